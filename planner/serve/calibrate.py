"""The bounded fit of a hardware profile's serving parameters (planner/specs.py
ServingCalibration) to measured serving runs: benchmarks/serve_calibrate.py fits the shipped
profiles with it, `planner calibrate` a user's profile to the user's benchmark runs.

- BOUNDS: each parameter's physical range, in the order a profile with few runs gets them
  (the most physical first); PCIe and Infinity Fabric servers have their own link ranges.
- The loss (`rows_loss`): per run, the mean over its metrics (TTFT, TPOT, throughput, e2e) of
  the squared log error (NORMS "l2"; "l1" the absolute log error, for the shipped profiles)
  capped at 1 (a run off by more than a factor e counts as e), averaged
  over the runs (WEIGHTING "run"; "class": over classes of runs); plus a soft bar keeping the
  offline-throughput and static-latency runs inside 35% (each run past it adds ten times its
  excess log error squared; not for a user's runs). Runs planner cannot hold at their
  concurrency are left out (a user's: out of the fit, named; none left is an error).
- `fit`: a coarse grid per parameter, then a pattern search within the bounds.
- At most one parameter per two runs (`free_parameters`); `planner calibrate` also keeps only
  the parameters its runs identify (`identified`, the rule of planner/calibration/fit.py).

A row (what `evaluate(hw)` returns per run and metric) has `id`, `class`, `error` (predicted /
measured - 1) and, for the infeasibility check, `requested` and `max_concurrency`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.calibration.fit import CONDITION_MAX, SENSITIVITY_MIN, STEP, select_identified
from planner.specs import HardwareSpec, ServingCalibration

__all__ = [
    "BOUNDS",
    "PCIE",
    "XGMI",
    "WEIGHTING",
    "NORMS",
    "bounds",
    "replace_cal",
    "infeasible",
    "rows_loss",
    "free_parameters",
    "at_bounds",
    "fit",
    "identified",
    "ServeRun",
    "ServeCalibrated",
    "calibrate_serving",
    "serve_profile_yaml",
]

BOUNDS = {  # physically plausible ranges (docs/serving.md, 'Calibration')
    "hbm_efficiency": (0.55, 0.92),  # streaming reads reach 60-90 % of the HBM peak
    "gemm_efficiency": (0.3, 0.85),  # large fp8/fp4/bf16 GEMMs: 30-85 % of the dense peak
    "gemm_half_tokens": (0.0, 512.0),  # GEMMs reach half their efficiency at M ~ 0-512
    "moe_efficiency": (0.1, 1.0),  # grouped GEMMs relative to a dense one
    "attention_efficiency": (0.25, 0.75),  # flash attention forward: 25-75 % of the bf16 peak
    "layer_overhead_us": (0.0, 150.0),  # 10-20 kernels per layer, 1-4 us each in CUDA graphs,
    #   5-10 us launched eagerly (mixed steps)
    "graph_layer_overhead_us": (0.0, 60.0),  # a CUDA-graph replay: 10-20 kernels a layer
    #   back to back, ~0.5-3 us of gap and tail each
    "step_overhead_us": (0.0, 8000.0),  # scheduler and host work per engine step
    "sequence_overhead_us": (0.0, 60.0),  # per request per step (sampling, bookkeeping)
    "request_overhead_us": (0.0, 8000.0),  # host work per request: admit, respond
    "link_efficiency": (0.5, 0.9),  # NVLink / Infinity Fabric bus bandwidth / link rate
    "allreduce_latency_us": (0.3, 1.5),  # per ring step on NVLink: 8-GPU small all-reduces
    #   take ~5-20 us (one-shot kernels, NCCL LL)
    "moe_layer_overhead_us": (0.0, 150.0),  # a routed-expert layer's extra kernels and its
    #   latency-bound grouped GEMMs at a few tokens per expert: fused MoE at M = 1 takes
    #   0.13-0.21 ms a layer where its 22 MB of weights stream in ~3 us (sgl-project/sglang
    #   pull 22208, DeepSeek shapes, TP 8); last in the order: GPUs with few runs keep theirs
}
PCIE = {
    "allreduce_latency_us": (2.0, 20.0),  # per ring step over PCIe (NCCL, no NVLink)
    "link_efficiency": (0.1, 0.9),
}  # PCIe topology: switches, CPU root complexes
XGMI = {"allreduce_latency_us": (0.5, 3.0)}  # RCCL over Infinity Fabric: higher than NVLink

WEIGHTING = "run"  # "run": every run once (its metrics averaged); "class": every class once
BAR_CLASSES = ("offline-throughput", "static-latency")


def bounds(hw) -> dict:
    out = dict(BOUNDS)
    out.update({"pcie": PCIE, "xgmi": XGMI}.get(hw.intra_node_link, {}))
    return out


def replace_cal(hw, **values):
    cal = ServingCalibration(**{**hw.serving_calibration.model_dump(), **values})
    return hw.model_copy(update={"serving_calibration": cal})


def infeasible(rows: list[dict]) -> list[dict]:
    """Runs planner cannot hold at all (not one request fits). A run whose concurrency is
    above what the instance holds at once is not among them: its clients queue for a slot
    (estimate.admission_wait)."""
    return [r for r in rows if r.get("requested") not in (None, "max") and r["max_concurrency"] < 1]


NORMS = ("l2", "l1")
"""The per-run error measure of the loss: "l2" the squared log error (a user's runs,
`planner calibrate`), "l1" the absolute log error, whose minimiser over the runs is their
median: the shipped profiles (benchmarks/serve_calibrate.py), judged on the median |error| of
each class, a run the model cannot describe pulling the fit by its sign, not its square."""


def _capped(r: dict, norm: str = "l2") -> float:
    err = abs(math.log(max(1e-6, 1 + r["error"])))
    return min(1.0, err if norm == "l1" else err**2)  # beyond e-fold: e-fold


def rows_loss(
    rows: list[dict],
    weighting: str | None = None,
    bar_classes: tuple[str, ...] = BAR_CLASSES,
    norm: str = "l2",
) -> float:
    """The loss of the module's doc over evaluated rows (`bar_classes`: the classes the soft
    bar applies to; none for a user's runs; `norm`: NORMS)."""
    if norm not in NORMS:
        raise ValueError(f"norm {norm!r}: one of {', '.join(NORMS)}")
    bad = {r["id"] for r in infeasible(rows)}
    # the accuracy bar of tests/test_serve.py: no run of inference-calibration.yaml beyond
    # 40 %; a run past 35 % adds its excess squared, ten-fold (a soft bound, not a fit to it)
    bar = math.log(1.35)
    over = sum(
        10 * max(0.0, abs(math.log(max(1e-6, 1 + r["error"]))) - bar) ** 2
        for r in rows
        if r["class"] in bar_classes
    )
    if (weighting or WEIGHTING) == "run":
        runs: dict[str, list[float]] = {}
        for r in rows:
            if r["id"] not in bad:
                runs.setdefault(r["id"], []).append(_capped(r, norm))
        return sum(sum(v) / len(v) for v in runs.values()) / max(1, len(runs)) + over
    by: dict[tuple, list[float]] = {}
    for r in rows:
        if r["id"] not in bad:
            by.setdefault((r["class"], r.get("metric", "")), []).append(_capped(r, norm))
    classes: dict[str, list[float]] = {}
    for (cls, _), v in by.items():
        classes.setdefault(cls, []).append(sum(v) / len(v))
    return sum(sum(v) / len(v) for v in classes.values()) / len(classes) + over


def free_parameters(cases, hw, names=None) -> dict:
    """The bounds of the parameters the runs on this GPU may move: at most one per two runs
    (a run measured TPOT and TTFT counts once), in BOUNDS' order; `names`: only those
    (the identified ones), still in that order."""
    b = bounds(hw)
    if names is not None:
        b = {k: v for k, v in b.items() if k in names}
    runs = len({c.id for c in cases})
    return dict(list(b.items())[: max(1, runs // 2)])


def at_bounds(hw, b: dict) -> list[str]:
    cal = hw.serving_calibration
    return [
        n
        for n, (lo, hi) in b.items()
        if math.isclose(getattr(cal, n), lo, abs_tol=1e-9)
        or math.isclose(getattr(cal, n), hi, abs_tol=1e-9)
    ]


def fit(
    evaluate: Callable[[HardwareSpec], list[dict]],
    hw,
    b: dict,
    *,
    sweeps: int = 6,
    steps: int = 9,
    weighting: str | None = None,
    bar_classes: tuple[str, ...] = BAR_CLASSES,
    norm: str = "l2",
):
    """Minimise rows_loss(evaluate(hw)) over the parameters of `b` (name -> bounds): a coarse
    grid per parameter, then a pattern search: each parameter moved by +-step while the loss
    falls, the steps halved when no move helps, within the bounds."""

    def loss(h):
        return rows_loss(evaluate(h), weighting, bar_classes, norm)

    hw = replace_cal(
        hw, **{n: min(hi, max(lo, getattr(hw.serving_calibration, n))) for n, (lo, hi) in b.items()}
    )  # start inside the bounds
    best = loss(hw)
    for name, (lo, hi) in b.items():  # coarse grid, one pass
        for i in range(steps):
            cand = replace_cal(hw, **{name: round(lo + (hi - lo) * i / (steps - 1), 4)})
            lval = loss(cand)
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
                lval = loss(cand)
                if lval < best - 1e-9:
                    best, hw, moved = lval, cand, True
                    break
        if not moved:
            step = {n: v / 2 for n, v in step.items()}
            if all(v < (b[n][1] - b[n][0]) / 256 for n, v in step.items()):
                break
    return hw, best


def _log_predictions(evaluate, hw) -> list[float]:
    return [math.log(max(1e-12, 1 + r["error"])) for r in evaluate(hw)]


def identified(
    evaluate: Callable[[HardwareSpec], list[dict]], hw, b: dict
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The parameters of `b` (in order) the runs pin, by planner/calibration/fit.py's rule:
    sweeping one over its whole range must move the runs' log metrics by at least
    SENSITIVITY_MIN (root mean square over every run's metrics), and the fitted set's
    Jacobian must stay below CONDITION_MAX. Returns them and why each other one is out."""
    base = _log_predictions(evaluate, hw)
    sens = {}
    for name, (lo, hi) in b.items():
        cur = min(hi, max(lo, getattr(hw.serving_calibration, name)))
        d = STEP * (hi - lo)
        up, down = min(hi, cur + d), max(lo, cur - d)
        e_up = _log_predictions(evaluate, replace_cal(hw, **{name: up})) if up > cur else base
        e_dn = _log_predictions(evaluate, replace_cal(hw, **{name: down})) if down < cur else base
        span = (up - down) / (hi - lo)
        sens[name] = [(a - c) / span for a, c in zip(e_up, e_dn)]
    return select_identified(sens, list(b), SENSITIVITY_MIN, CONDITION_MAX)


# ------------------------------------------------------------- user runs (planner calibrate)


@dataclass(frozen=True)
class ServeRun:
    """One measured serving run: the deployment (job, layout) and what its benchmark measured
    (metric -> value, in planner.serve.estimate's names: ttft_s, tpot_s, output_tokens_per_s)."""

    id: str
    job: object
    layout: object
    measured: dict

    @property
    def cls(self) -> str:
        """Its class (planner.serve.validate.serve_class): serving-latency at a concurrency,
        offline-throughput at "max", static-latency, disagg."""
        from planner.serve.validate import serve_class

        return serve_class(self.job, self.layout)


def evaluate_runs(runs, hw) -> list[dict]:
    """One row per run and measured metric, each run predicted on `hw`."""
    from dataclasses import replace

    from planner.serve.estimate import estimate

    rows = []
    for r in runs:
        est = estimate(replace(r.job, hardware=hw), r.layout)
        for metric, value in r.measured.items():
            rows.append(
                {
                    "id": r.id,
                    "class": r.cls,
                    "metric": metric,
                    "error": getattr(est, metric) / value - 1,
                    "requested": r.job.serving.concurrency,
                    "max_concurrency": est.memory.max_concurrency,
                }
            )
    return rows


@dataclass(frozen=True)
class ServeCalibrated:
    """What `calibrate_serving` found; before/after: per run, metric -> predicted/measured - 1."""

    base: HardwareSpec
    profile: HardwareSpec
    fitted: tuple[str, ...]
    at_bound: list[str]
    before: list[dict]
    after: list[dict]
    left_out: dict[str, str]
    """Parameters not fitted (beyond those the run count allows) and why."""
    infeasible: list[str]


def _per_run(runs, rows) -> list[dict]:
    out: list[dict] = [{} for _ in runs]
    index = {r.id: i for i, r in enumerate(runs)}
    for row in rows:
        out[index[row["id"]]][row["metric"]] = row["error"]
    return out


def calibrate_serving(runs, base: HardwareSpec) -> ServeCalibrated:
    """Fit `base`'s serving parameters to `runs`: the identified ones, at most one per two
    runs (at least one), within bounds(base); the rest stay base's."""

    def ev(h):
        return evaluate_runs(runs, h)

    from planner.errors import SpecError

    ids = [r.id for r in runs]
    if len(set(ids)) != len(ids):  # rows are grouped by id: make them unique
        runs = [ServeRun(f"{r.id}#{i}", r.job, r.layout, r.measured) for i, r in enumerate(runs)]
    bad = {r["id"] for r in infeasible(ev(base))}
    fit_runs = [r for r in runs if r.id not in bad]
    if not fit_runs:
        raise SpecError(
            f"no serving run has room for one request in the KV cache planner "
            f"leaves ({', '.join(sorted(bad))[:200]}); check each config's "
            "lengths and memory with `planner validate`",
            field="config",
        )

    def ev_fit(h):
        return evaluate_runs(fit_runs, h)

    names, why = identified(ev_fit, base, bounds(base))
    b = free_parameters(fit_runs, base, names)
    for n in names:
        if n not in b:
            why[n] = f"identified, but {len(fit_runs)} run(s) fit at most {len(b)} parameter(s)"
    fitted, _ = fit(ev_fit, base, b, bar_classes=()) if b else (base, 0.0)
    classes = sorted({r.cls for r in fit_runs}) if b else []
    cal = fitted.serving_calibration
    fitted = replace_cal(fitted, fitted_on=tuple(sorted(set(cal.fitted_on) | set(classes))))
    before, after = ev(base), ev(fitted)
    return ServeCalibrated(
        base,
        fitted,
        tuple(b),
        at_bounds(fitted, b),
        _per_run(runs, before),
        _per_run(runs, after),
        why,
        sorted(bad),
    )


def serve_profile_yaml(result: ServeCalibrated, *, runs: int, source: str) -> str:
    """The fitted profile as YAML (a comment header says what was fitted to what)."""
    import yaml

    data = result.profile.model_dump(mode="json", exclude_defaults=False)
    rest = [
        k for k in ServingCalibration.model_fields if k not in result.fitted and k != "fitted_on"
    ]
    head = [
        f"# Hardware profile whose serving parameters `planner calibrate` fitted to {runs} "
        f"measured serving run(s) ({source}),",
        f"# starting from {result.base.name}. Fitted: {', '.join(result.fitted) or 'none'};",
        f"# kept from {result.base.name}: {', '.join(rest) or 'none'}.",
    ]
    if result.at_bound:
        head.append(f"# At a bound of its physical range: {', '.join(result.at_bound)}.")
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False)


def with_log_workload(job, layout, log) -> tuple[object, list[str]]:
    """The job as the benchmark ran it: the concurrency its clients kept (vLLM / SGLang
    --max-concurrency, for the whole deployment: per instance it is divided by the replicas,
    or the decode workers) replaces the config's, said in a note; mean request lengths far
    (> 10%) from the config's are named (the config's are predicted)."""
    from dataclasses import replace

    notes = []
    sv = job.serving
    if log.concurrency_is_setting and log.concurrency:
        share = layout.decode_workers if layout.disaggregated else layout.replicas
        c = max(1, round(log.concurrency / max(1, share)))
        if sv.concurrency != c:
            was = "as many as fit" if sv.concurrency == "max" else f"{sv.concurrency} per instance"
            per = f" ({c} per instance)" if share > 1 else ""
            notes.append(
                f"concurrency {log.concurrency:g} from the log{per}, not the config's {was}"
            )
            job = replace(job, serving=sv.model_copy(update={"concurrency": c}))
    elif log.concurrency and sv.concurrency == "max":
        notes.append(
            f"the log measured {log.concurrency:g} requests in flight on average; "
            "predicted at the concurrency the KV cache holds (give serving."
            "concurrency to predict another)"
        )
    for name, got, want in (
        ("input", log.input_length, sv.input_length),
        ("output", log.output_length, sv.output_length),
    ):
        if got and abs(got / want - 1) > 0.10:
            notes.append(
                f"the log's mean {name} length {got:.0f} tokens is not the config's "
                f"{want}: predicted at the config's"
            )
    return job, notes
