"""The JSON shapes of `planner serve` and of `planner validate SERVE.yaml`: plain data, no
rich, so `--json` does not import the terminal views. The stable interface documented in
README ("Inference"); planner.views.serve_report re-exports them beside the rich views."""

from __future__ import annotations

from typing import Any


def job_json(job) -> dict[str, Any]:
    from planner.cost.params import total_params

    sv = job.serving
    out = {
        "model": job.model.name,
        "parameters": total_params(job.model),
        "hardware": job.hardware.name,
        "num_gpus": job.num_gpus,
        "precision": sv.precision,
        "kv_cache_dtype": sv.kv_dtype,
        "input_length": sv.input_length,
        "output_length": sv.output_length,
        "concurrency": sv.concurrency,
        "engine": sv.engine,
        "batching": sv.batching,
    }
    if sv.speculative is not None:
        out["speculative"] = sv.speculative.model_dump(exclude_none=True)
    return out


def estimate_json(est, job=None) -> dict[str, Any]:
    """The estimate's keys; with `job`, the 80% intervals and their basis
    (docs/calibration.md)."""
    out = {
        "memory": est.memory.as_dict(),
        "latency": est.latency_dict(),
        "throughput": est.throughput_dict(),
        "concurrency": est.concurrency,
        "decode_step": est.decode_step.as_dict(),
        "prefill_s": est.prefill_s,
    }
    if est.prefill_memory is not None:
        out["prefill_memory"] = est.prefill_memory.as_dict()
        out["kv_transfer_s"] = est.kv_transfer_s
        out["bottleneck"] = est.bottleneck
    if job is not None:
        _serve_intervals(out, est, job)
    return out


def _serve_intervals(out: dict[str, Any], est, job) -> None:
    from planner.calibration.intervals import serve_intervals

    ivs = serve_intervals(job)
    if job.serving.batching != "static":  # e2e's runs are static batches
        ivs.pop("e2e_s", None)
    for metric, section in (
        ("ttft_s", "latency"),
        ("tpot_s", "latency"),
        ("e2e_s", "latency"),
        ("output_tokens_per_s", "throughput"),
    ):
        if metric in ivs:
            out[section][f"{metric}_interval"] = ivs[metric].of(getattr(est, metric))
    out["interval_basis"] = {m: iv.basis() for m, iv in ivs.items()}


def validation_json(result, *, caveats: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "valid": result.valid,
        "errors": [v.as_dict() for v in result.errors],
        "warnings": [v.as_dict() for v in result.warnings],
        "layout": result.layout.as_dict(),
    }
    if result.estimate is not None:
        out.update(estimate_json(result.estimate, result.job))
    out["job"] = job_json(result.job)
    out["caveats"] = list(caveats or [])
    return out


def candidate_json(c, job=None) -> dict[str, Any]:
    d = {
        "rank": c.rank,
        "meets_slo": c.meets,
        "layout": c.layout.as_dict(),
        "name": c.layout.name,
        "warnings": [v.as_dict() for v in c.warnings],
    }
    d.update(estimate_json(c.estimate, job))
    return d


def plan_json(result) -> dict[str, Any]:
    """{"plans", "pareto", "steps", ...} (README, 'Inference: JSON')."""
    o = result.options
    out: dict[str, Any] = {
        "plans": [candidate_json(p, result.job) for p in result.plans],
        "pareto": [
            {
                "name": p.layout.name,
                "layout": p.layout.as_dict(),
                "concurrency": p.estimate.concurrency,
                "meets_slo": p.meets,
                "latency": p.estimate.latency_dict(),
                "throughput": p.estimate.throughput_dict(),
            }
            for p in result.pareto
        ],
        "steps": result.steps,
        "slo": {"ttft_s": o.ttft_s, "tpot_s": o.tpot_s},
        "searched": result.searched,
        "shapes": result.shapes,
        "fitting": result.fitting,
        "meeting": result.meeting,
        "pruned": result.pruned,
        "elapsed_s": result.elapsed_s,
        "job": job_json(result.job),
        "caveats": list(result.caveats),
    }
    if result.pick is not None:
        pick = candidate_json(result.pick, result.job)
        pick["rank"] = result.pick_rank
        pick["note"] = result.pick_note
        out["procedure_pick"] = pick
    if result.closest is not None:
        out["closest"] = candidate_json(result.closest)
    return out
