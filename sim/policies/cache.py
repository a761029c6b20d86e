"""The device expert cache: a high- and a low-precision pool of slots (paper §3.4).

Pools are sized in slots (bytes / expert bytes at the pool's precision) and kept as
arrays, one entry per slot, so that an eviction policy scores a whole pool at once.
Which slot leaves a full pool is the policy's choice (``to_evict``); evicting is the
cache's. When a pool (or, per layer, its region) has no slot it may take (none at all, or
every one pinned), the copy is used once and not kept; a pool or region of no slots at all
tells a hooked policy nothing of it.

With ``per_layer`` each pool is split into one region per layer, side by side in layer order: a copy of
layer l's expert takes only region l. Regions may differ in size (``cache.layer_partition=bytes``: each
layer the same bytes, in experts of its own size); by default every layer has the pool's slots // L.

Records (paper §3.4: last use R, uses F, high-precision uses H) are kept per (layer, expert)
for the whole request, whether or not the expert is cached now: they survive eviction, a
reloaded expert comes back with them, and they reset at every request. Each slot mirrors
its expert's record for the policies. A prefetched copy enters its pool pinned: no policy
evicts it until its layer has run (``unpin``).

A policy that keeps its own order of the entries (``hooked``: queues, ghost lists, a hand; see
``policies.base.Hooked``) is told every event of a region (the pool, or with ``per_layer`` the
layer's part of it): a miss about to be admitted (``on_miss``), an insertion (``on_insert``), a hit
(``on_hit``); the slot its ``to_evict`` returns is always evicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import cast

from hobbit.sim.policies.base import HIGH, LOW, CacheView, EvictionPolicy, Hooked, Key, Pool


class ExpertCache:
    """Two pools of expert copies; ``per_layer`` splits each pool across layers (``regions``)."""

    def __init__(
        self,
        high_slots: int,
        low_slots: int,
        policy: EvictionPolicy,
        num_layers: int,
        per_layer: bool = False,
        regions: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """``regions`` (with ``per_layer``): each pool's slots in each layer, [2][L] (the pools are then their sums);
        None: every layer ``high_slots // num_layers`` and ``low_slots // num_layers`` (the rest unused)."""
        self.policy = policy
        # the policy again, typed for its hooks, when it keeps its own order (``hooked``); None otherwise
        self.hooks: Hooked | None = cast(Hooked, policy) if getattr(policy, "hooked", False) else None
        self.num_layers = num_layers
        self.per_layer = per_layer
        if per_layer:
            if regions is None:
                regions = ([high_slots // num_layers] * num_layers, [low_slots // num_layers] * num_layers)
            if any(len(r) != num_layers or min(r, default=0) < 0 for r in regions):
                raise ValueError(f"regions: a count >= 0 per layer of each pool ({num_layers} layers), got {regions}")
            # region of layer l in pool p: slots offsets[p][l] .. offsets[p][l + 1] - 1
            self.offsets = tuple(tuple(accumulate((int(n) for n in r), initial=0)) for r in regions)
            high_slots, low_slots = self.offsets[HIGH][-1], self.offsets[LOW][-1]
        else:
            self.offsets = ((0, high_slots), (0, low_slots))
        self.pools = (Pool(high_slots, HIGH), Pool(low_slots, LOW))
        self.index: tuple[dict[Key, int], dict[Key, int]] = ({}, {})  # key -> slot, per pool
        self.free = (list(range(high_slots - 1, -1, -1)), list(range(low_slots - 1, -1, -1)))  # empty slots
        self.tokens = 1  # T: tokens so far in the request
        self.clock = 0  # accesses so far
        self.step = 0  # (pass, layer) index over the trace, set by the caller
        self.records: dict[Key, list[int]] = {}  # (layer, expert) -> [R, F, H] for the request

    def __len__(self) -> int:
        return len(self.index[HIGH]) + len(self.index[LOW])

    def lookup(self, key: Key, need: int, any_precision: bool) -> tuple[int, int] | None:
        """(pool, slot) of a copy that serves ``need``: high always does; low if ``need`` is
        LOW or ``any_precision``."""
        s = self.index[HIGH].get(key)
        if s is not None:
            return HIGH, s
        if need == LOW or any_precision:
            s = self.index[LOW].get(key)
            if s is not None:
                return LOW, s
        return None

    def has_free(self, precision: int, layer: int) -> bool:
        """Whether a copy of ``layer`` would find an empty slot in the pool (no eviction)."""
        p = self.pools[precision]
        if self.per_layer:
            return any(p.layer[s] < 0 for s in self.region(p, layer))
        return bool(self.free[precision])

    def contains(self, key: Key) -> bool:
        return key in self.index[HIGH] or key in self.index[LOW]

    def transfer(self, pool: int, slot: int) -> int:
        return self.pools[pool].transfer[slot]

    def record(self, key: Key) -> tuple[int, int, int]:
        """(R, F, H) of ``key`` in this request: last use (token, 0: none), uses, high-precision uses."""
        r = self.records.get(key)
        return (r[0], r[1], r[2]) if r is not None else (0, 0, 0)

    def note_use(self, key: Key, precision: int, token: int) -> None:
        """A use of ``key`` at ``precision`` by the request's token number ``token`` (1-based), whether
        or not a copy is kept: the request's records, and the slots that hold the expert."""
        r = self.records.get(key)
        if r is None:
            r = self.records[key] = [0, 0, 0]
        r[0] = token
        r[1] += 1
        if precision == HIGH:
            r[2] += 1
        for pool, index in zip(self.pools, self.index):
            s = index.get(key)
            if s is not None:
                pool.last_use[s], pool.uses[s], pool.high_uses[s] = r

    def region(self, p: Pool, key_layer: int) -> range:
        """The slots a copy of layer ``key_layer`` may take: the pool, or with ``per_layer`` its layer's part."""
        if not self.per_layer:
            return range(p.size)
        off = self.offsets[p.precision]
        return range(off[key_layer], off[key_layer + 1])

    def region_slots(self, precision: int, layer: int) -> int:
        """How many slots a copy of ``layer`` may take in pool ``precision`` (its region's, or the pool's)."""
        return len(self.region(self.pools[precision], layer))

    def use(self, pool: int, slot: int, token: int, hit: bool = True) -> None:
        """A cached copy served a use by the request's token number ``token``, recorded (``note_use``);
        ``hit``: False for the use that loaded it (a hooked policy hears of it as the insertion)."""
        self.clock += 1
        p = self.pools[pool]
        p.touched[slot] = self.clock
        p.all_uses[slot] += 1
        if hit and self.hooks is not None:
            self.hooks.on_hit(p, self.region(p, p.layer[slot]), slot)
        self.note_use((p.layer[slot], p.expert[slot]), pool, token)

    def _free_slot(self, p: Pool, layer: int, key_layer: int) -> tuple[int, Key | None]:
        """A slot for a new copy: an empty one, or the policy's victim; (-1, None) if there is none."""
        region = self.region(p, key_layer)
        free = self.free[p.precision]
        if self.per_layer:
            for s in region:
                if p.layer[s] < 0:
                    return s, None
        elif free:
            return free.pop(), None
        view = CacheView(layer=layer, num_layers=self.num_layers, tokens=self.tokens, clock=self.clock, step=self.step)
        slot = self.policy.to_evict(p, view, region)
        if slot < 0:  # no slot it could take
            return -1, None
        return slot, (p.layer[slot], p.expert[slot])

    def admit(
        self, key: Key, precision: int, layer: int, transfer: int, pinned: bool = False
    ) -> tuple[int, Key | None]:
        """Insert a copy (``pinned``: until ``unpin``); returns (its slot or -1 if it is not kept, the
        evicted key or None)."""
        p = self.pools[precision]
        if p.size == 0 or (self.per_layer and not self.region(p, key[0])):  # no slot at all: nothing to tell
            return -1, None
        self.clock += 1
        if self.hooks is not None:
            self.hooks.on_miss(p, self.region(p, key[0]), key)
        slot, victim = self._free_slot(p, layer, key[0])
        if slot < 0:
            return -1, None
        if victim is not None:
            del self.index[precision][victim]
        p.put(slot, key, self.clock, transfer, self.record(key), pinned)
        self.index[precision][key] = slot
        if self.hooks is not None:
            self.hooks.on_insert(p, self.region(p, key[0]), slot)
        return slot, victim

    def unpin(self, precision: int, key: Key) -> None:
        """A prefetched copy's layer has run: it becomes evictable."""
        s = self.index[precision].get(key)
        if s is not None:
            self.pools[precision].pinned[s] = 0

    def new_request(self) -> None:
        """Records are per sequence (paper §3.4): forget last use and counts."""
        self.tokens = 1
        self.records.clear()
        for p in self.pools:
            p.last_use = [0] * p.size
            p.uses = [0] * p.size
            p.high_uses = [0] * p.size

    def keys(self, pool: int) -> set[Key]:
        return set(self.index[pool])
