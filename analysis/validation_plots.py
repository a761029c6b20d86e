"""Simulated against measured per-token latency: a scatter and both over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hobbit.analysis.plots import pyplot, save


def plot_validation(sim_ms: list[float], real_ms: list[float], v: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    sim, real = np.asarray(sim_ms), np.asarray(real_ms)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 1.6]})
    a.scatter(real, sim, s=10, alpha=0.6)
    lo, hi = min(real.min(), sim.min()), max(real.max(), sim.max())
    a.plot([lo, hi], [lo, hi], "k--", lw=1, label="simulated = measured")
    a.set_xlabel("measured (ms / token)")
    a.set_ylabel("simulated (ms / token)")
    extra = f", bias {100 * v['bias']:+.1f} %" if "bias" in v else ""
    noise = f"; replays' own spread {100 * v['noise_mape']:.1f} %" if "noise_mape" in v else ""
    a.set_title(f"per token: MAPE {100 * v['mape']:.1f} %{extra}{noise}", fontsize=10)
    a.legend(fontsize=8)
    b.plot(real, lw=1, label="measured")
    b.plot(sim, lw=1, label="simulated")
    b.set_xlabel("decode token")
    b.set_ylabel("latency (ms)")
    b.set_title(f"over time ({v['device']})")
    b.legend(fontsize=8)
    return save(fig, out, "validation")
