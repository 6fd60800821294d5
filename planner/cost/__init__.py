"""The cost model: `estimate(job, layout) -> Estimate`. Composes memory, compute, comm and
pipeline; no math of its own."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from planner.cost.memory import MemoryBreakdown
from planner.cost.shape import ModelShape, model_shape
from planner.cost.step import StepTime

if TYPE_CHECKING:
    from planner.cost.model import CostModel
    from planner.layout import Layout
    from planner.specs import JobLike, ModelSpec

__all__ = ["Estimate", "estimate", "shape_of", "time_of", "cost_model"]


@dataclass(frozen=True)
class Estimate:
    memory: MemoryBreakdown
    time: StepTime | None = None


@lru_cache(maxsize=32)
def shape_of(model: ModelSpec) -> ModelShape:
    return model_shape(model)


def cost_model(job: JobLike) -> CostModel:
    from planner.cost.model import CostModel

    return CostModel(job, shape_of(job.model))


def time_of(
    job: JobLike, layout: Layout, *, tokens: float | None = None, model: CostModel | None = None
) -> StepTime:
    from dataclasses import replace

    st = (model or cost_model(job)).time(layout)
    if tokens:
        tr = job.training
        steps = tokens / (tr.global_batch_size * tr.seq_length)
        seconds = steps * st.step_time_s
        st = replace(
            st,
            train={
                "tokens": tokens,
                "steps": steps,
                "days": seconds / 86400,
                "gpu_hours": seconds * st.num_gpus / 3600,
            },
        )
    return st


def estimate(
    job: JobLike, layout: Layout, *, tokens: float | None = None, model: CostModel | None = None
) -> Estimate:
    """Memory of the most loaded rank and the step time of `layout` for `job`."""
    cm = model or cost_model(job)
    return Estimate(memory=cm.memory(layout), time=time_of(job, layout, tokens=tokens, model=cm))
