"""`validate(job, layout) -> ServeValidation`: every serving rule, and the estimate where the
layout is whole enough to compute one."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.caveats import layer_kind_caveats
from planner.errors import Violation
from planner.serve.estimate import ServeEstimate, estimate
from planner.serve.rules import check, instance_errors, job_errors

__all__ = ["ServeValidation", "validate"]


@dataclass(frozen=True)
class ServeValidation:
    job: object
    layout: object
    violations: list[Violation]
    estimate: ServeEstimate | None
    extra: list[Violation] = field(default_factory=list)  # an engine command line's own

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.extra + self.violations if v.severity == "error"]

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.extra + self.violations if v.severity == "warning"]

    @property
    def valid(self) -> bool:
        return not self.errors


def _computable(job, layout) -> bool:
    """The estimate needs whole divisions (heads, experts) on every instance."""
    insts = [layout.prefill, layout.decode] if layout.disaggregated else [layout.instance]
    return not job_errors(job) and not any(instance_errors(job, i) for i in insts)


def validate(job, layout, *, extra: list[Violation] | None = None) -> ServeValidation:
    est = estimate(job, layout) if _computable(job, layout) else None
    mem = est.memory if est else None
    pmem = est.prefill_memory if est else None
    violations = check(job, layout, memory=mem, prefill_memory=pmem)
    if est is not None and any(v.rule == "fits-in-memory" for v in violations):
        est = None
    return ServeValidation(job, layout, violations, est, list(extra or []))


def serve_class(job, layout) -> str:
    """The calibration class an estimate belongs to (inference-calibration.yaml's)."""
    if layout.disaggregated:
        return "disagg"
    if job.serving.batching == "static":
        return "static-latency"
    return "offline-throughput" if job.serving.concurrency == "max" else "serving-latency"


def caveats(job, layout) -> list[str]:
    """Where this estimate leaves the serving calibration's ground, one sentence each."""
    hw = job.hardware
    fitted = set(hw.serving_calibration.fitted_on)
    if not fitted:
        return [
            f"{hw.name} has no serving calibration: its serving parameters are defaults, "
            "so treat the estimate as rough"
        ]
    out = []
    cls = serve_class(job, layout)
    if cls not in fitted:
        out.append(
            f"no {cls} runs on {hw.name} in the calibration data (fitted on "
            f"{', '.join(sorted(fitted))}): extrapolated"
        )
    if job.serving.speculative is not None:
        out.append(
            "speculative decoding is costed from the acceptance rate given, not from measured runs"
        )
    return out + cp_caveats(job, layout) + layer_kind_caveats(job.model)


def _instances(layout) -> list:
    return [layout.prefill, layout.decode] if layout.disaggregated else [layout.instance]


def cp_caveats(job, layout) -> list[str]:
    """Context parallelism is outside the serving calibration's ground: no run in
    inference-calibration.yaml uses it."""
    cps = sorted({i.cp for i in _instances(layout) if i.cp > 1})
    if not cps:
        return []
    out = [
        f"cp {'/'.join(map(str, cps))}: the serving calibration has no context-parallel "
        "runs, so the CP terms (1/cp of the KV cache and of each prompt, the K/V ring, the "
        "decode combine) are modelled, not fitted: outside calibrated ground"
    ]
    if job.serving.engine == "trtllm":
        out.append(
            "TensorRT-LLM's Helix reuses the cp ranks as tensor-parallel ranks for the "
            "FFN/MoE layers; planner keeps every weight whole on each cp rank, so its "
            "weight memory and weight-read time are upper bounds"
        )
    return out
