"""`ModelShape`: the per-model constants every cost function needs, computed once.

A search evaluates hundreds of thousands of layouts of one model; the parameter counts per
component and the per-token activation coefficients do not depend on the layout, so they are
computed here once (pure, from the `ModelSpec`) and the cost functions do arithmetic only.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.params import embedding_params, layer_params
from planner.specs import ModelSpec

__all__ = ["ModelShape", "model_shape"]


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    L: int                  # layers
    L_moe: int              # MoE layers (the last L_moe of them)
    L_dense: int            # leading dense layers
    h: int
    a: int                  # query heads
    g: int                  # kv heads
    d: int                  # head dim (v head dim for MLA)
    q: int                  # query width a*d (a*qk for MLA)
    f: int                  # dense MLP width
    f_e: int                # routed expert width
    f_s: int                # shared-expert width (n_shared * f_e)
    E: int                  # routed experts (0 dense)
    k: int                  # top-k
    V: int                  # vocabulary (unpadded)
    gated: bool
    tied: bool
    mla: bool
    capacity_factor: float
    # parameters of one layer, by sharding
    dense_tp: int           # TP-sharded params of a dense layer (attention + MLP)
    dense_rep: int          # replicated params of a dense layer (norms)
    moe_tp: int             # TP-sharded params of an MoE layer (attention + shared experts)
    moe_rep: int            # replicated params of an MoE layer (norms + router)
    moe_experts: int        # routed-expert params of an MoE layer (all experts)
    emb_extra: int          # learned position embedding params (first stage)
    out_norm: int           # final norm params (last stage)
    # FLOPs per token per layer, forward (2 * MACs), excluding attention core
    attn_proj_flops: float  # QKV + output projections
    mlp_flops: float        # dense MLP
    moe_flops: float        # routed (top-k) + shared experts
    attn_core_flops_per_s: float  # causal attention core: 2 * 2 * q_core * s / 2 per token per s
    # per-token activation bytes of one layer (16-bit, no parallelism), see memory.py
    act_rep: float          # norms and GEMM inputs outside the TP region (÷t only with SP)
    act_attn: float         # inside the TP region: QKV, attention output, softmax stats
    act_mlp: float          # dense MLP inside the TP region
    act_shared: float       # shared experts inside the TP region


def model_shape(m: ModelSpec) -> ModelShape:
    dense = layer_params(m, moe=False)
    moe = layer_params(m, moe=True) if m.is_moe else dense
    emb, out = embedding_params(m, vocab=0)
    h, a, g = m.hidden_size, m.num_attention_heads, m.kv_heads
    if m.is_mla:
        qk = m.qk_head_dim + (m.qk_pos_emb_head_dim if m.qk_pos_emb_head_dim is not None else 64)
        d, q = m.v_head_dim, a * qk
        attn_params_nobias = dense.attention
        # stored: latents (q_lora, kv_lora + rope), q, k (a*qk each), v and output (a*v each)
        act_attn = 2 * ((m.q_lora_rank or 0) + m.kv_lora_rank + qk - m.qk_head_dim) \
            + 2 * (2 * a * qk + a * d) + 2 * a * d + 4 * a
        core_q = a * (qk + d) / 2   # QK^T uses qk dims, PV uses v dims
    else:
        d = m.head_dim
        q = a * d
        attn_params_nobias = h * (q + 2 * d * g) + q * h
        act_attn = 2 * (q + 2 * g * d) + 2 * q + 4 * a
        core_q = q
    mats = 3 if m.gated else 2
    f, f_e = m.ffn, m.expert_ffn
    f_s = m.num_shared_experts * f_e
    act_mlp_per_width = 6 if m.gated else 4        # fc1 out (2 or 4 bytes/width) + act out
    return ModelShape(
        name=m.name, L=m.num_layers, L_moe=m.num_moe_layers,
        L_dense=m.num_layers - m.num_moe_layers, h=h, a=a, g=g, d=d, q=q, f=f, f_e=f_e, f_s=f_s,
        E=m.num_experts or 0, k=m.moe_top_k if m.is_moe else 0, V=m.vocab_size,
        gated=m.gated, tied=m.tied_embeddings, mla=m.is_mla,
        capacity_factor=m.moe_capacity_factor,
        dense_tp=dense.attention + dense.mlp, dense_rep=dense.replicated,
        moe_tp=moe.attention + moe.mlp, moe_rep=moe.replicated, moe_experts=moe.experts,
        emb_extra=emb, out_norm=out,
        attn_proj_flops=2.0 * attn_params_nobias,
        mlp_flops=2.0 * mats * h * f,
        moe_flops=2.0 * mats * h * (f_e * (m.moe_top_k if m.is_moe else 0) + f_s),
        attn_core_flops_per_s=2.0 * core_q,   # causal: 4*q*s/2 per token => 2*q per unit s
        act_rep=8.0 * h,
        act_attn=float(act_attn),
        act_mlp=float(act_mlp_per_width * f),
        act_shared=float(act_mlp_per_width * f_s),
    )
