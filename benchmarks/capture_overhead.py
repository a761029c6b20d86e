"""Cost of recording routing during generation, measured side by side in one run.

    python benchmarks/capture_overhead.py [--tokens 64] [--repeats 3]

Greedy decode of the bundled tiny MoE (batch 1, KV cache), timed three ways in
alternation: plain, with the router hooks (lookahead 0) and with lookahead 3. Prints
ms/token for each and ends with one line
``plain_ms_per_token=<f> hooks_ratio=<f> lookahead3_ratio=<f>``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _decode(model, ids: torch.Tensor, n: int, recorder=None) -> float:
    """Seconds per decode token (prefill excluded)."""
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        if recorder is not None:
            recorder.take()
        kw = "cache" if hasattr(out, "cache") else "past_key_values"
        nxt = out.logits[:, -1:].argmax(-1)
        cache = getattr(out, kw)
        t0 = time.perf_counter()
        for _ in range(n):
            out = model(input_ids=nxt, use_cache=True, **{kw: cache})
            if recorder is not None:
                recorder.take()
            nxt, cache = out.logits[:, -1:].argmax(-1), getattr(out, kw)
        return (time.perf_counter() - t0) / n


def main() -> None:
    from transformers import AutoModelForCausalLM

    from hobbit.traces.capture import RouterRecorder
    from hobbit.traces.families import family_for, find_routers
    from hobbit.traces.tiny import bundled_model_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(bundled_model_dir(), dtype=torch.float32).eval()
    routers = [r for _, r in find_routers(model, family_for(model.config, "bundled"))]
    ids = torch.tensor([list(b"def parse(self, text):\n    ")])
    _decode(model, ids, 8)  # warm-up
    times: dict[str, list[float]] = {"plain": [], "hooks": [], "lookahead3": []}
    for _ in range(args.repeats):
        times["plain"].append(_decode(model, ids, args.tokens))
        for name, depth in (("hooks", 0), ("lookahead3", 3)):
            rec = RouterRecorder(routers, depth)
            times[name].append(_decode(model, ids, args.tokens, rec))
            rec.remove()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:<11} {v:7.2f} ms/token (median of {args.repeats})")
    print(
        f"plain_ms_per_token={med['plain']:.3f} hooks_ratio={med['hooks'] / med['plain']:.3f} "
        f"lookahead3_ratio={med['lookahead3'] / med['plain']:.3f}"
    )


if __name__ == "__main__":
    main()
