"""Fit the serving parameters of one hardware profile to the measured runs on it.

    python benchmarks/serve_calibrate.py h100-sxm [--data PATH] [--sweeps 4]

One parameter set per GPU type, fitted to every case of inference-calibration.yaml on that
GPU at once (never per case): coordinate descent over bounded, physically meaningful ranges,
minimising the mean over classes (offline-throughput, static-latency) of each class's mean
squared log error, so a class with fewer cases weighs as much. Prints the
`serving_calibration:` block to paste into hardware_profiles/NAME.yaml and the errors.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.serve_accuracy import evaluate, load_cases, summary
from planner.config import resolve_hardware
from planner.specs import ServingCalibration

BOUNDS = {   # physically plausible ranges (README, 'Inference: calibration')
    "hbm_efficiency": (0.55, 0.92),        # streaming reads reach 60-90 % of the HBM peak
    "gemm_efficiency": (0.3, 0.85),        # large fp8/fp4/bf16 GEMMs: 30-85 % of the dense peak
    "gemm_half_tokens": (0.0, 512.0),      # GEMMs reach half their efficiency at M ~ 0-512
    "moe_efficiency": (0.1, 1.0),          # grouped GEMMs relative to a dense one
    "attention_efficiency": (0.25, 0.75),  # flash attention forward: 25-75 % of the bf16 peak
    "layer_overhead_us": (0.0, 150.0),     # 10-20 kernels per layer, 1-4 us each in CUDA graphs,
                                           #   5-10 us launched eagerly (mixed steps)
    "step_overhead_us": (0.0, 8000.0),     # scheduler and host work per engine step
    "sequence_overhead_us": (0.0, 60.0),   # per request per step (sampling, bookkeeping)
    "request_overhead_us": (0.0, 8000.0),  # host work per request: admit, respond
    "link_efficiency": (0.5, 0.9),         # NVLink / Infinity Fabric bus bandwidth / link rate
    "allreduce_latency_us": (0.3, 1.5),    # per ring step on NVLink: 8-GPU small all-reduces
                                           #   take ~5-20 us (one-shot kernels, NCCL LL)
}
PCIE = {"allreduce_latency_us": (2.0, 20.0),   # per ring step over PCIe (NCCL, no NVLink)
        "link_efficiency": (0.1, 0.9)}         # PCIe topology: switches, CPU root complexes
XGMI = {"allreduce_latency_us": (0.5, 3.0)}   # RCCL over Infinity Fabric: higher than NVLink


def bounds(hw) -> dict:
    out = dict(BOUNDS)
    out.update({"pcie": PCIE, "xgmi": XGMI}.get(hw.intra_node_link, {}))
    return out


def replace_cal(hw, **values):
    cal = ServingCalibration(**{**hw.serving_calibration.model_dump(), **values})
    return hw.model_copy(update={"serving_calibration": cal})


def loss(cases, hw) -> float:
    rows = evaluate(cases, {hw.name: hw})
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["class"], []).append(math.log(1 + r["error"]) ** 2)
    return sum(sum(v) / len(v) for v in by.values()) / len(by)


def fit(cases, hw, *, sweeps: int = 6, steps: int = 9):
    """A coarse grid per parameter, then a pattern search: each parameter moved by +-step
    while the loss falls, the steps halved when no move helps, within the bounds."""
    b = bounds(hw)
    hw = replace_cal(hw, **{n: min(hi, max(lo, getattr(hw.serving_calibration, n)))
                            for n, (lo, hi) in b.items()})   # start inside the bounds
    best = loss(cases, hw)
    for name, (lo, hi) in b.items():                      # coarse grid, one pass
        for i in range(steps):
            cand = replace_cal(hw, **{name: round(lo + (hi - lo) * i / (steps - 1), 4)})
            lval = loss(cases, cand)
            if lval < best - 1e-9:
                best, hw = lval, cand
    step = {n: (hi - lo) / 8 for n, (lo, hi) in b.items()}
    for _ in range(sweeps * 8):
        moved = False
        for name, (lo, hi) in b.items():
            cur = getattr(hw.serving_calibration, name)
            for val in (cur - step[name], cur + step[name]):
                val = round(min(hi, max(lo, val)), 4)
                if val == cur:
                    continue
                cand = replace_cal(hw, **{name: val})
                lval = loss(cases, cand)
                if lval < best - 1e-9:
                    best, hw, moved = lval, cand, True
                    break
        if not moved:
            step = {n: v / 2 for n, v in step.items()}
            if all(v < (b[n][1] - b[n][0]) / 256 for n, v in step.items()):
                break
    return hw, best


def render_block(hw, head: str) -> str:
    lines = ["# Parameters of the serving time model (planner/specs.py ServingCalibration).",
             "# Fitted by `python benchmarks/serve_calibrate.py " + hw.name + " --write` to the",
             "# measured runs of inference-calibration.yaml on this GPU, within physical bounds.",
             head, "serving_calibration:"]
    for k, v in hw.serving_calibration.model_dump().items():
        lines.append(f"  {k}: [{', '.join(v)}]" if isinstance(v, tuple) else f"  {k}: {v}")
    return "\n".join(lines) + "\n"


def write_block(name: str, block: str) -> None:
    """Replace (or append) the profile's serving_calibration block and its comment lines."""
    from planner.config import profile_dir
    path = profile_dir() / f"{name}.yaml"
    lines = path.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("serving_calibration:")), None)
    if start is not None:
        end = start + 1
        while end < len(lines) and lines[end].startswith("  "):
            end += 1
        while start > 0 and lines[start - 1].startswith("#") and "serving" in "".join(
                lines[max(0, start - 4):start]).lower():
            start -= 1
        lines[start:end] = [block]
    else:
        lines.append(block)
    path.write_text("".join(lines))
    print(f"wrote {path}", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hardware")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--sweeps", type=int, default=6)
    ap.add_argument("--write", action="store_true",
                    help="replace the serving_calibration block of hardware_profiles/NAME.yaml")
    args = ap.parse_args(argv)
    cases = [c for c in load_cases(args.data) if c.hardware == args.hardware]
    if not cases:
        print(f"no serving calibration cases on {args.hardware}", file=sys.stderr)
        return 2
    hw0 = resolve_hardware(args.hardware)   # start from the defaults: the fit is reproducible
    hw0 = hw0.model_copy(update={"serving_calibration": ServingCalibration()})
    hw, best = fit(cases, hw0, sweeps=args.sweeps)
    classes = sorted({c.cls for c in cases})
    hw = replace_cal(hw, fitted_on=tuple(classes))
    head = (f"# fitted to {len(cases)} cases on {args.hardware} ({', '.join(classes)}): "
            f"rms log error {math.sqrt(best):.3f}")
    block = render_block(hw, head)
    print(block, end="")
    if args.write:
        write_block(args.hardware, block)
    for s in summary(evaluate(cases, {hw.name: hw})):
        if s["hardware"] != "all":
            print(f"# {s['class']:19s} n={s['n']:3d} median |error| {s['median_abs_error']:6.1%} "
                  f"max {s['max_abs_error']:6.1%} bias {s['bias']:+6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
