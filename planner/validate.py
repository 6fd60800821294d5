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
    extra: list[Violation] = field(default_factory=list)   # framework-specific (importers)

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


def _computable(layout: Layout, job: Job) -> bool:
    """The estimate needs whole degrees that tile the world and at least one micro-batch."""
    return (layout.world_size == job.num_gpus and layout.num_microbatches(job.training.global_batch_size) >= 1
            and (not job.model.is_moe or job.model.num_experts % layout.ep == 0)
            and job.model.num_attention_heads % layout.tp == 0)


def validate(job: Job, layout: Layout, *, headroom: float = DEFAULT_HEADROOM,
             extra: list[Violation] | None = None, tokens: float | None = None) -> ValidationResult:
    """Every rule, with memory (and time) where the layout is whole enough to estimate.
    Knobs the config left to the planner (`layout.auto`) are chosen first, with the same
    headroom. `tokens` (training tokens) adds time-to-train to the estimate."""
    if layout.auto and _computable(layout, job):
        layout = fill_auto(job, layout, headroom=headroom)
    est = estimate(job, layout, tokens=tokens) if _computable(layout, job) else None
    ctx = Context(model=job.model, hardware=job.hardware, training=job.training,
                  num_gpus=job.num_gpus, layout=layout,
                  memory=est.memory if est else None, headroom=headroom)
    return ValidationResult(job, layout, check(ctx), est, list(extra or []))
