"""The compiled walk's pool as a policy's compiled part reads it (``Plain.compiled_evict``): ``pool[pool, slot,
field]``, int64, one row per slot of the high (0) and low (1) precision pools, with these fields. The walk
(``sim.fast.walk``) takes them from here, so a policy's file needs nothing of the compiled core to name them."""

from __future__ import annotations

# the copy's layer (-1: a free slot) and expert; its record of uses in this request (last use, uses, uses at high
# precision, all uses since it entered); its last touch (a counter, unique: a use or its insertion); the transfer
# that brings it (-1: landed); whether it is pinned (a prefetch waiting for its layer: never a victim)
LAYER, EXPERT, LAST_USE, USES, HIGH_USES, ALL_USES, TOUCHED, TRANSFER, PINNED = range(9)
N_FIELDS = 9
