"""`validate`: a job and a layout in, a verdict (violations) and the estimate out."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.config import Job
from planner.cost import Estimate, estimate
from planner.errors import Violation
from planner.layout import Layout
from planner.rules import DEFAULT_HEADROOM, Context, check
from planner.tune import fill_auto

__all__ = ["ValidationResult", "validate"]


@dataclass(frozen=True)
class ValidationResult:
    job: Job
    layout: Layout
    violations: list[Violation]
    estimate: Estimate | None
    extra: list[Violation] = field(default_factory=list)  # framework-specific (importers)

    @property
    def errors(self) -> list[Violation]:
        """planner's own rules first (memory, the layout), then the framework's."""
        return [v for v in self.violations + self.extra if v.severity == "error"]

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.violations + self.extra if v.severity == "warning"]

    @property
    def valid(self) -> bool:
        return not self.errors


def why_no_estimate(layout: Layout, job: Job) -> str | None:
    """Why this layout cannot be estimated (None: it can): the estimate needs whole degrees
    that tile the world, at least one micro-batch and a pipeline layout string (if any) that
    Megatron would run; the rules say what to fix."""
    if layout.world_size != job.num_gpus:
        return "the layout does not tile the GPUs"
    if layout.num_microbatches(job.training.global_batch_size) < 1:
        return "the global batch leaves a data-parallel rank no whole micro-batch"
    if (
        job.model.is_moe and job.model.num_experts % layout.ep
    ) or job.model.num_attention_heads % layout.tp:
        return "the layout does not divide the model (heads by tp, experts by ep)"
    if not _layout_string_runs(layout, job):
        return "the pipeline layout string does not run as written"
    return None


def _computable(layout: Layout, job: Job) -> bool:
    return why_no_estimate(layout, job) is None


def _layout_string_runs(layout: Layout, job: Job) -> bool:
    text = layout.pipeline_model_parallel_layout
    if not text:
        return True
    from planner.pipeline_layout import layout_problem, parse_layout

    try:
        stages = parse_layout(text)
    except ValueError:
        return False
    return (
        not layout.uneven
        and len(stages) == layout.pp * layout.vpp
        and layout_problem(
            stages,
            pp=layout.pp,
            num_layers=job.model.num_layers,
            mtp_num_layers=job.model.mtp_num_layers,
        )
        is None
    )


def validate(
    job: Job,
    layout: Layout,
    *,
    headroom: float = DEFAULT_HEADROOM,
    extra: list[Violation] | None = None,
    tokens: float | None = None,
) -> ValidationResult:
    """Every rule, with memory (and time) where the layout is whole enough to estimate.
    Knobs the config left to the planner (`layout.auto`) are chosen first, with the same
    headroom. `tokens` (training tokens) adds time-to-train to the estimate."""
    if layout.auto and _computable(layout, job):
        layout = fill_auto(job, layout, headroom=headroom)
    est = estimate(job, layout, tokens=tokens) if _computable(layout, job) else None
    ctx = Context(
        model=job.model,
        hardware=job.hardware,
        training=job.training,
        num_gpus=job.num_gpus,
        layout=layout,
        memory=est.memory if est else None,
        headroom=headroom,
    )
    return ValidationResult(job, layout, check(ctx), est, list(extra or []))
