"""Golden files: the tests compare against the committed files; one command rewrites them.

The tests never write under tests/golden/: `assert_golden` compares what the code produces now
with the committed files (names and bytes) and fails with a diff. After an intended change,
rewrite them with

    python scripts/update_goldens.py            # rewrites tests/golden/, prints what changed
    python scripts/update_goldens.py --check    # writes nothing; exit 1 if any golden is stale

and review `git diff tests/golden/` before committing: that diff is the change of behaviour.

The producers live beside their tests (test_launch_golden.py, test_windows.py,
test_plan_cli.py); `produce` runs them all, so the command writes exactly what the tests read.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).parent / "golden"
FAMILIES = ("launch", "launch-windows", "plans")
UPDATE_COMMAND = "python scripts/update_goldens.py"

if os.environ.get("MOEPLAN_UPDATE_GOLDEN"):  # the old way: the tests no longer write goldens
    raise RuntimeError(f"MOEPLAN_UPDATE_GOLDEN is gone: the tests only compare; rewrite goldens with "
                       f"`{UPDATE_COMMAND}` and review the diff")

Key = str | tuple[str, ...]
Files = Mapping[str, str | bytes] | Mapping[tuple[str, ...], str | bytes] | Mapping[Key, str | bytes]


def _path(key: Key) -> str:
    return key if isinstance(key, str) else "/".join(key)


def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode()


def differences(folder: Path, files: Files) -> list[str]:
    """What differs between `files` (path relative to `folder` -> content) and the files under
    `folder`: missing, unexpected and changed files, a changed one with a unified diff."""
    want = {_path(k): _bytes(v) for k, v in files.items()}
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else set()
    out = [f"missing golden {folder.name}/{p}" for p in sorted(set(want) - on_disk)]
    out += [f"golden {folder.name}/{p} is no longer produced" for p in sorted(on_disk - set(want))]
    for p in sorted(set(want) & on_disk):
        out += _changed(folder / p, want[p], f"{folder.name}/{p}")
    return out


def _changed(path: Path, data: bytes, name: str) -> list[str]:
    old = path.read_bytes()
    if old == data:
        return []
    diff = difflib.unified_diff(old.decode(errors="replace").splitlines(), data.decode(errors="replace").splitlines(),
                                f"committed/{name}", f"produced/{name}", lineterm="", n=1)
    return [f"golden {name} changed:\n" + "\n".join(list(diff)[:40])]


def assert_golden(folder: Path, files: Files) -> None:
    """Fail unless the committed files under `folder` are exactly `files`."""
    problems = differences(folder, files)
    assert not problems, "\n".join(problems) + (f"\nif the change is intended: `{UPDATE_COMMAND}`, then review "
                                                "`git diff tests/golden/`")


def assert_golden_file(path: Path, data: str | bytes) -> None:
    """Fail unless the committed file `path` holds exactly `data`."""
    problems = _changed(path, _bytes(data), path.name) if path.is_file() else [f"missing golden {path.name}"]
    assert not problems, "\n".join(problems) + (f"\nif the change is intended: `{UPDATE_COMMAND}`, then review "
                                                "`git diff tests/golden/`")


# ---- the update command ---------------------------------------------------------------------

def _launch(work: Path) -> dict[str, bytes]:
    import test_launch_golden as lg
    from launch_plans import write_models

    models = write_models(work / "launch")
    out = {}
    for case in sorted(lg.CASES):
        out.update({f"launch/{case}/{_path(k)}": _bytes(v) for k, v in lg.golden_files(models, case).items()})
    for case in sorted(lg.BUNDLED):
        out.update({f"launch/bundled/{case}/{_path(k)}": _bytes(v) for k, v in lg.bundled_files(case).items()})
    return out


def _windows(work: Path) -> dict[str, bytes]:
    import test_windows as tw
    from launch_plans import write_models

    models = write_models(work / "windows")
    out = {}
    for case in sorted(tw.golden_cases()):
        files, _ = tw.windows_golden_files(models, case)
        out.update({f"launch-windows/{case}/{_path(k)}": _bytes(v) for k, v in files.items()})
    return out


def _plans(work: Path) -> dict[str, bytes]:
    import test_plan_cli as pc

    return {f"plans/{pc.golden_plan_name(model, hw)}": pc.golden_plan_text(model, extra, hw).encode()
            for model, extra, hw in pc.CASES}


PRODUCERS: dict[str, Callable[[Path], dict[str, bytes]]] = {"launch": _launch, "launch-windows": _windows,
                                                            "plans": _plans}


def produce(families: tuple[str, ...] = FAMILIES) -> dict[str, bytes]:
    """Every golden file of `families`, path relative to tests/golden -> bytes, as the code makes it now."""
    with tempfile.TemporaryDirectory() as tmp:
        out: dict[str, bytes] = {}
        for fam in families:
            out.update(PRODUCERS[fam](Path(tmp)))
        return out


def update(root: Path, families: tuple[str, ...] = FAMILIES, check: bool = False,
           files: dict[str, bytes] | None = None) -> list[str]:
    """Rewrite the goldens of `families` under `root` (files no longer produced are removed);
    with `check`, write nothing. `files`: what `produce(families)` returns, when already made.
    Returns the lines saying what changed (empty: up to date)."""
    files = produce(families) if files is None else files
    changes: list[str] = []
    for fam in families:
        mine = {p[len(fam) + 1:]: b for p, b in files.items() if p.split("/", 1)[0] == fam}
        folder = root / fam
        for problem in differences(folder, mine):
            changes.append(problem.splitlines()[0])
        if check:
            continue
        for rel, data in mine.items():
            p = folder / rel
            if not p.is_file() or p.read_bytes() != data:
                p.parent.mkdir(parents=True, exist_ok=True)
                tmp = p.with_name(p.name + ".tmp")
                tmp.write_bytes(data)
                tmp.replace(p)
        if folder.is_dir():
            for p in sorted(folder.rglob("*"), reverse=True):
                rel = p.relative_to(folder).as_posix()
                if p.is_file() and rel not in mine:
                    p.unlink()
                elif p.is_dir() and not any(p.iterdir()):
                    p.rmdir()
    return changes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="update_goldens.py", description="rewrite tests/golden/ from the current "
                                 "code; review `git diff tests/golden/` before committing")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if any golden is stale")
    ap.add_argument("--only", action="append", choices=FAMILIES, default=[], help="one family (repeatable)")
    ap.add_argument("--root", type=Path, default=ROOT, help="golden folder (default tests/golden)")
    a = ap.parse_args(argv)
    families = tuple(a.only) or FAMILIES
    changes = update(a.root, families, check=a.check)
    for line in changes:
        print(line)
    if a.check:
        print("goldens up to date" if not changes else f"{len(changes)} golden file(s) stale: run {UPDATE_COMMAND}",
              file=sys.stderr)
        return 1 if changes else 0
    print(f"{len(changes)} golden file(s) rewritten under {a.root}" + (": review `git diff tests/golden/`"
                                                                      if changes else ""), file=sys.stderr)
    return 0
