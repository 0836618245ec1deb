"""The numactl prefix and llama.cpp's --numa value for a plan's NUMA policy.

  bind        numactl --cpunodebind=N --membind=N  + llama.cpp --numa numactl
              (threads and pages on the listed nodes; llama.cpp takes numactl's CPU map)
  interleave  numactl --interleave=N,M             + llama.cpp --numa distribute
              (pages spread over the nodes, threads spread to match)
  distribute  no prefix                            + llama.cpp --numa distribute
  none        no prefix, no --numa (first touch)
--numa isolate (threads only on the node the process started on) is never chosen: with a
bind the numactl map already says that, and without one it depends on where the shell runs.

On Windows there is no numactl and --numa does nothing (ggml's NUMA code is Linux-only, see
planner/hardware/windows.py): no prefix and no --numa; a bind becomes
`start "" /B /WAIT /NODE n /AFFINITY mask` in launch.cmd (launch/winscripts.py).
"""
from __future__ import annotations

from moeplan.errors import InputError
from moeplan.planner.placement import Placement


def numa_prefix(p: Placement, os_family: str = "linux") -> tuple[str, ...]:
    if os_family == "windows":
        return ()
    nodes = ",".join(str(n) for n in p.numa_nodes)
    if p.numa == "bind":
        if not nodes:
            raise InputError("the plan binds to NUMA nodes but lists none",
                             "re-plan with `moeplan tune --numa bind` so the plan names the nodes")
        return ("numactl", f"--cpunodebind={nodes}", f"--membind={nodes}")
    if p.numa == "interleave":
        return ("numactl", f"--interleave={nodes or 'all'}")
    return ()


def llama_numa_value(p: Placement, os_family: str = "linux") -> str:
    """The value of llama.cpp's --numa for the plan, '' for none (always on Windows)."""
    if os_family == "windows":
        return ""
    return {"bind": "numactl", "interleave": "distribute", "distribute": "distribute"}.get(p.numa, "")


def numa_notes(p: Placement, os_family: str = "linux") -> tuple[str, ...]:
    if os_family == "windows":
        if p.numa == "bind":
            node = p.numa_nodes[0] if p.numa_nodes else 0
            return (f"Windows: launch.cmd binds with `start /NODE {node} /AFFINITY mask` (threads on node {node}, "
                    "memory preferred there: the CPU experts must fit in its RAM); launch.sh has no binding",)
        if p.numa in ("interleave", "distribute"):
            return (f"Windows: the plan's '{p.numa}' has no Windows equivalent (no numactl, and llama.cpp's "
                    "--numa does nothing there): threads run on every node and pages spread over the nodes",)
        return ()
    if p.numa in ("distribute", "interleave"):
        return ("llama.cpp advises dropping the page cache before the first run with --numa "
                "(sync; echo 3 | sudo tee /proc/sys/vm/drop_caches), so pages are placed anew",)
    if p.numa == "bind":
        return (f"numactl binds threads and memory to node(s) {','.join(map(str, p.numa_nodes))}: "
                "the CPU experts must fit in those nodes' RAM",)
    return ()
