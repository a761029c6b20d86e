"""The device cache: slot pools per precision class, allocated on the device up front.

The decisions (``sim.decide``) say which expert copies the cache keeps and which it evicts;
this class holds the device buffers behind them. Each pool is preallocated with the pool's
slot count, the high pool also with the staging slots prefetched experts wait in (both
capped at the number of experts a pool could ever hold, layers x experts), so the replay
allocates nothing while it runs unless copies in flight outnumber the free buffers: demand
loads the decisions do not keep, or a prefetch landing while its slot's expert computes. ``admit``
raises if a pool would hold more resident experts than its slots, so a replay that ran is
a replay that stayed within them; ``peak`` records the most each pool held.
"""

from __future__ import annotations

import torch

from hobbit.executor.weights import HostStore

Key = tuple[int, int, int]  # (layer, expert, precision class)


class CacheOverflow(RuntimeError):
    """The replay was asked to keep more experts in a pool than the pool has slots."""


class DeviceCache:
    def __init__(self, store: HostStore, slots: tuple[int, int], staging: int = 0) -> None:
        self.store = store
        self.slots = (int(slots[0]), int(slots[1]))
        cap = store.model.num_layers * store.model.num_experts
        self.allocated = [0, 0]
        self.free: list[list[torch.Tensor]] = [[], []]
        for cls, n in enumerate((self.slots[0] + staging, self.slots[1])):
            if cls in store.kernels:
                self.free[cls] = [self._alloc(cls) for _ in range(min(n, cap))]
        self.resident: dict[Key, torch.Tensor] = {}
        self.count = [0, 0]
        self.peak = [0, 0]

    def _alloc(self, cls: int) -> torch.Tensor:
        self.allocated[cls] += 1
        # zeroed, so that a replay's copies do not pay the pages' first touch (allocated before the clock starts)
        return torch.zeros(self.store.nbytes(cls), dtype=torch.uint8, device=self.store.device)

    def take(self, cls: int) -> torch.Tensor:
        """A free buffer for a copy of class ``cls`` (a new one only when every slot is busy)."""
        return self.free[cls].pop() if self.free[cls] else self._alloc(cls)

    def give(self, cls: int, buf: torch.Tensor) -> None:
        self.free[cls].append(buf)

    def admit(self, key: Key, buf: torch.Tensor, *, pinned: bool = False) -> None:
        """Keep ``buf`` as the resident copy of ``key``; ``pinned`` (static placement) is outside the pools."""
        cls = key[2]
        if key not in self.resident:
            if not pinned and self.count[cls] >= self.slots[cls]:
                raise CacheOverflow(
                    f"pool {cls} would hold {self.count[cls] + 1} experts, it has {self.slots[cls]} slots"
                )
            self.count[cls] += 1
            self.peak[cls] = max(self.peak[cls], self.count[cls])
        self.resident[key] = buf

    def evict(self, key: Key) -> bool:
        """Free ``key``'s buffer; False when it was not resident."""
        buf = self.resident.pop(key, None)
        if buf is None:
            return False
        self.count[key[2]] -= 1
        self.give(key[2], buf)
        return True

    def get(self, key: Key) -> torch.Tensor:
        return self.resident[key]
