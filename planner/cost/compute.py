"""FLOPs and compute time.

Model FLOPs per step (Megatron `num_floating_point_operations`,
docs/reference/formulas.md#f4a-model-flops-per-step), T = B*s:
    F = T*[6h(f*φ*L_dense + f_e*k*φ*L_moe + f_s*φ*L_moe) + 6(h(q + 2dg) + qh)*L + 6hV]
      + B*s²*6*q*L                               (causal attention, QKᵀ and ·V)
with φ = 3 gated else 2 (the code writes 2φ·h·f per token per forward, ×3 for fwd+bwd).
Hardware FLOPs add recompute: full = one more forward (+F_fwd), selective = the attention core.

Compute time (what a GPU actually multiplies). GEMMs run at
    peak × η_max × n/(n + n_half),   1/n = tp/h + 1/tokens
n is the per-GPU GEMM size that shrinks with TP (the hidden dimension split t ways) and with
few tokens per micro-batch (small b, large CP). The fused attention core runs at
peak × η_attn; non-GEMM kernels (norms, activation functions, rope, residuals, permutes) are
memory bound: c_ew × (stored activation bytes) / HBM bandwidth. Backward = 2× forward for
GEMMs and element-wise kernels, 2.5× for flash attention (it recomputes the probabilities).
FP8 runs the linear layers at the FP8 peak; attention and the output layer stay in BF16.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.memory import op_sac_matmuls, op_sac_on
from planner.cost.shape import ModelShape

__all__ = [
    "model_flops_per_step",
    "hardware_flops_per_step",
    "gemm_efficiency",
    "LayerTimes",
    "layer_times",
    "logits_time",
    "CE_TRAFFIC_BYTES",
    "megatron_flops_2024",
    "narayanan_flops",
    "attention_kernel_share",
    "FLASH2_SHARE",
]

ATTN_BWD_FACTOR = 2.5  # flash-attention backward / forward work (recomputes P: 5 vs 2 GEMMs)

FLASH2_FWD_SHARE = 329.483 / 631.338
"""FlashAttention-2's forward rate over the Hopper-native fused kernel's on H100: PyTorch
SDPA's flash backend 329.5 TFLOPS against cuDNN's 631.3 (FlashAttention-3: 631.8), batch 1,
24 heads, 4,608 tokens, head dim 128 (pytorch/pytorch#142132, torch 2.6 nightly, Tritonbench)."""
FLASH2_BWD_SHARE = 1 / 1.625
"""FlashAttention-2's backward rate over FlashAttention-3's on H100: FA3's backward is
1.5-1.75x FA2's (Shah et al. 2024, arXiv:2407.08608, abstract and Sec. 4.1); the middle."""
FLASH2_SHARE = (1 + ATTN_BWD_FACTOR) / (1 / FLASH2_FWD_SHARE + ATTN_BWD_FACTOR / FLASH2_BWD_SHARE)
"""The share of the fused rate FlashAttention-2 reaches over a forward and its backward (2.5x
the forward's work):  r = 3.5 / (1/r_f + 2.5/r_b) = 3.5 / (1.916 + 4.063) = 0.585."""


def attention_kernel_share(kernel: str, architecture: str | None) -> float:
    """The attention core's rate as a share of the profile's (peak x attention_efficiency,
    which is the GPU generation's own fused kernel: TE / cuDNN, FlashAttention-3 on Hopper,
    FlashAttention-2 on Ampere). `flash2` on Hopper or Blackwell is FlashAttention-2's SM80
    code (no wgmma / TMA): FLASH2_SHARE, measured on Hopper; on Blackwell, where the same code
    runs, no measurement is published and Hopper's share is taken. Ampere (FlashAttention-2
    is its native kernel) and anything else: 1."""
    if kernel == "flash2" and architecture in ("hopper", "blackwell"):
        return FLASH2_SHARE
    return 1.0


def model_flops_per_step(
    shape: ModelShape, *, seq: int, global_batch_size: int, vocab: int | None = None
) -> float:
    """Megatron's num_floating_point_operations (today's: GQA, gated MLP, MoE, causal)."""
    T = global_batch_size * seq
    V = vocab if vocab is not None else shape.V
    per_token = (
        3.0
        * (
            shape.L_dense * shape.mlp_flops
            + shape.L_moe * shape.moe_flops
            + shape.L * shape.attn_proj_flops
        )
        + 6.0 * shape.h * V
    )
    attention = 3.0 * shape.L * shape.attn_core(seq) * T
    return T * per_token + attention


def hardware_flops_per_step(
    shape: ModelShape, *, seq: int, global_batch_size: int, recompute: str, vocab: int | None = None
) -> float:
    """Model FLOPs plus what recompute repeats (full: a forward of every layer; selective:
    the attention core forward)."""
    F = model_flops_per_step(shape, seq=seq, global_batch_size=global_batch_size, vocab=vocab)
    T = global_batch_size * seq
    core_fwd = shape.L * shape.attn_core(seq) * T
    if recompute == "full":
        layers_fwd = T * (
            shape.L_dense * shape.mlp_flops
            + shape.L_moe * shape.moe_flops
            + shape.L * shape.attn_proj_flops
        )
        return F + layers_fwd + core_fwd
    if recompute == "selective":
        return F + core_fwd
    return F


def megatron_flops_2024(
    *,
    B: int,
    s: int,
    L: int,
    h: int,
    a: int,
    g: int,
    q: int,
    f: int,
    V: int,
    k: int = 1,
    gated: bool = False,
) -> float:
    """Megatron-LM r0.8 (July 2024): 12·B·s·L·h²·[(1 + g/a + s/h)(q/h) + (f/h)·k·γ + V/(2Lh)]
    with γ = 1.5 gated else 1 and the attention counted non-causal (calibration.yaml)."""
    gamma = 1.5 if gated else 1.0
    return (
        12.0
        * B
        * s
        * L
        * h
        * h
        * ((1 + g / a + s / h) * (q / h) + (f / h) * k * gamma + V / (2 * L * h))
    )


def narayanan_flops(*, B: int, s: int, L: int, h: int, V: int) -> float:
    """Narayanan et al. 2021 eq. 3: 96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)) (recompute counted)."""
    return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def gemm_efficiency(*, eff_max: float, half_size: float, tp: int, h: int, tokens: float) -> float:
    """η_max · n/(n + n_half) with 1/n = tp/h + 1/tokens."""
    n = 1.0 / (tp / h + 1.0 / max(tokens, 1.0))
    return eff_max * n / (n + half_size)


@dataclass(frozen=True, slots=True)
class LayerTimes:
    """Seconds for one layer and one micro-batch on one GPU."""

    fwd: float
    bwd: float
    recompute: float
    gemm_flops_fwd: float


def layer_times(
    shape: ModelShape,
    *,
    moe: bool,
    tokens: float,
    seq: int,
    tp: int,
    recompute: str,
    gemm_flops_per_s: float,
    attn_flops_per_s: float,
    hbm_bytes_per_s: float,
    ew_factor: float,
    act_bytes_fwd: float,
    overhead_s: float = 0.0,
    modules: tuple[str, ...] = (),
    freed_bytes: float = 0.0,
    expert_flops_per_s: float | None = None,
    copies: float = 0.0,
    extra_bytes_fwd: float = 0.0,
    extra_bytes_bwd: float = 0.0,
    host: tuple[float, float] = (0.0, 0.0),
    host_mode: str = "ahead",
    launch_s: float = 0.0,
    router_s: float = 0.0,
) -> LayerTimes:
    """Forward, backward and recompute time of one layer for one micro-batch of `tokens`
    (= s*b/cp) tokens on one GPU of a TP group of `tp`.

    GEMM FLOPs per token (fwd): (QKV + out projections + MLP or shared experts)/tp at
    `gemm_flops_per_s`, the routed experts' (k*cf copies of each token, spread over the EP
    group) at `expert_flops_per_s` (grouped GEMMs of the experts' own size, moe.py);
    attention core: causal 2*q*s_kv per token, s_kv = s (all keys of the sequence, CP or not)
    but only s/cp query tokens per rank; element-wise: c_ew x stored activation bytes / HBM
    bandwidth, plus `extra_bytes` of traffic that is not stored (MoE permute / unpermute of
    the `copies` rows, FP8 quantization), plus a fixed per-layer overhead, all 2x in
    backward. The host's launch time `host` (attention block, expert block; launch.py; 2x in
    backward) hides behind the device as `host_mode` says (launch.py). An MoE layer's router
    GEMM takes `router_s` forward (moe.router_flops at the BF16 rate), 2x in backward.
    Recompute: full repeats the forward; selective repeats the forward of its modules
    (`--recompute-modules`): core_attn the attention core, mlp the dense MLP's GEMMs, moe the
    routed experts' GEMMs, shared_experts theirs, mla_up_proj the MLA up-projections, and for
    every module the element-wise work that regenerates the `freed_bytes` it dropped;
    torchtitan_op the matmuls whose outputs op SAC does not save (2·in·out per token / tp
    each: wk, wo, w3 of a gated dense layer) and that element-wise work.
    """
    from planner.cost.launch import layer_wall

    routed = shape.moe_flops - shape.shared_flops if moe else 0.0
    x_rate = expert_flops_per_s or gemm_flops_per_s
    # the attention block (+ a dense MLP) and the expert block (routed + shared experts)
    t_front = (
        tokens * (shape.attn_proj_flops + (0.0 if moe else shape.mlp_flops)) / tp / gemm_flops_per_s
    )
    t_shared = tokens * shape.shared_flops / tp / gemm_flops_per_s if moe else 0.0
    t_experts = tokens * shape.capacity_factor * routed / tp / x_rate if moe else 0.0
    t_gemm = t_front + t_shared + t_experts
    attn = tokens * shape.attn_core(seq) / tp
    t_attn = attn / attn_flops_per_s
    ew = ew_factor * act_bytes_fwd / hbm_bytes_per_s + overhead_s
    xf, xb = extra_bytes_fwd / hbm_bytes_per_s, extra_bytes_bwd / hbm_bytes_per_s
    front_f, back_f = t_front + t_attn + ew, t_shared + t_experts
    front_b, back_b = (
        2.0 * t_front + ATTN_BWD_FACTOR * t_attn + 2.0 * ew,
        2.0 * (t_shared + t_experts),
    )
    if moe:
        back_f, back_b = back_f + xf + router_s, back_b + xb + 2.0 * router_s
    else:
        front_f, front_b = front_f + xf, front_b + xb
    fwd = layer_wall((front_f, back_f), host, mode=host_mode, launch_s=launch_s)
    bwd = layer_wall(
        (front_b, back_b), (2.0 * host[0], 2.0 * host[1]), mode=host_mode, launch_s=launch_s
    )
    if recompute == "full":
        rec = fwd
    elif recompute == "selective" and op_sac_on(shape, modules, moe=moe):
        # op SAC reruns the matmuls whose outputs it did not save, and the element-wise work
        # that regenerates the freed bytes; flash attention's output is saved (no rerun)
        t = sum(2.0 * i * o for i, o, saved, _ in op_sac_matmuls(shape) if not saved)
        rec = tokens * t / tp / gemm_flops_per_s + ew_factor * freed_bytes / hbm_bytes_per_s
    elif recompute == "selective":
        mods = set(modules or ("core_attn",))
        if "torchtitan_op" in mods:  # MoE and MLA layers: as Megatron's default
            mods = {"core_attn"}
        t = 0.0
        if "mlp" in mods and not moe:
            t += tokens * shape.mlp_flops / tp / gemm_flops_per_s
        if "moe" in mods and moe:
            t += t_experts
        if "shared_experts" in mods and moe:
            t += tokens * shape.shared_flops / tp / gemm_flops_per_s
        if "mla_up_proj" in mods:
            t += tokens * shape.mla_up_flops / tp / gemm_flops_per_s
        rec = (
            (t_attn if "core_attn" in mods else 0.0) + t + ew_factor * freed_bytes / hbm_bytes_per_s
        )
    else:
        rec = 0.0
    return LayerTimes(fwd, bwd, rec, t_gemm * gemm_flops_per_s)


CE_TRAFFIC_BYTES = {"vocab_parallel": 24.0, "pytorch_fp32": 40.0}
"""HBM bytes per token and vocabulary entry the loss moves, fwd + bwd. vocab_parallel: read
and write the fp32 logits about three times each way (2 x 3 x 4). pytorch_fp32: the bf16->fp32
cast (2 + 4), log_softmax (4 + 4), its backward with nll_loss's gradient (4 zeros + 4 + 4 read,
4 written) and the cast back (4 + 2): 40."""


def logits_time(
    *,
    tokens: float,
    h: int,
    vocab: int,
    tp: int,
    flops_per_s: float,
    hbm_bytes_per_s: float,
    cross_entropy: str = "vocab_parallel",
    loss_parallel: bool = True,
) -> float:
    """Output layer fwd + bwd (3 × 2·h·V per token / tp) and the cross-entropy's memory
    traffic (CE_TRAFFIC_BYTES × V/tp per token; × V without loss parallelism)."""
    gemm = 3.0 * 2.0 * h * vocab * tokens / tp / flops_per_s
    share = vocab / tp if loss_parallel else vocab
    ce = CE_TRAFFIC_BYTES[cross_entropy] * share * tokens / hbm_bytes_per_s
    return gemm + ce
