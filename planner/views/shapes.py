"""The JSON shapes of every training command (and `compare`'s rows of plain text): plain
data, no rich, so `--json` does not import the terminal views.

The shapes are the stable interface documented in README ("JSON output"); planner.views.report
re-exports them beside the rich views.
"""

from __future__ import annotations

from typing import Any

from planner.units import GiB


def estimate_json(est, layout, global_batch_size: int, job=None) -> dict[str, Any]:
    """layout / memory / time / throughput keys of the contract (time keys when computed);
    with `job`, the 80% intervals and their basis (docs/calibration.md)."""
    out: dict[str, Any] = {"layout": layout.as_dict(global_batch_size)}
    if est is None:
        return out
    out["memory"] = est.memory.as_dict()
    if est.time is not None:
        out["time"] = est.time.as_dict()
        out["throughput"] = est.time.throughput_dict()
        if getattr(est.time, "train", None):
            out["time_to_train"] = est.time.train
    if job is not None:
        _intervals(out, est, job, layout)
    return out


def _intervals(out: dict[str, Any], est, job, layout) -> None:
    from planner.calibration.intervals import memory_interval, time_interval

    basis: dict[str, Any] = {}
    if est.time is not None:
        iv = time_interval(job, layout)
        out["time"]["step_time_s_interval"] = iv.of(est.time.step_time_s)
        tps = est.time.tokens_per_s_per_gpu  # tokens / time: the interval turned over
        out["throughput"]["tokens_per_s_per_gpu_interval"] = [tps / iv.hi, tps / iv.lo]
        basis.update(iv.basis())
    mv = memory_interval(job, layout)
    out["memory"]["total_bytes_interval"] = [round(x) for x in mv.of(est.memory.total)]
    basis["memory"] = mv.basis()
    out["interval_basis"] = basis


def validation_json(result) -> dict[str, Any]:
    gbs = result.job.training.global_batch_size
    out = {
        "valid": result.valid,
        "errors": [v.as_dict() for v in result.errors],
        "warnings": [v.as_dict() for v in result.warnings],
    }
    out.update(estimate_json(result.estimate, result.layout, gbs, result.job))
    out["chosen_by_planner"] = list(result.layout.auto)
    out["job"] = job_json(result.job)
    out["caveats"] = _caveats(result.job, result.layout)
    return out


def plan_ties(result) -> list[bool]:
    """Per plan: is the measured order against the fastest plan open, the two 80% intervals
    overlapping (lo x this step time <= hi x the fastest's)? The fastest itself: False."""
    from planner.calibration.intervals import time_interval

    if not result.plans:
        return []
    ivs = [time_interval(result.job, p.layout) for p in result.plans]
    best = min(range(len(result.plans)), key=lambda i: result.plans[i].time.step_time_s)
    t_best = result.plans[best].time.step_time_s * ivs[best].hi
    return [
        i != best and p.time.step_time_s * iv.lo <= t_best
        for i, (p, iv) in enumerate(zip(result.plans, ivs))
    ]


def _caveats(job, layout) -> list[str]:
    from planner.caveats import caveats

    return caveats(job, layout)


def job_json(job) -> dict[str, Any]:
    from planner.cost.params import total_params

    return {
        "model": job.model.name,
        "parameters": total_params(job.model),
        "hardware": job.hardware.name,
        "num_gpus": job.num_gpus,
        "seq_length": job.training.seq_length,
        "global_batch_size": job.training.global_batch_size,
        "precision": job.training.precision,
        "fp8_recipe": job.training.recipe,
        "fp8_param_gather": job.training.fp8_param_gather,
        "cross_entropy": job.training.cross_entropy,
        "loss_parallel": job.training.loss_parallel,
    }


def plan_json(result) -> dict[str, Any]:
    """{"plans": [...], "searched", "feasible", "steps", ...} (README, 'JSON output'); each
    plan with its `savers` (planner.savers.in_use) and, from `planner plan`, the
    `frameworks` whose exporter runs it."""
    from planner.savers import in_use

    job = result.job
    gbs = job.training.global_batch_size
    plans = []
    ties = plan_ties(result)
    for p, tie in zip(result.plans, ties):
        d = {
            "rank": p.rank,
            "valid": True,
            "errors": [],
            "warnings": [v.as_dict() for v in p.warnings],
        }
        d.update(estimate_json(_Est(p.memory, p.time), p.layout, gbs, job))
        d["caveats"] = _caveats(job, p.layout)
        d["tie_with_fastest"] = tie
        d["savers"] = in_use(p.layout, job.training)
        if p.frameworks is not None:
            d["frameworks"] = list(p.frameworks)
        plans.append(d)
    out: dict[str, Any] = {
        "plans": plans,
        "searched": result.searched,
        "feasible": result.feasible,
        "steps": result.steps,
        "evaluated": result.evaluated,
        "timed": result.timed,
        "pruned": result.pruned,
        "elapsed_s": result.elapsed_s,
        "job": job_json(job),
        "caveats": _caveats(job, None),
    }
    if result.pick is not None:
        pick = {"rank": result.pick_rank, "note": result.pick_note}
        pick.update(
            estimate_json(_Est(result.pick.memory, result.pick.time), result.pick.layout, gbs, job)
        )
        out["seven_step_pick"] = pick
    else:  # same keys, null, and why
        why = next((s["decision"] for s in result.steps if s.get("step") == 3), "")
        out["seven_step_pick"] = dict(
            _NO_PICK,
            reason=f"the seven-step procedure finds no layout that fits ({why})"
            if why
            else "the seven-step procedure finds no layout that fits",
        )
    if result.closest is not None:
        lay, mem = result.closest
        out["closest"] = {
            "layout": lay.as_dict(gbs),
            "memory": mem.as_dict(),
            "shortfall_bytes": round(mem.total - mem.capacity * (1 - result.headroom)),
        }
    elif not result.plans:
        out["closest"] = dict(
            _NO_CLOSEST,
            reason="no layout passes the structural rules (heads, "
            "layers, batch, sequence and expert divisibility, and --fix), so "
            "none has a memory estimate to compare",
        )
    if not result.plans:
        out["suggestions"] = result.suggestions
        out["binding"] = result.binding
        out["suggested"] = [sg.as_dict() for sg in result.suggested]
    return out


_NO_PICK = {
    "rank": None,
    "note": "",
    "layout": None,
    "memory": None,
    "time": None,
    "throughput": None,
}
_NO_CLOSEST = {"layout": None, "memory": None, "shortfall_bytes": None}


class _Est:
    def __init__(self, memory, time):
        self.memory, self.time = memory, time


def compare_rows(results: list) -> list[tuple[str, str, list[str], bool]]:
    """(key, label, one value per config, differs) for `planner compare`: the job, the layout,
    memory by component, step time by part, throughput; numbers after the first carry their
    change against the first config."""
    rows: list[tuple[str, str, list[str], bool]] = []

    def add(key: str, label: str, vals: list, fmt=str, rel: bool = False):
        shown = []
        for i, v in enumerate(vals):
            if v is None:
                shown.append("-")
                continue
            text = fmt(v)
            base = vals[0]
            if rel and i > 0 and base not in (None, 0) and v != base:
                text += f" ({(v / base - 1):+.0%})"
            shown.append(text)
        plain = [fmt(v) if v is not None else "-" for v in vals]
        rows.append((key, label, shown, len(set(plain)) > 1))

    jobs = [r.job for r in results]
    lays = [r.layout for r in results]
    ests = [r.estimate for r in results]
    add(
        "valid",
        "verdict",
        ["VALID" if r.valid else f"INVALID ({len(r.errors)} errors)" for r in results],
    )
    add("model", "model", [j.model.name for j in jobs])
    add("hardware", "hardware", [j.hardware.name for j in jobs])
    add("num_gpus", "GPUs", [j.num_gpus for j in jobs])
    add("seq_length", "sequence", [j.training.seq_length for j in jobs])
    add("global_batch_size", "global batch", [j.training.global_batch_size for j in jobs])
    add("precision", "precision", [j.training.precision for j in jobs])
    for key in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size"):
        add(key, key.replace("micro_batch_size", "micro-batch"), [getattr(x, key) for x in lays])
    add(
        "num_microbatches",
        "micro-batches",
        [x.num_microbatches(j.training.global_batch_size) for x, j in zip(lays, jobs)],
    )
    add("sequence_parallel", "sp", ["on" if x.sp else "off" for x in lays])
    add("zero_stage", "ZeRO", [x.zero for x in lays])
    add("recompute", "recompute", [x.recompute for x in lays])
    # the memory savers each config relies on (the plan table's savers column)
    from planner.savers import in_use

    add("savers", "savers", [" ".join(in_use(x, j.training)) or "-" for x, j in zip(lays, jobs)])
    gib = lambda v: f"{v / GiB:.2f}"  # noqa: E731
    for key, label in (
        ("weights", "weights GiB"),
        ("gradients", "gradients GiB"),
        ("optimizer", "optimizer GiB"),
        ("activations", "activations GiB"),
        ("other", "other GiB"),
        ("total", "memory GiB/GPU"),
    ):
        add(
            f"memory.{key}",
            label,
            [getattr(e.memory, key) if e else None for e in ests],
            gib,
            rel=key == "total",
        )
    add("memory.stage", "most loaded rank", [e.memory.stage if e else None for e in ests])
    tms = [e.time if e is not None else None for e in ests]
    sec = lambda v: f"{v:.3f}"  # noqa: E731
    for key, label in (
        ("compute_s", "compute s"),
        ("bubble_s", "bubble s"),
        ("tp_comm_s", "TP comm s"),
        ("pp_comm_s", "PP comm s"),
        ("dp_comm_s", "DP comm s"),
        ("ep_comm_s", "EP comm s"),
        ("cp_comm_s", "CP comm s"),
        ("optimizer_s", "optimizer s"),
        ("step_time_s", "step s"),
    ):
        add(
            f"time.{key}",
            label,
            [getattr(t, key) if t else None for t in tms],
            sec,
            rel=key == "step_time_s",
        )
    add(
        "throughput.tokens_per_s_per_gpu",
        "tokens/s/GPU",
        [t.tokens_per_s_per_gpu if t else None for t in tms],
        lambda v: f"{v:,.0f}",
        rel=True,
    )
    add("throughput.mfu", "MFU", [t.mfu if t else None for t in tms], lambda v: f"{v:.1%}")
    add("warnings", "warnings", [", ".join(v.rule for v in r.warnings) or "-" for r in results])
    add("caveats", "caveats", [str(len(_caveats(r.job, r.layout))) for r in results])
    return rows


def compare_json(results: list, names: list[str], formats: list[str]) -> dict[str, Any]:
    configs = []
    for name, fmt, r in zip(names, formats, results):
        d = validation_json(r)
        d["config"], d["format"] = name, fmt
        configs.append(d)
    return {
        "configs": configs,
        "differences": [key for key, _, _, differs in compare_rows(results) if differs],
    }
