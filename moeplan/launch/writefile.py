"""Atomic file writes: a temp file in the same folder, fsync, then os.replace."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from moeplan.errors import InputError


def write_text_atomic(path: Path, text: str, executable: bool = False) -> Path:
    """Write `text` to `path` so readers see the old file or the new one, never a part."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(f"cannot write in {path.parent}: {exc.strerror}", "choose a writable --out folder") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o755 if executable else 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
