"""Writing files atomically: a temp file in the same folder, fsync, then os.replace.

A reader never sees a half-written file, and a failure leaves the old file (or nothing).
Files the user asked for get the mode a shell redirect would give them (0666 less the
umask, 0777 less the umask for scripts); cache files pass mode=PRIVATE (0600).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from moeplan.errors import InputError

PRIVATE = 0o600


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(executable: bool = False) -> int:
    """The mode `open()` would give a new file (or `chmod +x` of it) under this umask."""
    return (0o777 if executable else 0o666) & ~current_umask()


def write_bytes_atomic(path: str | os.PathLike, data: bytes, mode: int | None = None) -> Path:
    """Write `data` to `path` atomically. mode None: 0666 less the umask (mkstemp's own 0600
    is for temp files, not for what the user asked for)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise InputError(f"cannot write {p}: {exc.strerror}", "choose a writable folder") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, default_mode() if mode is None else mode)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def write_text_atomic(path: str | os.PathLike, text: str, mode: int | None = None) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"), mode)


def _check_writable_ancestor(p: Path, start: Path, option: str, what: str) -> None:
    """The nearest existing path at or above `start` is a writable folder, so `p` (the file or
    folder asked for) can be created below it."""
    for q in (start, *start.parents):
        if q.exists():
            if not q.is_dir():
                raise InputError(f"{option} {p}: {q} is a file, not a folder", f"choose another {option}")
            if not os.access(q, os.W_OK | os.X_OK):
                raise InputError(f"{option} {p}: {q} is not writable", f"choose a writable {what}")
            return


def check_out_file(path: str | os.PathLike, option: str) -> Path:
    """Before any work: `path` can be written (not a folder, its folder not a file)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option} {p} is a folder", f"give {option} a file name")
    _check_writable_ancestor(p, p.parent, option, option)
    return p


def check_out_dir(path: str | os.PathLike, option: str) -> Path:
    """Before any work: `path` is a folder that exists or can be created, and is writable."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{option} {p} is a file", f"give {option} a folder (it is created if missing)")
    _check_writable_ancestor(p, p, option, f"{option} folder")
    return p


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive fcntl.flock on the folder itself: writers of one folder take turns.

    Locking the folder's own descriptor (Linux and the BSDs allow flock on a directory) leaves
    no lock file behind, and cannot race with a lock file being removed and re-created."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_file_set(folder: str | os.PathLike, files: list[tuple[str, str, bool]]) -> list[Path]:
    """Write (name, text, executable) files into `folder` as one set.

    Every file is written and fsynced into a temporary folder inside `folder` first (a full
    disk or an error leaves the folder as it was), then, holding the folder's lock, renamed
    into place: two writers into one folder never leave a mix of their files.
    """
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} is a file", "give --out a folder (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".moeplan-", suffix=".tmp", dir=out))
    except OSError as exc:
        raise InputError(f"cannot create {out}: {exc.strerror}", "choose a writable --out folder") from None
    try:
        staged = [(write_text_atomic(tmp / name, text, default_mode(exe)), out / name) for name, text, exe in files]
        with folder_lock(out):
            for src, dst in staged:
                os.replace(src, dst)
        dirfd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
    except OSError as exc:
        raise InputError(f"cannot write into {out}: {exc.strerror}", "choose a writable --out folder") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [dst for _, dst in staged]
