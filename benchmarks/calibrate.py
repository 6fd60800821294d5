"""Fit the time model's efficiency parameters of each hardware profile to the published runs.

    python benchmarks/calibrate.py [--calibration PATH ...] [--write]

One parameter set per GPU type (planner/specs.py Calibration), fitted to every run of
calibration.yaml and calibration-modern.yaml on that GPU at once, never per case (`suspect`
runs never). A profile fits only the parameters its runs exercise (no FP8 run: not the FP8
efficiency; no run across nodes: not the network's; no run with the MoE all-to-all overlap:
not its efficiency) and identify (`identifiable`: sweeping the parameter over its range moves
the runs' log step times by at least SENSITIVITY_MIN, root mean square, and adding it keeps
the fitted set's Jacobian condition number under CONDITION_MAX), at most one per
RUNS_PER_PARAMETER runs, in the order of PRIORITY (the hardware's shares of peak first, then
the software stack's overheads); the rest it takes from its PARENT profile, the nearest GPU
fitted before it, so two runs on a GPU never carry twelve parameters. The log reports, per
profile, each exercised parameter left out and why.

The fit itself (BOUNDS, PRIORITY, RUNS_PER_PARAMETER, the loss, the descent) is
planner/calibration/fit.py, which `planner calibrate` shares. Every parameter is bounded to a
physical range (BOUNDS). The loss is the mean Huber-weighted
squared log error of the step time (linear beyond 20%), each calibration file weighted alike;
the minimum is found by coordinate descent from several starts. `--write` writes each profile's
`calibration:` block (with `fitted_on`, the classes of the runs it was fitted to) and gives
the profiles with no runs (DERIVED) their parent's values with an empty `fitted_on`, so their
estimates carry a caveat.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.accuracy import (  # NOT_THIS_HARDWARE: the one list, re-exported here
    NOT_THIS_HARDWARE,
    default_paths,
    load_cases,
)
from planner.calibration.fit import (  # noqa: F401  (the fit's names, re-exported here)
    BOUNDS,
    CONDITION_MAX,
    HUBER,
    PRIORITY,
    RUNS_PER_PARAMETER,
    SENSITIVITY_MIN,
    _condition,
    at_bound,
    errors,
    exercised,
    fit_profile,
    free_parameters,
    identifiable,
    loss,
    sensitivities,
    with_values,
)
from planner.config import profile_dir
from planner.config import resolve_hardware as load_hardware
from planner.specs import Calibration

ORDER = ("h100-sxm", "a100-80g", "h100-96g", "h200", "b200", "gb200-nvl72", "b300", "gb300-nvl72")
"""Fit order: a profile's PARENT comes before it."""
PARENT = {
    "a100-80g": "h100-sxm",
    "h100-96g": "h100-sxm",
    "h200": "h100-sxm",
    "b200": "h100-sxm",
    "gb200-nvl72": "b200",
    "b300": "b200",
    "gb300-nvl72": "gb200-nvl72",
}
"""Where a profile takes the hardware values its own runs cannot fit: the nearest GPU of the
same family fitted before it (same die or its predecessor)."""
DERIVED = {
    "a100-40g": "a100-80g",
    "h800": "h100-sxm",
    "mi300x": "h100-sxm",
    "rtx-pro-6000": "h100-sxm",
}
"""Profiles with no training runs, and whose hardware values they carry (a stand-in: their
estimates carry the 'not calibrated' caveat)."""

PRIOR = {
    "fp8_matmul_efficiency": (
        0.68,
        "DeepGEMM's FP8 GEMMs reach 1,350+ of Hopper's 1,979 dense FP8 TFLOPS "
        "(deepseek-ai/DeepGEMM README): 0.68",
    ),
}
"""Physical values, from a cited microbenchmark, that a profile without a PARENT takes for the
parameters its runs do not identify (instead of whatever its file held; its children inherit
them): h100-sxm's 13 FP8 runs are MoE runs that move less than 2% over the FP8 share's whole
range, so the share they leave open is the measured kernel rate, not a bound."""


def fit_all(by_hw: dict, profiles: dict, log=print, fitted: dict | None = None) -> dict:
    """Each profile in ORDER on its own runs, starting from (and keeping what it cannot fit
    of) its parent's values; only the parameters its runs identify (`identifiable`, reported
    per profile). `fitted` collects each profile's fitted names."""
    for name in ORDER:
        if name not in by_hw:
            continue
        hw = profiles[name]
        if name in PARENT:
            hw = with_values(
                hw, {k: getattr(profiles[PARENT[name]].calibration, k) for k in PRIORITY}
            )
        cases = by_hw[name]
        _, why = (
            identifiable(cases, hw, tuple(exercised(cases, hw))) if len(cases) >= 2 else ((), {})
        )
        names = free_parameters(cases, hw, identify=True)
        if name not in PARENT:
            prior = {k: v for k, (v, _) in PRIOR.items() if k in why and k not in names}
            hw = with_values(hw, prior) if prior else hw
            for k in prior:
                log(f"#   {k}: the prior {PRIOR[k][0]} ({PRIOR[k][1]})")
        profiles[name], val = fit_profile(cases, hw, names)
        if fitted is not None:
            fitted[name] = names
        log(f"# {name:12s} n={len(cases):3d} fits {', '.join(names) or 'nothing'} (loss {val:.4f})")
        for k, reason in why.items():
            log(f"#   {k}: {reason}")
    return profiles


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
    path.write_text(
        "\n".join(lines[:i] + header.splitlines() + text.splitlines() + lines[j:]) + "\n"
    )
    return path


def _header(name: str, cases, names, hw) -> str:
    files = " and ".join(sorted({c.source_file for c in cases}))
    parent = PARENT.get(name)
    rest = [k for k in PRIORITY if k not in names]
    tail = f"; the others ({', '.join(rest)}) are {parent}'s" if parent and rest else ""
    priors = [k for k in PRIOR if k not in names and not parent]
    tail += "".join(
        f"; {k} not identified: the prior {PRIOR[k][0]} ({PRIOR[k][1]})" for k in priors
    )
    cal = hw.calibration
    edge = [k for k in names if getattr(cal, k) in BOUNDS[k]]
    note = "".join(
        f"\n# At its {'lower' if getattr(cal, k) == BOUNDS[k][0] else 'upper'} bound: {k} "
        f"({MISSING[k][getattr(cal, k) != BOUNDS[k][0]]})."
        for k in edge
    )
    return (
        "# Efficiency parameters of the time model (planner/specs.py Calibration), fitted by\n"
        "# `python benchmarks/calibrate.py --write` (never per case) to the "
        f"{len(cases)} runs on this GPU in {files}.\n"
        f"# Fitted here (identified by the runs: sensitivity >= {SENSITIVITY_MIN}, condition "
        f"<= {CONDITION_MAX:.0f}): {', '.join(names) or 'none'}{tail}.{note}"
    )


MISSING = {  # (at the lower bound, at the upper bound): what the model misses
    "matmul_efficiency": (
        "MoE compute the model leaves out (router GEMM, tile padding and the grouped "
        "GEMMs' size are modelled): routing imbalance beyond moe_capacity_factor",
        "elementwise or attention time the model overcounts",
    ),
    "fp8_matmul_efficiency": (
        "FP8 work besides the GEMMs' and quantization's (modelled: the casts and "
        "Hopper's transposed copies, grouped GEMMs' size and tile padding), or host time",
        "FP8 GEMM time the model overcounts",
    ),
    "attention_efficiency": (
        "attention is the implementation's (cuDNN, FlashAttention, SDPA), "
        "not the GPU's: one share per GPU absorbs the mix",
        "attention FLOPs the model overcounts",
    ),
    "network_efficiency": (
        "dispatch kernels' own overheads (permute, sync) counted as network time",
        "network traffic the model overcounts or does not overlap",
    ),
    "nvlink_efficiency": (
        "NVLink traffic the model does not count",
        "NVLink traffic the model counts twice",
    ),
    "overlap_efficiency": (
        "TP/DP/CP overlap the schedule does not give",
        "TP/DP/CP traffic the model overcounts",
    ),
    "ep_overlap_efficiency": (
        "EP traffic the paired-window law leaves hidden",
        "EP traffic the model overcounts",
    ),
    "elementwise_bytes_per_activation": (
        "GEMM time the model overcounts",
        "elementwise or MoE kernels the model leaves out",
    ),
    "launch_overhead_us": (
        "host work the model overcounts (CUDA graphs, fusion)",
        "host work per layer the model leaves out (CPU-bound MoE layers)",
    ),
    "layer_overhead_us": (
        "per-layer time the model overcounts elsewhere",
        "per-layer kernels the model leaves out",
    ),
    "step_overhead_ms": (
        "per-step time the model overcounts",
        "per-step host work the model leaves out (logging, checkpoint "
        "hooks, the first-micro-batch sync)",
    ),
    "matmul_half_size": (
        "small GEMMs running faster than the size law",
        "small GEMMs (few tokens per expert) slower than the size law",
    ),
}
"""What a parameter at a bound stands in for (the header names it)."""


def _derived_header(name: str, parent: str) -> str:
    return (
        "# Efficiency parameters of the time model (planner/specs.py Calibration).\n"
        f"# NOT fitted: no training runs on this GPU in the calibration files. The hardware "
        f"values are {parent}'s\n"
        "# as a stand-in\n# (benchmarks/calibrate.py DERIVED); fitted_on is empty so estimates"
        " carry a caveat."
    )


def fit_cases(paths, log=print) -> list:
    """The runs the fit uses: every case of `paths` but the `suspect` ones (load_cases leaves
    them out; they are reported by accuracy.py, never fitted) and those on other hardware than
    their profile (benchmarks/accuracy.py NOT_THIS_HARDWARE, `Case.other_hardware`)."""
    cases = load_cases(paths=paths)
    suspect = load_cases(paths=paths, suspect=True)
    if suspect:
        log(f"# not fitted: {len(suspect)} suspect runs ({', '.join(c.id for c in suspect)})")
    for prefix, why in NOT_THIS_HARDWARE.items():
        n = sum(c.id.startswith(prefix) for c in cases)
        if n:
            log(f"# not fitted: {n} runs {prefix}*: {why}")
    return [c for c in cases if not c.suspect and not c.other_hardware]


def base_profiles(by_hw: dict[str, list]) -> dict:
    """The profiles a fit starts from: each GPU's with runs, and a parent with no runs of its
    own, which still lends its values (`fit_all`)."""
    profiles = {n: cs[0].job.hardware for n, cs in by_hw.items()}
    for n in ORDER:
        if n in PARENT and PARENT[n] not in profiles:
            profiles[PARENT[n]] = load_hardware(PARENT[n])
    return profiles


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, action="append", default=None)
    ap.add_argument("--write", action="store_true", help="write the blocks into the profiles")
    args = ap.parse_args(argv)
    cases = fit_cases(args.calibration or default_paths())
    by_hw: dict[str, list] = {}
    for c in cases:
        by_hw.setdefault(c.job.hardware.name, []).append(c)
    unknown = sorted(set(by_hw) - set(ORDER))
    if unknown:
        print(
            f"runs on profiles calibrate.py has no place for: {', '.join(unknown)}; "
            "add them to ORDER and PARENT",
            file=sys.stderr,
        )
        return 2
    profiles = base_profiles(by_hw)
    fitted: dict = {}
    profiles = fit_all(by_hw, profiles, fitted=fitted)
    for name in ORDER:
        if name not in by_hw:
            continue
        cs = by_hw[name]
        errs = errors(cs, {name: profiles[name]})
        names = fitted[name]
        classes = sorted({c.cls for c in cs})
        recipes = sorted({c.job.training.recipe for c in cs if c.job.training.recipe})
        cal = profiles[name].calibration.model_copy(
            update={"fitted_on": tuple(classes) if names else (), "fitted_recipes": tuple(recipes)}
        )
        header = _header(name, cs, names, profiles[name])
        print(header)
        print(block(cal), end="")
        for c, e in zip(cs, errs):
            print(f"  {c.id[:60]:60s} {math.exp(e) - 1:+7.1%}")
        if args.write:
            print(f"wrote {write_block(name, block(cal), header)}")
    for name, parent in DERIVED.items():
        src = profiles.get(parent) or load_hardware(parent)
        cal = src.calibration.model_copy(update={"fitted_on": (), "fitted_recipes": ()})
        if args.write:
            print(f"wrote {write_block(name, block(cal), _derived_header(name, parent))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
