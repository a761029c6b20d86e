"""HOBBIT's multi-dimensional cache priority (paper §3.4, Eq. 3).

p = w_lru * R/T + w_lfu * F/T + w_lhu * H/T + w_fld * (1 - ((l_t - l_i + L) mod L) / L)

R: token index of the copy's last use in this request, F: its uses in this request, H: its
high-precision uses, T: tokens so far, l_t: the copy's layer, l_i: the layer being filled,
L: layers. The lowest p leaves; ties go to the least recently used. Weights are
normalised to sum 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hobbit.sim.policies.base import CacheView, PolicyInputs, Pool


def fld(layer: int, current: int, num_layers: int) -> float:
    """Forward layer distance term: 1 for the layer being filled, 1/L for the one just passed."""
    return 1.0 - ((layer - current + num_layers) % num_layers) / num_layers


@dataclass(frozen=True)
class MultiDimKnobs:
    """``system.cache.multidim``: the four weights of Eq. 3, >= 0 with a positive sum (normalised).
    The paper tunes them and does not publish them; conf/system/hobbit.yaml says how these were chosen."""

    LIMITS: ClassVar[dict[str, str]] = {"w_lru": ">=0", "w_lfu": ">=0", "w_lhu": ">=0", "w_fld": ">=0"}

    w_lru: float = 0.25
    """Weight of the recency term R/T: the token index of the copy's last use in this request over the tokens so far
    (paper §3.4, Eq. 3)."""
    w_lfu: float = 0.25
    """Weight of the frequency term F/T: the copy's uses in this request over the tokens so far (paper §3.4, Eq. 3)."""
    w_lhu: float = 0.0
    """Weight of the high-precision term H/T: the copy's high-precision uses in this request over the tokens so far
    (paper §3.4, Eq. 3)."""
    w_fld: float = 0.5
    """Weight of the forward layer distance term: 1 for the layer being filled, down to 1/L for the one just passed
    (paper §3.4, Eq. 3)."""

    def problems(self) -> list[str]:
        """What the ranges (``LIMITS``) cannot say; [] when nothing is wrong."""
        if self.w_lru + self.w_lfu + self.w_lhu + self.w_fld > 0:
            return []
        return ["w_lru + w_lfu + w_lhu + w_fld must be > 0"]


class MultiDim:
    """Evict the lowest multi-dimensional priority."""

    name = "multidim"
    Knobs = MultiDimKnobs
    needs: frozenset[str] = frozenset()

    def __init__(self, knobs: MultiDimKnobs | None = None, inputs: PolicyInputs | None = None) -> None:
        k = knobs or MultiDimKnobs()
        if k.problems() or min(k.w_lru, k.w_lfu, k.w_lhu, k.w_fld) < 0:
            raise ValueError("cache weights must be >= 0 with a positive sum")
        w = (k.w_lru, k.w_lfu, k.w_lhu, k.w_fld)
        self.w = tuple(x / sum(w) for x in w)
        self._fld: dict[tuple[int, int], list[float]] = {}

    def priority(self, pool: Pool, slot: int, view: CacheView) -> float:
        a, b, c, d = self.w
        rec = (a * pool.last_use[slot] + b * pool.uses[slot] + c * pool.high_uses[slot]) / max(view.tokens, 1)
        return rec + d * fld(pool.layer[slot], view.layer, view.num_layers)

    def _fld_weights(self, current: int, num_layers: int) -> list[float]:
        """w_fld * FLD by the copy's layer, for one layer being filled (memoised)."""
        key = (current, num_layers)
        if key not in self._fld:
            self._fld[key] = [self.w[3] * fld(x, current, num_layers) for x in range(num_layers)]
        return self._fld[key]

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        a, b, c, _ = self.w
        inv_t = 1.0 / max(view.tokens, 1)
        a, b, c = a * inv_t, b * inv_t, c * inv_t
        fw = self._fld_weights(view.layer, view.num_layers)
        lu, us, hu, lay, touched, pinned = (
            pool.last_use,
            pool.uses,
            pool.high_uses,
            pool.layer,
            pool.touched,
            pool.pinned,
        )
        best, best_key = -1, None
        for s in region:  # one pass: candidates, score, ties to the least recently used
            if lay[s] < 0 or pinned[s]:
                continue
            k = (a * lu[s] + b * us[s] + c * hu[s] + fw[lay[s]], touched[s])
            if best_key is None or k < best_key:
                best, best_key = s, k
        return best
