"""NUMA nodes from /sys/devices/system/node: CPUs, memory, distances, memory-only nodes."""
from __future__ import annotations

from moeplan.planner.hardware.profile import NumaNode
from moeplan.probes.cpu import Topology
from moeplan.probes.fsread import kib_field, list_dir, parse_cpulist, parse_kv_lines, read_text

NODE_DIR = "/sys/devices/system/node"


def parse_node_meminfo(text: str | None) -> tuple[int, int | None]:
    """'Node 0 MemTotal:  123 kB' lines -> (total bytes, free bytes or None)."""
    fields = {}
    for line in (text or "").splitlines():
        parts = line.split(":", 1)
        if len(parts) == 2:
            key = parts[0].split()[-1]  # drop the 'Node N' prefix
            fields[key] = parts[1].strip()
    total = kib_field(fields, "MemTotal") or 0
    return total, kib_field(fields, "MemFree")


def read_numa_nodes(root: str, topo: Topology) -> tuple[NumaNode, ...]:
    """One NumaNode per /sys/devices/system/node/nodeN. A kernel without NUMA support shows no
    node folder: then the whole machine is node 0, with /proc/meminfo's totals."""
    ids = sorted(int(n[4:]) for n in list_dir(root, NODE_DIR) if n.startswith("node") and n[4:].isdigit())
    if not ids:
        mem = parse_kv_lines(read_text(root, "/proc/meminfo"))
        return (NumaNode(id=0, cpus=topo.cpus, n_physical_cores=len(topo.cores),
                         mem_total_bytes=kib_field(mem, "MemTotal") or 0,
                         mem_free_bytes=kib_field(mem, "MemFree"), distances=(10,), source="procfs"),)
    online = set(topo.cpus)
    nodes = []
    for nid in ids:
        d = f"{NODE_DIR}/node{nid}"
        cpus = tuple(c for c in parse_cpulist(read_text(root, f"{d}/cpulist")) if c in online or not online)
        total, free = parse_node_meminfo(read_text(root, f"{d}/meminfo"))
        dist = tuple(int(x) for x in (read_text(root, f"{d}/distance") or "").split() if x.isdigit())
        cores = sum(1 for core in topo.cores if any(c in cpus for c in core))
        nodes.append(NumaNode(id=nid, cpus=cpus, n_physical_cores=cores, mem_total_bytes=total,
                              mem_free_bytes=free, distances=dist,
                              memory_only=not cpus and total > 0, source="sysfs"))
    return tuple(nodes)


def nearest_cpu_node(nodes: tuple[NumaNode, ...], node_id: int) -> NumaNode | None:
    """The node with CPUs closest (by SLIT distance) to `node_id` (itself if it has CPUs)."""
    by_id = {n.id: n for n in nodes}
    me = by_id.get(node_id)
    if me is None:
        return None
    if me.cpus:
        return me
    with_cpus = [n for n in nodes if n.cpus]
    if not with_cpus:
        return None
    ids = [n.id for n in nodes]

    def dist(n: NumaNode) -> int:
        pos = ids.index(n.id)
        return me.distances[pos] if pos < len(me.distances) else 10**6

    return min(with_cpus, key=lambda n: (dist(n), n.id))


def node_ids_here(root: str = "/") -> tuple[int, ...]:
    """NUMA node ids of this machine ((0,) on a kernel without NUMA folders)."""
    ids = sorted(int(n[4:]) for n in list_dir(root, NODE_DIR) if n.startswith("node") and n[4:].isdigit())
    return tuple(ids) or (0,)


def check_numa_nodes_here(p, where: str, root: str = "/") -> None:
    """`emit` writes numactl bindings for this machine and `bench` runs the placement here:
    every node the placement binds must exist."""
    from moeplan.errors import InputError

    if not p.numa_nodes or p.numa == "none":
        return
    ids = node_ids_here(root)
    bad = [n for n in p.numa_nodes if n not in ids]
    if bad:
        raise InputError(f"{where}: placement.numa_nodes names NUMA node {bad[0]}, which this machine does not have "
                         f"(nodes: {', '.join(map(str, ids))})",
                         "emit on the machine that runs the plan, or re-plan with `moeplan tune`")
