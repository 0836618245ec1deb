"""`moeplan estimate` beside every AMD row of the public measurement set.

The rows whose GPU is AMD's (a Radeon card, an Instinct, an APU's iGPU) are run the way
benchmarks/accuracy.py runs every row -- the machine from part names with `moeplan hardware`,
the model, quant, placement and test from the row -- but with the shipped model (the fit.json
moeplan installs), so the figures are what a user is told. Each row is labelled with its side
of the train/test split (the rule of benchmarks/split.py: a source is test when the first 8
hex digits of the SHA-256 of its URL without '#fragment' are divisible by 3).

    python benchmarks/amd_rows.py [--data PATH] [--json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # noqa: E402  (benchmarks/ is not a package)

AMD_MARKS = ("AMD", "Radeon", "Instinct")


def split_side(url: str) -> str:
    key = (url or "").split("#", 1)[0].rstrip("/")
    return "test" if int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % 3 == 0 else "train"


def amd_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if any(m in (r.get("gpu_model") or "") for m in AMD_MARKS)]


def run(rows: list[dict]) -> list[dict]:
    out = []
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmp:
        for r in rows:
            x = accuracy.run_row(r, runner, Path(tmp))
            for m in ("decode", "prefill"):
                if m not in x.measured:
                    continue
                rec: dict = {"id": r["id"], "split": split_side(r["source_url"]), "metric": m,
                             "measured": x.measured[m]}
                if m in x.skip or m not in x.prior:
                    rec["skip"] = x.skip.get(m, "no prediction")
                else:
                    lo, hi = x.prior_range[m]
                    rec.update(predicted=x.prior[m], low=lo, high=hi, err=x.prior[m] / x.measured[m] - 1,
                               inside=lo <= x.measured[m] <= hi)
                out.append(rec)
    return out


def summary(recs: list[dict]) -> list[str]:
    lines = []
    for side in ("train", "test", "all"):
        for m in ("decode", "prefill"):
            rs = [o for o in recs if o["metric"] == m and "predicted" in o and side in ("all", o["split"])]
            if rs:
                lines.append(f"{side:5} {m:7} rows {len(rs):3}  median |err| "
                             f"{statistics.median(abs(o['err']) for o in rs):4.0%}  median err "
                             f"{statistics.median(o['err'] for o in rs):+4.0%}  inside the range "
                             f"{sum(o['inside'] for o in rs) / len(rs):4.0%}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=accuracy.DEFAULT_DATA)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not a.data.exists():
        print(f"error: {a.data} not found\nhint: pass --data PATH/measurements.jsonl", file=sys.stderr)
        return 2
    rows = [json.loads(x) for x in a.data.read_text(encoding="utf-8").splitlines() if x.strip()]
    recs = run(amd_rows(rows))
    if a.json:
        print(json.dumps({"rows": recs, "summary": summary(recs)}, indent=1))
        return 0
    print(f"{'row':60} {'split':5} {'metric':7} {'measured':>9} {'moeplan':>9} {'range':>17} {'err':>6}")
    for o in recs:
        if "predicted" in o:
            rng = f"{o['low']:.1f}-{o['high']:.1f}"
            print(f"{o['id'][:60]:60} {o['split']:5} {o['metric']:7} {o['measured']:9.1f} {o['predicted']:9.1f} "
                  f"{rng:>17} {o['err']:+6.0%}")
        else:
            print(f"{o['id'][:60]:60} {o['split']:5} {o['metric']:7} {o['measured']:9.1f}  not estimable: {o['skip']}")
    print("\n".join(summary(recs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
