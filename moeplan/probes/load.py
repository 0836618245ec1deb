"""How busy the machine is: load average and a short /proc/stat CPU sample."""
from __future__ import annotations

import time
from collections.abc import Callable

from moeplan.probes.fsread import read_text


def parse_loadavg(text: str | None) -> float | None:
    try:
        return float((text or "").split()[0])
    except (ValueError, IndexError):
        return None


def parse_cpu_times(text: str | None) -> tuple[int, int] | None:
    """/proc/stat 'cpu' line -> (idle ticks incl. iowait, total ticks), all CPUs together."""
    for line in (text or "").splitlines():
        if line.startswith("cpu "):
            vals = [int(x) for x in line.split()[1:] if x.isdigit()]
            if len(vals) < 4:
                return None
            # user nice system idle iowait irq softirq steal guest guest_nice: guest time is
            # already counted in user/nice, so it is left out of the total
            total = sum(vals[:8])
            idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
            return idle, total
    return None


def busy_fraction(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Share of all CPU time that was busy between two /proc/stat samples (0..1)."""
    if before is None or after is None:
        return None
    d_total = after[1] - before[1]
    if d_total <= 0:
        return None
    d_idle = after[0] - before[0]
    return min(1.0, max(0.0, 1.0 - d_idle / d_total))


def sample_load(root: str = "/", window_s: float = 0.25,
                sleep: Callable[[float], None] = time.sleep) -> tuple[float | None, float | None]:
    """(1-minute load average, busy fraction over `window_s`)."""
    a = parse_cpu_times(read_text(root, "/proc/stat"))
    sleep(window_s)
    b = parse_cpu_times(read_text(root, "/proc/stat"))
    return parse_loadavg(read_text(root, "/proc/loadavg")), busy_fraction(a, b)


def _own_cpu_s() -> float:
    """CPU seconds of this process and its waited-for children."""
    import resource

    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def usable_cpus() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class LoadMeter:
    """The machine's load around one measured run: the load average as it starts and the
    share of all CPU time that OTHER processes used while it ran (/proc/stat busy ticks
    minus this process's and its children's CPU time, over all CPUs' ticks)."""

    def __init__(self, root: str = "/"):
        self.root = root
        self.loadavg_1m_before: float | None = None
        self._t0: tuple[int, int] | None = None
        self._own0 = 0.0

    def start(self) -> LoadMeter:
        self.loadavg_1m_before = parse_loadavg(read_text(self.root, "/proc/loadavg"))
        self._t0 = parse_cpu_times(read_text(self.root, "/proc/stat"))
        self._own0 = _own_cpu_s()
        return self

    def other_busy(self) -> float | None:
        """Share of all CPU time other processes used since start() (0..1)."""
        import os

        t1 = parse_cpu_times(read_text(self.root, "/proc/stat"))
        if self._t0 is None or t1 is None:
            return None
        d_total = t1[1] - self._t0[1]
        if d_total <= 0:
            return None
        d_busy = d_total - (t1[0] - self._t0[0])
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        own_ticks = (_own_cpu_s() - self._own0) * hz
        return min(1.0, max(0.0, (d_busy - own_ticks) / d_total))


def wait_for_idle(max_other_busy: float, timeout_s: float, window_s: float = 1.0,
                  root: str = "/", sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> tuple[bool, float | None, float]:
    """Sample the machine every `window_s` until other processes use at most
    `max_other_busy` of all CPU time, or `timeout_s` passes: (settled, last share, waited s)."""
    t0 = clock()
    last = None
    while True:
        m = LoadMeter(root).start()
        sleep(window_s)
        last = m.other_busy()
        waited = clock() - t0
        if last is not None and last <= max_other_busy:
            return True, last, waited
        if waited + window_s > timeout_s:
            return False, last, waited
