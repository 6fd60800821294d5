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

__all__ = ["MemoryBreakdown", "state_bytes_per_param", "megatron_weight_optimizer_bytes",
           "layer_activation_bytes", "korthikanti_layer_bytes", "stage_params", "state_bytes",
           "in_flight_layers"]


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
    elif not flash:      # scores, softmax and dropout instead of flash's softmax statistics
        attn += 5.0 * shape.a * seq - 4 * shape.a
    per_token = shape.act_rep / sp_div + attn / t
    if moe:
        per_token += shape.act_shared / t + 8.0 * shape.E / sp_div
        routed = shape.k * shape.capacity_factor / sp_div
        act_w = 6 if shape.gated else 4
        per_token += routed * (2.0 * shape.h * etp + act_w * shape.f_e + 2.0 * shape.h)
    else:
        per_token += shape.act_mlp / t
    return tokens * per_token


def stage_params(shape: ModelShape, *, layers: float, moe_layers: float, t: int,
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


def state_bytes(*, dense_params: float, expert_params: float, zero: int, shard: int,
                expert_shard: int, accounting: str, precision: str) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes of a rank holding these parameters; dense states
    shard over `shard` = dp*cp, expert states over `expert_shard` = EDP."""
    wd, gd, od = state_bytes_per_param(zero=zero, shard=shard, accounting=accounting,
                                       precision=precision)
    we, ge, oe = state_bytes_per_param(zero=zero, shard=expert_shard, accounting=accounting,
                                       precision=precision)
    return (dense_params * wd + expert_params * we, dense_params * gd + expert_params * ge,
            dense_params * od + expert_params * oe)


def in_flight_layers(layers: float, p: int, v: int, m: int, rank: int) -> float:
    """Layer-micro-batches of activations a pipeline rank holds at its peak.

    1F1B: rank r holds min(m, p - r) micro-batches of its layers. Interleaved (v chunks of
    layers/v): 2(p - r - 1) + (v - 1)p + 1 chunk-micro-batches, at most m*v; for rank 0 that
    is L/p * (p + (p-1)/v) = L*(1 + (p-1)/(p*v)) (Megatron's interleaving factor).
    """
    if v > 1 and p > 1:
        return layers / v * min(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1)
    return layers * min(m, p - rank)
