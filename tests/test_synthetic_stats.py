"""Synthetic traces: seeded, valid, and their knobs move the statistics they name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hobbit.traces.arrays import TraceArrays
from hobbit.traces.io import Trace, read_trace, write_trace
from hobbit.traces.schema import ModelSpec, TraceMeta
from hobbit.traces.stats import summarize
from hobbit.traces.synthetic import SyntheticConfig, generate


def _stats(**kw):
    arrays, meta = generate(SyntheticConfig(**{"requests": 2, "prompt_tokens": 8, "decode_tokens": 40, **kw}))
    return summarize(Trace(meta, arrays))


def test_same_seed_same_trace_other_seed_differs():
    a1, _ = generate(SyntheticConfig(seed=3, requests=1))
    a2, _ = generate(SyntheticConfig(seed=3, requests=1))
    a3, _ = generate(SyntheticConfig(seed=4, requests=1))
    assert a1.pred_ids is not None and a2.pred_ids is not None
    assert np.array_equal(a1.expert_ids, a2.expert_ids) and np.array_equal(a1.pred_ids, a2.pred_ids)
    assert not np.array_equal(a1.expert_ids, a3.expert_ids)


def test_knobs_move_their_statistics():
    low, high = _stats(reuse=0.0, cross_layer=0.0), _stats(reuse=0.8, cross_layer=0.0)
    assert high["next_token_reuse"]["all"] > low["next_token_reuse"]["all"] + 0.3
    flat, skew = _stats(zipf=0.0, reuse=0.0, cross_layer=0.0), _stats(zipf=2.0, reuse=0.0, cross_layer=0.0)
    assert np.mean(skew["expert_load"]["top_share"]) > np.mean(flat["expert_load"]["top_share"]) + 0.2
    acc = _stats(lookahead_accuracy=0.7, lookahead_decay=1.0)["lookahead"]
    assert [r["d"] for r in acc] == [1, 2, 3]
    assert all(abs(r["top1"] - 0.7) < 0.05 for r in acc)
    perfect = _stats(lookahead_accuracy=1.0, lookahead_decay=1.0)["lookahead"]
    assert all(r["top1"] == 1.0 and r["recall"] == 1.0 for r in perfect)


def test_bad_knobs_are_named():
    with pytest.raises(ValueError, match="reuse"):
        SyntheticConfig(reuse=1.5)
    with pytest.raises(ValueError, match="top_k"):
        SyntheticConfig(top_k=9, num_experts=8)


@settings(max_examples=25, deadline=None)
@given(
    layers=st.integers(1, 5),
    experts=st.integers(1, 12),
    k=st.integers(1, 4),
    requests=st.integers(1, 3),
    prompt=st.integers(1, 4),
    decode=st.integers(0, 4),
    depth=st.integers(0, 3),
    seed=st.integers(0, 10_000),
    reuse=st.floats(0, 1),
    cross=st.floats(0, 1),
)
def test_any_synthetic_trace_is_valid_and_round_trips(
    tmp_path_factory, layers, experts, k, requests, prompt, decode, depth, seed, reuse, cross
):
    k = min(k, experts)
    cfg = SyntheticConfig(
        num_layers=layers,
        num_experts=experts,
        top_k=k,
        requests=requests,
        prompt_tokens=prompt,
        decode_tokens=decode,
        lookahead_depth=depth,
        seed=seed,
        reuse=reuse,
        cross_layer=min(cross, 1 - reuse),
    )
    arrays, meta = generate(cfg)
    path = write_trace(tmp_path_factory.mktemp("h") / "t.parquet", arrays, meta)
    tr = read_trace(path)
    assert tr.num_tokens == requests * (prompt + decode)
    assert np.array_equal(tr.arrays.expert_ids, arrays.expert_ids)
    s = summarize(tr)
    assert s["tokens"]["decode"] == requests * decode
    assert sum(map(sum, s["expert_load"]["counts"])) == tr.num_tokens * layers * k


def _hand_trace() -> Trace:
    """2 layers, 4 experts, top-2; one request of 3 tokens with known overlaps."""
    ids = np.array(
        [
            [0, 1],
            [2, 3],  # token 0: layer 0, layer 1
            [1, 0],
            [2, 0],  # token 1: reuse at layer 0 = 2/2, layer 1 = 1/2
            [3, 2],
            [1, 3],
        ]
    )  # token 2: layer 0 = 0/2, layer 1 = 0/2
    w = np.tile([[0.7, 0.3]], (6, 1)).astype(np.float32)
    pred = np.full((6, 1, 2), -1, np.int16)
    pred[0, 0], pred[2, 0], pred[4, 0] = [2, 1], [0, 2], [3, 1]  # token-wise predictions of layer 1
    pw = np.where(pred >= 0, 0.5, np.nan).astype(np.float32)
    a = TraceArrays(
        request_id=np.zeros(6, np.int32),
        phase=np.array([0, 0, 1, 1, 1, 1], np.int8),
        step=np.array([0, 0, 1, 1, 2, 2], np.int32),
        position=np.repeat(np.arange(3), 2).astype(np.int32),
        layer=np.tile([0, 1], 3).astype(np.int16),
        expert_ids=ids.astype(np.int16),
        gate_weights=w,
        pred_ids=pred,
        pred_weights=pw,
    )
    meta = TraceMeta(model=ModelSpec("hand", "test", 2, 4, 2, "softmax_renorm"), lookahead_depth=1)
    return Trace(meta, a)


def test_stats_on_a_hand_computed_trace(tmp_path):
    tr = _hand_trace()
    tr = read_trace(write_trace(tmp_path / "h.parquet", tr.arrays, tr.meta))
    s = summarize(tr)
    # reuse: token1 (2/2 + 1/2)/2 = 0.75, token2 0; mean 0.375; per layer [0.5, 0.25]
    assert s["next_token_reuse"]["all"] == pytest.approx(0.375)
    assert s["next_token_reuse"]["per_layer"] == [0.5, 0.25]
    assert s["next_token_reuse"]["decode"] == pytest.approx(0.375)  # both pairs end in a decode token
    # load baseline: layer shares (2/3, 2/3, 1/3, 1/3) -> sum p^2 / k = (10/9) / 2
    assert s["next_token_reuse"]["baseline"] == pytest.approx(5 / 9)
    (la,) = s["lookahead"]
    # top-1: pred [2,0,3] vs actual layer-1 top-1 [2,2,1] -> 1/3; recall: {2,1}&{2,3}=1, {0,2}&{2,0}=2, {3,1}&{1,3}=2
    assert la["top1"] == pytest.approx(1 / 3)
    assert la["recall"] == pytest.approx(5 / 6)
    assert la["baseline_top1"] == pytest.approx(2 / 9)  # predicted top-1 {2,0,3}, true top-1 {2,2,1}
    assert s["expert_load"]["counts"] == [[2, 2, 1, 1], [1, 1, 2, 2]]
    assert s["tokens"] == {"total": 3, "prefill": 1, "decode": 2}


def test_stats_without_predictions(tmp_path):
    tr = _hand_trace()
    meta = dataclasses.replace(tr.meta, lookahead_depth=0)
    tr.arrays.pred_ids = tr.arrays.pred_weights = None
    s = summarize(read_trace(write_trace(tmp_path / "h.parquet", tr.arrays, meta)))
    assert s["lookahead"] == []


def _close(a, b, path=""):
    """Equal, floats within 1e-12 relative (sums taken in another order)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15), path
    else:
        assert a == b, path


def test_statistics_read_in_chunks_of_tokens_are_those_of_the_whole_trace(monkeypatch):
    """``summarize`` reads the tokens ``TOKEN_CHUNK`` at a time (the pair of consecutive tokens across two chunks
    counted once). The bundled model's trace (real routing) and synthetic ones with several requests and lookahead
    give the same statistics in chunks of 1, 3 and 7 tokens as in one."""
    from hobbit.traces import stats
    from hobbit.traces.tiny import bundled_trace

    traces = [read_trace(bundled_trace())]
    for seed in range(2):
        arrays, meta = generate(
            SyntheticConfig(requests=3, prompt_tokens=5, decode_tokens=9, lookahead_depth=2, seed=seed)
        )
        traces.append(Trace(meta, arrays))
    for tr in traces:
        monkeypatch.setattr(stats, "TOKEN_CHUNK", 1 << 30)
        whole = summarize(tr)
        assert whole["lookahead"] and whole["next_token_reuse"]["all"] is not None
        for chunk in (1, 3, 7):
            monkeypatch.setattr(stats, "TOKEN_CHUNK", chunk)
            _close(summarize(tr), whole)
