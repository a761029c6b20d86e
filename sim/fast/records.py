"""The compiled walk's records and numbers (``sim.fast.walk``): what it carries from one pass to the next (``State``),
what it reads and does not carry (``Inputs``: the routing, the rule, the placement, the eviction's and the prefetcher's
inputs, the CPU's and the bound's), the records its phases read (``Cache``, ``Staged``, ``Logs``, ``Future``,
``Scratch``, and per step ``Step``), the log's row counts (``Rows``) and what ``walk`` returns (``Out``); the
precision classes, the served kinds, the scalars of ``st`` and cpu_misses' numbers.

State lives in arrays: ``pool[precision, slot, field]`` (fields ``LAYER`` .. ``PINNED``, as ``policies.base.Pool``),
``index[precision, layer, expert]`` (slot or -1), ``rec[layer, expert, (R, F, H)]`` (both views of one row per
(layer, expert), ``xs``), scalars in ``st`` (``CLOCK`` ..), a policy's own state in ``own`` and the prefetchers' in
``pf``. The log is appended to tables (``Logs``), one row per record, in the order the reference appends them."""

from __future__ import annotations

from typing import Any, NamedTuple

from hobbit.sim.policies.compiled import NOW_REQUEST, NOW_STEP, NOW_TOKENS

HIGH, LOW, SKIP = 0, 1, 2
HIGH_HIT, LOW_HIT, HIGH_LOAD, LOW_LOAD, SKIPPED, CPU = range(6)

# scalars of st
CLOCK, NEXT_TID, TOKENS, STEP, EVICTIONS, ISSUED, USED, DROPPED, BYTES, INSERTS, OVERFLOW, WARM, BEHIND = range(13)
REQUESTS = 13  # requests begun
N_ST = 14
# a policy's compiled part reads the tokens, the current step and the requests in ``st`` (``Space.now``) by these
# numbers
assert (TOKENS, STEP, REQUESTS) == (NOW_TOKENS, NOW_STEP, NOW_REQUEST)
CPU_MISSES = ("never", "always", "faster", "split")
CM_NEVER, CM_ALWAYS, CM_FASTER, CM_SPLIT = range(4)


class State(NamedTuple):
    """What the walk carries from one pass to the next (``walk_state`` makes it, ``walk`` updates it in place; a
    streamed run replaces ``pins`` and ``logs`` with the grown buffers ``walk`` returns)."""

    pool: Any
    roff: Any
    nfree: Any
    match: Any  # [1]: a prefetcher's match (``Space.match``)
    own: Any  # the state of a policy whose file gives its compiled part (``policies.compiled``; () for the others)
    pf: Any  # each compiled prefetcher's state (``special.prefetchers``' order; () for one that keeps none)
    xs: Any
    index: Any  # [2, L, E]: a view of xs (the slot per pool)
    st: Any
    served: Any
    mass: Any
    stg_tid: Any
    stg_prec: Any
    stg_list: Any
    pins: Any
    counts: Any
    fut_cur: Any  # [L * E] each key's place in its list of next uses (``_passed``; -1: the walk sets it)
    fut_nu: Any  # [L * E] the step there (``Space.next_use``)
    logs: Any


STATE = State._fields


class Routing(NamedTuple):
    """The trace as the walk reads it (``fast.inputs.walk_inputs``): per token, per pass."""

    ids: Any  # [N, L, K] int16: each token's experts per layer
    weights: Any  # [N, L, K]: their gate weights
    pred: Any  # [N, L, D, K] int16: the trace's predictions of later layers (-1: none)
    pred_w: Any  # [N, L, D, K]: their weights
    pass_start: Any  # [P] int64: each pass's first token
    pass_end: Any  # [P] int64: one past its last
    pass_request: Any  # [P] int64: its request
    token_in_request: Any  # [N] int64: each token's place in its request
    top_k: int  # the model's experts per token
    # a window of a longer trace (``fast.stream`` over windows): the per-pass arrays' row 0 is pass ``first_pass``,
    # whose predecessor ran request ``prev_request`` (-1: none); a whole trace is the window from pass 0
    first_pass: int = 0
    prev_request: int = -1
    prev_ids: Any = None  # [T, K] int16: the selections of the last layer of the pass before (``_edge``)


class Rule(NamedTuple):
    """The precision rule (``rule.rule_args``, ``policies.precision``)."""

    hobbit_rule: bool  # HOBBIT's T1/T2 rule, else a uniform precision
    rule_hi: float  # T1
    rule_lo: float  # T2
    mixed: bool  # precision.mode == hobbit
    uniform: int  # the precision of a uniform mode (HIGH or LOW)
    any_prec: bool  # precision.serve_any_cached
    multi_high: bool  # precision.multi_token == high, under the mixed mode


class Place(NamedTuple):
    """Where experts live and what the pools keep."""

    resident: Any  # [L, E] bool: resident on the device (placement)
    cpu_layer: Any  # [L] bool: the layer's experts stay on the CPU
    wide_bypass: bool  # cache.wide_step=bypass on per-layer pools
    offload_at: int  # tokens from which a CPU layer's experts run on the device (op offload)
    per_layer: bool  # cache.per_layer
    per_expert: Any  # [P] int64: tokens per expert of each pass (the bound's CPU share)
    expert_bytes: Any  # [L, 2] int64: a copy's bytes per layer and precision


class Evict(NamedTuple):
    """What the eviction policies read besides the pools."""

    fut_off: Any  # the future uses (``future_csr``) of a policy that needs them (``FUTURE``): offsets per key
    fut_steps: Any  # and the steps


class Prefetch(NamedTuple):
    """The prefetcher and its inputs."""

    kind: int  # the prefetcher: its place in ``special.prefetchers``
    max_depth: int  # prefetch.max_depth
    history: bool  # the history fallback predicts from the request's counts
    prefetch_prec: int  # the precision of a prefetch (-1: the rule's)
    prefetching: bool  # the prefetcher loads ahead (and misses are not all computed on the CPU)
    staging: int  # prefetch.staging_slots
    most: int  # the proposals a step may make beyond max_depth layers' experts (``CompiledPrefetch.most``)


class Cpu(NamedTuple):
    """Misses computed on the CPU (``system.cpu_misses``)."""

    misses: int  # CM_*
    insert: int  # system.cpu_insert: copies kept behind CPU-served misses, at most
    faster: Any  # [2, tokens + 1] bool: computing a miss on the CPU beats loading it
    copy_s: Any  # [2]: a miss's copy seconds per precision (FreeToken's split)
    cpu_s: Any  # [tokens + 1]: its CPU seconds per token count
    split_threshold: float
    split_max_fetch: int


class Bound(NamedTuple):
    """Each pass's bound and the rule's class counts, computed as the walk reads the selections (``stream``)."""

    on: bool  # compute them
    dense: Any  # [P, 2]: the dense part's seconds per pass (a whole CPU layer's in column 1)
    whole: Any  # [L] bool: the layer runs whole on the CPU
    other: Any  # [P]: the rest of a pass
    min_s: Any  # [tokens + 1]: an expert's least device seconds per token count (over the precisions run)
    cpu: Any  # [tokens + 1]: on the CPU
    uses_cpu: bool  # the bound may put experts on the CPU
    out: Any  # [P]: written, each pass's bound
    cls_n: Any  # [3] int64: written, the selections of each class


class Out(NamedTuple):
    """What ``walk`` returns: its passes' log tables (views of the buffers, which the next walk with the same state
    overwrites), the counters (the state's own arrays), the pins' table and the buffers (grown: they replace the
    state's ``pins`` and ``logs``)."""

    loads: Any
    gpu: Any
    cpu: Any
    cancel: Any
    evicted: Any
    kept: Any
    served: Any
    mass: Any
    st: Any
    pins: Any
    logs: Any


class Inputs(NamedTuple):
    """Everything the walk reads and does not carry from one pass to the next (``fast.inputs.walk_inputs``)."""

    routing: Routing
    rule: Rule
    place: Place
    evict: Evict
    prefetch: Prefetch
    cpu: Cpu
    bound: Bound
    log_proto: Any  # an empty array of the log tables' dtype


class Cache(NamedTuple):
    """The pools and what the walk keeps per (layer, expert), as the phases of ``walk`` read them (the state's arrays,
    borrowed)."""

    pool: Any  # [2, slots, N_FIELDS]
    roff: Any  # [2, L + 1]: the pools' regions
    nfree: Any  # [2]: the slots a shared pool has filled
    index: Any  # [2, L, E]: each (layer, expert)'s slot per pool (-1: none)
    rec: Any  # [L, E, 3]: its record (last use, uses, uses at high precision) in this request
    counts: Any  # [L, E]: the tokens that used it in this request
    prefetched: Any  # [L, E]: a prefetch brought its copy, not yet used
    st: Any  # the scalars (CLOCK ..)
    served: Any  # [6]: uses by how they were served (HIGH_HIT ..)
    mass: Any  # [3]: gate mass served at each precision


class Staged(NamedTuple):
    """Copies ahead of their use: prefetches staged outside the cache (``prefetch.staging_slots``) and the pins of
    those admitted, pinned until their layer (the pins' table, borrowed: ``walk`` grows it between steps)."""

    stg_tid: Any  # [L, E]: its transfer (-1: none)
    stg_prec: Any  # [L, E]: its precision
    stg_list: Any  # [staging, 3]: layer, expert, target, in insertion order
    pins: Any  # [.., 4]: target layer, pool, layer, expert


class Logs(NamedTuple):
    """The log tables the walk appends to (borrowed; grown between steps)."""

    loads: Any
    gpu: Any
    cpu: Any
    cancel: Any
    evicted: Any
    kept: Any


class Future(NamedTuple):
    """Each key's next use (``FUTURE``): the lists of its steps (``Evict.fut_off``, ``Evict.fut_steps``), its cursor
    in them and the step there (``State.fut_cur``, ``State.fut_nu``)."""

    fo_b: Any
    fs_b: Any
    cur_b: Any
    nu_b: Any


class Scratch(NamedTuple):
    """One step's working arrays (``scratch`` makes them once a walk)."""

    need_c: Any  # [E]: the step's need: each expert's class, tokens and gate mass
    need_n: Any
    need_m: Any
    order: Any  # [E]: the experts it needs, in first-appearance order
    on_cpu: Any  # [E]: FreeToken's split sends it to the CPU
    want: Any  # [E]: a prefetcher's wanted precision per expert, and the wanted in order (``Sight``)
    worder: Any
    props: Any  # [.., 3]: proposals: layer, expert, precision
    sink: Any  # [1]: ``Sight.sink``
    m_e: Any  # [E]: FreeToken's misses, their classes and sort keys
    m_c: Any
    m_key: Any
    hist: Any  # [E]: the history fallback's counts
    b_dev: Any  # [E]: the bound's device and CPU seconds of each expert a step needs
    b_cpu: Any
    row: Any  # [K]: the rule's buffers (``rule_row``)
    rc: Any
    rm: Any


class Step(NamedTuple):
    """A step as its phases read it (``walk`` makes one per step): which, the request's tokens so far, and how its
    misses go."""

    i: int  # pass * L + layer
    layer: int
    pw: int  # the pass's row of the window's per-pass arrays
    token: int  # the request's tokens so far, this pass's included (a use's record)
    offload: bool  # offload_min_batch: a CPU layer's experts run on the device, each copied and used once
    off_miss: bool  # and so does a miss (cpu_misses is not never)
    by_h: bool  # wide_step=bypass: the step keeps none of its misses in the high pool
    by_l: bool  # nor in the low one


class Rows(NamedTuple):
    """The rows the walk has written to each log table (``Logs``), and the staged copies and pins it lists
    (``Staged``): what its phases move on and return."""

    loads: int
    gpu: int
    cpu: int
    cancel: int
    evicted: int
    kept: int
    staged: int
    pins: int
