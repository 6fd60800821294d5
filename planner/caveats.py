"""Where an estimate stands outside calibrated ground, in words a user can act on.

The time model's few efficiency parameters are fitted per hardware profile to published runs
of some classes (`Calibration.fitted_on`). An estimate for a job of another class, or on a
profile fitted to nothing, is an extrapolation: `caveats(job, layout)` says which, and the
report shows it beside the numbers (table, JSON `caveats`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.layout import Layout
    from planner.specs import JobLike as _Job  # what caveats read of a job
    from planner.specs import ModelSpec

__all__ = [
    "case_classes",
    "caveats",
    "dispatcher_caveats",
    "layer_kind_caveats",
    "LONG_CONTEXT_TOKENS",
]

LONG_CONTEXT_TOKENS = 32768
"""Sequences from this length on are the long-context class (calibration-modern.yaml)."""


def case_classes(job: _Job, layout: Layout | None) -> list[str]:
    """The calibration classes a job and layout belong to (a run can be in several):
    moe (routed experts), fsdp (ZeRO-3), long-context (>= 32k tokens), and dense-fp8 or
    dense-bf16 for the rest by precision."""
    out = []
    if job.model.is_moe:
        out.append("moe")
    if layout is not None and layout.zero == 3:
        out.append("fsdp")
    if job.training.seq_length >= LONG_CONTEXT_TOKENS:
        out.append("long-context")
    if not out:
        out.append("dense-fp8" if job.training.precision == "fp8" else "dense-bf16")
    return out


_KIND_WORDS = {
    "sliding": "sliding-window",
    "chunked": "chunked-local",
    "dsa": "DSA (top-k sparse)",
    "linear": "linear-attention (Gated DeltaNet)",
}


def layer_kind_caveats(model: ModelSpec) -> list[str]:
    """Every calibration run, training and serving, has full (or MLA) attention in every layer;
    a model with other layer kinds (`layer_types`) has their attention priced from its FLOPs
    and bytes at the full-attention efficiency, never checked against a run."""
    kinds = [k for k in _KIND_WORDS if k in set(model.attention_kinds)]
    if not kinds:
        return []
    names = ", ".join(_KIND_WORDS[k] for k in kinds)
    return [
        f"{names} layers: no calibration run has them, so their attention is priced from its "
        "FLOPs and bytes at the full-attention efficiency: extrapolated"
    ]


def dispatcher_caveats(job: _Job, layout: Layout | None) -> list[str]:
    """DeepEP's internode kernels on Hopper: the model costs them at the RDMA and NVLink
    bandwidths DeepSeek measured on its H800 cluster (deepseek-ai/DeepEP README, normal
    kernels, 43-51 GB/s RDMA) with the overlap law of `cost/moe.py`. The calibration runs
    with DeepEP across nodes on Hopper measured slower than that (Kimi K2 on 256 H100 under
    NeMo AutoModel; Qwen3-235B-A22B on 256 H100 under Megatron-Bridge 26.02.01, where the
    alltoall runs of the same layout are on the mark: docs/accuracy.md), and users report it no
    faster than NCCL's all-to-all on H100 clusters (deepseek-ai/DeepEP#59: dispatch slower,
    its notify step as long as the combine; #155: 25 of 47 GB/s RDMA). One sentence where an
    estimate rests on it: EP all-to-all across nodes, `moe_token_dispatcher: deepep`, Hopper."""
    if layout is None or layout.ep <= 1 or layout.moe_token_dispatcher != "deepep":
        return []
    hw = job.hardware
    if hw.architecture != "hopper" or layout.ep_span <= hw.nvlink_domain_size:
        return []
    return [
        "DeepEP across nodes on Hopper is costed at the bandwidth DeepSeek measured on H800 "
        "(deepseek-ai/DeepEP README); the published Hopper runs with it measured slower "
        "than this model says, and users report it no faster than NCCL's all-to-all on H100 "
        "clusters (deepseek-ai/DeepEP#59): its EP time may be optimistic; compare with "
        "moe_token_dispatcher alltoall"
    ]


def caveats(job: _Job, layout: Layout | None) -> list[str]:
    """One sentence per way this estimate leaves calibrated ground (empty: on it)."""
    hw = job.hardware
    fitted = set(hw.calibration.fitted_on)
    if not fitted:
        return [
            f"{hw.name} has no calibration data: its efficiency parameters are borrowed "
            "from another GPU, so treat the step time as a rough estimate"
        ]
    out = []
    missing = [c for c in case_classes(job, layout) if c not in fitted]
    if missing:
        out.append(
            f"no {' or '.join(missing)} runs on {hw.name} in the calibration data "
            f"(fitted on {', '.join(sorted(fitted))}): the step time is extrapolated"
        )
    recipe = job.training.recipe
    if recipe is not None and recipe not in hw.calibration.fitted_recipes:
        seen = ", ".join(hw.calibration.fitted_recipes) or "none"
        out.append(
            f"no FP8 {recipe} runs on {hw.name} in the calibration data (FP8 recipes "
            f"fitted: {seen}): its FP8 GEMM rate is extrapolated"
        )
    return out + dispatcher_caveats(job, layout) + layer_kind_caveats(job.model)
