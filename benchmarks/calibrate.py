"""Fit the few efficiency parameters of one hardware profile to the published runs on it.

    python benchmarks/calibrate.py h100-sxm [--calibration PATH]

One parameter set per GPU type, fitted to every calibration.yaml case on that GPU at once
(never per case): coordinate descent over bounded, physically meaningful ranges, minimising
the mean squared log error of the step time. Prints the
`calibration:` block to paste into hardware_profiles/NAME.yaml, and the errors it gives.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.accuracy import evaluate, load_cases  # noqa: E402
from planner.specs import Calibration  # noqa: E402

BOUNDS = {   # physically plausible ranges (sources in README, 'Calibration')
    "matmul_efficiency": (0.6, 0.9),        # large bf16 GEMMs reach 70-85% of the dense peak
    "matmul_half_size": (0.0, 1000.0),
    "attention_efficiency": (0.3, 0.75),    # FlashAttention-2/3: 35-75% of peak
    "elementwise_bytes_per_activation": (0.0, 12.0),
    "layer_overhead_us": (0.0, 200.0),      # tens of kernel launches per layer
    "nvlink_efficiency": (0.6, 0.9),        # nccl-tests bus bandwidth / link rate
    "network_efficiency": (0.6, 0.95),
    "overlap_efficiency": (0.5, 0.95),
}


def loss(cases, hw) -> tuple[float, float]:
    rows = evaluate(cases, {hw.name: hw})
    errs = [math.log(r["predicted_s"] / r["measured_s"]) for r in rows]
    return sum(e * e for e in errs) / len(errs), max(abs(e) for e in errs)


def fit(cases, hw, sweeps: int = 4, steps: int = 11):
    best = loss(cases, hw)
    for _ in range(sweeps):
        for name, (lo, hi) in BOUNDS.items():
            cur = getattr(hw.calibration, name)
            grid = [lo + (hi - lo) * i / (steps - 1) for i in range(steps)] + [cur]
            for val in grid:
                cand = replace_cal(hw, name, val)
                lval = loss(cases, cand)
                if lval < best:
                    best, hw = lval, cand
    return hw, best


def replace_cal(hw, name, val):
    cal = Calibration(**{**hw.calibration.model_dump(), name: round(val, 4)})
    return hw.model_copy(update={"calibration": cal})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hardware")
    ap.add_argument("--calibration", type=Path, default=None)
    args = ap.parse_args(argv)
    cases = [c for c in load_cases(args.calibration) if c.job.hardware.name == args.hardware]
    if not cases:
        print(f"no calibration cases on {args.hardware}", file=sys.stderr)
        return 2
    hw0 = cases[0].job.hardware
    hw, (mse, worst) = fit(cases, hw0)
    print(f"# fitted to {len(cases)} cases on {args.hardware}: rms log error {math.sqrt(mse):.3f}, "
          f"worst {worst:.3f}")
    print("calibration:")
    for k, v in hw.calibration.model_dump().items():
        print(f"  {k}: {v}")
    for r in evaluate(cases, {hw.name: hw}):
        print(f"  {r['id']:44s} {r['error']:+7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
