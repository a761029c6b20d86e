#!/usr/bin/env bash
# GPU check (under 5 minutes on one GPU): calibrate + validate on CUDA, the executor's CUDA
# kernels against the reference, and the achieved host-to-device bandwidth of the replay's
# copies as a fraction of the calibrated B. Runs unchanged on any CUDA box with the project.
#   benchmarks/gpu_check.sh            # SCALE=4 REQUESTS=3 OUT=outputs/gpu_check by default
#   PY=python3 benchmarks/gpu_check.sh # a Python that already holds the project (a machine with no package index)
# Ends with: gpu_check mape=<f> bias=<f> noise_mape=<f> copy_fraction=<f>
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if [ "$PY" = .venv/bin/python ]; then [ -x .venv/bin/hobbit ] || make venv >/dev/null; fi
OUT=${OUT:-outputs/gpu_check}
SCALE=${SCALE:-4}
REQUESTS=${REQUESTS:-3}
mkdir -p "$OUT"
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('device:', torch.cuda.get_device_name(0))"
$PY -m pytest -q -m gpu tests/test_executor.py
$PY -m hobbit validate device=cuda scale="$SCALE" requests="$REQUESTS" threads=4 hydra.run.dir="$OUT/validate"
$PY - "$OUT/validate/results.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
v, p = r["validation"], r["profile"]
frac = r["copies_measured_gbps"] / p["link_gbps"]
print(f"validation on {v['device']}: {v['tokens']} decode tokens, MAPE {100 * v['mape']:.2f} %, "
      f"|error| P50 {v['p50_abs_ms']:.3f} ms, P95 {v['p95_abs_ms']:.3f} ms")
print(f"link: calibrated t0 {p['link_t0_s'] * 1e6:.1f} us, B {p['link_gbps']:.2f} GB/s; replay copies "
      f"{r['copies_measured_gbps']:.2f} GB/s = {100 * frac:.1f} % of B")
print(f"bias {100 * v['bias']:+.2f} %, replays' own spread (noise_mape) {100 * v['noise_mape']:.2f} %, "
      f"prefill MAPE {100 * v['prefill_mape']:.2f} % over {v['prefills']} requests")
print(f"gpu_check mape={v['mape']:.4f} bias={v['bias']:.4f} noise_mape={v['noise_mape']:.4f} "
      f"copy_fraction={frac:.3f}")
PYEOF
