"""The host side of a layer: kernel launches, host syncs and what CUDA graphs remove.

Eager PyTorch issues every kernel from the host; a layer part's forward costs the host
    host = kernels x launch_overhead_us           (backward: twice the kernels)
`launch_overhead_us` is the per-kernel host time (op dispatch + launch), a profile's fitted
parameter. Kernel counts per layer forward (Transformer Engine + Megatron-Core, read off
Nsight traces of their layers; estimates): the attention block 20 (norm, GEMMs, RoPE, the
attention kernel, residual add, the TP collectives, FP8 casts); a dense MLP 6; an MoE
layer's expert block 30 (router GEMM, softmax / top-k, auxiliary-loss terms, permute and
unpermute, the dispatcher's collectives and its token-count exchange) plus one GEMM per
local expert for fc1 and one for fc2 (Transformer Engine's GroupedLinear issues a GEMM per
expert); with an FP8 recipe each GEMM input is quantized by a kernel of its own (the
attention block's 4, the experts' 2 per expert; current scaling adds its amax pass);
backward issues twice as many (dgrad and wgrad).
While the host runs ahead of the device its time is hidden: a part takes max(device, host).
An MoE layer reads its tokens per expert on the host (`host_mode`) between the attention
block and the expert block: the host cannot run ahead across it, so the layer takes
max(device, host) of each part, plus the sync's round trip (two launches' worth).
Megatron's all-to-all overlap (`overlap_moe_expert_parallel_comm`) runs each MoE layer as
sub-modules (attention, dispatch, experts, combine) scheduled across two micro-batches and
two streams, with a sync at each of the four boundaries: the host cannot run ahead across a
boundary, but while it issues one micro-batch's sub-module the device runs the other's, so
each part still takes max(device, host), and the layer pays four syncs' round trips instead
of one (unless the whole iteration is one CUDA graph). Measured (Megatron-Bridge's
recompute/overlap study, calibration-modern.yaml mbskill-qwen3-30b-*-epoverlap-on/off): the
overlap makes Qwen3-30B-A3B on 16 H100s 15% faster, so it cannot add the host's whole time.
Drop-and-pad (`moe_pad_expert_input_to_capacity`, Megatron-Core's
`--moe-pad-expert-input-to-capacity` with `--moe-expert-capacity-factor`): every expert gets
exactly its capacity C = ceil(T·k·cf/E) rows from each EP rank, so the shapes are known on the
host before the router runs. Megatron-Core's MoEAlltoAllTokenDispatcher.preprocess returns, in
drop-and-pad mode, the tokens per local expert as a host tensor (`torch.full(...,
capacity * tp * ep)`) before it computes any count on the device, and its
`_maybe_dtoh_and_synchronize` does nothing when `drop_and_pad` is set (no device-to-host copy,
no event synchronize; megatron/core/transformer/moe/token_dispatcher.py): the MoE layer has no
sync and the host runs ahead as in a dense layer (`ahead`); the all-to-all overlap keeps its
sub-module boundaries (`serial`).
CUDA graphs (`cuda_graphs`): partial (Transformer Engine per-layer graphs of the attention
block, the dense MLP and the router / preprocessing: Megatron-Bridge's default scopes) leave
those parts one launch each and the expert path (dispatch, experts, combine) as it is, except
that a padded MoE layer's expert path is captured too (one launch): its shapes are static, the
condition Megatron-LM sets for graphing the whole MoE layer (megatron/training/arguments.py:
the `moe` graph scope "is only supported with drop-padding MoE", the alltoall dispatcher with a
capacity factor and `--moe-pad-expert-input-to-capacity`; Megatron-Bridge 25.09's performance
recipes turn on `enable_cuda_graph`, Megatron-Core's per-layer graphs of the whole layer); full
(the whole iteration captured, which needs a sync-free, fixed-capacity dispatch) leaves none.
"""

from __future__ import annotations

__all__ = [
    "ATTENTION_KERNELS",
    "MLP_KERNELS",
    "EXPERT_BLOCK_KERNELS",
    "HOST_MODES",
    "host_parts",
    "host_mode",
    "layer_wall",
]

ATTENTION_KERNELS = 20
MLP_KERNELS = 6
EXPERT_BLOCK_KERNELS = 30
_SYNC_LAUNCHES = 2


def host_parts(
    *,
    moe: bool,
    cuda_graphs: str,
    launch_us: float,
    local_experts: int = 0,
    recipe: str | None = None,
    padded: bool = False,
) -> tuple[float, float]:
    """Host seconds of one layer's forward: (the attention block (+ a dense MLP), the expert
    block); backward: twice each. Per-layer graphs of a padded MoE layer (`padded`) capture
    its expert block too: one launch each."""
    if cuda_graphs == "full":
        return 0.0, 0.0
    c = launch_us * 1e-6
    per_input = 0 if recipe is None else (1 if recipe in ("delayed", "mxfp8") else 2)
    expert_kernels = EXPERT_BLOCK_KERNELS + 2 * local_experts * (1 + per_input) if moe else 0
    if cuda_graphs == "partial":
        attention = 1
        if not moe:
            experts = 0
        elif padded:  # static shapes: the whole MoE layer is in the layer's graph
            experts = 1
        else:  # the router and preprocessing graphed
            experts = expert_kernels - 4
    else:
        attention = ATTENTION_KERNELS + 4 * per_input + (0 if moe else MLP_KERNELS + 2 * per_input)
        experts = expert_kernels
    return attention * c, experts * c


HOST_MODES = ("ahead", "sync", "serial")
"""ahead: the host runs ahead of the device; sync: it stops once per layer (the MoE layer's
token counts); serial: it stops at every sub-module boundary (the all-to-all overlap's
schedule)."""


def host_mode(*, moe: bool, cuda_graphs: str, ep_overlap: bool, padded: bool = False) -> str:
    """How a layer's host work meets its device work (HOST_MODES). A dispatch padded to the
    capacity (`padded`) has no token counts to wait for: the host runs ahead."""
    if not moe or cuda_graphs == "full":
        return "ahead"
    if ep_overlap:
        return "serial"
    return "ahead" if padded else "sync"


def layer_wall(
    device: tuple[float, float],
    host: tuple[float, float],
    *,
    mode: str = "ahead",
    launch_s: float = 0.0,
) -> float:
    """A layer's wall time from the (attention, expert) parts of its device and host time:
    the host hidden behind the device (ahead), part by part across the MoE layer's sync
    (sync), and the same with four syncs' round trips instead of one (serial)."""
    if mode == "ahead":
        return max(device[0] + device[1], host[0] + host[1])
    syncs = 4 if mode == "serial" else 1
    return max(device[0], host[0]) + max(device[1], host[1]) + syncs * _SYNC_LAUNCHES * launch_s
