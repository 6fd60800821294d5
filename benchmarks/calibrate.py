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

Every parameter is bounded to a physical range (BOUNDS). The loss is the mean Huber-weighted
squared log error of the step time (linear beyond 20%), each calibration file weighted alike;
the minimum is found by coordinate descent from several starts. `--write` writes each profile's
`calibration:` block (with `fitted_on`, the classes of the runs it was fitted to) and gives
the profiles with no runs (DERIVED) their parent's values with an empty `fitted_on`, so their
estimates carry a caveat.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.accuracy import default_paths, evaluate, load_cases
from planner.config import profile_dir
from planner.config import resolve_hardware as load_hardware
from planner.specs import Calibration

BOUNDS = {   # physically plausible ranges (README, 'Calibration')
    "matmul_efficiency": (0.55, 0.9),       # large bf16 GEMMs reach 60-85% of the dense peak
    "fp8_matmul_efficiency": (0.45, 0.85),  # FP8 GEMMs: 50-75% of the FP8 peak; never slower
                                            # than BF16 ones (0.45 x 2 x peak > 0.9 x peak)
    "matmul_half_size": (0.0, 1500.0),      # the GEMM size where efficiency halves
    "attention_efficiency": (0.2, 0.75),    # FlashAttention-2/3, cuDNN: 25-75% of peak
    "nvlink_efficiency": (0.75, 0.9),       # nccl-tests bus bandwidth / link rate; DeepSeek
                                            # measured 160 of H800's 200 GB/s (arXiv:2412.19437),
                                            # nccl-tests ~370 of H100's 450 without NVLS
    "network_efficiency": (0.6, 0.95),      # IB/RoCE busbw: 40-46 of a NIC's 50 GB/s
    "elementwise_bytes_per_activation": (0.0, 12.0),
    "layer_overhead_us": (0.0, 200.0),      # tens of small kernels per layer
    "launch_overhead_us": (1.0, 60.0),      # eager PyTorch: 5-50 us of host time per op
    "overlap_efficiency": (0.5, 0.95),
    "ep_overlap_efficiency": (0.2, 0.95),   # Megatron's 1F1B all-to-all overlap: partial
    "step_overhead_ms": (0.0, 150.0),       # host work per step besides the model's: loss and
                                            # grad-norm reductions, timers, logging, optimizer
                                            # launches (its HBM traffic is modelled on its own)
}

PRIORITY = ("matmul_efficiency", "fp8_matmul_efficiency", "attention_efficiency",
            "launch_overhead_us", "network_efficiency", "nvlink_efficiency",
            "overlap_efficiency", "ep_overlap_efficiency", "elementwise_bytes_per_activation",
            "matmul_half_size", "layer_overhead_us", "step_overhead_ms")
"""The order in which a profile with few runs gets its own parameters."""

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

RUNS_PER_PARAMETER = 2

NOT_THIS_HARDWARE = {
    "tt-2508-llama3-8b-b200pl-": "8 power-limited B200s (the source: 'POWER-LIMITED B200 (power "
                                 "limit not stated)'), not the DGX B200 of the b200 profile",
}
"""Runs the data file files under a profile whose hardware differs from it, by id prefix and
why; they are reported by accuracy.py like every run but do not shape the fit."""

HUBER = 0.20
"""Log errors beyond this count linearly, not squared: a few runs whose published settings are
incomplete (README, 'Accuracy') must not drag the fit of every other run."""


def _huber(e: float) -> float:
    return e * e if abs(e) <= HUBER else HUBER * (2 * abs(e) - HUBER)


def errors(cases, profiles: dict) -> list[float]:
    """Log errors of the step time of `cases`, each under its profile in `profiles`."""
    return [math.log(r["predicted_s"] / r["measured_s"]) for r in evaluate(cases, profiles)]


def loss(cases, profiles: dict) -> float:
    """Mean Huber loss of each calibration file's runs, averaged over the files: the 36 dense
    runs of calibration.yaml count as much as the 116 of calibration-modern.yaml."""
    by_file: dict[str, list[float]] = {}
    for c, e in zip(cases, errors(cases, profiles)):
        by_file.setdefault(c.source_file, []).append(_huber(e))
    return sum(sum(v) / len(v) for v in by_file.values()) / len(by_file)


def with_values(hw, values: dict):
    cal = Calibration(**{**hw.calibration.model_dump(),
                         **{k: round(v, 4) for k, v in values.items()}})
    return hw.model_copy(update={"calibration": cal})


SENSITIVITY_MIN = 0.10
"""A parameter is identified by a profile's runs only if sweeping it over its whole BOUNDS
range moves their log step times by at least this much (root mean square over the runs):
below it, the runs' 5-10% scatter decides its value, not the runs."""
CONDITION_MAX = 30.0
"""The fitted set's Jacobian (runs x parameters, columns scaled to unit length) must have a
condition number below this: above it two parameters trade against each other (a higher
matmul share and more elementwise bytes predict the same runs) and neither is pinned."""
STEP = 0.05
"""The finite-difference step, as a share of a parameter's BOUNDS range."""


def sensitivities(cases, hw, names) -> dict[str, list[float]]:
    """d ln(predicted step) / d u per run, u the parameter scaled to its BOUNDS range (a
    central difference of STEP, one-sided at a bound)."""
    base = errors(cases, {hw.name: hw})
    out = {}
    for name in names:
        lo, hi = BOUNDS[name]
        cur = min(hi, max(lo, getattr(hw.calibration, name)))
        d = STEP * (hi - lo)
        up, down = min(hi, cur + d), max(lo, cur - d)
        e_up = errors(cases, {hw.name: with_values(hw, {name: up})}) if up > cur else base
        e_dn = errors(cases, {hw.name: with_values(hw, {name: down})}) if down < cur else base
        span = (up - down) / (hi - lo)
        out[name] = [(a - b) / span for a, b in zip(e_up, e_dn)]
    return out


def _condition(columns: list[list[float]]) -> float:
    """Condition number of the matrix with these columns, each scaled to unit length:
    sqrt(largest / smallest eigenvalue of its Gram matrix) (cyclic Jacobi rotations)."""
    cols = []
    for c in columns:
        n = math.sqrt(sum(x * x for x in c))
        if n == 0:
            return math.inf
        cols.append([x / n for x in c])
    k = len(cols)
    a = [[sum(x * y for x, y in zip(cols[i], cols[j])) for j in range(k)] for i in range(k)]
    for _ in range(50):
        off = sum(a[i][j] ** 2 for i in range(k) for j in range(k) if i != j)
        if off < 1e-24:
            break
        for p in range(k):
            for q in range(p + 1, k):
                if abs(a[p][q]) < 1e-30:
                    continue
                theta = (a[q][q] - a[p][p]) / (2 * a[p][q])
                t = math.copysign(1.0, theta) / (abs(theta) + math.sqrt(theta * theta + 1))
                c = 1 / math.sqrt(t * t + 1)
                sn = t * c
                for r in range(k):
                    arp, arq = a[r][p], a[r][q]
                    a[r][p], a[r][q] = c * arp - sn * arq, sn * arp + c * arq
                for r in range(k):
                    apr, aqr = a[p][r], a[q][r]
                    a[p][r], a[q][r] = c * apr - sn * aqr, sn * apr + c * aqr
    eig = [a[i][i] for i in range(k)]
    lo = min(eig)
    return math.inf if lo <= 1e-15 else math.sqrt(max(eig) / lo)


def identifiable(cases, hw, candidates) -> tuple[tuple[str, ...], dict[str, str]]:
    """The candidates (in order) the runs pin: RMS sensitivity >= SENSITIVITY_MIN, and each
    added only if the fitted set's Jacobian stays below CONDITION_MAX. Returns them and, for
    every candidate left out, why."""
    sens = sensitivities(cases, hw, candidates)
    chosen: list[str] = []
    why: dict[str, str] = {}
    for name in candidates:
        col = sens[name]
        rms = math.sqrt(sum(x * x for x in col) / len(col)) if col else 0.0
        if rms < SENSITIVITY_MIN:
            why[name] = f"not identified (sensitivity {rms:.3f} < {SENSITIVITY_MIN})"
            continue
        cond = _condition([sens[n] for n in chosen] + [col])
        if cond > CONDITION_MAX:
            why[name] = f"not separable from {', '.join(chosen)} (condition {cond:.0f})"
            continue
        chosen.append(name)
    return tuple(chosen), why


def free_parameters(cases, hw) -> tuple[str, ...]:
    """The parameters a profile's runs can fit: those they exercise, one per
    RUNS_PER_PARAMETER runs (at least one from two runs), in PRIORITY's order (the FP8 share
    before the bf16 one where most runs are FP8), and of those only the ones the runs
    identify (`identifiable`)."""
    if len(cases) < 2:
        return ()
    chosen = identifiable(cases, hw, _exercised(cases, hw))[0]
    return chosen[:max(1, len(cases) // RUNS_PER_PARAMETER)]


def _exercised(cases, hw) -> tuple[str, ...]:
    """The parameters a profile's runs exercise, in PRIORITY's order (the FP8 share before
    the bf16 one where most runs are FP8)."""
    order = list(PRIORITY)
    if 2 * sum(c.job.training.precision == "fp8" for c in cases) > len(cases):
        order[0], order[1] = order[1], order[0]     # mostly FP8 runs: the FP8 share first
    seen = []
    for name in order:
        if name == "fp8_matmul_efficiency" and not any(
                c.job.training.precision == "fp8" for c in cases):
            continue
        if name == "network_efficiency" and not any(
                c.job.num_gpus > hw.nvlink_domain_size for c in cases):
            continue
        if name == "ep_overlap_efficiency" and not any(
                c.layout.overlap_moe_expert_parallel_comm for c in cases):
            continue
        seen.append(name)
    return tuple(seen)


def _descend(f, point: dict, names, sweeps: int = 3, steps: int = 11) -> tuple[dict, float]:
    """Coordinate descent of f over `names` within BOUNDS: a grid over each bound first, then
    finer grids around the best value, sweep after sweep."""
    best = f(point)
    for sweep in range(sweeps):
        for name in names:
            lo, hi = BOUNDS[name]
            span = (hi - lo) / (steps - 1) / (1 if sweep == 0 else 2 ** sweep)
            cur = point[name]
            grid = ([lo + (hi - lo) * i / (steps - 1) for i in range(steps)] if sweep == 0
                    else [min(hi, max(lo, cur + span * (i - 5))) for i in range(11)])
            for val in grid:
                cand = {**point, name: val}
                got = f(cand)
                if got < best - 1e-12:
                    point, best = cand, got
    return point, best


def fit_profile(cases, hw, names, starts: int = 3) -> tuple[object, float]:
    """The best of several descents over `names` (from the current values, the middle of the
    bounds and seeded random points): one descent stalls in the valleys two compensating
    parameters make."""
    if not names:
        return hw, loss(cases, {hw.name: hw})
    rng = random.Random(0)
    cur = {k: min(BOUNDS[k][1], max(BOUNDS[k][0], getattr(hw.calibration, k))) for k in names}
    points = [cur, {k: sum(BOUNDS[k]) / 2 for k in names}]
    points += [{k: rng.uniform(*BOUNDS[k]) for k in names} for _ in range(max(0, starts - 2))]

    def f(p):
        return loss(cases, {hw.name: with_values(hw, p)})

    best_p, best = None, math.inf
    for p in points:
        got, val = _descend(f, p, names)
        if val < best:
            best_p, best = got, val
    return with_values(hw, best_p), best


def fit_all(by_hw: dict, profiles: dict, log=print, fitted: dict | None = None) -> dict:
    """Each profile in ORDER on its own runs, starting from (and keeping what it cannot fit
    of) its parent's values; only the parameters its runs identify (`identifiable`, reported
    per profile). `fitted` collects each profile's fitted names."""
    for name in ORDER:
        if name not in by_hw:
            continue
        hw = profiles[name]
        if name in PARENT:
            hw = with_values(hw, {k: getattr(profiles[PARENT[name]].calibration, k)
                                  for k in PRIORITY})
        cases = by_hw[name]
        _, why = identifiable(cases, hw, _exercised(cases, hw)) if len(cases) >= 2 else ((), {})
        names = free_parameters(cases, hw)
        profiles[name], val = fit_profile(cases, hw, names)
        if fitted is not None:
            fitted[name] = names
        log(f"# {name:12s} n={len(cases):3d} fits {', '.join(names) or 'nothing'} "
            f"(loss {val:.4f})")
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
    path.write_text("\n".join(lines[:i] + header.splitlines() + text.splitlines() + lines[j:])
                    + "\n")
    return path


def _header(name: str, cases, names, hw) -> str:
    files = " and ".join(sorted({c.source_file for c in cases}))
    parent = PARENT.get(name)
    rest = [k for k in PRIORITY if k not in names]
    tail = f"; the others ({', '.join(rest)}) are {parent}'s" if parent and rest else ""
    cal = hw.calibration
    edge = [k for k in names if getattr(cal, k) in BOUNDS[k]]
    note = "".join(
        f"\n# At its {'lower' if getattr(cal, k) == BOUNDS[k][0] else 'upper'} bound: {k} "
        f"({MISSING[k][getattr(cal, k) != BOUNDS[k][0]]})." for k in edge)
    return ("# Efficiency parameters of the time model (planner/specs.py Calibration), fitted by\n"
            "# `python benchmarks/calibrate.py --write` (never per case) to the "
            f"{len(cases)} runs on this GPU in {files}.\n"
            f"# Fitted here (identified by the runs: sensitivity >= {SENSITIVITY_MIN}, condition "
            f"<= {CONDITION_MAX:.0f}): {', '.join(names) or 'none'}{tail}.{note}")


MISSING = {   # (at the lower bound, at the upper bound): what the model misses
    "matmul_efficiency": ("MoE compute the model leaves out: router and top-k, grouped GEMMs at "
                          "few tokens per expert (tile padding), load imbalance",
                          "elementwise or attention time the model overcounts"),
    "fp8_matmul_efficiency": ("FP8 quantize/cast kernels and grouped FP8 GEMMs at few tokens "
                              "per expert", "FP8 GEMM time the model overcounts"),
    "attention_efficiency": ("attention is the implementation's (cuDNN, FlashAttention, SDPA), "
                             "not the GPU's: one share per GPU absorbs the mix",
                             "attention FLOPs the model overcounts"),
    "network_efficiency": ("dispatch kernels' own overheads (permute, sync) counted as network "
                           "time", "network traffic the model overcounts or does not overlap"),
    "nvlink_efficiency": ("NVLink traffic the model does not count",
                          "NVLink traffic the model counts twice"),
    "overlap_efficiency": ("TP/DP/CP overlap the schedule does not give",
                           "TP/DP/CP traffic the model overcounts"),
    "ep_overlap_efficiency": ("EP traffic the paired-window law leaves hidden",
                              "EP traffic the model overcounts"),
    "elementwise_bytes_per_activation": ("GEMM time the model overcounts",
                                         "elementwise or MoE kernels the model leaves out"),
    "launch_overhead_us": ("host work the model overcounts (CUDA graphs, fusion)",
                           "host work per layer the model leaves out (CPU-bound MoE layers)"),
    "layer_overhead_us": ("per-layer time the model overcounts elsewhere",
                          "per-layer kernels the model leaves out"),
    "step_overhead_ms": ("per-step time the model overcounts",
                         "per-step host work the model leaves out (logging, checkpoint "
                         "hooks, the first-micro-batch sync)"),
    "matmul_half_size": ("small GEMMs running faster than the size law",
                         "small GEMMs (few tokens per expert) slower than the size law"),
}
"""What a parameter at a bound stands in for (the header names it)."""


def _derived_header(name: str, parent: str) -> str:
    return ("# Efficiency parameters of the time model (planner/specs.py Calibration).\n"
            f"# NOT fitted: no training runs on this GPU in the calibration files. The hardware "
            f"values are {parent}'s\n"
            "# as a stand-in\n# (benchmarks/calibrate.py DERIVED); fitted_on is empty so estimates"
            " carry a caveat.")


def fit_cases(paths, log=print) -> list:
    """The runs the fit uses: every case of `paths` but the `suspect` ones (load_cases leaves
    them out; they are reported by accuracy.py, never fitted) and NOT_THIS_HARDWARE's."""
    cases = load_cases(paths=paths)
    suspect = load_cases(paths=paths, suspect=True)
    if suspect:
        log(f"# not fitted: {len(suspect)} suspect runs ({', '.join(c.id for c in suspect)})")
    for prefix, why in NOT_THIS_HARDWARE.items():
        n = sum(c.id.startswith(prefix) for c in cases)
        if n:
            log(f"# not fitted: {n} runs {prefix}*: {why}")
    return [c for c in cases if not c.suspect
            and not any(c.id.startswith(p) for p in NOT_THIS_HARDWARE)]


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
        print(f"runs on profiles calibrate.py has no place for: {', '.join(unknown)}; "
              "add them to ORDER and PARENT", file=sys.stderr)
        return 2
    profiles = {n: cs[0].job.hardware for n, cs in by_hw.items()}
    for n in ORDER:     # a parent with no runs of its own still lends its values
        if n in PARENT and PARENT[n] not in profiles:
            profiles[PARENT[n]] = load_hardware(PARENT[n])
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
