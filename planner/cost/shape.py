"""`ModelShape`: the per-model constants every cost function needs, computed once.

A search evaluates hundreds of thousands of layouts of one model; the parameter counts per
component and the per-token activation coefficients do not depend on the layout, so they are
computed here once (pure, from the `ModelSpec`) and the cost functions do arithmetic only.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.params import embedding_params, layer_params, mla_dims
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
    shared_flops: float     # shared experts alone (part of moe_flops)
    mla_up_flops: float     # MLA up-projections (q_up, kv_up; part of attn_proj_flops)
    mtp: int                # multi-token-prediction layers (on the last stage)
    mtp_extra: int          # params an MTP layer adds beside its transformer layer
    # per-token activation widths of one layer (memory.py turns them into bytes)
    act_qkv: float          # bytes: Q, K, V as flash attention keeps them (MLA: after up-proj)
    act_latent: float       # bytes: MLA latents (q and kv down-projections); 0 otherwise
    attn_out: int           # width of the attention output (a*d)


def model_shape(m: ModelSpec) -> ModelShape:
    dense = layer_params(m, moe=False)
    moe = layer_params(m, moe=True) if m.is_moe else dense
    emb, out = embedding_params(m, vocab=0)
    h, a, g = m.hidden_size, m.num_attention_heads, m.kv_heads
    if m.is_mla:
        kv_rank, qk_head, v_head = mla_dims(m)
        qk = qk_head + (m.qk_pos_emb_head_dim if m.qk_pos_emb_head_dim is not None else 64)
        d, q = v_head, a * qk
        attn_params_nobias = dense.attention
        # stored: latents (q_lora, kv_lora + rope), q, k (a*qk each), v (a*v)
        act_latent = 2 * ((m.q_lora_rank or 0) + kv_rank + qk - qk_head)
        act_qkv = 2 * (2 * a * qk + a * d)
        up = (m.q_lora_rank * a * qk if m.q_lora_rank else 0) \
            + kv_rank * a * (qk_head + v_head)
        core_q = a * (qk + d) / 2   # QK^T uses qk dims, PV uses v dims
    else:
        d = m.head_dim
        q = a * d
        attn_params_nobias = h * (q + 2 * d * g) + q * h
        act_latent, act_qkv, up = 0, 2 * (q + 2 * g * d), 0
        core_q = q
    mats = 3 if m.gated else 2
    f, f_e = m.ffn, m.expert_ffn
    f_s = m.num_shared_experts * f_e
    # an MTP layer (DeepSeek-V3 §2.2): its transformer layer plus enorm, hnorm and the 2h x h
    # projection; the final norm of its output is counted with the output layer
    mtp_extra = 2 * h * h + 2 * h
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
        shared_flops=2.0 * mats * h * f_s,
        mla_up_flops=2.0 * up,
        mtp=m.mtp_num_layers, mtp_extra=mtp_extra,
        act_qkv=float(act_qkv), act_latent=float(act_latent), attn_out=a * d,
    )
