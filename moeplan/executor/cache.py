"""GPU expert cache policy (pure): which experts of CPU-resident layers are kept in VRAM.

One cache of `n_slots` experts shared by all CPU layers, keyed by (block, expert). For each
use of an expert by a decode token (experts of a token in increasing id order):
  hit                 the expert is resident: it runs on the GPU from its slot
  miss, upload        a share `upload_share` of misses (spread evenly, deterministic) copy the
                      expert to the GPU over PCIe and admit it; it then runs on the GPU
  miss, cpu           the other misses run on the CPU from host memory, as without a cache
Eviction when full (never an expert the same token already uses: its slot is busy; if every
resident expert is busy, the miss runs on the CPU):
  lru   the least recently used resident expert
  lfu   frequency-aware: every use (hit or miss) counts; the victim is the resident expert
        with the fewest uses (least recent among equals), and an expert used fewer times
        than that victim is not admitted (its miss runs on the CPU), so one-off experts do
        not flush hot ones
"""
from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("lru", "lfu")

HIT, UPLOAD, CPU = "hit", "upload", "cpu"


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    uploads: int = 0
    evictions: int = 0

    @property
    def accesses(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.accesses if self.accesses else None

    def to_dict(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "uploads": self.uploads,
                "evictions": self.evictions, "hit_rate": self.hit_rate}


class ExpertCache:
    def __init__(self, n_slots: int, policy: str = "lru", upload_share: float = 1.0) -> None:
        if policy not in POLICIES:
            raise ValueError(policy)
        self.n_slots = n_slots
        self.policy = policy
        self.upload_share = upload_share
        self.slot_of: dict[tuple[int, int], int] = {}
        self.free = list(range(n_slots - 1, -1, -1))
        self.last_use: dict[tuple[int, int], int] = {}
        self.uses: dict[tuple[int, int], int] = {}
        self.clock = 0
        self._share_acc = 0.0
        self.busy: set[tuple[int, int]] = set()
        self.stats = CacheStats()

    def begin_step(self) -> None:
        """A new token's experts are about to be decided: none of its slots is busy yet."""
        self.busy.clear()

    def reset_stats(self) -> None:
        self.stats = CacheStats()

    def _want_upload(self) -> bool:
        self._share_acc += self.upload_share
        if self._share_acc >= 1.0 - 1e-9:
            self._share_acc -= 1.0
            return True
        return False

    def _victim(self) -> tuple[int, int] | None:
        free = [key for key in self.slot_of if key not in self.busy]
        if not free:
            return None
        if self.policy == "lru":
            return min(free, key=lambda key: self.last_use[key])
        return min(free, key=lambda key: (self.uses[key], self.last_use[key]))

    def access(self, layer: int, expert: int) -> tuple[str, int]:
        """Decide one use; returns (HIT|UPLOAD|CPU, slot or -1)."""
        key = (layer, expert)
        self.clock += 1
        self.uses[key] = self.uses.get(key, 0) + 1
        if key in self.slot_of:
            self.last_use[key] = self.clock
            self.busy.add(key)
            self.stats.hits += 1
            return HIT, self.slot_of[key]
        self.stats.misses += 1
        if self.n_slots <= 0 or not self._want_upload():
            return CPU, -1
        if not self.free:
            victim = self._victim()
            if victim is None or (self.policy == "lfu" and self.uses[key] < self.uses[victim]):
                return CPU, -1
            self.free.append(self.slot_of.pop(victim))
            del self.last_use[victim]
            self.stats.evictions += 1
        slot = self.free.pop()
        self.slot_of[key] = slot
        self.last_use[key] = self.clock
        self.busy.add(key)
        self.stats.uploads += 1
        return UPLOAD, slot
