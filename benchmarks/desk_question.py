"""The question users bring: a big MoE on a 24 GB card with 128 GB of DDR5, how fast with which runtime and settings?

    python benchmarks/desk_question.py [--context 4096] [--models qwen3.5-397b-a17b,deepseek-v3] [--seed 0]

The machine is described as its owner would (``hobbit hardware gpu=rtx4090 pcie=4x16 ram=128GB:ddr5-6000x2
ssd=7GB/s cpu_cores=16``); routing is synthetic (``trace=synthetic``: no trace of these models ships with hobbit);
each runtime runs as its users run it: llama.cpp with -ngl 99 and as few --n-cpu-moe layers as fit, KTransformers with
every routed expert on the CPU, HOBBIT on the Q4_K_M file with Q2_K low-precision copies, all with the file
memory-mapped. Prints a markdown table (the README's) and, per run, what the answer rests on (the memory notes); each
runtime again with page faults at the drive's sequential rate (``hardware.ssd_fault_gbps``: the figure the answer
leans on most).
"""

from __future__ import annotations

import argparse
import dataclasses

from hobbit.api import configure, read_trace, simulate_config, trace_file
from hobbit.catalogue.machine import hardware_config
from hobbit.plumbing.results_io import tok_s

MACHINE = {"gpu": "rtx4090", "pcie": "4x16", "ram": "128GB:ddr5-6000x2", "ssd": "7GB/s", "cpu_cores": "16"}
RUNTIMES = {  # label -> (system preset, overrides): each as its users run it
    "llama.cpp -ngl 99 --n-cpu-moe N (as few as fit)": ("llama-cpp", {"system__flags": "-ngl 99"}),
    "KTransformers (every routed expert on the CPU)": ("ktransformers", {}),
    "HOBBIT (Q4_K_M + Q2_K copies, mmap)": (
        "hobbit",
        {"system__weights": "q4_k_m", "system__precision__low": "q2_k", "system__host_load": "mmap"},
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--models", default="qwen3.5-397b-a17b,deepseek-v3,qwen3.5-122b-a10b")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    hw = hardware_config(**MACHINE)
    rows, notes = [], []
    for model in args.models.split(","):
        for label, (system, knobs) in RUNTIMES.items():
            cfg = configure(model, hw, system, context=args.context, seed=args.seed, **knobs)
            trace = read_trace(trace_file("synthetic", cfg.model, args.seed))
            s = simulate_config(trace, cfg).summary
            ms = s["decode_ms_per_token"]["mean"]
            fast = dataclasses.replace(cfg, hardware=dataclasses.replace(hw, ssd_fault_gbps=hw.ssd_gbps))
            ms_fast = simulate_config(trace, fast).summary["decode_ms_per_token"]["mean"]
            where = s.get("placement", {}).get("cpu_moe_layers")
            setting = f"--n-cpu-moe {len(where)}" if where is not None else ""
            mem = s["memory"]
            rows.append(
                f"| {model} | {label} | {setting} | {tok_s(ms):.2f} | {tok_s(ms_fast):.2f} | "
                f"{mem['weights_format']} | {mem['ram_share']:.0%} |"
            )
            notes.append(f"{model}, {system}: " + "; ".join(mem["notes"]))
    print(f"machine: {hw.name} ({' '.join(f'{k}={v}' for k, v in MACHINE.items())}), context {args.context}")
    print(
        "| model | runtime | setting found | decode tok/s | tok/s if page faults ran at the drive's rate | weights "
        "| host-side reads served by RAM |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
