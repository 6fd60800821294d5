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
attention block's 4, the experts' 2 per expert; current scaling adds its amax pass), launched
from C++ inside the module's call at CPP_LAUNCH_US each, not at an op's launch_overhead_us;
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
Multi-latent attention (`attention_kernels`) issues more kernels than a fused QKV projection:
Megatron-Core's MLASelfAttention runs linear_q_proj (or linear_q_down_proj, q_layernorm and
linear_q_up_proj with a q_lora_rank), linear_kv_down_proj, kv_layernorm and linear_kv_up_proj
where GQA runs one linear_qkv, RoPE on the query and on the shared rope key apart
(fused_apply_mla_rope_for_q / _for_kv), and under sequence parallelism an all-gather of that
rope key (gather_from_sequence_parallel_region; megatron/core/transformer/
multi_latent_attention.py). Shared experts (`SHARED_EXPERT_KERNELS`) are Megatron's MLP
module run beside the routed experts (megatron/core/transformer/moe/shared_experts.py
SharedExpertMLP): a dense MLP's kernels in the expert block, outside the router and
preprocessing graph scopes.
"""

from __future__ import annotations

__all__ = [
    "ATTENTION_KERNELS",
    "MLP_KERNELS",
    "EXPERT_BLOCK_KERNELS",
    "SHARED_EXPERT_KERNELS",
    "MLA_EXTRA_KERNELS",
    "attention_kernels",
    "gemm_inputs",
    "CPP_LAUNCH_US",
    "HOST_MODES",
    "host_parts",
    "host_mode",
    "layer_wall",
]

ATTENTION_KERNELS = 20
MLP_KERNELS = 6
EXPERT_BLOCK_KERNELS = 30
SHARED_EXPERT_KERNELS = MLP_KERNELS
"""Shared experts: Megatron's SharedExpertMLP is its MLP module (fc1, the activation, fc2 and
their collectives), the dense MLP's count; 2 GEMM inputs quantized under FP8."""
MLA_EXTRA_KERNELS = 4
"""MLA beyond a fused-QKV attention block, without a query down-projection: linear_q_proj,
linear_kv_down_proj and linear_kv_up_proj are 2 GEMMs more than one linear_qkv, plus
kv_layernorm and the second RoPE kernel (query and rope key apart): 4 (2 GEMM inputs more to
quantize under FP8). A q_lora_rank adds linear_q_down_proj and q_layernorm (2, 1 GEMM input);
sequence parallelism the rope key's all-gather (1)."""
CPP_LAUNCH_US = 5.0
"""Host microseconds of a kernel launched from C++ inside one op (no Python dispatch): the CUDA
driver and runtime calls of one launch, 4-6 us measured (a chain of short kernels launched
back to back, RTX 5070 Ti, CUDA 13: susun-blog.com 'pegainfer (3): From Launch Overhead to CUDA
Graph', code github.com/xiaguan/cuda-kernel-launch-lab); the middle, 5. Transformer Engine
quantizes a GEMM's FP8 inputs inside the module's C++ call (`tex.quantize`; current scaling:
the amax, scale and cast kernels one after the other) and a grouped GEMM's per expert in one
`tex.split_quantize` call (transformer_engine/pytorch/module/grouped_linear.py), so those
kernels cost a launch each, not an op's dispatch."""
_SYNC_LAUNCHES = 2


def attention_kernels(*, mla: bool = False, q_lora: bool = False, tp: int = 1) -> int:
    """Kernels an attention block's forward issues as ops (each at the launch overhead):
        GQA:  ATTENTION_KERNELS
        MLA:  + MLA_EXTRA_KERNELS  [+ 2 with q_lora]  [+ 1 if tp > 1]
    e.g. MLA, TP 2, no q_lora (Moonlight-16B-A3B): 20 + 4 + 1 = 25; DeepSeek-V3's (q_lora,
    TP 1): 20 + 4 + 2 = 26."""
    n = ATTENTION_KERNELS
    if mla:
        n += MLA_EXTRA_KERNELS + (2 if q_lora else 0) + (1 if tp > 1 else 0)
    return n


def gemm_inputs(*, mla: bool = False, q_lora: bool = False, mlp: bool = False) -> int:
    """FP8 quantization passes of an attention block's forward (+ a dense MLP's), each
    `per_input` kernels: the attention block's 4, MLA's 2 more GEMMs 1 each (+1 with q_lora),
    a dense MLP's 2."""
    return 4 + ((2 + (1 if q_lora else 0)) if mla else 0) + (2 if mlp else 0)


def host_parts(
    *,
    moe: bool,
    cuda_graphs: str,
    launch_us: float,
    local_experts: int = 0,
    recipe: str | None = None,
    padded: bool = False,
    mla: bool = False,
    q_lora: bool = False,
    tp: int = 1,
    shared: bool = False,
) -> tuple[float, float]:
    """Host seconds of one layer's forward: (the attention block (+ a dense MLP), the expert
    block); backward: twice each. Per-layer graphs of a padded MoE layer (`padded`) capture
    its expert block too: one launch each. Op launches at `launch_us`: the attention block's
    `attention_kernels` (MLA: `mla`, `q_lora`, `tp`; + MLP_KERNELS for a dense MLP), the
    expert block's EXPERT_BLOCK_KERNELS + 2 GEMMs per local expert (+ SHARED_EXPERT_KERNELS
    with `shared` experts); FP8 quantization at CPP_LAUNCH_US: `per_input` kernels per GEMM
    input, `gemm_inputs` of them in the attention block, 2 per local expert (+ 2 for the shared
    experts) in the expert block:
        attention = A·c + per_input·I·q
        experts   = (30 + 2·E_l + 6·s)·c + per_input·(2·E_l + 2·s)·q
    (c = launch_us, q = CPP_LAUNCH_US; partial graphs: the attention block 1 launch, the expert
    block 4 op launches fewer, a padded one 1)."""
    if cuda_graphs == "full":
        return 0.0, 0.0
    c, q = launch_us * 1e-6, CPP_LAUNCH_US * 1e-6
    per_input = 0 if recipe is None else (1 if recipe in ("delayed", "mxfp8") else 2)
    # (kernels at the op's launch cost, quantization kernels launched from C++)
    expert = (
        (EXPERT_BLOCK_KERNELS + 2 * local_experts, 2 * local_experts * per_input) if moe else (0, 0)
    )
    if moe and shared:
        expert = (expert[0] + SHARED_EXPERT_KERNELS, expert[1] + 2 * per_input)
    if cuda_graphs == "partial":
        attention = (1, 0)
        if not moe:
            expert = (0, 0)
        elif padded:  # static shapes: the whole MoE layer is in the layer's graph
            expert = (1, 0)
        else:  # the router and preprocessing graphed
            expert = (expert[0] - 4, expert[1])
    else:
        attention = (
            attention_kernels(mla=mla, q_lora=q_lora, tp=tp) + (0 if moe else MLP_KERNELS),
            per_input * gemm_inputs(mla=mla, q_lora=q_lora, mlp=not moe),
        )
    return attention[0] * c + attention[1] * q, expert[0] * c + expert[1] * q


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
