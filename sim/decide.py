"""Walk a trace through the policies: every hit, load, prefetch, skip and eviction.

Decisions do not depend on time, so they are made once here and replayed by the timing
engines (``sim.engine`` with simpy, ``sim.plain`` without) and by the executor, which
therefore all see the same decisions.

Rules (paper §3.2-3.4, docs/design.md): an expert whose precision score is above T2 is skipped
only on a miss; a cached copy of either precision serves it. Records (R, F, H) are kept per
(layer, expert) for the request (``policies.cache``). A prefetched expert enters its pool
when the prefetch is issued (evicting then), pinned until its target layer has run; with
``prefetch.staging_slots`` > 0 it waits instead in one of that many staging slots (carved
from the high pool's memory), enters the cache only when used there, and is dropped
unused, a copy that has not started then being cancelled by the timing engine.
With ``cache.per_layer`` and ``cache.wide_step=bypass``, a (pass, layer) whose tokens select more distinct
experts than the layer's region of a pool has slots (a prefill) keeps none of its misses in that pool: each
is used once and not kept (no eviction, no hook hears of it), as a copy that finds no slot is, and no copy
follows a CPU-computed miss (``cpu_insert``, nor ``cpu_misses=faster``'s fill of an empty slot). Its hits
are hits. Prefetches, staged copies included, are not misses of the step: they enter as ever.
The walk names no policy: it gives each what its class ``needs`` (``policies.base.NEEDS``).
Legend: N tokens, L layers, K top-k, D lookahead depth, E experts, T tokens in a forward pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hobbit.sim.config import SystemConfig, offload_tokens, policy_knobs
from hobbit.sim.decisions import (
    CPU,
    HIGH_HIT,
    HIGH_LOAD,
    LOW_HIT,
    LOW_LOAD,
    PRECISION,
    SERVED_NAMES,
    SKIPPED,
    Compute,
    CopyKey,
    Decisions,
    DecisionTables,
    LayerStep,
    Load,
    LogEntry,
    NotKept,
    Placement,
    cache_slots,
    layer_bytes,
    layer_regions,
    log_dtype,
    tables_from_steps,
)
from hobbit.sim.policies.base import HIGH, LOW, SKIP, PolicyInputs, PrefetchContext
from hobbit.sim.policies.cache import ExpertCache
from hobbit.sim.policies.precision import classes_for
from hobbit.sim.policies.registry import eviction_class, prefetcher_class
from hobbit.sim.workload import Workload

# the decisions' records live in sim.decisions; the compiled core (sim.fast) and the results (sim.results) import
# these from here
__all__ = [
    "HIGH_HIT",
    "LOW_HIT",
    "SERVED_NAMES",
    "SKIPPED",
    "Decider",
    "DecisionTables",
    "Decisions",
    "NotKept",
    "Placement",
    "cache_slots",
    "layer_bytes",
    "layer_regions",
    "log_dtype",
    "tables_from_steps",
]


@dataclass
class _Staged:
    tid: int
    precision: int
    target: int  # layer it was fetched for


class Decider:
    """Applies one system's policies to a workload; ``run`` returns the decisions."""

    def __init__(
        self,
        wl: Workload,
        system: SystemConfig,
        slots: Any,
        expert_bytes: Any,
        placement: Placement | None = None,
        keep_log: bool = False,
        cpu_faster: Callable[[int, int], bool] | None = None,
        profile: list | None = None,
        miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
    ) -> None:
        """``slots``: the pools' slots (high, low), or with ``cache.per_layer`` each pool's slots in each layer ([2, L],
        ``layer_regions``); ``cpu_faster(precision, tokens)``: whether a miss is better computed on the CPU (for
        ``system.cpu_misses=faster``); ``profile``: the profiling requests' activation matrices;
        ``miss_costs(precision, tokens)``: a miss's copy time and CPU time (``cpu_misses=split``)."""
        self.wl, self.system = wl, system
        self.expert_bytes = layer_bytes(expert_bytes, wl.num_layers).tolist()  # [L][2]: a copy charges its layer's
        p = system.precision
        self.mixed = p.mode == "hobbit"
        self.uniform = LOW if p.mode == "low" else HIGH
        self.ids = wl.ids.tolist()  # [N][L][K]
        w = wl.weights.astype(np.float64)
        self.wn = (w / np.clip(w.sum(axis=-1, keepdims=True), 1e-30, None)).tolist()  # gate mass per token
        self.cls = classes_for(wl.weights, p.mode, p.t1, p.t2).tolist()
        pf, ev = system.prefetch, system.cache
        loads_ahead = self._set_policies(slots, profile)
        self.wide = ev.per_layer and ev.wide_step == "bypass"  # a wide step's misses are not kept (``run``)
        self.bypass = (False, False)  # per pool: this step's misses are not kept there
        self.offload_at = offload_tokens(system, wl.num_experts, wl.top_k)  # a pass this wide copies host experts
        self.offload = False  # this pass computes host-side experts on the device (``offload_min_batch``)
        placement = placement or Placement()
        self.resident, self.cpu_layers = placement.resident, placement.cpu_layers
        self.counts = np.zeros((wl.num_layers, wl.num_experts), np.int64)  # activation matrix of the request
        self.staged: dict[tuple[int, int], _Staged] = {}  # staging mode: prefetched copies waiting for their layer
        self.staging = pf.staging_slots
        self.pins: dict[int, list[tuple[int, tuple[int, int]]]] = {}  # target layer -> (pool, key) pinned for it
        self.prefetched: dict[tuple[int, int], int] = {}  # key -> target layer, until used or its layer ran
        self.next_tid = 0
        self.cpu_misses, self.cpu_faster = system.cpu_misses, cpu_faster or (lambda prec, n: True)
        self.miss_costs = miss_costs or (lambda prec, n: (1.0, 1.0))
        self.on_cpu: set[int] = set()  # split: this layer's misses the CPU computes
        self.inserts = 0  # cpu_insert: copies behind CPU-computed misses in this layer step
        self.prefetching = loads_ahead and system.cpu_misses != "always"
        # None: the precision the rule gives the predicted weights; else one class for every prefetch
        self.prefetch_prec = {"high": HIGH, "low": LOW}.get(pf.precision) if self.mixed else self.uniform
        self.steps: list[LayerStep] = []  # the walk's records, in order (``self.out.steps``)
        self.out = Decisions(
            steps=self.steps,
            served=np.zeros(6, np.int64),
            log=[] if keep_log else None,
            slots=cache_slots(slots),
            staging=self.staging if self.prefetching else 0,
        )
        self.any_prec = p.serve_any_cached
        self._span = (0, 0)
        self.ctx = PrefetchContext(
            layer=0,
            num_layers=wl.num_layers,
            predict=self._predict,
            future=self._future,
            counts=self.counts,
            is_cached=self._present,
            precision=self.uniform,
        )

    def _set_policies(self, slots: Any, profile: list | None) -> bool:
        """The policies' inputs (the predictions and their classes, where the policies need them), the prefetcher and
        the cache; whether the prefetcher loads ahead."""
        self.pred: list | None = None  # set together with pred_cls
        self.pred_cls: list | None = None
        wl, system, p = self.wl, self.system, self.system.precision
        pf, ev = system.prefetch, system.cache
        depth = pf.max_depth
        pf_cls, ev_cls = prefetcher_class(pf.kind), eviction_class(ev.policy)
        needs = pf_cls.needs | ev_cls.needs
        if wl.pred_ids is not None and "predictions" in needs:
            assert wl.pred_weights is not None  # laid out with the ids
            self.pred = wl.pred_ids[:, :, :depth].tolist()  # [N][L][D][K]
            self.pred_cls = classes_for(
                np.nan_to_num(wl.pred_weights[:, :, :depth], nan=0.0), p.mode, p.t1, p.t2
            ).tolist()  # a missing prediction's weight counts as 0
        inputs = PolicyInputs(
            num_layers=wl.num_layers,
            depth=depth,
            future_uses=wl.future_uses() if "future_uses" in needs else None,
            profile=profile if "profile" in needs else None,
        )
        self.prefetcher = pf_cls(policy_knobs(pf, pf.kind), inputs)
        if "prefetcher" in needs:
            inputs = dataclasses.replace(inputs, prefetcher=self.prefetcher)
        self.cache = ExpertCache(
            *cache_slots(slots),
            ev_cls(policy_knobs(ev, ev.policy), inputs),
            wl.num_layers,
            per_layer=ev.per_layer,
            regions=layer_regions(slots, wl.num_layers).tolist() if ev.per_layer else None,
        )
        return pf_cls.loads_ahead

    def _log(self, p: int, layer: int, e: int, action: str, prec: int) -> None:
        if self.out.log is not None:
            self.out.log.append(LogEntry(p, layer, e, action, PRECISION[prec]))

    def _transfer(self, step: LayerStep, key: tuple[int, int], prec: int, demand: bool) -> int:
        tid = self.next_tid
        self.next_tid += 1
        nbytes = self.expert_bytes[key[0]][prec]
        step.loads.append(Load(tid, nbytes, demand))
        step.load_keys.append(CopyKey(key[0], key[1], PRECISION[prec]))
        self.out.bytes_requested += nbytes
        return tid

    def _admit(
        self, p: int, key: tuple[int, int], prec: int, layer_now: int, tid: int, token: int, step: LayerStep
    ) -> None:
        slot, victim = self.cache.admit(key, prec, layer_now, tid)
        if victim is not None:
            self.out.evictions += 1
            step.evicted.append(CopyKey(victim[0], victim[1], PRECISION[prec]))
            self._log(p, victim[0], victim[1], "evict", prec)
        if slot >= 0:
            self.cache.use(prec, slot, token, hit=False)
            step.kept.append(CopyKey(key[0], key[1], PRECISION[prec]))
        else:  # used once, not kept: the request's records still count it
            self.cache.note_use(key, prec, token)

    # ------------------------------------------------------------------ serving one layer

    def _needed(self, a: int, b: int, layer: int) -> dict[int, list]:
        """expert -> [best precision class, tokens that select it, their gate mass] over the pass's
        tokens (mass: weights normalised per token). The class is SKIP only when every token scores
        it above T2; served at all, an expert computes every token that selected it."""
        ids, cls, wn = self.ids, self.cls, self.wn
        if b - a == 1:
            return {e: [c, 1, w] for e, c, w in zip(ids[a][layer], cls[a][layer], wn[a][layer])}
        need: dict[int, list] = {}
        for t in range(a, b):
            for e, c, w in zip(ids[t][layer], cls[t][layer], wn[t][layer]):
                cur = need.setdefault(e, [SKIP, 0, 0.0])
                cur[0] = min(cur[0], c)
                cur[1] += 1
                cur[2] += w
        if b - a > 1 and self.system.precision.multi_token == "high" and self.mixed:  # HOBBIT's rule only
            for v in need.values():
                v[0] = SKIP if v[0] == SKIP else HIGH
        return need

    def _serve_one(self, p: int, layer: int, e: int, c: int, n: int, step: LayerStep, token: int) -> int:
        """Serve one expert for its ``n`` tokens; returns the precision they got (HIGH, LOW or SKIP).
        A SKIP class is served by any copy on the device (skip only on a miss, paper §3.2)."""
        key = (layer, e)
        if key in self.resident:
            self.out.served[HIGH_HIT] += 1
            step.gpu.append(Compute(-1, HIGH, n))
            step.gpu_keys.append(key)
            self._log(p, layer, e, "hit", HIGH)
            return HIGH
        if layer in self.cpu_layers and self.offload:  # op offload: copied for this pass, used once
            return self._offload(p, layer, e, n, step)
        if layer in self.cpu_layers:
            self.out.served[CPU] += 1
            step.cpu.append(n)
            step.cpu_keys.append(key)
            self._log(p, layer, e, "cpu", HIGH)
            return HIGH
        need = LOW if c == SKIP else c  # either precision serves a selection that would be skipped
        hit = self.cache.lookup(key, need, self.any_prec)
        if hit is not None:
            pool, slot = hit
            self.cache.use(pool, slot, token)
            if self.prefetched.pop(key, None) is not None:
                self.out.prefetch_used += 1
            self.out.served[HIGH_HIT if pool == HIGH else LOW_HIT] += 1
            step.gpu.append(Compute(self.cache.transfer(pool, slot), PRECISION[pool], n))
            step.gpu_keys.append(key)
            self._log(p, layer, e, "hit", pool)
            return pool
        staged = self.staged.pop(key, None)
        if staged is not None and (staged.precision == HIGH or need == LOW or self.any_prec):
            self.out.prefetch_used += 1
            self.out.served[HIGH_HIT if staged.precision == HIGH else LOW_HIT] += 1
            step.gpu.append(Compute(staged.tid, PRECISION[staged.precision], n))
            step.gpu_keys.append(key)
            self._log(p, layer, e, "hit", staged.precision)
            self._admit(p, key, staged.precision, layer, staged.tid, token, step)
            return staged.precision
        if staged is not None:  # staged at low precision, high needed: useless
            step.cancel.append(staged.tid)
        if c == SKIP:
            self.out.served[SKIPPED] += 1
            self._log(p, layer, e, "skip", SKIP)
            return SKIP
        prec = c if self.mixed else self.uniform
        if self.offload and self.cpu_misses != "never":  # op offload: the CPU's misses copied, used once
            return self._offload(p, layer, e, n, step, prec, token)
        if (
            self.cpu_misses == "always"
            or (self.cpu_misses == "faster" and self.cpu_faster(prec, n))
            or (e in self.on_cpu)
        ):
            return self._serve_on_cpu(p, layer, e, n, step, prec)
        tid = self._transfer(step, key, prec, True)
        self.out.served[HIGH_LOAD if prec == HIGH else LOW_LOAD] += 1
        self._log(p, layer, e, "load", prec)
        step.gpu.append(Compute(tid, PRECISION[prec], n))
        step.gpu_keys.append(key)
        if self.bypass[prec]:  # a wide step's miss (wide_step=bypass): used once, not kept
            self.cache.note_use(key, prec, token)
        else:
            self._admit(p, key, prec, layer, tid, token, step)
        return prec

    def _serve_on_cpu(self, p: int, layer: int, e: int, n: int, step: LayerStep, prec: int) -> int:
        """A miss computed on the host CPU for its ``n`` tokens (``cpu_misses``), with the copy behind it that
        ``cpu_insert`` (or ``cpu_misses=faster``'s empty slot) asks for; returns HIGH, the precision it got."""
        key = (layer, e)
        self.out.served[CPU] += 1
        step.cpu.append(n)
        step.cpu_keys.append(key)
        self._log(p, layer, e, "cpu", HIGH)
        bypass = self.bypass[prec]  # a wide step's miss: no copy follows it
        if self.inserts < self.system.cpu_insert:  # copied behind the CPU's computation, evicting
            if not bypass and self._copy_ahead(p, layer, key, prec, step, pinned=False):
                self.inserts += 1
                self.out.prefetch_issued += 1
                self.out.copies_behind += 1
                self._log(p, layer, e, "prefetch", prec)
        elif self.cpu_misses == "faster" and not bypass and self.cache.has_free(prec, layer):
            # an empty slot costs nothing to fill: the copy follows in the background, behind demand loads,
            # so the cache warms up although the CPU served this use
            self._copy_ahead(p, layer, key, prec, step, pinned=False)
            self.out.prefetch_issued += 1
            self.out.copies_behind += 1
            self._log(p, layer, e, "prefetch", prec)
        return HIGH

    def _offload(self, p: int, layer: int, e: int, n: int, step: LayerStep, prec: int = HIGH, token: int = 0) -> int:
        """A host-side expert computed on the device in a pass of ``offload_min_batch`` tokens or more: a demand copy,
        used once and not kept (a miss's use is still recorded, ``token`` > 0)."""
        key = (layer, e)
        tid = self._transfer(step, key, prec, True)
        self.out.served[HIGH_LOAD if prec == HIGH else LOW_LOAD] += 1
        self._log(p, layer, e, "load", prec)
        step.gpu.append(Compute(tid, PRECISION[prec], n))
        step.gpu_keys.append(key)
        if token:
            self.cache.note_use(key, prec, token)
        return prec

    def _copy_ahead(self, p: int, layer: int, key: tuple[int, int], prec: int, step: LayerStep, pinned: bool) -> bool:
        """A copy of ``key`` ahead of its use: a slot of its pool (evicting for it, ``layer`` being executed),
        then the transfer into it; False, and nothing copied, when the pool has no slot to give."""
        slot, victim = self.cache.admit(key, prec, layer, -1, pinned=pinned)
        if slot < 0:
            return False
        self.cache.pools[prec].transfer[slot] = self._transfer(step, key, prec, False)
        if victim is not None:
            self.out.evictions += 1
            step.evicted.append(CopyKey(victim[0], victim[1], PRECISION[prec]))
            self._log(p, victim[0], victim[1], "evict", prec)
        step.kept.append(CopyKey(key[0], key[1], PRECISION[prec]))
        return True

    def _drop_stale(self, p: int, layer: int, step: LayerStep) -> None:
        """``layer`` has run: its pinned prefetches become evictable (used or not; an unused one stays
        cached); those it did not use leave their staging slots."""
        for pool, key in self.pins.pop(layer, ()):
            self.cache.unpin(pool, key)
            self.prefetched.pop(key, None)
        if not self.staged:
            return
        for key in [k for k, s in self.staged.items() if s.target == layer]:
            s = self.staged.pop(key)
            step.cancel.append(s.tid)
            self._log(p, key[0], key[1], "discard", s.precision)

    def _split(self, need: dict[int, list], layer: int) -> set[int]:
        """FreeToken's hybrid backend (FlashML-org/FreeToken moe/offload_kernels.py, engine/engine.py): of a
        layer's M misses, F are copied and the rest computed on the CPU, with frac = link bandwidth / CPU
        bandwidth (here the CPU's time for an expert over its copy's) and F the one of floor(frac x M) and
        the next integer with the lower max(F x (1 - frac), (M - F) x frac); the most recently used (in this
        request; ties to the lower id) are the ones copied. Where frac is at least 1 / ``split_threshold``
        (the CPU under twice the link's bandwidth) its auto backend copies every miss."""
        misses = []
        for e, (c, n, _) in need.items():
            key = (layer, e)
            if c == SKIP or key in self.resident or self.cache.lookup(key, c, self.any_prec) is not None:
                continue
            misses.append((e, c if self.mixed else self.uniform, n))
        if not misses:
            return set()
        copy_s, cpu_s = self.miss_costs(misses[0][1], max(n for _, _, n in misses))
        frac = cpu_s / copy_s if copy_s > 0 else 1.0
        if frac * self.system.split_threshold >= 1.0:
            return set()
        M = len(misses)
        lo = int(M * frac)
        F = min((lo, lo + 1), key=lambda f: max(f * (1 - frac), (M - f) * frac))
        if self.system.split_max_fetch >= 0:
            F = min(F, self.system.split_max_fetch)
        misses.sort(key=lambda m: (-self.cache.record((layer, m[0]))[0], m[0]))  # most recently used first
        return {e for e, _, _ in misses[F:]}

    # ------------------------------------------------------------------ prefetch

    def _present(self, layer: int, e: int) -> bool:
        key = (layer, e)
        return key in self.staged or key in self.resident or layer in self.cpu_layers or self.cache.contains(key)

    def _predict(self, d: int) -> tuple[list, list]:
        a, b, layer = self._span[0], self._span[1], self.ctx.layer
        pred, pred_cls = self.pred, self.pred_cls
        if pred is not None and pred_cls is not None and d <= len(pred[a][layer]):
            if b - a == 1:
                return [pred[a][layer][d - 1]], [pred_cls[a][layer][d - 1]]
            return (
                [pred[t][layer][d - 1] for t in range(a, b)],
                [pred_cls[t][layer][d - 1] for t in range(a, b)],
            )
        if self.system.prefetch.fallback == "history" and self.counts[layer + d].any():
            top = np.argsort(-self.counts[layer + d], kind="stable")[: self.wl.top_k].tolist()
            return [top], [[self.uniform] * len(top)]
        return [], []

    def _future(self, d: int) -> tuple[list, list]:
        a, b, layer = self._span[0], self._span[1], self.ctx.layer
        return [self.ids[t][layer + d] for t in range(a, b)], [self.cls[t][layer + d] for t in range(a, b)]

    def _prefetch(self, p: int, layer: int, step: LayerStep, a: int, b: int) -> None:
        self._span = (a, b)
        self.ctx.layer = layer
        per_expert = max(1, round((b - a) * self.wl.top_k / self.wl.num_experts))  # tokens an expert serves, expected
        for req in self.prefetcher.propose(self.ctx):
            key = (req.layer, req.expert)
            if self._present(*key):
                continue
            prec = req.precision if self.prefetch_prec is None else self.prefetch_prec
            if self.cpu_misses == "faster" and self.cpu_faster(prec, per_expert):
                continue  # the CPU would compute it sooner than the copy lands: nothing to prefetch
            if self.staging:
                if len(self.staged) >= self.staging:  # no free staging slot
                    self.out.prefetch_dropped += 1
                    continue
                tid = self._transfer(step, key, prec, False)
                self.staged[key] = _Staged(tid, prec, req.layer)
            else:  # into its pool, pinned until its layer has run
                if not self._copy_ahead(p, layer, key, prec, step, pinned=True):
                    self.out.prefetch_dropped += 1  # no slot to take: every one pinned, or no pool
                    continue
                self.pins.setdefault(req.layer, []).append((prec, key))
                self.prefetched[key] = req.layer
            self.out.prefetch_issued += 1
            self._log(p, req.layer, req.expert, "prefetch", prec)

    # ------------------------------------------------------------------ the walk

    def run(self) -> Decisions:
        wl, L = self.wl, self.wl.num_layers
        for p, (req, a, b) in enumerate(zip(wl.pass_request, wl.pass_start, wl.pass_end)):
            if p > 0 and req != wl.pass_request[p - 1]:
                self.prefetcher.end_request()
                self.cache.new_request()
                self.counts[:] = 0
            token = int(wl.token_in_request[b - 1]) + 1
            self.cache.tokens = token
            self.offload = 0 < self.offload_at <= b - a
            for layer in range(L):
                self.cache.step = p * L + layer
                step = LayerStep(p, layer)
                need = self._needed(a, b, layer)
                if self.wide:  # more experts than a pool's region holds: none of the step's misses kept there
                    self.bypass = (
                        len(need) > self.cache.region_slots(HIGH, layer),
                        len(need) > self.cache.region_slots(LOW, layer),
                    )
                self.inserts = 0
                if self.cpu_misses == "split":
                    self.on_cpu = self._split(need, layer)
                for e, (c, n, mass) in need.items():
                    self.out.mass[self._serve_one(p, layer, e, c, n, step, token)] += mass
                    self.counts[layer, e] += n
                self._drop_stale(p, layer, step)
                if self.prefetching:
                    self._prefetch(p, layer, step, a, b)
                self.steps.append(step)
        self.prefetcher.end_request()
        return self.out
