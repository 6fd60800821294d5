"""The host side of a layer: kernel launches, host syncs and what CUDA graphs remove.

Eager PyTorch issues every kernel from the host; a layer's forward costs the host
    host = kernels x launch_overhead_us           (backward: twice the kernels)
`launch_overhead_us` is the per-kernel host time (op dispatch + launch), a profile's fitted
parameter. Kernel counts per layer forward (Transformer Engine + Megatron-Core, read off
Nsight traces of their layers; estimates): a dense layer 24 (norms, GEMMs, RoPE, attention,
residuals, the TP collectives and FP8 casts); an MoE layer 56 (the attention block, router
GEMM, softmax/top-k, auxiliary-loss terms, permute and unpermute, the dispatcher's
collectives, grouped GEMMs, activation, casts).
While the host runs ahead of the device its time is hidden: a layer takes max(device, host).
An MoE layer's device-to-host sync (moe.host_sync) stops the host once per layer, so that
layer takes device + host.
CUDA graphs (`cuda_graphs`): partial (Transformer Engine per-layer graphs of the attention
block and the router / preprocessing, Megatron-Bridge's default scopes) leave a dense layer
one launch and an MoE layer its 20 expert-path kernels (dispatch, experts, combine); full
(the whole iteration captured, which needs a sync-free dispatcher) leaves none.
"""

from __future__ import annotations

__all__ = ["DENSE_KERNELS", "MOE_KERNELS", "MOE_UNGRAPHED_KERNELS", "host_seconds",
           "layer_wall"]

DENSE_KERNELS = 24
MOE_KERNELS = 56
MOE_UNGRAPHED_KERNELS = 20


def host_seconds(*, moe: bool, cuda_graphs: str, launch_us: float) -> float:
    """Host time of one layer's forward (backward: twice)."""
    if cuda_graphs == "full":
        return 0.0
    if cuda_graphs == "partial":
        kernels = MOE_UNGRAPHED_KERNELS if moe else 1
    else:
        kernels = MOE_KERNELS if moe else DENSE_KERNELS
    return kernels * launch_us * 1e-6


def layer_wall(device: float, host: float, *, sync: bool) -> float:
    """A layer's wall time: the host hidden behind the device unless a sync serialises them."""
    return device + host if sync else max(device, host)
