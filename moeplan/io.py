"""Writing files atomically: a temp file in the same folder, fsync, then os.replace.

A reader never sees a half-written file, and a failure leaves the old file (or nothing).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from moeplan.errors import InputError


def write_bytes_atomic(path: str | os.PathLike, data: bytes, mode: int | None = None) -> Path:
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
        if mode is not None:
            os.chmod(tmp, mode)
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
