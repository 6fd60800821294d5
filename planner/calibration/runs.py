"""`planner calibrate`: a list of measured runs in, a fitted hardware profile out.

RUNS.yaml:

    runs:
      - {config: PATH, log: PATH, hardware: NAME, gpus: N}   # hardware, gpus optional;
                                                             # paths relative to RUNS.yaml

`calibrate(runs, base)` fits, starting from `base`, the parameters whose fit improves held-out
prediction beyond its cost (planner/calibration/fit.py select_parameters: of those the runs
exercise, forward selection by Akaike's criterion, at most one per RUNS_PER_PARAMETER runs,
within BOUNDS); the others stay base's. It checks base's bandwidths against the runs
(fit.fit_bandwidths: the ones the runs identify are refitted, kept only where the gain beats
chance), before and after the selection, and keeps the order with the lower criterion. `profile_yaml` writes the result as a hardware profile that
`--hardware PROFILE.yaml` reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from planner.calibration.fit import (
    NOISE,
    at_bound,
    errors,
    exercised,
    fit_bandwidths,
    select_parameters,
)
from planner.caveats import case_classes
from planner.errors import SpecError, short
from planner.io import read_yaml
from planner.specs import HardwareSpec

__all__ = ["RunRef", "read_runs_file", "Calibrated", "calibrate", "profile_yaml"]

RUN_KEYS = ("config", "log", "hardware", "gpus")


@dataclass(frozen=True)
class RunRef:
    """One entry of RUNS.yaml, its paths resolved."""

    config: Path
    log: Path
    hardware: str | None = None
    gpus: int | None = None
    """Total GPUs, where the config does not say (a torchtitan TOML)."""


def read_runs_file(path: str | Path) -> list[RunRef]:
    p = Path(path)
    data = read_yaml(p, what="runs file")
    where = short(str(p), 200)
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list) or not data["runs"]:
        raise SpecError(
            f"runs file {where}: needs `runs:`, a list of {{config: PATH, log: PATH, "
            "hardware: NAME}} (hardware optional)",
            field="runs",
        )
    extra = sorted(set(data) - {"runs"})
    if extra:
        raise SpecError(
            f"runs file {where}: unknown key {short(extra[0])}; the file has only `runs:`",
            field=str(extra[0]),
        )
    out = []
    for i, r in enumerate(data["runs"]):
        if not isinstance(r, dict):
            raise SpecError(
                f"runs file {where}: runs[{i}] = {short(r)}: must be a mapping "
                "{config: PATH, log: PATH}",
                field=f"runs[{i}]",
                value=r,
            )
        unknown = sorted(set(r) - set(RUN_KEYS))
        if unknown:
            raise SpecError(
                f"runs file {where}: runs[{i}].{str(unknown[0])[:60]} is not a key; "
                f"use {', '.join(RUN_KEYS)}",
                field=f"runs[{i}].{unknown[0]}",
            )
        for key in ("config", "log"):
            if not isinstance(r.get(key), str) or not r[key]:
                raise SpecError(
                    f"runs file {where}: runs[{i}].{key} = {short(r.get(key))}: "
                    "give the file's path (relative to the runs file)",
                    field=f"runs[{i}].{key}",
                    value=r.get(key),
                )
        hw = r.get("hardware")
        if hw is not None and not isinstance(hw, str):
            raise SpecError(
                f"runs file {where}: runs[{i}].hardware = {short(hw)}: give a "
                "profile name or YAML path",
                field=f"runs[{i}].hardware",
                value=hw,
            )
        gpus = r.get("gpus")
        if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1):
            raise SpecError(
                f"runs file {where}: runs[{i}].gpus = {short(gpus)}: give the job's "
                "total GPUs, a whole number",
                field=f"runs[{i}].gpus",
                value=gpus,
            )
        out.append(RunRef(p.parent / r["config"], p.parent / r["log"], hw, gpus))
    return out


@dataclass(frozen=True)
class Calibrated:
    """What `calibrate` found."""

    base: HardwareSpec
    profile: HardwareSpec
    fitted: tuple[str, ...]
    at_bound: list[str]
    before: list[float]
    """Relative error (predicted / measured - 1) of each run under the base profile."""
    after: list[float]
    bandwidths: dict[str, float] = field(default_factory=dict)
    """The base's bandwidths the runs refitted: name -> fitted / base (fit.fit_bandwidths)."""
    bandwidth_note: str = ""
    not_fitted: dict[str, str] = field(default_factory=dict)
    """Each exercised parameter left at the base's value, and why (its held-out gain was below
    Akaike's 2, fit.select_parameters, or the runs fit no more parameters)."""
    gains: dict[str, float] = field(default_factory=dict)
    """name -> n (loss without - loss with) / NOISE^2 (fit.select_parameters)."""


def _two_orders(runs, base: HardwareSpec):
    """The efficiencies selected by held-out gain (fit.select_parameters) and the check of the
    base's bandwidths (fit.fit_bandwidths), in both orders: efficiencies first (then the
    bandwidths refitted with them where that beats chance), and bandwidths first (checked
    under the base's efficiencies, then the efficiencies selected on top). A GEMM share 10%
    low and an NVLink bandwidth 4x low can predict the same few runs; whichever order comes
    first takes the error. Of the two, the one with the lower Akaike criterion
    n loss / NOISE^2 + 2 k (k: the efficiencies and bandwidth factors it fits) is kept, the
    first on a tie. Returns (names, profile, factors, note, why, gains)."""
    n = len(runs)
    out = []
    sel = select_parameters(runs, base, exercised(runs, base))
    prof, val, factors, note = fit_bandwidths(runs, base, sel.fitted)
    out.append((sel, prof, val, factors, note))
    hw, _, factors, note = fit_bandwidths(runs, base, ())
    if factors:
        sel = select_parameters(runs, hw, exercised(runs, hw))
        out.append((sel, sel.profile, sel.loss, factors, note))
    sel, prof, val, factors, note = min(
        out, key=lambda o: n * o[2] / NOISE**2 + 2 * (len(o[0].fitted) + len(o[3]))
    )
    return sel.fitted, prof, factors, note, sel.why, sel.gains


def calibrate(runs, base: HardwareSpec) -> Calibrated:
    """Fit `base` to `runs` (each is predicted under the profile being fitted)."""
    from dataclasses import replace

    runs = [replace(r, job=replace(r.job, hardware=base)) for r in runs]
    names, fitted, factors, note, why, gains = _two_orders(runs, base)
    moved = bool(names or factors)
    classes = sorted({c for r in runs for c in case_classes(r.job, r.layout)}) if moved else []
    recipes = (
        sorted({r.job.training.recipe for r in runs if r.job.training.recipe}) if moved else []
    )
    cal = fitted.calibration.model_copy(
        update={
            "fitted_on": tuple(sorted(set(base.calibration.fitted_on) | set(classes))),
            "fitted_recipes": tuple(sorted(set(base.calibration.fitted_recipes) | set(recipes))),
        }
    )
    fitted = fitted.model_copy(update={"calibration": cal})
    before = [math.expm1(e) for e in errors(runs, {base.name: base})]
    after = [math.expm1(e) for e in errors(runs, {base.name: fitted})]
    return Calibrated(
        base,
        fitted,
        names,
        at_bound(fitted, names),
        before,
        after,
        factors,
        note,
        {k: v for k, v in why.items() if k not in names},
        gains,
    )


def profile_yaml(result: Calibrated, *, runs: int, source: str) -> str:
    """The fitted profile as YAML (a comment header says what was fitted to what)."""
    import yaml

    data = result.profile.model_dump(mode="json", exclude_defaults=False)
    rest = [
        k
        for k in type(result.base.calibration).model_fields
        if k not in result.fitted and k not in ("fitted_on", "fitted_recipes")
    ]
    head = [
        f"# Hardware profile calibrated by `planner calibrate` to {runs} measured run(s) "
        f"({source}),",
        f"# starting from {result.base.name}. Fitted (held-out gain n (loss before - after) "
        f"/ 0.1^2 above Akaike's 2): "
        + (", ".join(f"{k} {result.gains[k]:.1f}" for k in result.fitted) or "none")
        + ";",
        f"# kept from {result.base.name}: {', '.join(rest) or 'none'}.",
    ]
    if result.at_bound:
        head.append(f"# At a bound of its physical range: {', '.join(result.at_bound)}.")
    if result.bandwidths:
        head.append(
            f"# {result.bandwidth_note}: check {result.base.name}'s hardware numbers "
            "against this cluster."
        )
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False)
