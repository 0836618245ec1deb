#!/usr/bin/env python3
"""Rewrite the golden files under tests/golden/ from the current code (the tests only compare).

    python scripts/update_goldens.py                 # rewrite every golden, print what changed
    python scripts/update_goldens.py --check         # write nothing; exit 1 if any golden is stale
    python scripts/update_goldens.py --only plans    # one family: launch, launch-windows, plans

Review `git diff tests/golden/` before committing: that diff is the change of behaviour.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(HERE / "tests"), str(HERE)]

from goldens import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
