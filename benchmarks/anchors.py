"""The public measurement rows the cost model's priors and constants are anchored on, found where
the anchors are written.

A prior is *anchored* on a row of benchmarks/data/measurements.jsonl when a file that holds the
priors or hardware facts names it as its evidence. Such a row's residual is the prior's training
error, not a prediction: it says how well the prior was fitted, not how far the next machine may
land. So benchmarks/accuracy.py sets no range (centre or width) from an anchor source's rows and
prints their figures apart, and tests/test_accuracy_split.py fails when an anchor is a test row
or a test source (benchmarks/split.py).

Where an anchor is written (SCANNED), and how:

- a row id or an id pattern: 'ik1075-*', 'ik380-*-mainline-*', 'kt-v02-llamacpp-baseline'
  (backends.toml's comments and `sources` fields) -- every row it matches;
- a URL: a `source = "https://..."` field (parts/memory_measurements.toml) or any URL in the
  text -- the rows of that source;
- a thread of a repository: 'ik_llama.cpp discussion 201', 'KTransformers #726', 'ktransformers
  PR 2175', 'ik_llama.cpp issues #1230, #2089'; a bare 'PR 533' takes the backend of the TOML table
  it sits in ([ik_llama_cpp.*] -> ik_llama.cpp) and, outside one, any repository's thread of that
  number (a wider net: an anchor found too many leaves a range a little wider, one missed
  narrows it);
- a data file a constant is fitted on: benchmarks/data/thread-sweeps.json's train sweeps
  (DECODE_OVERLAP_P, benchmarks/overlap_fit.py).

Model profiles (moeplan/profiles/models/) are not scanned: they cite sources for a file's layout
and size, which set no rate.

    python benchmarks/anchors.py      # every anchor found, by source, with where it is written
"""
from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _load_split():
    """benchmarks/split.py (loaded by path: benchmarks/ is no package)."""
    if "moeplan_bench_split" in sys.modules:
        return sys.modules["moeplan_bench_split"]
    spec = importlib.util.spec_from_file_location("moeplan_bench_split", HERE / "split.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["moeplan_bench_split"] = mod
    spec.loader.exec_module(mod)
    return mod


split = _load_split()


def scanned_files(root: Path = ROOT) -> list[Path]:
    """The files that hold the cost model's priors, constants and hardware facts."""
    prof, plan = root / "moeplan" / "profiles", root / "moeplan" / "planner"
    return [prof / "backends.toml", *sorted((prof / "parts").glob("*.toml")),
            *sorted((plan / "cost").glob("*.py")), *sorted((plan / "runtimes").glob("*.py")),
            *sorted(p for p in (root / "benchmarks" / "kernels").glob("*") if p.is_file())]


SWEEPS = HERE / "data" / "thread-sweeps.json"

# a row id or id pattern as the priors write them: 'ik1075-*', 'ik380-*-mainline-*'
ID_TOKEN = re.compile(r"(?<![\w/.*-])([a-z][a-z0-9]*(?:-[a-z0-9.*]+)+)(?![\w*-])")
URL = re.compile(r"https?://[^\s\"'<>)\]]+")
# a repository's thread: optional repository, a keyword or '#', one number or a list of them
REPOS = {"ik_llama.cpp": "ik_llama.cpp", "llama.cpp": "llama.cpp", "ktransformers": "ktransformers",
         "kt-kernel": "ktransformers", "llamafile": "llamafile", "llmfit": "llmfit"}
THREAD = re.compile(
    r"(?:(?<![\w.-])(?P<repo>ik_llama\.cpp|llama\.cpp|ktransformers|kt-kernel|llamafile|llmfit)(?:'s)?\s+)?"
    r"(?P<kw>\b(?:PRs?|pull|issues?|discussions?)\s+#?|#)(?=\d)"
    r"(?P<nums>\d{2,6}(?:(?:\s*,\s*|\s+and\s+|\s*/\s*)#?\d{2,6})*)\b", re.I)
# a TOML table -> the repository a bare thread number in it refers to
TABLE_REPO = [(re.compile(r"^\[\[?ik_llama_cpp\b"), "ik_llama.cpp"), (re.compile(r"^\[\[?llama_cpp\b"), "llama.cpp"),
              (re.compile(r"^\[\[?ktransformers\b"), "ktransformers")]
# a data source's GitHub thread: (repository name, number)
GH_THREAD = re.compile(r"github\.com/[^/]+/([^/]+)/(?:issues|pull|discussions)/(\d+)")


@dataclass(frozen=True)
class Anchor:
    where: str  # 'path:line'
    kind: str  # 'row id', 'url', 'thread', 'fit data'
    text: str  # as written
    rows: tuple[str, ...]  # the data rows it names
    sources: tuple[str, ...]  # their sources (benchmarks/split.py source_key)


def _thread_key(source: str) -> tuple[str, str] | None:
    m = GH_THREAD.search(source)
    return (m.group(1).lower(), m.group(2)) if m else None


class Index:
    """The data's row ids, sources and GitHub threads, for resolving what a text names."""

    def __init__(self, rows: list[dict]):
        self.source_of = {r["id"]: split.source_key(r.get("source_url") or r["id"]) for r in rows}
        self.rows_of: dict[str, list[str]] = {}
        for rid, s in self.source_of.items():
            self.rows_of.setdefault(s, []).append(rid)
        self.threads: dict[tuple[str, str], str] = {}
        for s in self.rows_of:
            k = _thread_key(s)
            if k:
                self.threads[k] = s

    def anchor(self, where: str, kind: str, text: str, sources: set[str], rows: set[str] | None = None) -> Anchor:
        rows = set(rows or ()) | {i for s in sources for i in self.rows_of.get(s, ())}
        return Anchor(where, kind, text, tuple(sorted(rows)), tuple(sorted(sources | {self.source_of[i] for i in rows})))


def scan_text(text: str, index: Index, label: str = "<text>") -> list[Anchor]:
    """Every anchor in text that names a row or a source of the data."""
    out: list[Anchor] = []
    table_repo = None
    for ln, line in enumerate(text.splitlines(), 1):
        where = f"{label}:{ln}"
        head = line.lstrip()
        if head.startswith("["):
            table_repo = next((r for pat, r in TABLE_REPO if pat.match(head)), None)
        for tok in set(ID_TOKEN.findall(line)):
            tok = tok.rstrip(".")
            hit = {i for i in index.source_of if fnmatch.fnmatchcase(i, tok)}
            if hit:
                out.append(index.anchor(where, "row id", tok, set(), hit))
        for url in URL.findall(line):
            key = split.source_key(url.rstrip(".,;"))
            if key in index.rows_of:
                out.append(index.anchor(where, "url", url, {key}))
        for m in THREAD.finditer(line):
            repo = REPOS.get((m.group("repo") or "").lower()) or table_repo
            for n in re.findall(r"\d+", m.group("nums")):
                src = {s for (r, num), s in index.threads.items() if num == n and (repo is None or r == repo)}
                if src:
                    out.append(index.anchor(where, "thread", m.group(0), src))
    return out


def _sweep_anchors(index: Index, path: Path = SWEEPS) -> list[Anchor]:
    """DECODE_OVERLAP_P is fitted on the train sweeps of thread-sweeps.json (overlap_fit.py): a
    data row of one of their sources is its training data."""
    if not path.exists():
        return []
    out = []
    for i, sw in enumerate(json.loads(path.read_text(encoding="utf-8"))["sweeps"]):
        key = split.source_key(sw["source_url"])
        if split.side(key) == "train" and key in index.rows_of:
            out.append(index.anchor(f"{path.relative_to(ROOT)}:sweep {i}", "fit data", sw["source_url"], {key}))
    return out


def scan(rows: list[dict] | None = None, files: list[Path] | None = None) -> list[Anchor]:
    """Every anchor written in the scanned files (scanned_files()) and the fitted data files."""
    index = Index(split.rows() if rows is None else rows)
    out: list[Anchor] = []
    for p in scanned_files() if files is None else files:
        label = str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
        out += scan_text(p.read_text(encoding="utf-8", errors="replace"), index, label)
    return out + _sweep_anchors(index)


def anchor_sources(rows: list[dict] | None = None) -> dict[str, list[str]]:
    """source -> where it is named as an anchor."""
    out: dict[str, list[str]] = {}
    for a in scan(rows):
        for s in a.sources:
            out.setdefault(s, []).append(f"{a.where} ({a.kind} {a.text!r})")
    return out


def on_test_split(found: list[Anchor]) -> list[str]:
    """The anchors that name a test row or a test source (benchmarks/split.py): each one a prior
    tuned on the split nothing may be tuned on."""
    return [f"{a.where}: {a.kind} {a.text!r} names test source(s) {sorted(s for s in a.sources if split.side(s) == 'test')}"
            for a in found if any(split.side(s) == "test" for s in a.sources)]


def main(argv: list[str] | None = None) -> int:
    import argparse
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    rows = split.rows()
    found = anchor_sources(rows)
    n_rows = sum(1 for r in rows if split.source_key(r["source_url"]) in found)
    print(f"{len(found)} anchor sources, {n_rows} rows (left out of range calibration by benchmarks/accuracy.py)")
    for s, where in sorted(found.items()):
        n = sum(1 for r in rows if split.source_key(r["source_url"]) == s)
        print(f"  {split.side(s):5} {n:3d} rows  {s}")
        for w in sorted(set(where)):
            print(f"               {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
