"""Sequential and 4 KiB random read rates of the storage holding the model file.

Reads the model file itself, read-only, with O_DIRECT (page-aligned buffers, 4 KiB-aligned
offsets and lengths) so the page cache does not flatter the figure. Where O_DIRECT is refused
(tmpfs, some FUSE and network file systems) it falls back to buffered reads after asking the
kernel to drop the file's clean cached pages (posix_fadvise DONTNEED: nothing is written).
Nothing is created, nothing is left behind.
"""
from __future__ import annotations

import errno
import mmap
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from moeplan.errors import InputError
from moeplan.planner.hardware.profile import Storage
from moeplan.probes.fsread import read_int, read_text, under
from moeplan.probes.timing import measured_figure, summarise_rates, windows
from moeplan.units import MIB

ALIGN = 4096


@dataclass(frozen=True)
class StorageSettings:
    block_bytes: int  # sequential read size (queue depth 1)
    seq_budget_s: float
    seq_max_bytes: int
    rand_budget_s: float


QUICK = StorageSettings(block_bytes=4 * MIB, seq_budget_s=1.5, seq_max_bytes=2 * 1024 * MIB, rand_budget_s=1.0)
FULL = StorageSettings(block_bytes=4 * MIB, seq_budget_s=6.0, seq_max_bytes=16 * 1024 * MIB, rand_budget_s=4.0)


def resolve_model_file(path: str) -> str:
    """A file to read: the path itself, or the largest file in a model folder."""
    p = os.path.expanduser(path)
    if os.path.isdir(p):
        files = [os.path.join(p, f) for f in os.listdir(p) if os.path.isfile(os.path.join(p, f))]
        if not files:
            raise InputError(f"--model-path {path}: the folder has no files to read",
                             "give a model file (a .gguf shard or .safetensors file)")
        return max(files, key=os.path.getsize)
    if not os.path.isfile(p):
        raise InputError(f"--model-path {path}: no such file", "give the model file whose disk you want measured")
    return p


def parse_mountinfo(text: str | None) -> list[tuple[str, str, str]]:
    """/proc/self/mountinfo -> [(mount point, 'major:minor', fs type)]."""
    out = []
    for line in (text or "").splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        r = right.split()
        if len(f) >= 5 and r:
            out.append((f[4].replace("\\040", " "), f[2], r[0]))
    return out


def read_storage_device(root: str, path: str) -> Storage:
    """Device name, model, rotational and file system of the disk holding `path`."""
    real = os.path.realpath(path)
    mounts = parse_mountinfo(read_text(root, "/proc/self/mountinfo"))
    best = ("", "", "")
    for mnt in mounts:
        mp = mnt[0].rstrip("/") or "/"
        if (real == mp or real.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best[0]):
            best = mnt
    devno = best[1]
    if not devno or devno.startswith("0:"):
        st = os.stat(real)
        devno = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    device = model = ""
    rotational = None
    link = under(root, f"/sys/dev/block/{devno}")
    if os.path.exists(link):
        dev_dir = os.path.realpath(link)
        if os.path.exists(os.path.join(dev_dir, "partition")):
            dev_dir = os.path.dirname(dev_dir)
        device = os.path.basename(dev_dir)
        # dev_dir is already inside `root` (the sysfs link resolved there)
        rot = read_int("/", os.path.join(dev_dir, "queue", "rotational"))
        rotational = None if rot is None else bool(rot)
        model = (read_text("/", os.path.join(dev_dir, "device", "model")) or "").strip()
    return Storage(path=real, device=device, rotational=rotational, fs_type=best[2], device_model=model,
                   file_bytes=os.path.getsize(real))


def open_for_reading(path: str, opener: Callable[..., int] = os.open) -> tuple[int, bool]:
    """(fd, direct): O_DIRECT when the file system accepts it, else a buffered descriptor."""
    base = os.O_RDONLY | getattr(os, "O_NOATIME", 0)
    direct = getattr(os, "O_DIRECT", 0)
    for flags, is_direct in ((base | direct, bool(direct)), (os.O_RDONLY | direct, bool(direct)),
                             (base, False), (os.O_RDONLY, False)):
        if is_direct and not direct:
            continue
        try:
            return opener(path, flags), is_direct
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EPERM, errno.EOPNOTSUPP):
                raise
    raise OSError(errno.EINVAL, f"cannot open {path}")


def drop_cached_pages(fd: int) -> None:
    """Ask the kernel to drop this file's clean cached pages (buffered fallback only)."""
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


def measure_seq(fd: int, size: int, s: StorageSettings, wrap: bool,
                clock: Callable[[], float] = time.perf_counter) -> list[tuple[float, float]]:
    """(bytes, seconds) per block read, from offset 0, queue depth 1, until the time or byte
    budget is spent; wraps to the start only when reads bypass the cache (`wrap`)."""
    usable = size // ALIGN * ALIGN
    if usable < ALIGN:
        return []
    buf = mmap.mmap(-1, s.block_bytes)  # page-aligned, as O_DIRECT wants
    samples: list[tuple[float, float]] = []
    try:
        off = total = 0
        start = clock()
        while clock() - start < s.seq_budget_s and total < s.seq_max_bytes:
            n = min(s.block_bytes, usable - off)
            view = memoryview(buf)[:n]
            t0 = clock()
            got = os.preadv(fd, [view], off)
            samples.append((float(got), clock() - t0))
            view.release()
            total += got
            off += n
            if got < n or off >= usable:
                if not wrap:
                    break
                off = 0
    finally:
        buf.close()
    return samples


def measure_rand4k(fd: int, size: int, budget_s: float, seed: int | None = None,
                   clock: Callable[[], float] = time.perf_counter) -> list[tuple[float, float]]:
    """(bytes, seconds) per 4 KiB read at uniformly random aligned offsets, queue depth 1.

    The offsets differ from run to run (seed None): a fixed sequence would be served from a
    drive's or a hypervisor's cache the second time and flatter the figure."""
    n_blocks = size // ALIGN
    if n_blocks < 1:
        return []
    rng = random.Random(seed)
    buf = mmap.mmap(-1, ALIGN)
    samples: list[tuple[float, float]] = []
    try:
        start = clock()
        while clock() - start < budget_s:
            off = rng.randrange(n_blocks) * ALIGN
            t0 = clock()
            got = os.preadv(fd, [buf], off)
            samples.append((float(got), clock() - t0))
    finally:
        buf.close()
    return samples


def measure_storage(path: str, s: StorageSettings, root: str = "/",
                    opener: Callable[..., int] = os.open) -> tuple[Storage, list[str]]:
    """The Storage entry for the model file with its measured read rates, and notes."""
    from dataclasses import replace

    file = resolve_model_file(path)
    info = read_storage_device(root, file)
    size = info.file_bytes or 0
    notes = []
    fd, direct = open_for_reading(file, opener)
    try:
        try:
            seq = measure_seq(fd, size, s, wrap=direct)
        except OSError as exc:
            if not direct or exc.errno != errno.EINVAL:
                raise
            os.close(fd)  # O_DIRECT accepted at open but refused at read: go buffered
            fd, direct = open_for_reading(file, lambda p, fl: opener(p, fl & ~getattr(os, "O_DIRECT", 0)))
            direct = False
            seq = None
        if not direct:
            notes.append(f"{file}: O_DIRECT refused by the file system ({info.fs_type or 'unknown'}); "
                         "buffered reads after dropping the file's cached pages: may include cache hits")
            drop_cached_pages(fd)
            if seq is None:
                seq = measure_seq(fd, size, s, wrap=False)
            drop_cached_pages(fd)
        rand = measure_rand4k(fd, size, s.rand_budget_s)
    finally:
        os.close(fd)
    assert seq is not None  # measured above (buffered, when O_DIRECT was refused at read)
    how = "O_DIRECT" if direct else "buffered (O_DIRECT refused)"
    seq_bytes = sum(b for b, _ in seq)
    if seq_bytes and size and seq_bytes > size and direct:
        notes.append(f"{file} is smaller than the sequential budget: it was read {seq_bytes / size:.1f} times")
    seq_fig = rand_fig = None
    if seq:
        seq_fig = measured_figure(summarise_rates(windows(seq, 0.1)),
                                  f"{how} pread of {file}, {s.block_bytes // MIB} MiB blocks, queue depth 1, "
                                  f"{seq_bytes / MIB:.0f} MiB from offset 0; overall rate, spread over 0.1 s "
                                  "windows", value="overall")
    if rand:
        rand_fig = measured_figure(summarise_rates(windows(rand, 0.1)),
                                   f"{how} pread of 4 KiB at {len(rand)} random aligned offsets of {file}, queue "
                                   "depth 1; overall rate", value="overall")
    if size < 64 * MIB:
        notes.append(f"{file} is only {size / MIB:.1f} MiB: storage figures from so little data are rough")
    return replace(info, seq_read_bytes_per_s=seq_fig, rand4k_read_bytes_per_s=rand_fig), notes
