"""How busy the machine is: load average and a short /proc/stat CPU sample."""
from __future__ import annotations

import time
from typing import Callable

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
