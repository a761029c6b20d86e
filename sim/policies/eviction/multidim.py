"""HOBBIT's multi-dimensional cache priority (paper §3.4, Eq. 3).

p = w_lru * R/T + w_lfu * F/T + w_lhu * H/T + w_fld * (1 - ((l_t - l_i + L) mod L) / L)

R: token index of the copy's last use in this request, F: its uses in this request, H: its
high-precision uses, T: tokens so far, l_t: the copy's layer, l_i: the layer being filled,
L: layers. The lowest p leaves; ties go to the least recently used. Weights are
normalised to sum 1.
"""

from __future__ import annotations

from sim.policies.base import CacheView, Pool


def fld(layer: int, current: int, num_layers: int) -> float:
    """Forward layer distance term: 1 for the layer being filled, 1/L for the one just passed."""
    return 1.0 - ((layer - current + num_layers) % num_layers) / num_layers


class MultiDim:
    """Evict the lowest multi-dimensional priority."""

    name = "multidim"

    def __init__(self, w_lru: float = 0.25, w_lfu: float = 0.25, w_lhu: float = 0.25, w_fld: float = 0.25) -> None:
        total = w_lru + w_lfu + w_lhu + w_fld
        if total <= 0 or min(w_lru, w_lfu, w_lhu, w_fld) < 0:
            raise ValueError("cache weights must be >= 0 with a positive sum")
        self.w = (w_lru / total, w_lfu / total, w_lhu / total, w_fld / total)

    def priority(self, pool: Pool, slot: int, view: CacheView) -> float:
        a, b, c, d = self.w
        rec = (a * pool.last_use[slot] + b * pool.uses[slot] + c * pool.high_uses[slot]) / max(view.tokens, 1)
        return rec + d * fld(pool.layer[slot], view.layer, view.num_layers)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        a, b, c, d = self.w
        inv_t, L, cur = 1.0 / max(view.tokens, 1), view.num_layers, view.layer
        lu, us, hu, lay, touched = pool.last_use, pool.uses, pool.high_uses, pool.layer, pool.touched
        fld_w = [d * (1.0 - ((x - cur) % L) / L) for x in range(L)]  # by the copy's layer
        return min(pool.candidates(region),
                   key=lambda s: ((a * lu[s] + b * us[s] + c * hu[s]) * inv_t + fld_w[lay[s]], touched[s]))
