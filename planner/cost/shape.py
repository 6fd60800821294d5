"""`ModelShape`: the per-model constants every cost function needs, computed once.

A search evaluates hundreds of thousands of layouts of one model; the parameter counts per
component and the per-token activation coefficients do not depend on the layout, so they are
computed here once (pure, from the `ModelSpec`) and the cost functions do arithmetic only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.cost.params import (
    attention_params,
    attention_projections,
    embedding_params,
    layer_params,
    linear_attention_dims,
    mla_dims,
)
from planner.specs import ModelSpec

__all__ = ["ModelShape", "model_shape"]


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    L: int  # layers
    L_moe: int  # MoE layers (the last L_moe of them)
    L_dense: int  # leading dense layers
    h: int
    a: int  # query heads
    g: int  # kv heads
    d: int  # head dim (v head dim for MLA)
    q: int  # query width a*d (a*qk for MLA)
    f: int  # dense MLP width
    f_e: int  # routed expert width
    f_s: int  # shared-expert width (n_shared * f_e)
    E: int  # routed experts (0 dense)
    k: int  # top-k
    V: int  # vocabulary (unpadded)
    gated: bool
    tied: bool
    mla: bool
    capacity_factor: float
    sandwich: bool  # a norm on each sublayer's output too (Gemma 3's norm_placement sandwich)
    # parameters of one layer, by sharding
    dense_tp: float  # TP-sharded params of a dense layer (attention + MLP)
    dense_rep: int  # replicated params of a dense layer (norms)
    moe_tp: float  # TP-sharded params of an MoE layer (attention + shared experts)
    moe_rep: int  # replicated params of an MoE layer (norms + router)
    moe_experts: int  # routed-expert params of an MoE layer (all experts)
    emb_extra: int  # learned position embedding params (first stage)
    out_norm: int  # final norm params (last stage)
    # FLOPs per token per layer, forward (2 * MACs), excluding attention core
    attn_proj_flops: float  # QKV + output projections
    mlp_flops: float  # dense MLP
    moe_flops: float  # routed (top-k) + shared experts
    attn_core_flops_per_s: float  # causal attention core: 2 * 2 * q_core * s / 2 per token per s
    shared_flops: float  # shared experts alone (part of moe_flops)
    mla_up_flops: float  # MLA up-projections (q_up, kv_up; part of attn_proj_flops)
    mtp: int  # multi-token-prediction layers (on the last stage)
    mtp_extra: int  # params an MTP layer adds beside its transformer layer
    mtp_own_embedding: bool  # each MTP layer holds a word embedding of its own
    # per-token activation widths of one layer (memory.py turns them into bytes)
    act_qkv: float  # bytes: Q, K, V as flash attention keeps them (MLA: after up-proj)
    act_latent: float  # bytes: MLA latents (q and kv down-projections); 0 otherwise
    latent_norm: float  # elements: MLA's normed latents (q_lora + kv_lora) the up-projections keep
    attn_out: int  # width of the attention output (a*d)
    # the layer pattern (docs/cost-model.md "Layer kinds"); defaults = every layer full, MoE last
    moe_prefix: tuple[int, ...] | None = None  # MoE layers before index i (None: dense first)
    kinds: tuple[tuple[str, int], ...] = ()  # (attention kind, layers) beyond full causal
    window: int = 0  # sliding window W
    chunk: int = 0  # chunked-local chunk C
    topk: int = 0  # DSA keys per query
    indexer_flops_per_s: float = 0.0  # DSA indexer: 2*H_I*d_I per key (causal: all keys)
    linear_core_flops: float = 0.0  # Gated DeltaNet core per token (no s dependence)
    q_lora: bool = False  # MLA with a query down-projection (q_lora_rank set)

    def mean_keys(self, kind: str, seq: int) -> float:
        """Mean keys a query attends to, over the s positions of a causal sequence (the
        continuous form whose full-attention value s/2 the FLOP formula has always used):
        full s/2; sliding W - W²/(2s) (s/2 for s <= W); chunked C/2 per whole chunk plus r²/2
        for the r tokens of a last partial one, over s; dsa the window form with k."""
        s = float(seq)
        if kind == "sliding" or kind == "dsa":
            w = float(self.window if kind == "sliding" else self.topk)
            return s / 2 if s <= w else w - w * w / (2 * s)
        if kind == "chunked":
            c = float(self.chunk)
            n, r = divmod(s, c)
            return (n * c * c / 2 + r * r / 2) / s
        return s / 2

    def attn_core(self, seq: int) -> float:
        """Attention-core FLOPs per token of the mean layer, forward, at sequence length seq:
        2*2*q_core per attended key (QKᵀ and ·V), so 2*q_core*s for full causal layers (the
        `attn_core_flops_per_s * seq` of every model before the layer kinds); sliding, chunked
        and dsa layers 4*q_core*mean_keys; dsa adds its indexer over all s/2 causal keys; a
        linear layer costs linear_core_flops whatever s (its state is fixed)."""
        if not self.kinds:
            return self.attn_core_flops_per_s * seq
        rest = self.L - sum(n for _, n in self.kinds)
        total = rest * self.attn_core_flops_per_s * seq
        for kind, n in self.kinds:
            if kind == "linear":
                total += n * self.linear_core_flops
                continue
            per = 2.0 * self.attn_core_flops_per_s * self.mean_keys(kind, seq)
            if kind == "dsa":
                per += self.indexer_flops_per_s * seq
            total += n * per
        return total / self.L

    def moe_between(self, start: float, layers: float) -> float:
        """MoE layers among `layers` layers from global index `start` (fractional positions
        interpolate within a layer)."""
        pre = self.moe_prefix
        if pre is None:
            return max(0.0, min(layers, start + layers - self.L_dense))

        def at(x: float) -> float:
            x = min(max(x, 0.0), float(self.L))
            i = int(x)
            return pre[i] + ((x - i) * (pre[i + 1] - pre[i]) if i < self.L else 0.0)

        return at(start + layers) - at(start)


def model_shape(m: ModelSpec) -> ModelShape:
    dense = layer_params(m, moe=False)
    moe = layer_params(m, moe=True) if m.is_moe else dense
    emb, out = embedding_params(m, vocab=0)
    h, a, g = m.hidden_size, m.num_attention_heads, m.kv_heads
    if m.is_mla:
        kv_rank, qk_head, v_head = mla_dims(m)
        qk = qk_head + (m.qk_pos_emb_head_dim if m.qk_pos_emb_head_dim is not None else 64)
        d, q = v_head, a * qk
        attn_params_nobias = attention_projections(m)
        # stored: latents (q_lora, kv_lora + rope), q, k (a*qk each), v (a*v)
        act_latent = 2 * ((m.q_lora_rank or 0) + kv_rank + qk - qk_head)
        # the q and kv latents after their norms (q_a_layernorm, kv_a_layernorm), which the
        # up-projections keep as their inputs: Megatron-Core builds linear_q_up_proj and
        # linear_kv_up_proj as TELayerNormColumnParallelLinear with qk_layernorm (the DeepSeek
        # and Kimi recipes), whose ln_out is saved for the weight gradient
        latent_norm = (m.q_lora_rank or 0) + kv_rank
        act_qkv = 2 * (2 * a * qk + a * d)
        up = (m.q_lora_rank * a * qk if m.q_lora_rank else 0) + kv_rank * a * (qk_head + v_head)
        core_q = a * (qk + d) / 2  # QK^T uses qk dims, PV uses v dims
    else:
        d = m.head_dim
        q = a * d
        attn_params_nobias = h * (q + 2 * d * g) + q * h
        act_latent, act_qkv, up, latent_norm = 0, 2 * (q + 2 * g * d), 0, 0
        core_q = q
    pattern = _pattern(m, attn_params_nobias, act_qkv, act_latent, latent_norm)
    if pattern is not None:
        attn_params_nobias, act_qkv, act_latent, latent_norm = pattern.pop("_avg")
    mats = 3 if m.gated else 2
    f, f_e = m.ffn, m.expert_ffn
    f_s = m.num_shared_experts * f_e
    # an MTP layer (DeepSeek-V3 §2.2): its transformer layer plus enorm, hnorm and the 2h x h
    # projection; the final norm of its output is counted with the output layer
    mtp_extra = 2 * h * h + 2 * h
    return ModelShape(
        name=m.name,
        L=m.num_layers,
        L_moe=m.num_moe_layers,
        L_dense=m.num_layers - m.num_moe_layers,
        h=h,
        a=a,
        g=g,
        d=d,
        q=q,
        f=f,
        f_e=f_e,
        f_s=f_s,
        E=m.num_experts or 0,
        k=m.moe_top_k if m.is_moe else 0,
        V=m.vocab_size,
        gated=m.gated,
        tied=m.tied_embeddings,
        mla=m.is_mla,
        capacity_factor=m.moe_capacity_factor,
        sandwich=m.norm_placement == "sandwich",
        dense_tp=dense.attention + dense.mlp,
        dense_rep=dense.replicated,
        moe_tp=moe.attention + moe.mlp,
        moe_rep=moe.replicated,
        moe_experts=moe.experts,
        emb_extra=emb,
        out_norm=out,
        attn_proj_flops=2.0 * attn_params_nobias,
        mlp_flops=2.0 * mats * h * f,
        moe_flops=2.0 * mats * h * (f_e * (m.moe_top_k if m.is_moe else 0) + f_s),
        attn_core_flops_per_s=2.0 * core_q,  # causal: 4*q*s/2 per token => 2*q per unit s
        shared_flops=2.0 * mats * h * f_s,
        mla_up_flops=2.0 * up,
        mtp=m.mtp_num_layers,
        mtp_extra=mtp_extra,
        mtp_own_embedding=m.mtp_dedicated_embeddings,
        act_qkv=float(act_qkv),
        act_latent=float(act_latent),
        latent_norm=float(latent_norm),
        attn_out=a * d,
        q_lora=bool(m.is_mla and m.q_lora_rank),
        **(pattern or {}),
    )


def _pattern(
    m: ModelSpec, proj: float, act_qkv: float, act_latent: float, latent_norm: float
) -> dict[str, Any] | None:
    """The layer-pattern fields of ModelShape, and the mean layer's (projection params,
    act_qkv, act_latent, latent_norm) under "_avg"; None for a model of full causal layers,
    MoE last.

    Per kind, beside full causal: sliding / chunked / dsa keep the projections of a full
    layer (dsa adds the indexer: q_in x H_I*d_I, h x d_I, h x H_I; its stored activations
    the indexer q and k, 2*(H_I*d_I + d_I) bytes, and the top-k indices, 4k bytes); an
    output gate adds h x q (and its 2q-byte gate activation), sinks nothing a GEMM sees.
    A linear (Gated DeltaNet) layer projects h -> 2*nk*dk + 2*nv*dv + 2nv and nv*dv -> h,
    convolves the conv = 2*nk*dk + nv*dv channels (2*conv*kernel FLOPs a token), and its
    core costs 2*nv*(3*dk*dv + (dk + dv)*C/2) a token: three multiply-adds per state element
    (read S^T k, the rank-1 update, read S^T q) and the causal intra-chunk attention of the
    chunked kernel over C = 64 tokens (flash-linear-attention's chunk size); it keeps q, k, v
    after and before the convolution, the z gate, beta and alpha and the core output,
    2*(2*conv + 2*nv*dv + 2*nv) bytes."""
    kinds = m.attention_kinds
    moe = m.moe_layers
    dense_first = not m.interleaved
    special = {k: kinds.count(k) for k in set(kinds) if k != "full"}
    plain_attention = not (m.attention_output_gate or m.attention_sinks)
    if dense_first and not special and plain_attention:
        return None
    out: dict[str, Any] = {}
    if not dense_first:
        pre = [0]
        for x in moe:
            pre.append(pre[-1] + int(x))
        out["moe_prefix"] = tuple(pre)
    h, L = m.hidden_size, m.num_layers
    gate = h * m.num_attention_heads * m.head_dim if m.attention_output_gate else 0
    per_kind: dict[str, tuple[float, float, float, float]] = {}
    base = (
        float(proj + gate),
        float(act_qkv + (2 * m.num_attention_heads * m.head_dim if gate else 0)),
        float(act_latent),
        float(latent_norm),
    )
    for kind in set(kinds):
        if kind == "linear":
            nk, nv, dk, dv = linear_attention_dims(m)
            conv = 2 * nk * dk + nv * dv
            lin = attention_params(m, "linear") - (2 * nv + dv)  # less A_log, dt_bias, norm
            per_kind[kind] = (float(lin), float(2 * (2 * conv + 2 * nv * dv + 2 * nv)), 0.0, 0.0)
            out["linear_core_flops"] = 2.0 * nv * (3 * dk * dv + (dk + dv) * 64 / 2)
        elif kind == "dsa":
            hi, di = m.dsa_index_heads or 0, m.dsa_index_head_dim or 0
            q_in = m.q_lora_rank or h
            idx = q_in * hi * di + h * di + h * hi
            per_kind[kind] = (
                base[0] + idx,
                base[1] + 2 * (hi * di + di) + 4 * (m.dsa_index_topk or 0),
                base[2],
                base[3],
            )
            out["topk"] = m.dsa_index_topk or 0
            out["indexer_flops_per_s"] = 2.0 * hi * di / 2  # causal: s/2 keys, 2 FLOPs a MAC
        else:
            per_kind[kind] = base
    out["window"] = m.window_size or 0
    out["chunk"] = m.attention_chunk_size or 0
    out["kinds"] = tuple(sorted((k, n) for k, n in special.items()))
    avg = tuple(sum(per_kind[k][i] for k in kinds) / L for i in range(4))
    out["_avg"] = (
        avg
        if len(set(kinds)) > 1 or not plain_attention or special
        else (proj, act_qkv, act_latent, latent_norm)
    )
    return out
