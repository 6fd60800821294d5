"""Fit the time model's efficiency parameters of each hardware profile to the published runs.

    python benchmarks/calibrate.py [--calibration PATH ...] [--write]

One parameter set per GPU type (planner/specs.py Calibration), fitted to every run of
calibration.yaml and calibration-modern.yaml on that GPU at once, never per case. A profile
fits only the parameters its runs exercise (no FP8 run: not the FP8 efficiency; no run across
nodes: not the network's; no run with the MoE all-to-all overlap: not its efficiency), at most
one per RUNS_PER_PARAMETER runs, in the order of PRIORITY (the hardware's shares of peak
first, then the software stack's overheads); the rest it takes from its PARENT profile, the
nearest GPU fitted before it, so two runs on a GPU never carry twelve parameters.

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

from benchmarks.accuracy import default_paths, load_cases
from planner.calibration.fit import (  # noqa: F401  (the fit's names, re-exported here)
    BOUNDS,
    HUBER,
    PRIORITY,
    RUNS_PER_PARAMETER,
    at_bound,
    errors,
    fit_profile,
    free_parameters,
    loss,
    with_values,
)
from planner.config import profile_dir
from planner.config import resolve_hardware as load_hardware
from planner.specs import Calibration

ORDER = ("h100-sxm", "a100-80g", "h100-96g", "h200", "b200", "gb200-nvl72", "b300",
         "gb300-nvl72")
"""Fit order: a profile's PARENT comes before it."""
PARENT = {"a100-80g": "h100-sxm", "h100-96g": "h100-sxm", "h200": "h100-sxm", "b200": "h100-sxm",
          "gb200-nvl72": "b200", "b300": "b200", "gb300-nvl72": "gb200-nvl72"}
"""Where a profile takes the hardware values its own runs cannot fit: the nearest GPU of the
same family fitted before it (same die or its predecessor)."""
DERIVED = {"a100-40g": "a100-80g", "h800": "h100-sxm", "mi300x": "h100-sxm",
           "rtx-pro-6000": "h100-sxm"}
"""Profiles with no training runs, and whose hardware values they carry (a stand-in: their
estimates carry the 'not calibrated' caveat)."""

NOT_THIS_HARDWARE = {
    "tt-2508-llama3-8b-b200pl-": "8 power-limited B200s (the source: 'POWER-LIMITED B200 (power "
                                 "limit not stated)'), not the DGX B200 of the b200 profile",
}
"""Runs the data file files under a profile whose hardware differs from it, by id prefix and
why; they are reported by accuracy.py like every run but do not shape the fit."""

def fit_all(by_hw: dict, profiles: dict, log=print) -> dict:
    """Each profile in ORDER on its own runs, starting from (and keeping what it cannot fit
    of) its parent's values."""
    for name in ORDER:
        if name not in by_hw:
            continue
        hw = profiles[name]
        if name in PARENT:
            hw = with_values(hw, {k: getattr(profiles[PARENT[name]].calibration, k)
                                  for k in PRIORITY})
        names = free_parameters(by_hw[name], hw)
        profiles[name], val = fit_profile(by_hw[name], hw, names)
        log(f"# {name:12s} n={len(by_hw[name]):3d} fits {', '.join(names)} (loss {val:.4f})")
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
    path.write_text("\n".join(lines[:i] + header.splitlines() + text.splitlines() + lines[j:])
                    + "\n")
    return path


def _header(name: str, cases, names, hw) -> str:
    files = " and ".join(sorted({c.source_file for c in cases}))
    parent = PARENT.get(name)
    rest = [k for k in PRIORITY if k not in names]
    tail = f"; the others ({', '.join(rest)}) are {parent}'s" if parent and rest else ""
    edge = at_bound(hw, names)
    note = (f"\n# At a bound of its physical range (what the model misses, the fit pushes there): "
            f"{', '.join(edge)}." if edge else "")
    return ("# Efficiency parameters of the time model (planner/specs.py Calibration), fitted by\n"
            "# `python benchmarks/calibrate.py --write` (never per case) to the "
            f"{len(cases)} runs on this GPU in {files}.\n"
            f"# Fitted here: {', '.join(names) or 'none'}{tail}.{note}")


def _derived_header(name: str, parent: str) -> str:
    return ("# Efficiency parameters of the time model (planner/specs.py Calibration).\n"
            f"# NOT fitted: no training runs on this GPU in the calibration files. The hardware "
            f"values are {parent}'s\n"
            "# as a stand-in\n# (benchmarks/calibrate.py DERIVED); fitted_on is empty so estimates"
            " carry a caveat.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, action="append", default=None)
    ap.add_argument("--write", action="store_true", help="write the blocks into the profiles")
    args = ap.parse_args(argv)
    cases = load_cases(paths=args.calibration or default_paths())
    for prefix, why in NOT_THIS_HARDWARE.items():
        n = sum(c.id.startswith(prefix) for c in cases)
        if n:
            print(f"# not fitted: {n} runs {prefix}*: {why}")
    cases = [c for c in cases if not any(c.id.startswith(p) for p in NOT_THIS_HARDWARE)]
    by_hw: dict[str, list] = {}
    for c in cases:
        by_hw.setdefault(c.job.hardware.name, []).append(c)
    unknown = sorted(set(by_hw) - set(ORDER))
    if unknown:
        print(f"runs on profiles calibrate.py has no place for: {', '.join(unknown)}; "
              "add them to ORDER and PARENT", file=sys.stderr)
        return 2
    profiles = {n: cs[0].job.hardware for n, cs in by_hw.items()}
    for n in ORDER:     # a parent with no runs of its own still lends its values
        if n in PARENT and PARENT[n] not in profiles:
            profiles[PARENT[n]] = load_hardware(PARENT[n])
    profiles = fit_all(by_hw, profiles)
    for name in ORDER:
        if name not in by_hw:
            continue
        cs = by_hw[name]
        errs = errors(cs, {name: profiles[name]})
        names = free_parameters(cs, profiles[name])
        classes = sorted({c.cls for c in cs})
        recipes = sorted({c.job.training.recipe for c in cs if c.job.training.recipe})
        cal = profiles[name].calibration.model_copy(update={
            "fitted_on": tuple(classes) if names else (), "fitted_recipes": tuple(recipes)})
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
