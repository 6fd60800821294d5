"""Per-GPU memory on the most loaded rank: model states, activations, overheads.

Model states (docs/reference/formulas.md#f1-model-states). Megatron accounting (default;
docs/reference/formulas.md#f1b-megatron-lm-accounting), bytes per parameter:
bf16/fp8 weights 2, fp32 main grads 4, fp32 master + Adam 12 = 18; with the distributed
optimizer (zero 1) the 12 shard over d ranks: 6 + 12/d; fp16 keeps fp16 grads beside fp32 main
grads: 20 -> 4 + 16/d (Megatron distributed-optimizer docs). ZeRO-2 (Megatron FSDP
`optim_grads`) shards the grads too, ZeRO-3 (`optim_grads_params`) the weights as well.
DeepSpeed accounting (ZeRO paper Fig. 1): 2 + 2 + 12, sharded per stage; ZeRO-3 adds
DeepSpeed's own `4 * largest layer` for the gathered layer. Dense states shard over
d = dp*cp (what Megatron's code does: its formula says dp, see `tests/test_cost_memory.py`);
expert states over EDP = world/(etp*ep*pp); expert weights over ep*etp.

Activations (Korthikanti et al. 2022 Table 2, re-derived in `layer_activation_bytes`).
Pipeline: the first rank holds min(m, p) micro-batches (1F1B) or vp+p-1 chunks of L/(pv)
layers (interleaved, = L*(1 + (p-1)/(pv))); the last rank holds 1 (1F1B) or (v-1)p+1 chunks,
plus fp32 logits. CP divides the sequence on every term.

Overheads: CUDA context + NCCL buffers (profile), allocator fragmentation as a fraction of
the tensor bytes, and the TP/SP all-gather buffer of one layer's input.
FP8 weight copies and Transformer Engine's transposed copies are counted with the weights
(`state_dtypes`). Low-precision activation caches (Megatron-Core's FP8 SwiGLU input store,
DeepSeek-V3's E5M6 attention output): `layer_activation_bytes`. Left out: dropout masks (dropout 0, as in every recipe we model),
CUDA-graph pools, optimizer CPU offload, checkpoint/IO buffers.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from planner.cost.shape import ModelShape

__all__ = [
    "MemoryBreakdown",
    "StateDtypes",
    "state_dtypes",
    "GEMM_INPUT_BYTES",
    "E5M6_STORE_BYTES",
    "FP8_INPUT_STORE_BYTES",
    "DEEPSEEK_FP8_STORE_BYTES",
    "state_bytes_per_param",
    "megatron_weight_optimizer_bytes",
    "layer_activation_bytes",
    "routed_activation_bytes",
    "korthikanti_layer_bytes",
    "stage_params",
    "state_bytes",
    "in_flight_layers",
    "LOSS_PEAK_BYTES",
    "loss_bytes",
    "mtp_extra_bytes",
    "recompute_working_set",
    "op_sac_matmuls",
    "op_sac_on",
    "op_sac_bytes",
]


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float
    capacity: float
    stage: str = "first"

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other

    @property
    def fraction(self) -> float:
        return self.total / self.capacity

    def as_dict(self) -> dict[str, int | str]:
        return {
            "weights_bytes": round(self.weights),
            "gradients_bytes": round(self.gradients),
            "optimizer_bytes": round(self.optimizer),
            "activations_bytes": round(self.activations),
            "other_bytes": round(self.other),
            "total_bytes": round(self.total),
            "capacity_bytes": round(self.capacity),
            "stage": self.stage,
        }


@dataclass(frozen=True, slots=True)
class StateDtypes:
    """Bytes per parameter of each model-state tensor under a recipe (`state_dtypes`)."""

    weight: float = 2.0  # a bf16/fp16 parameter (embedding, output layer, norms, router)
    fp8_weight: float = 2.0  # a linear layer's weight, with Transformer Engine's FP8 caches
    grad: float = 4.0  # the main gradient buffer
    optimizer: float = 12.0  # fp32 master copy + Adam's two moments (+ fp16's fp32 grads)


def state_dtypes(
    *,
    accounting: str = "megatron",
    precision: str = "bf16",
    recipe: str | None = None,
    fp8_param_gather: bool = False,
    grad_reduce_in_fp32: bool = True,
    exp_avg_dtype: str = "fp32",
    exp_avg_sq_dtype: str = "fp32",
    architecture: str | None = None,
) -> StateDtypes:
    """Bytes per parameter of weights, gradients and optimizer states.

    megatron: bf16 weights 2, fp32 main grads 4 (`--grad-reduce-in-bf16`: 2), optimizer fp32
    master 4 + Adam m and v 4 each (precision-aware optimizer `--exp-avg(-sq)-dtype bf16`: 2
    each): 18 B/param by default (Megatron's distributed-optimizer docs). fp16: fp16 grads 2
    beside fp32 main grads 4 that live with the optimizer. deepspeed: 2 + 2 + 12 (ZeRO Fig. 1).
    FP8 linear weights (Transformer Engine): the weight in the GEMM layouts it needs, each 1
    byte (+ scales: GEMM_INPUT_BYTES), cached across micro-batches: the row-wise data and its
    transpose on Hopper and older (FP8 GEMMs there are TN-only: TE's "Handling transposes"),
    the row-wise data alone for per-tensor scaling (delayed, tensorwise) on Blackwell (TE's
    `non_tn_fp8_gemm_supported()`: compute capability >= 10), row- and column-wise scaled
    copies for MXFP8 and blockwise (their scales run along one axis). With `fp8_param_gather`
    the parameter itself is that FP8 tensor, without it a bf16 parameter (2) holds beside it.
    """
    moments = (2.0 if exp_avg_dtype == "bf16" else 4.0) + (
        2.0 if exp_avg_sq_dtype == "bf16" else 4.0
    )
    fp8w = 2.0
    if recipe is not None:
        one_layout = architecture == "blackwell" and recipe in ("delayed", "tensorwise")
        quantized = (1.0 if one_layout else 2.0) * GEMM_INPUT_BYTES[recipe]
        fp8w = quantized if fp8_param_gather else 2.0 + quantized
    if accounting == "deepspeed":
        return StateDtypes(2.0, fp8w, 2.0, 4.0 + moments)
    if precision == "fp16":
        return StateDtypes(2.0, fp8w, 2.0, 4.0 + moments + 4.0)
    return StateDtypes(2.0, fp8w, 4.0 if grad_reduce_in_fp32 else 2.0, 4.0 + moments)


def _shard(zero: int, shard: int, w: float, g: float, o: float) -> tuple[float, float, float]:
    """ZeRO 0 shards nothing, 1 the optimizer, 2 + gradients, 3 + weights, over `shard`."""
    d = max(1, shard)
    if zero == 0:
        return w, g, o
    if zero == 1:
        return w, g, o / d
    if zero == 2:
        return w, g / d, o / d
    return w / d, g / d, o / d


def state_bytes_per_param(
    *,
    zero: int,
    shard: int,
    accounting: str = "megatron",
    precision: str = "bf16",
    dtypes: StateDtypes | None = None,
) -> tuple[float, float, float]:
    """(weight, gradient, optimizer) bytes per (non-FP8) parameter on one rank: the
    `state_dtypes` bytes, sharded by ZeRO stage over `shard` ranks (18 B/param, or
    6 + 12/d with the distributed optimizer, by default)."""
    dt = dtypes or state_dtypes(accounting=accounting, precision=precision)
    return _shard(zero, shard, dt.weight, dt.grad, dt.optimizer)


def megatron_weight_optimizer_bytes(
    *, params_on_rank: float, dp: int, distributed_optimizer: bool = True
) -> float:
    """Megatron's `compute_weight_and_optimizer_memory`: params * (18, or 6 + 12/dp)."""
    per = 6 + 12 / dp if distributed_optimizer else 18
    return params_on_rank * per


def korthikanti_layer_bytes(
    *, s: int, b: int, h: int, a: int, t: int, sp: bool, recompute: str
) -> float:
    """Korthikanti et al. 2022 Table 2, bytes per layer (MHA, 4h GELU, dropout, no flash)."""
    sbh = s * b * h
    score = 5 * a * s / (h * t)
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    if sp:
        return sbh * (34 / t + (0 if recompute == "selective" else score))
    return sbh * (10 + 24 / t + (0 if recompute == "selective" else score))


E5M6_STORE_BYTES = 12 / 8 + 4 / 128
"""Bytes per element of DeepSeek-V3's attention-output cache (arXiv:2412.19437 sec. 3.3.3):
a customized E5M6 format (1 sign + 5 exponent + 6 mantissa bits = 12 bits) in 1x128 tiles,
each with a power-of-two scale, counted as a fp32 scale per 128 elements as the blockwise
recipe keeps them (GEMM_INPUT_BYTES)."""

FP8_INPUT_STORE_BYTES = 1.0
"""Bytes per element of the activation input Megatron-Core's `activation_func_fp8_input_store`
(TransformerConfig) keeps: `bias_swiglu_impl` saves `input.to(torch.float8_e4m3fn)` (no scale) for the backward
and casts it back before the SwiGLU gradient (megatron/core/fusions/fused_bias_swiglu.py)."""

DEEPSEEK_FP8_STORE_BYTES = 1.0 + 4 / 128
"""Bytes per element of DeepSeek-V3's FP8 SwiGLU-input cache: "stored in FP8 with our
fine-grained quantization method" (arXiv:2412.19437 sec. 3.3.3), 1x128 tiles with a scale
each, counted as the blockwise recipe's fp32 scale per 128 elements (GEMM_INPUT_BYTES)."""

GEMM_INPUT_BYTES = {
    None: 2.0,
    "delayed": 1.0,
    "tensorwise": 1.0,
    "blockwise": 1.0 + 4 / 128,
    "mxfp8": 1.0 + 1 / 32,
}
"""Bytes per element of a saved GEMM input: bf16 2; with an FP8 recipe Transformer Engine
saves the quantized copy it already made for the GEMM (1 byte, plus a fp32 scale per 128
elements for blockwise and an E8M0 scale per 32 for MXFP8)."""


def layer_activation_bytes(
    shape: ModelShape,
    *,
    tokens: float,
    seq: int,
    t: int,
    sp: bool,
    recompute: str,
    flash: bool,
    moe: bool,
    etp: int = 1,
    modules: tuple[str, ...] = (),
    recipe: str | None = None,
    fp8_act_input: bool = False,
    cache: str = "te",
) -> float:
    """Stored activation bytes of one layer for `tokens` = s*b/cp tokens.

    Re-derivation of Korthikanti's 34*s*b*h for flash attention, GQA, gated MLPs, MoE and FP8
    (Transformer Engine + Megatron-Core, dropout 0), per token (h hidden, q = a*d, g KV heads,
    f MLP width, x = GEMM_INPUT_BYTES: 2 in bf16, ~1 with an FP8 recipe):
      outside the TP region (÷t with SP): the two norm inputs (the residual stream) 4h and
        the two norm outputs the next GEMMs keep, 2h each in bf16; with FP8 the GEMM keeps
        its own x*h copy instead, except the MoE router (a bf16 GEMM), which keeps 2h; a
        sandwich layer (Gemma 3) normalizes the attention and MLP outputs again before the
        residual adds, and those two norms keep their inputs, 4h more (Megatron-Bridge's
        TERowParallelLinearLayerNorm: a TENorm after the row-parallel GEMM's reduce-scatter)
      attention (÷t): Q, K, V 2(q + 2gd) (MLA: the latents 2(q_lora + kv_lora + rope),
        the normed latents the up-projections keep, x(q_lora + kv_lora), and the
        up-projected Q, K, V);
        the output 2a*d (+ x*a*d for the FP8 projection's own copy); softmax stats 4a
        (fp32), or without flash the scores, softmax and dropout 5*a*s instead
      dense MLP (÷t): fc1 output 2f (gelu) or 4f (gate and up), activation output x*f
      MoE: router logits and probabilities 8E (fp32, ÷t with SP); per routed copy (k*cf per
        token, ÷t with SP, all-gathered over etp) the expert fc1 input x*h*etp, its output
        4f_e (or 2f_e) and the activation output x*f_e; the router probabilities are
        applied inside the activation, so the experts' outputs are not kept. Shared experts
        like a dense MLP.
    Low-precision caching (DeepSeek-V3 report, arXiv:2412.19437 sec. 3.3.3):
      fp8_act_input (Megatron-Core `activation_func_fp8_input_store`): a gated MLP's
        activation input, the fc1 output 2f (2f_e, 2f_s), is kept in FP8_INPUT_STORE_BYTES = 1
        an element instead of 2: 2f instead of 4f, in the dense MLP, the shared and the routed
        experts. Under `moe_act` (cache te) the routed experts' activation runs inside
        Megatron's CheckpointWithoutOutput, without autograd: the checkpoint saves its input,
        the fc1 output, as fc1 wrote it (bf16 4f_e), and the FP8 store does nothing there.
      cache deepseek (DeepSeek's own framework): the attention output is kept once, in
        E5M6_STORE_BYTES = 1.5 + 4/128, for both the attention backward and the projection's
        Wgrad, instead of 2 (+ x with an FP8 recipe); with fp8_act_input the SwiGLU input is
        kept "in FP8 with our fine-grained quantization method", DEEPSEEK_FP8_STORE_BYTES =
        1 + 4/128 an element (1x128 tiles, a fp32 scale each), and the `moe_act` recompute
        runs from it (DeepSeek-V3 recomputes the output): 2(1 + 4/128)f_e a routed copy. With
        `layernorm` DeepSeek recomputes "all RMSNorm operations ... eliminating the need to
        persistently store their output activations" (sec. 3.2.3), and caches activations
        "in FP8 format for the backward pass of the Linear operator" (sec. 3.3.3): the FP8
        input a Linear keeps after a norm is that norm's output, so it is not kept but
        regenerated in the backward (the norm rerun from the kept residual, its output
        quantized again), in every layer: the q/kv down-projection's (QKV's) x*h, MLA's
        up-projections' x(q_lora + kv_lora), the router's 2h, the shared expert's (a dense
        fc1's) x*h. The routed copies' fc1 input x*h*etp
        stays: it is the dispatched copy, which only a second dispatch could regenerate (the
        report recomputes none). Transformer Engine (cache te) keeps its FP8 copies.
    MHA + 4h GELU in bf16 + the two 1-byte dropout masks gives back Korthikanti's 34h (+5as).
    Selective recompute frees what its modules (`--recompute-modules`) would regenerate:
      core_attn the softmax stats (and the scores without flash); layernorm the bf16 outputs
      of the norms that are modules of their own (MLA's input norm, an MoE layer's pre-MLP
      norm; the others are fused into their GEMMs; cache deepseek: every norm's output and
      the FP8 copies of it, above); mla_up_proj the up-projected Q, K, V and the normed
      latents (Megatron-Core's CheckpointWithoutOutput reruns the up-projections without
      autograd); mlp
      the dense MLP's fc1 input, fc1 and activation outputs; moe_act the experts' activation
      outputs; moe every routed copy, the router state and the shared experts; shared_experts
      the shared experts' MLP. torchtitan_op (torchtitan's op-level SAC) keeps what
      `op_sac_bytes` lists on a dense layer, and counts an MoE or MLA layer as core_attn.
    Full recompute keeps only the layer input 2h (÷t with SP).
    """
    sp_div = t if sp else 1
    h = shape.h
    if recompute == "full":
        return tokens * 2.0 * h / sp_div
    mods = set(modules or ("core_attn",)) if recompute == "selective" else set()
    if op_sac_on(shape, mods, moe=moe):
        return tokens * op_sac_bytes(shape, t=t, sp=sp)
    if "torchtitan_op" in mods:
        mods = {"core_attn"}  # MoE and MLA layers: as Megatron's default (an upper bound)
    x = GEMM_INPUT_BYTES[recipe]
    fp8 = recipe is not None
    fc1_w = _fc1_bytes(shape, fp8_act_input, cache)
    # `layernorm` recomputes only the norms that are modules of their own (Megatron skips the
    # IdentityOp ones): with Transformer Engine's layer spec the input norm is fused into
    # linear_qkv and a dense layer's pre-MLP norm into fc1 (their GEMMs keep the norm output
    # as their input); MLA's input norm and an MoE layer's pre-MLP norm are separate TENorms
    norms = "layernorm" in mods
    deepseek = cache == "deepseek"
    # DeepSeek's framework reruns every RMSNorm and regenerates the FP8 inputs after them
    regen = norms and deepseek
    sep_in = norms and shape.mla
    ln_gemm = 0.0 if regen else (x * h if fp8 else (0.0 if sep_in else 2.0 * h))
    shared_kept = shape.f_s and not ({"moe", "shared_experts"} & mods)
    if moe:
        ln_mlp = 0.0 if norms else 2.0 * h  # router input, bf16
        if fp8 and shared_kept and not regen:
            ln_mlp += x * h  # shared fc1's copy
    else:
        # `mlp` checkpoints the MLP from the residual: the fused norm's output goes too
        ln_mlp = 0.0 if "mlp" in mods or regen else (x * h if fp8 else 2.0 * h)
    outside = 4.0 * h + ln_gemm + ln_mlp + (4.0 * h if shape.sandwich else 0.0)
    up_proj = shape.mla and "mla_up_proj" in mods
    qkv = 0.0 if up_proj else shape.act_qkv
    # the normed latents the up-projections keep (x each: Transformer Engine's LayerNormLinear
    # keeps its own FP8 copy of ln_out); gone with mla_up_proj (the up-projections rerun
    # without autograd inside the checkpoint) and with DeepSeek's norm regeneration
    latents = 0.0 if up_proj or regen else (x if fp8 else 2.0) * shape.latent_norm
    out_b = E5M6_STORE_BYTES if deepseek else 2.0 + (x if fp8 else 0.0)
    attn = shape.act_latent + latents + qkv + out_b * shape.attn_out
    if "core_attn" not in mods:
        attn += 4.0 * shape.a if flash else 5.0 * shape.a * seq
    per_token = outside / sp_div + attn / t
    if moe:
        if "moe" not in mods:
            per_token += 8.0 * shape.E / sp_div
            routed = shape.k * shape.capacity_factor / sp_div
            act = 0.0 if "moe_act" in mods else x * shape.f_e
            # a te moe_act checkpoint saves the fc1 output as fc1 wrote it (bf16)
            fc1_e = _fc1_bytes(shape, False) if "moe_act" in mods and not deepseek else fc1_w
            per_token += routed * (x * h * etp + fc1_e * shape.f_e + act)
        if shared_kept:  # `moe` checkpoints MoELayer, whose forward runs the shared expert
            per_token += (fc1_w + x) * shape.f_s / t
    elif "mlp" not in mods:
        per_token += (fc1_w + x) * shape.f / t
    return tokens * per_token


def _fc1_bytes(shape: ModelShape, fp8_act_input: bool, cache: str = "te") -> float:
    """Bytes per MLP-width element of the kept fc1 output: gated 2 tensors, gelu 1, each 2
    bytes in bf16; a gated one 1 byte each with the FP8 input store (a gelu MLP keeps
    Megatron's fused bias-gelu input in bf16: the flag reaches the SwiGLU only), 1 + 4/128
    with DeepSeek's fine-grained one (cache deepseek)."""
    if not shape.gated:
        return 2.0
    if not fp8_act_input:
        return 4.0
    return 2.0 * (DEEPSEEK_FP8_STORE_BYTES if cache == "deepseek" else FP8_INPUT_STORE_BYTES)


def op_sac_matmuls(shape: ModelShape) -> list[tuple[int, int, bool, bool]]:
    """torchtitan's op-level selective activation checkpointing (`selective_ac_option = "op"`,
    torchtitan/distributed/activation_checkpoint.py) counts the matmuls of each checkpointed
    layer in order and saves the output of the odd ones (1st, 3rd, ...); the even ones are
    recomputed. Per matmul (in width, out width, saved, column-parallel): wq, wk, wv, wo,
    then the MLP's w1, w3 (gated), w2, of a dense GQA/MHA layer. MoE and MLA layers are
    counted as Megatron's selective default instead (it keeps more: an upper bound)."""
    mms = [
        (shape.h, shape.q, True),
        (shape.h, shape.g * shape.d, True),
        (shape.h, shape.g * shape.d, True),
        (shape.q, shape.h, False),
    ]
    mms += (
        [(shape.h, shape.f, True), (shape.h, shape.f, True)]
        if shape.gated
        else [(shape.h, shape.f, True)]
    ) + [(shape.f, shape.h, False)]
    return [(i, o, n % 2 == 0, col) for n, (i, o, col) in enumerate(mms)]


def op_sac_on(shape: ModelShape, modules: Collection[str], *, moe: bool) -> bool:
    """torchtitan's op SAC is modelled on this layer: `torchtitan_op` among the recompute
    modules and a dense GQA/MHA layer (MoE and MLA layers count as core_attn)."""
    return "torchtitan_op" in modules and not (moe or shape.mla)


def op_sac_bytes(shape: ModelShape, *, t: int, sp: bool) -> float:
    """Bytes a token keeps in one layer under torchtitan's op SAC (bf16): the layer input 2h
    (÷t with SP), the saved matmul outputs (`op_sac_matmuls`; 2·out, ÷t when
    column-parallel; a row-parallel output is the local partial sum of all h, and its
    reduce-scatter result 2h/t is saved too), flash attention's output 2q and log-sum-exp
    4a (÷t). FP8 (torchao) matmuls are counted with bf16 outputs as well."""
    sp_div = t if sp else 1
    kept = 2.0 * shape.h / sp_div + (2.0 * shape.attn_out + 4.0 * shape.a) / t
    for _, out, saved, col in op_sac_matmuls(shape):
        if saved:
            kept += 2.0 * out / t if col else 2.0 * out + (2.0 * out / t if t > 1 else 0.0)
    return kept


def routed_activation_bytes(
    shape: ModelShape,
    *,
    tokens: float,
    t: int,
    sp: bool,
    etp: int = 1,
    recipe: str | None = None,
    fp8_act_input: bool = False,
    cache: str = "te",
) -> float:
    """The routed copies' share of `layer_activation_bytes` (moe, no recompute): per token a
    rank holds, k*cf copies of x*h*etp + (fc1 width + x)*f_e."""
    if not shape.E:
        return 0.0
    x = GEMM_INPUT_BYTES[recipe]
    fc1_w = _fc1_bytes(shape, fp8_act_input, cache)
    routed = shape.k * shape.capacity_factor / (t if sp else 1)
    return tokens * routed * (x * shape.h * etp + (fc1_w + x) * shape.f_e)


LOSS_PEAK_BYTES = {"vocab_parallel": 4.0, "pytorch_fp32": 12.0}
"""Bytes per token and vocabulary entry (of a rank's vocabulary share) the loss holds at its
peak. vocab_parallel, Megatron-LM's `_VocabParallelCrossEntropy` (fused or not): one fp32 copy
of the logits (4 B); max-subtraction, exp, softmax and the gradient are written in place.
pytorch_fp32, torchtitan's `cross_entropy(pred.float(), labels)` in eager mode: the fp32 copy
(4 B) is freed once log_softmax has written its fp32 output (4 B, saved for backward); at the
start of backward that saved output, nll_loss's fp32 gradient (4 B) and log_softmax's fp32
input gradient (4 B) are alive together: 12 B."""


def loss_bytes(
    *,
    tokens: float,
    vocab: int,
    h: int,
    t: int,
    sp: bool,
    cross_entropy: str = "vocab_parallel",
    loss_parallel: bool = True,
) -> float:
    """The last stage's loss at its peak: LOSS_PEAK_BYTES[cross_entropy] * tokens * V/t (V
    over all t ranks without loss parallelism) plus the final norm's bf16 output
    2 * tokens * h (/t with sequence parallelism)."""
    share = vocab / t if loss_parallel else vocab
    return LOSS_PEAK_BYTES[cross_entropy] * tokens * share + 2.0 * tokens * h / (t if sp else 1)


def mtp_extra_bytes(
    *, tokens: float, h: int, t: int, sp: bool, recipe: str | None, recompute: str
) -> float:
    """Bytes an MTP layer keeps for one micro-batch beside its transformer layer and its loss
    (Megatron-Core `MultiTokenPredictionLayer`; DeepSeek-V3 sec. 2.2), per token:
        enorm's input, the embedding of the shifted tokens         2h
        eh_proj's input, the concatenation of the enorm and hnorm
          outputs (a TE column-parallel Linear: its FP8 copy)     x*2h   (2 * 2h in bf16)
        final_layernorm's input, the layer's output                 2h
    all ÷t with sequence parallelism (the concatenation is of the sequence-parallel
    shards; eh_proj all-gathers its input again in the backward). hnorm's input is the main
    model's output, kept by the main final norm; the norm outputs are consumed by the
    concatenation, not saved; the final norm's output is the output layer's input, counted
    with the MTP layer's loss (loss_bytes). Full recompute checkpoints the whole of
    `_proj_and_transformer_layer`, which keeps only its inputs: the embedding, which the
    layer's kept 2h stands for, so nothing is added."""
    if recompute == "full":
        return 0.0
    x = GEMM_INPUT_BYTES[recipe]
    return tokens * (2.0 * h + x * 2.0 * h + 2.0 * h) / (t if sp else 1)


def recompute_working_set(
    shape: ModelShape,
    *,
    moe: bool,
    modules: tuple[str, ...],
    whole: float | None = None,
    **kw: Any,
) -> float:
    """Bytes a selective recompute regenerates at once in a layer's backward: the most any
    one of its modules regenerates, layer_activation_bytes without recompute (`whole`, when
    the caller has it) less with that module alone (each checkpointed module reruns when the
    backward reaches it and its outputs are freed by its own backward, before the next
    module's rerun). On a rank without the loss the first backward reruns it on top of
    everything the rank holds; `kw` are layer_activation_bytes' keywords."""
    if whole is None:
        whole = layer_activation_bytes(shape, moe=moe, recompute="none", **kw)
    return max(
        whole - layer_activation_bytes(shape, moe=moe, recompute="selective", modules=(m,), **kw)
        for m in modules or ("core_attn",)
    )


def stage_params(
    shape: ModelShape,
    *,
    layers: float,
    moe_layers: float,
    t: int,
    with_embedding: bool,
    with_output: bool,
    vocab: int,
    mtp: int = 0,
) -> tuple[float, float, float]:
    """(dense params, of which linear-layer weights, expert params) on one rank of a stage,
    before ep sharding of experts. Linear weights are what FP8 recipes quantize: attention
    and MLP / shared-expert projections (not the embedding, output layer, norms or router).
    `mtp` MTP layers (on the last stage) each add a transformer layer (MoE in an MoE model)
    and their enorm, hnorm, final norm and 2h x h projection (`ModelShape.mtp_extra`); on a
    last stage without the embedding (pp > 1) they also build their own copy of an untied
    word embedding (Megatron's GPTModel: `pre_process or mtp_process`); with
    `mtp_own_embedding` (Qwen3.5's dedicated MTP embeddings) each MTP layer adds one of its
    own, vocab x h / t."""
    dense_layers = layers - moe_layers
    linear = dense_layers * shape.dense_tp / t + moe_layers * shape.moe_tp / t
    dense = linear + dense_layers * shape.dense_rep + moe_layers * shape.moe_rep
    experts = moe_layers * shape.moe_experts
    if mtp:
        lin_m = (shape.moe_tp if shape.E else shape.dense_tp) / t + 2.0 * shape.h * shape.h / t
        linear += mtp * lin_m
        dense += mtp * (lin_m + (shape.moe_rep if shape.E else shape.dense_rep) + 3.0 * shape.h)
        experts += mtp * shape.moe_experts if shape.E else 0.0
        if with_output and not with_embedding and not shape.tied:
            dense += vocab * shape.h / t
        if shape.mtp_own_embedding:
            dense += mtp * vocab * shape.h / t
    if with_embedding:
        dense += (vocab * shape.h + shape.emb_extra) / t
    if with_output:
        dense += shape.out_norm
        if not shape.tied or not with_embedding:
            dense += vocab * shape.h / t  # untied output layer, or the tied copy on the last stage
    return dense, linear, experts


def state_bytes(
    *,
    dense_params: float,
    expert_params: float,
    zero: int,
    shard: int,
    expert_shard: int,
    dtypes: StateDtypes,
    linear_params: float = 0.0,
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes of a rank holding these parameters; dense states
    shard over `shard` = dp*cp, expert states over `expert_shard` = EDP. `linear_params` (of
    the dense ones) and every expert weight take `dtypes.fp8_weight` bytes."""
    dt = dtypes
    wd, gd, od = _shard(zero, shard, dt.weight, dt.grad, dt.optimizer)
    wl = _shard(zero, shard, dt.fp8_weight, 0, 0)[0]
    we, ge, oe = _shard(zero, expert_shard, dt.fp8_weight, dt.grad, dt.optimizer)
    weights = (dense_params - linear_params) * wd + linear_params * wl + expert_params * we
    return weights, dense_params * gd + expert_params * ge, dense_params * od + expert_params * oe


def in_flight_layers(layers: float, p: int, v: int, m: int, rank: int) -> float:
    """Layer-micro-batches of activations a pipeline rank holds at its peak.

    1F1B: rank r holds min(m, p - r) micro-batches of its layers. Interleaved (v chunks of
    layers/v): 2(p - r - 1) + (v - 1)p + 1 chunk-micro-batches, at most m*v; for rank 0 that
    is L/p * (p + (p-1)/v) = L*(1 + (p-1)/(p*v)) (Megatron's interleaving factor).
    """
    if v > 1 and p > 1:
        return layers / v * min(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1)
    return layers * min(m, p - rank)
