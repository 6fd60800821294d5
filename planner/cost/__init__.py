"""The cost model: `estimate(job, layout) -> Estimate`. Composes memory, compute, comm and
pipeline; no math of its own."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from planner.cost.memory import MemoryBreakdown, peak_memory
from planner.cost.shape import ModelShape, model_shape
from planner.units import GiB

__all__ = ["Estimate", "estimate", "shape_of", "memory_of"]


@dataclass(frozen=True)
class Estimate:
    memory: MemoryBreakdown
    time: object = None          # StepTime once the time model runs


@lru_cache(maxsize=32)
def shape_of(model) -> ModelShape:
    return model_shape(model)


def memory_of(job, layout) -> MemoryBreakdown:
    hw, tr = job.hardware, job.training
    return peak_memory(
        shape_of(job.model), layout, seq=tr.seq_length, global_batch_size=tr.global_batch_size,
        capacity=hw.memory_gib * GiB, fixed_overhead=(hw.cuda_context_gib + hw.nccl_buffer_gib) * GiB,
        fragmentation=hw.fragmentation_fraction, accounting=tr.accounting,
        precision=tr.precision, flash=tr.flash_attention)


def estimate(job, layout, *, tokens: float | None = None) -> Estimate:
    return Estimate(memory=memory_of(job, layout))
