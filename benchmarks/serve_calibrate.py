"""Fit the serving parameters of one hardware profile to the measured runs on it.

    python benchmarks/serve_calibrate.py h100-sxm [--data PATH] [--sweeps 4]

One parameter set per GPU type, fitted to every case of inference-calibration.yaml AND
inference-latency.yaml on that GPU at once (never per case): coordinate descent over bounded,
physically meaningful ranges, minimising the mean over classes (offline-throughput, static-latency, serving-latency,
disagg) of the mean over the class's metrics (TPOT and TTFT for the last two) of each
metric's mean absolute log error (NORM "l1": its minimiser is the median |error| each class
is judged on; a run off by more than a factor e counts as e: one run the model cannot
describe must not pull every parameter to a bound), so a class with
fewer cases weighs as much (WEIGHTING "class"; the default "run" counts every run once, its
metrics averaged), plus a soft bound keeping the runs of inference-calibration.yaml inside
the accuracy bar of tests/test_serve.py (each run past 35 % adds ten times its excess log
error squared). The search starts from the profile's fitted values (the
previous fit; `--from-defaults` from ServingCalibration's defaults). At most
one parameter per two runs: with fewer than 2 x len(BOUNDS) runs on a GPU only the first
runs/2 parameters of BOUNDS (its order: the most physical first) move, the rest stay at
their defaults. Runs planner cannot hold at their concurrency are left out of the loss
(and listed). The parameters that end at a bound are named in the profile header. Prints
the `serving_calibration:` block to paste into hardware_profiles/NAME.yaml and the errors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.serve_accuracy import evaluate, infeasible, load_all, summary
from planner.config import resolve_hardware
from planner.serve import calibrate as _fit
from planner.serve.calibrate import BOUNDS, PCIE, XGMI, at_bounds, bounds, replace_cal  # noqa: F401
from planner.specs import ServingCalibration

# The fitting code (bounds, loss, the pattern search) is planner/serve/calibrate.py's, shared
# with `planner calibrate`; this script picks the cases and writes the shipped profiles.
WEIGHTING = (
    _fit.WEIGHTING
)  # "run": every run once (its metrics averaged); "class": every class once


NORM = "l1"
"""The shipped profiles' per-run error measure: the absolute log error (planner/serve/calibrate.py
NORMS: its minimiser is the median, the figure each class is judged on)."""


def loss(cases, hw, weighting: str | None = None) -> float:
    return _fit.rows_loss(evaluate(cases, {hw.name: hw}), weighting or WEIGHTING, norm=NORM)


def free_parameters(cases, hw) -> dict:
    """The bounds of the parameters the runs on this GPU may move: at most one per two runs
    (a run measured TPOT and TTFT counts once)."""
    return _fit.free_parameters(cases, hw)


def fit(cases, hw, *, sweeps: int = 6, steps: int = 9):
    """planner.serve.calibrate.fit over the cases on this GPU (its doc: grid, pattern search)."""
    return _fit.fit(
        lambda h: evaluate(cases, {h.name: h}),
        hw,
        free_parameters(cases, hw),
        sweeps=sweeps,
        steps=steps,
        weighting=WEIGHTING,
        norm=NORM,
    )


def render_block(hw, head: str) -> str:
    lines = [
        "# Parameters of the serving time model (planner/specs.py ServingCalibration).",
        "# Fitted by `python benchmarks/serve_calibrate.py " + hw.name + " --write` to the",
        "# measured runs of inference-calibration.yaml and inference-latency.yaml on this GPU, within physical bounds.",
        head,
        "serving_calibration:",
    ]
    for k, v in hw.serving_calibration.model_dump().items():
        lines.append(f"  {k}: [{', '.join(v)}]" if isinstance(v, tuple) else f"  {k}: {v}")
    return "\n".join(lines) + "\n"


def write_block(name: str, block: str) -> None:
    """Replace (or append) the profile's serving_calibration block and its comment lines."""
    from planner.config import profile_dir

    path = profile_dir() / f"{name}.yaml"
    lines = path.read_text().splitlines(keepends=True)
    start = next(
        (i for i, line in enumerate(lines) if line.startswith("serving_calibration:")), None
    )
    if start is not None:
        end = start + 1
        while end < len(lines) and lines[end].startswith("  "):
            end += 1
        head = next(
            (
                i
                for i in range(start - 1, -1, -1)
                if lines[i].startswith("# Parameters of the serving time model")
            ),
            None,
        )
        if head is not None and all(x.startswith("#") for x in lines[head:start]):
            start = head  # the block's own comment lines, written by render_block
        else:
            while (
                start > 0
                and lines[start - 1].startswith("#")
                and "serving" in "".join(lines[max(0, start - 4) : start]).lower()
            ):
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
    ap.add_argument(
        "--from-defaults",
        action="store_true",
        help="start from ServingCalibration's defaults, not the profile's fit",
    )
    ap.add_argument(
        "--write",
        action="store_true",
        help="replace the serving_calibration block of hardware_profiles/NAME.yaml",
    )
    args = ap.parse_args(argv)
    from benchmarks.serve_accuracy import CLASSES, LATENCY_CLASSES, load_cases

    cases = load_all() if args.data is None else load_cases(args.data, CLASSES + LATENCY_CLASSES)
    cases = [c for c in cases if c.hardware == args.hardware]
    if not cases:
        print(f"no serving calibration cases on {args.hardware}", file=sys.stderr)
        return 2
    hw0 = resolve_hardware(args.hardware)
    if args.from_defaults or not hw0.serving_calibration.fitted_on:
        hw0 = hw0.model_copy(update={"serving_calibration": ServingCalibration()})
    elif "graph_layer_overhead_us" not in hw0.serving_calibration.model_fields_set:
        # a profile fitted before CUDA-graph steps were told apart: start with graph = eager
        hw0 = replace_cal(hw0, graph_layer_overhead_us=hw0.serving_calibration.layer_overhead_us)
    hw, best = fit(cases, hw0, sweeps=args.sweeps)
    classes = sorted({c.cls for c in cases})
    hw = replace_cal(hw, fitted_on=tuple(classes))
    edge = at_bounds(hw, free_parameters(cases, hw0))
    head = (
        f"# fitted to {len({c.id for c in cases})} runs on {args.hardware} "
        f"({', '.join(classes)}): loss {best:.3f} (mean |log error|, capped, + the bar)\n"
        f"# at a bound: {', '.join(edge) if edge else 'none'}"
    )
    block = render_block(hw, head)
    print(block, end="")
    if args.write:
        write_block(args.hardware, block)
    for s in summary(evaluate(cases, {hw.name: hw})):
        if s["hardware"] != "all":
            print(
                f"# {s['class']:19s} {s['metric']:19s} n={s['n']:3d} median |error| "
                f"{s['median_abs_error']:6.1%} "
                f"max {s['max_abs_error']:6.1%} bias {s['bias']:+6.1%}"
            )
    for r in infeasible(evaluate(cases, {hw.name: hw})):
        print(f"# left out (planner cannot hold it): {r['id']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
