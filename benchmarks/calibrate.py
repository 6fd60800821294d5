"""Fit the few efficiency parameters of one hardware profile to the published runs on it.

    python benchmarks/calibrate.py h100-sxm [--calibration PATH ...] [--write]

One parameter set per GPU type, fitted to every case of calibration.yaml and
calibration-modern.yaml on that GPU at once (never per case): coordinate descent over
bounded, physically meaningful ranges, minimising the mean squared log error of the step
time (Huber-weighted beyond 15%). Prints the `calibration:` block for hardware_profiles/NAME.yaml (with `fitted_on`, the
classes of the runs it was fitted to) and the errors it gives; `--write` replaces the
profile's block in place. Parameters the cases cannot see (no FP8 run: fp8_matmul_efficiency;
no run across nodes: network_efficiency) keep their values.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.accuracy import default_paths, evaluate, load_cases  # noqa: E402
from planner.config import profile_dir  # noqa: E402
from planner.specs import Calibration  # noqa: E402

BOUNDS = {   # physically plausible ranges (README, 'Calibration')
    "matmul_efficiency": (0.55, 0.9),       # large bf16 GEMMs reach 60-85% of the dense peak
    "fp8_matmul_efficiency": (0.45, 0.85),  # FP8 GEMMs: 50-75% of the FP8 peak; never slower
                                            # than BF16 ones (0.45 x 2 x peak > 0.9 x peak)
    "matmul_half_size": (0.0, 1500.0),      # the GEMM size where efficiency halves
    "attention_efficiency": (0.2, 0.75),    # FlashAttention-2/3, cuDNN: 25-75% of peak
    "elementwise_bytes_per_activation": (0.0, 12.0),
    "layer_overhead_us": (0.0, 200.0),      # tens of small kernels per layer
    "launch_overhead_us": (1.0, 60.0),      # eager PyTorch: 5-50 us of host time per op
    "nvlink_efficiency": (0.55, 0.9),       # nccl-tests bus bandwidth / link rate
    "network_efficiency": (0.5, 0.95),
    "overlap_efficiency": (0.5, 0.95),
    "ep_overlap_efficiency": (0.2, 0.95),  # Megatron's 1F1B all-to-all overlap: partial
    "step_overhead_ms": (0.0, 200.0),       # optimizer / grad-norm launches, bookkeeping
}


NOT_THIS_HARDWARE = {
    "tt-2508-llama3-8b-b200pl-": "8 power-limited B200s (the source: 'POWER-LIMITED B200 (power "
                                 "limit not stated)'), not the DGX B200 of the b200 profile",
}
"""Runs the data file files under a profile whose hardware differs from it, by id prefix and
why; they are reported by accuracy.py like every run but do not shape the profile's fit."""

HUBER = 0.15
"""Log errors beyond this count linearly, not squared: a few runs whose published settings are
incomplete (README, 'Accuracy') must not drag the fit of every other run."""


def loss(cases, hw) -> tuple[float, float]:
    rows = evaluate(cases, {hw.name: hw})
    errs = [math.log(r["predicted_s"] / r["measured_s"]) for r in rows]
    huber = [e * e if abs(e) <= HUBER else HUBER * (2 * abs(e) - HUBER) for e in errs]
    return sum(huber) / len(errs), max(abs(e) for e in errs)


def _descend(cases, hw, best, sweeps: int, steps: int):
    """Coordinate descent: each parameter over a grid of its bounds, then a finer grid around
    its best value, sweep after sweep."""
    for sweep in range(sweeps):
        for name, (lo, hi) in BOUNDS.items():
            cur = getattr(hw.calibration, name)
            span = (hi - lo) / (steps - 1)
            if sweep:        # later sweeps refine around the current value
                grid = [min(hi, max(lo, cur + span * (i - 5) / 5)) for i in range(11)]
            else:
                grid = [lo + span * i for i in range(steps)] + [cur]
            for val in grid:
                cand = replace_cal(hw, name, val)
                lval = loss(cases, cand)
                if lval < best:
                    best, hw = lval, cand
    return hw, best


def fit(cases, hw, sweeps: int = 4, steps: int = 11, starts: int = 4):
    """The best of several coordinate descents: from the profile's values, from the middle
    of the bounds, and from `starts` - 2 seeded random points (a single descent stalls in
    the valleys two compensating parameters make)."""
    import random
    rng = random.Random(0)
    points = [hw, _at(hw, {k: (lo + hi) / 2 for k, (lo, hi) in BOUNDS.items()})]
    points += [_at(hw, {k: rng.uniform(lo, hi) for k, (lo, hi) in BOUNDS.items()})
               for _ in range(max(0, starts - 2))]
    best_hw, best = hw, loss(cases, hw)
    for start in points:
        got, val = _descend(cases, start, loss(cases, start), sweeps, steps)
        if val < best:
            best_hw, best = got, val
    return best_hw, best


def _at(hw, values: dict):
    for name, val in values.items():
        hw = replace_cal(hw, name, val)
    return hw


def replace_cal(hw, name, val):
    cal = Calibration(**{**hw.calibration.model_dump(), name: round(val, 4)})
    return hw.model_copy(update={"calibration": cal})


def block(cal: Calibration) -> str:
    lines = ["calibration:"]
    for k, v in cal.model_dump().items():
        lines.append(f"  {k}: [{', '.join(v)}]" if isinstance(v, tuple) else f"  {k}: {v}")
    return "\n".join(lines) + "\n"


def write_block(name: str, text: str, header: str) -> Path:
    """Replace the `calibration:` block (and the comment lines right above it), keeping every
    other block of the profile (`serving_calibration:` after it, for one) as it is."""
    path = profile_dir() / f"{name}.yaml"
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("calibration:"))
    j = i + 1
    while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
        j += 1
    while i > 0 and lines[i - 1].startswith("#"):
        i -= 1
    path.write_text("\n".join(lines[:i] + header.splitlines() + text.splitlines() + lines[j:])
                    + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hardware")
    ap.add_argument("--calibration", type=Path, action="append", default=None)
    ap.add_argument("--write", action="store_true", help="write the block into the profile")
    args = ap.parse_args(argv)
    cases = [c for c in load_cases(paths=args.calibration or default_paths())
             if c.job.hardware.name == args.hardware]
    left = [c for c in cases if any(c.id.startswith(p) for p in NOT_THIS_HARDWARE)]
    for prefix, why in NOT_THIS_HARDWARE.items():
        n = sum(c.id.startswith(prefix) for c in left)
        if n:
            print(f"# not fitted: {n} runs {prefix}*: {why}")
    cases = [c for c in cases if c not in left]
    if not cases:
        print(f"no calibration cases on {args.hardware}", file=sys.stderr)
        return 2
    hw0 = cases[0].job.hardware
    hw, (mse, worst) = fit(cases, hw0)
    classes = sorted({c.cls for c in cases})
    recipes = sorted({c.job.training.recipe for c in cases if c.job.training.recipe})
    cal = hw.calibration.model_copy(update={"fitted_on": tuple(classes),
                                            "fitted_recipes": tuple(recipes)})
    files = sorted({c.source_file for c in cases})
    header = (f"# Efficiency parameters of the time model (planner/specs.py Calibration).\n"
              f"# Fitted by `python benchmarks/calibrate.py {args.hardware}` to the {len(cases)} "
              f"runs on it in {' and '.join(files)}\n"
              f"# (Huber loss {mse:.4f}, worst log error {worst:.3f}): one set for every case.")
    print(header)
    print(block(cal), end="")
    for r in evaluate(cases, {hw.name: hw.model_copy(update={"calibration": cal})}):
        print(f"  {r['id'][:56]:56s} {r['error']:+7.1%}")
    if args.write:
        print(f"wrote {write_block(args.hardware, block(cal), header)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
