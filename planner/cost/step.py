"""One optimizer step's result type, and the data-parallel exposure formula.

The composition lives in model.py (`CostModel.time`); what it adds up:

Per micro-batch, a stage costs Σ_layers (fwd + bwd + recompute) plus the communication on its
critical path: TP collectives (2 per layer forward, 2 backward, 2 more when recomputing; SP
changes the form, not the volume; hidden by `tp_comm_overlap` up to the overlap efficiency),
EP all-to-alls (dispatch + combine, forward and backward, times the load imbalance), CP
(ring K/V exchange hidden behind the attention core where it can be; Ulysses all-to-alls
not hidden) and PP point-to-point (activations in, gradients back, v times when interleaved).
The step is `pipeline_time` over the stages, plus the data-parallel traffic that the
backward (or forward) of one micro-batch could not hide, plus the optimizer update.
Data parallel: ZeRO-0 all-reduces the gradients once; ZeRO-1 (distributed optimizer)
reduce-scatters them once and all-gathers the parameters once; ZeRO-2 reduce-scatters every
micro-batch; ZeRO-3 also all-gathers the parameters in every forward and backward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from planner.cost.comm import Link, all_gather_time, all_reduce_time, reduce_scatter_time

__all__ = [
    "StepTime",
    "dp_exposed",
    "dp_buckets",
    "overlapped",
    "OPTIMIZER_BYTES_PER_PARAM",
    "STREAM_HBM_EFFICIENCY",
    "adam_update_bytes",
    "grad_clip_bytes",
    "optimizer_times",
]

STREAM_HBM_EFFICIENCY = 0.9
"""Share of the datasheet HBM bandwidth a long coalesced stream reaches: 3,614.6 GB/s read and
3,704.8 GB/s written on a GH200 of 4,000 GB/s (HBM3, 96 GB; ProjectPhysX's OpenCL-Benchmark,
its output in the public repository mredenti/PowerCapping, configuration/OpenCL_benchmark.md):
0.90 and 0.93. The optimizer's kernels are such streams (no reuse, every element read or written
once); they are counted at the read side's 0.90, an upper bound on what a multi-tensor kernel
over many tensors reaches."""


def adam_update_bytes(
    *,
    grad: float = 4.0,
    exp_avg: float = 4.0,
    exp_avg_sq: float = 4.0,
    master: float = 4.0,
    weight: float = 2.0,
) -> float:
    """HBM bytes a fused Adam(W) update moves per parameter it owns (Transformer Engine's and
    Apex's FusedAdam, PyTorch's fused AdamW: one pass, each tensor read or written once):
    it reads the fp32 master weight, the gradient and the two moments and writes the master
    weight, the moments and the bf16 weight copy back,
        2·master + grad + 2·exp_avg + 2·exp_avg_sq + weight
    = 2·4 + 4 + 2·4 + 2·4 + 2 = 30 B with fp32 gradients and moments; 22 B with bf16 moments
    (the precision-aware optimizer's `--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`). The dtypes
    are the memory model's (memory.state_dtypes)."""
    return 2.0 * master + grad + 2.0 * exp_avg + 2.0 * exp_avg_sq + weight


OPTIMIZER_BYTES_PER_PARAM = adam_update_bytes()
"""HBM bytes the default Adam update moves per owned parameter (30: `adam_update_bytes`)."""


def grad_clip_bytes(*, grad: float = 4.0) -> float:
    """HBM bytes gradient-norm clipping moves per owned parameter, 3·grad: Megatron-Core's
    `get_grad_norm_fp32` reads every gradient once (`multi_tensor_l2norm`), and
    `clip_grad_by_total_norm_fp32` scales them in place with Transformer Engine's
    `multi_tensor_scale_tensor` every step (the clip coefficient, clamped at 1, stays on the
    device: a read and a write; megatron/core/optimizer/clip_grads.py). PyTorch's
    `clip_grad_norm_` (torchtitan) does the same: the norm, then a multiply by the clamped
    coefficient."""
    return 3.0 * grad


def optimizer_times(
    *,
    params: float,
    hbm_bytes_per_s: float,
    grad: float = 4.0,
    exp_avg: float = 4.0,
    exp_avg_sq: float = 4.0,
    clip: bool = True,
    efficiency: float = STREAM_HBM_EFFICIENCY,
) -> tuple[float, float]:
    """(Adam update, gradient clipping) seconds of one step on a rank that owns `params`
    parameters (the distributed optimizer's and FSDP's shard: its dense parameters / dp·cp,
    its experts' / EDP; all of them without ZeRO). Both kernels are memory-bound streams:
        t_adam = params · adam_update_bytes / (B_hbm · η),
        t_clip = params · grad_clip_bytes / (B_hbm · η),
    η = STREAM_HBM_EFFICIENCY. Llama 3 8B on 8 H100 with the distributed optimizer: 1.0e9
    parameters a rank, 30 + 12 B each, 42 GB / (3.35 TB/s · 0.9) = 14 ms."""
    rate = hbm_bytes_per_s * efficiency
    update = params * adam_update_bytes(grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq) / rate
    clipping = params * grad_clip_bytes(grad=grad) / rate if clip else 0.0
    return update, clipping


@dataclass(frozen=True)
class StepTime:
    step_time_s: float
    compute_s: float
    bubble_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    ep_comm_s: float
    cp_comm_s: float
    optimizer_s: float  # the optimizer step: update + clipping + the per-step overhead
    bubble_fraction: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    hfu: float
    model_flops: float
    num_gpus: int
    train: dict[str, float] | None = field(default=None)
    optimizer_update_s: float = 0.0  # of optimizer_s: the Adam update (`optimizer_times`)
    grad_clip_s: float = 0.0  # of optimizer_s: the gradient norm and clipping
    step_overhead_s: float = 0.0  # of optimizer_s: the profile's step_overhead_ms

    @property
    def exposed_comm_s(self) -> float:
        return self.tp_comm_s + self.pp_comm_s + self.dp_comm_s + self.ep_comm_s + self.cp_comm_s

    def parts(self) -> list[tuple[str, float]]:
        return [
            ("compute (incl. recompute)", self.compute_s),
            (f"pipeline bubble ({self.bubble_fraction:.0%} of ideal)", self.bubble_s),
            ("TP communication (exposed)", self.tp_comm_s),
            ("PP communication (exposed)", self.pp_comm_s),
            ("DP communication (exposed)", self.dp_comm_s),
            ("EP communication (exposed)", self.ep_comm_s),
            ("CP communication (exposed)", self.cp_comm_s),
            (
                "optimizer step (Adam update, gradient clipping)",
                self.optimizer_s - self.step_overhead_s,
            ),
            ("per-step overhead (step_overhead_ms)", self.step_overhead_s),
        ]

    def as_dict(self) -> dict[str, float]:
        return {
            "step_time_s": self.step_time_s,
            "compute_s": self.compute_s,
            "bubble_s": self.bubble_s,
            "bubble_fraction": self.bubble_fraction,
            "tp_comm_s": self.tp_comm_s,
            "pp_comm_s": self.pp_comm_s,
            "dp_comm_s": self.dp_comm_s,
            "ep_comm_s": self.ep_comm_s,
            "cp_comm_s": self.cp_comm_s,
            "optimizer_s": self.optimizer_s,
            "optimizer_update_s": self.optimizer_update_s,
            "grad_clip_s": self.grad_clip_s,
            "step_overhead_s": self.step_overhead_s,
            "exposed_comm_s": self.exposed_comm_s,
        }

    def throughput_dict(self) -> dict[str, float]:
        return {
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
        }


def dp_buckets(params: float, n: int) -> int:
    """Gradient buckets Megatron's DDP reduces: one per max(40M, 1M x dp) parameters
    (`--ddp-bucket-size`'s default); each pays its collective's latency."""
    return max(1, -(-int(params) // int(max(40e6, 1e6 * n))))


def _bucketed(
    time_fn: Callable[[float, int, Link], float], size: float, n: int, link: Link, buckets: int
) -> float:
    """A collective of `size` bytes sent as `buckets` calls: the bandwidth term once, the
    ring latency (n-1)*alpha once per call."""
    return time_fn(size / buckets, n, link) * buckets


def dp_exposed(
    *,
    zero: int,
    m: int,
    dense_params: float,
    expert_params: float,
    dp_link: Link,
    dp_size: int,
    edp_link: Link,
    edp_size: int,
    grad_bytes: float,
    window_fwd: float,
    window_bwd: float,
    hide: float,
    overlap_grad_reduce: bool = True,
    overlap_param_gather: bool = True,
    param_bytes: float = 2.0,
    units: int = 1,
) -> float:
    """Seconds of data-parallel traffic not hidden behind compute, per step.

    ZeRO-0: all-reduce of the gradients (grad_bytes per param) during the last micro-batch's
    backward. ZeRO-1 (distributed optimizer): reduce-scatter of the gradients there, and an
    all-gather of the bf16 parameters behind the first micro-batch's forward. ZeRO-2: the
    reduce-scatter every micro-batch. Both in Megatron's buckets (`dp_buckets`), each paying
    the ring latency. ZeRO-3 / FSDP: per micro-batch and per FSDP unit (a layer: `units` of
    them on the stage), a parameter all-gather in forward (prefetched behind the previous
    unit's compute) and again in backward plus the gradient reduce-scatter, each a ring of n
    ranks with its (n-1)*alpha latency -- so at large n a fixed global batch stops scaling:
    the latency grows with n while each rank's compute shrinks. `hide` is the fraction of the
    compute window that communication can actually use. Dense parameters reduce over dp*cp,
    expert parameters over the expert-data-parallel group. Gradients move at `grad_bytes`
    per parameter (4 fp32, 2 with bf16 reduction), parameters at `param_bytes` (2 bf16, 1 for
    FP8 weights with fp8_param_gather).
    """
    total = 0.0
    for P, n, link in ((dense_params, dp_size, dp_link), (expert_params, edp_size, edp_link)):
        if P <= 0 or n <= 1:
            continue
        if zero == 3:
            u = max(1, units)
            ag = all_gather_time(param_bytes * P / u, n, link)
            rs = reduce_scatter_time(grad_bytes * P / u, n, link)
            fwd, bwd = window_fwd / u, window_bwd / u
            total += m * u * (max(0.0, ag - hide * fwd) + max(0.0, ag + rs - hide * bwd))
            continue
        buckets = dp_buckets(P, n)
        rs = _bucketed(reduce_scatter_time, grad_bytes * P, n, link, buckets)
        ag = _bucketed(all_gather_time, param_bytes * P, n, link, buckets)
        if zero == 0:
            ar = _bucketed(all_reduce_time, grad_bytes * P, n, link, buckets)
            total += overlapped(ar, buckets, window_bwd, hide) if overlap_grad_reduce else ar
        elif zero == 1:
            total += overlapped(rs, buckets, window_bwd, hide) if overlap_grad_reduce else rs
            total += overlapped(ag, buckets, window_fwd, hide) if overlap_param_gather else ag
        else:
            total += m * overlapped(rs, buckets, window_bwd, hide)
            total += overlapped(ag, buckets, window_fwd, hide) if overlap_param_gather else ag
    return total


def overlapped(comm: float, buckets: int, window: float, hide: float) -> float:
    """Exposed seconds of a bucketed DP collective of `comm` seconds in all, overlapped with a
    compute window:
        max(comm / buckets, comm - hide·window)
    One bucket's share is never hidden: Megatron's DDP starts a bucket's gradient
    reduce-scatter (all-reduce) when the last gradient of the bucket is ready in the backward
    (`register_grad_ready`), and the bucket holding the first layers' parameters is ready only
    when the backward ends; the forward pre-hook waits for a bucket's parameter all-gather
    before its first module runs and only then dispatches the next one (`finish_param_sync`),
    so the first bucket's all-gather has no compute before it (megatron/core/distributed/
    distributed_data_parallel.py, param_and_grad_buffer.py). A model of one bucket (fewer
    parameters than the bucket size) exposes its whole collective."""
    return max(comm / buckets, comm - hide * window)
