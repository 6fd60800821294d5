"""Per-GPU memory on the most loaded rank: model states, activations, overheads.

Model states (formulas.md §1). Megatron accounting (default), bytes per parameter:
bf16/fp8 weights 2, fp32 main grads 4, fp32 master + Adam 12 = 18; with the distributed
optimizer (zero 1) the 12 shard over d ranks: 6 + 12/d; fp16 keeps fp16 grads beside fp32 main
grads: 20 -> 4 + 16/d (Megatron distributed-optimizer docs). ZeRO-2 (Megatron FSDP
`optim_grads`) shards the grads too, ZeRO-3 (`optim_grads_params`) the weights as well.
DeepSpeed accounting (ZeRO paper Fig. 1): 2 + 2 + 12, sharded per stage; ZeRO-3 adds
DeepSpeed's own `4 * largest layer` for the gathered layer. Dense states shard over
d = dp*cp (what Megatron's code does: its formula says dp, see `tests/test_memory.py`);
expert states over EDP = world/(etp*ep*pp); expert weights over ep*etp.

Activations (Korthikanti et al. 2022 Table 2, re-derived in `layer_activation_bytes`).
Pipeline: the first rank holds min(m, p) micro-batches (1F1B) or vp+p-1 chunks of L/(pv)
layers (interleaved, = L*(1 + (p-1)/(pv))); the last rank holds 1 (1F1B) or (v-1)p+1 chunks,
plus fp32 logits. CP divides the sequence on every term.

Overheads: CUDA context + NCCL buffers (profile), allocator fragmentation as a fraction of
the tensor bytes, and the TP/SP all-gather buffer of one layer's input.
Left out: dropout masks (dropout 0, as in every recipe we model), CUDA-graph pools,
FP8 transposed-weight caches, optimizer CPU offload, checkpoint/IO buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.shape import ModelShape
from planner.layout import Layout, stage_layer_counts

__all__ = ["MemoryBreakdown", "state_bytes_per_param", "megatron_weight_optimizer_bytes",
           "layer_activation_bytes", "korthikanti_layer_bytes", "stage_memory", "peak_memory"]


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

    def as_dict(self) -> dict:
        return {
            "weights_bytes": round(self.weights), "gradients_bytes": round(self.gradients),
            "optimizer_bytes": round(self.optimizer), "activations_bytes": round(self.activations),
            "other_bytes": round(self.other), "total_bytes": round(self.total),
            "capacity_bytes": round(self.capacity), "stage": self.stage,
        }


def state_bytes_per_param(*, zero: int, shard: int, accounting: str = "megatron",
                          precision: str = "bf16") -> tuple[float, float, float]:
    """(weight, gradient, optimizer) bytes per parameter on one rank.

    megatron: w 2, g 4 (fp32 main grad; fp16: 2 + 4 sharded with the optimizer), opt 12.
    deepspeed: w 2, g 2, opt 12. zero 0 shards nothing, 1 the optimizer, 2 + grads,
    3 + weights, each over `shard` ranks.
    """
    d = max(1, shard)
    if accounting == "deepspeed":
        w, g, o, g_sharded_extra = 2.0, 2.0, 12.0, 0.0
    elif precision == "fp16":
        w, g, o, g_sharded_extra = 2.0, 2.0, 12.0, 4.0   # fp32 main grads live with the optimizer
    else:
        w, g, o, g_sharded_extra = 2.0, 4.0, 12.0, 0.0
    o += g_sharded_extra
    if zero == 0:
        return w, g, o
    if zero == 1:
        return w, g, o / d
    if zero == 2:
        return w, g / d, o / d
    return w / d, g / d, o / d


def megatron_weight_optimizer_bytes(*, params_on_rank: float, dp: int,
                                    distributed_optimizer: bool = True) -> float:
    """Megatron's `compute_weight_and_optimizer_memory`: params * (18, or 6 + 12/dp)."""
    per = 6 + 12 / dp if distributed_optimizer else 18
    return params_on_rank * per


def korthikanti_layer_bytes(*, s: int, b: int, h: int, a: int, t: int, sp: bool,
                            recompute: str) -> float:
    """Korthikanti et al. 2022 Table 2, bytes per layer (MHA, 4h GELU, dropout, no flash)."""
    sbh = s * b * h
    score = 5 * a * s / (h * t)
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    if sp:
        return sbh * (34 / t + (0 if recompute == "selective" else score))
    return sbh * (10 + 24 / t + (0 if recompute == "selective" else score))


def layer_activation_bytes(shape: ModelShape, *, tokens: float, seq: int, t: int, sp: bool,
                           recompute: str, flash: bool, moe: bool, etp: int = 1) -> float:
    """Stored activation bytes of one layer for `tokens` = s*b/cp tokens.

    Re-derivation of Korthikanti's 34*s*b*h for flash attention, GQA and gated MLPs, 16-bit,
    no dropout (per token, h hidden, q = a*d, g KV heads, f MLP width):
      outside the TP region: two norm inputs + two GEMM inputs      8h          (÷t with SP)
      attention: Q, K, V 2(q + 2gd), output 2q, softmax stats 4a (fp32)         (÷t)
                 without flash + scores, softmax and dropout 5*a*s              (÷t)
      MLP: fc1 output 2f (gelu) or 4f (gate, up), activation output 2f          (÷t)
    MHA + 4h GELU + the two 1-byte dropout masks gives back 34h (+5as). MoE layers replace
    the MLP with routed tokens k*cf per token, each storing its permuted input 2h (gathered over
    the etp group), the expert fc1/activation outputs 6f_e/etp and the combine input 2h,
    plus router logits and probabilities (fp32, 8E) and the shared experts like a dense MLP.
    Selective recompute (core attention) drops the scores (and the softmax stats);
    full recompute keeps only the layer input 2h (÷t with SP).
    """
    sp_div = t if sp else 1
    if recompute == "full":
        return tokens * 2.0 * shape.h / sp_div
    attn = shape.act_attn
    if recompute == "selective":
        attn -= 4 * shape.a
    elif not flash:
        attn += 5.0 * shape.a * seq
    per_token = shape.act_rep / sp_div + attn / t
    if moe:
        per_token += shape.act_shared / t + 8.0 * shape.E / sp_div
        routed = shape.k * shape.capacity_factor / sp_div
        act_w = 6 if shape.gated else 4
        per_token += routed * (2.0 * shape.h * etp + act_w * shape.f_e + 2.0 * shape.h)
    else:
        per_token += shape.act_mlp / t
    return tokens * per_token


def _stage_params(shape: ModelShape, *, layers: float, moe_layers: float, t: int,
                  with_embedding: bool, with_output: bool, vocab: int) -> tuple[float, float]:
    """(dense params, expert params) on one rank of a stage, before ep sharding of experts."""
    dense_layers = layers - moe_layers
    dense = dense_layers * (shape.dense_tp / t + shape.dense_rep)
    dense += moe_layers * (shape.moe_tp / t + shape.moe_rep)
    if with_embedding:
        dense += (vocab * shape.h + shape.emb_extra) / t
    if with_output:
        dense += shape.out_norm
        if not shape.tied or not with_embedding:
            dense += vocab * shape.h / t   # untied output layer, or the tied copy on the last stage
    return dense, moe_layers * shape.moe_experts


def stage_memory(shape: ModelShape, layout: Layout, *, stage: str, seq: int,
                 global_batch_size: int, capacity: float, fixed_overhead: float,
                 fragmentation: float, zero: int | None = None, accounting: str = "megatron",
                 precision: str = "bf16", flash: bool = True) -> MemoryBreakdown:
    """Memory of the first, a middle, or the last pipeline rank."""
    from planner.cost.params import padded_vocab

    lay = layout
    zero = lay.zero if zero is None else zero
    p, v, t = lay.pp, lay.vpp, lay.tp
    first_n, mid_n, last_n = stage_layer_counts(shape.L, lay)
    if stage == "first":
        layers, emb, out = first_n, True, p == 1
        moe_layers = max(0.0, layers - shape.L_dense) if shape.E else 0.0
    elif stage == "last":
        layers, emb, out = last_n, p == 1, True
        moe_layers = min(layers, shape.L_moe) if shape.E else 0.0
    else:
        layers, emb, out = mid_n, False, False
        moe_layers = min(layers, shape.L_moe) if shape.E else 0.0
    vocab = padded_vocab(shape.V, t)
    dense_p, expert_p = _stage_params(shape, layers=layers, moe_layers=moe_layers, t=t,
                                      with_embedding=emb, with_output=out, vocab=vocab)
    expert_p /= lay.ep * lay.etp
    wd, gd, od = state_bytes_per_param(zero=zero, shard=lay.optimizer_shard,
                                       accounting=accounting, precision=precision)
    we, ge, oe = state_bytes_per_param(zero=zero, shard=lay.edp, accounting=accounting,
                                       precision=precision)
    weights = dense_p * wd + expert_p * we
    grads = dense_p * gd + expert_p * ge
    optim = dense_p * od + expert_p * oe

    # activations ---------------------------------------------------------------------
    b = lay.micro_batch_size
    tokens = seq * b / lay.cp
    m = max(1, lay.num_microbatches(global_batch_size))
    rank = 0 if stage == "first" else (p - 1 if stage == "last" else 1)
    if v > 1 and p > 1:
        chunks = min(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1)
        in_flight_layers = layers / v * chunks
    else:
        in_flight_layers = layers * min(m, p - rank)
    dense_frac = 1.0 - (moe_layers / layers if layers else 0.0)
    kw = dict(tokens=tokens, seq=seq // lay.cp, t=t, sp=lay.sp, flash=flash, etp=lay.etp)
    per_layer = dense_frac * layer_activation_bytes(shape, moe=False, recompute=lay.recompute, **kw)
    if moe_layers:
        per_layer += (1 - dense_frac) * layer_activation_bytes(shape, moe=True,
                                                               recompute=lay.recompute, **kw)
    acts = per_layer * in_flight_layers
    if lay.recompute == "full" and layers:
        # the layer being recomputed in backward holds its full activations for a moment
        acts += layer_activation_bytes(shape, moe=moe_layers > 0, recompute="none", **kw)
    if out:
        acts += 4.0 * tokens * vocab / t          # fp32 logits for the loss (vocab-parallel)
        acts += 2.0 * tokens * shape.h / (t if lay.sp else 1)   # final norm output
    other_transient = 2.0 * 2.0 * tokens * shape.h if t > 1 and lay.sp else 0.0
    if zero == 3:
        other_transient += 2 * 2.0 * shape.largest_layer / t   # gathered layer, prefetch of next
    tensors = weights + grads + optim + acts
    other = fixed_overhead + fragmentation * tensors + other_transient
    return MemoryBreakdown(weights, grads, optim, acts, other, capacity, stage)


def peak_memory(shape: ModelShape, layout: Layout, **kw) -> MemoryBreakdown:
    """The most loaded rank: the larger of the first and last pipeline ranks (and a middle one
    for MoE models whose first ranks hold the dense layers)."""
    if layout.pp == 1:
        stages: tuple[str, ...] = ("first",)
    elif layout.pp > 2 and shape.E:
        stages = ("first", "last", "middle")
    else:
        stages = ("first", "last")
    best = None
    for st in stages:
        mb = stage_memory(shape, layout, stage=st, **kw)
        if best is None or mb.total > best.total:
            best = mb
    return best
