"""The train/test split of the public measurement set, by source, fixed by a rule.

A row's *source* is its `source_url` without the fragment (`#issuecomment-...`) or a trailing
slash: every comment of one GitHub thread, every table of one document, falls on the same side.
A source is a TEST source when the first 8 hex digits of the SHA-256 of that key, read as an
integer, are divisible by 3 (about a third of the sources); every other source is TRAIN.

Nothing is tuned on test sources: no prior in moeplan/profiles/backends.toml may name a test
row as its anchor (benchmarks/anchors.py finds them), moeplan/profiles/fit.json is fitted and its
ranges set on train rows only (benchmarks/accuracy.py --write-fit), and
tests/test_accuracy_split.py checks both. The rule
was committed before any tuning that followed it; rows added later fall into the split by the
same rule, whatever they show. The split is listed in benchmarks/data/split.json:

    python benchmarks/split.py            # check the listing against the rule and the data
    python benchmarks/split.py --write    # rewrite the listing (after adding rows)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "measurements.jsonl"
LISTING = HERE / "data" / "split.json"
RULE = ("source = source_url without '#fragment' and trailing '/'; test when "
        "int(sha256(source).hexdigest()[:8], 16) % 3 == 0, else train")


def source_key(url: str) -> str:
    return (url or "").split("#", 1)[0].rstrip("/")


def side(url: str) -> str:
    """'test' or 'train' for a row's source_url."""
    h = hashlib.sha256(source_key(url).encode("utf-8")).hexdigest()
    return "test" if int(h[:8], 16) % 3 == 0 else "train"


def rows(path: Path = DATA) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def listing(data: list[dict]) -> dict:
    """The split of the data's sources by the rule, with each source's row ids."""
    srcs: dict[str, list[str]] = {}
    for r in data:
        srcs.setdefault(source_key(r["source_url"]), []).append(r["id"])
    out: dict = {"rule": RULE, "train": {}, "test": {}}
    for s in sorted(srcs):
        out[side(s)][s] = sorted(srcs[s])
    out["counts"] = {k: {"sources": len(out[k]), "rows": sum(len(v) for v in out[k].values())}
                     for k in ("train", "test")}
    return out


def test_ids(data: list[dict]) -> set[str]:
    return {r["id"] for r in data if side(r["source_url"]) == "test"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite {LISTING.name} from the data")
    a = ap.parse_args(argv)
    want = json.dumps(listing(rows()), indent=1, sort_keys=True) + "\n"
    if a.write:
        from moeplan.io import write_text_atomic
        write_text_atomic(LISTING, want)
        print(f"wrote {LISTING}")
        return 0
    if not LISTING.exists() or LISTING.read_text(encoding="utf-8") != want:
        print(f"error: {LISTING} does not match the rule and the data\nhint: python benchmarks/split.py --write",
              file=sys.stderr)
        return 1
    c = json.loads(want)["counts"]
    print(f"train: {c['train']['sources']} sources, {c['train']['rows']} rows; "
          f"test: {c['test']['sources']} sources, {c['test']['rows']} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
