"""Parameter counts per component (Megatron `compute_weight_and_optimizer_memory`,
docs/reference/formulas.md#f2-parameter-counts).

Per layer: attention `h*(q + 2*d*g) + q*h` (GQA; = `2h²(1 + g/a)(q/h)` of the reference),
or the multi-latent (MLA) projections; dense MLP `2*h*f*γ` (γ = 1.5 gated); routed experts
`2*h*f_e*E*γ`; shared experts `2*h*f_s*γ`; router `h*E`; norms `2h` (RMSNorm) or `4h`
(LayerNorm with bias); biases where the model has them. Embedding `h*V` (twice untied),
learned positions `s*h`. Departures from Megatron's formula: RMSNorm counted as `h` per norm
(Megatron always counts LayerNorm's `2h`); MLA counted exactly. Both change totals < 0.01%.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs import ModelSpec

__all__ = [
    "LayerParams",
    "layer_params",
    "embedding_params",
    "total_params",
    "active_params",
    "padded_vocab",
    "mla_dims",
    "attention_params",
    "mean_attention",
    "linear_attention_dims",
    "indexer_params",
    "attention_projections",
]


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one layer by how they are sharded."""

    attention: float  # TP-sharded (the mean layer's: an int when all layers are alike)
    mlp: float  # TP-sharded (dense MLP or shared experts)
    experts: int  # EP x ETP-sharded (routed experts, all of them)
    replicated: int  # norms, router: on every TP rank

    @property
    def total(self) -> float:
        return self.attention + self.mlp + self.experts + self.replicated


def padded_vocab(vocab_size: int, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of 128*tp."""
    mult = 128 * tp
    return -(-vocab_size // mult) * mult


def mla_dims(m: ModelSpec) -> tuple[int, int, int]:
    """(kv_lora_rank, qk_head_dim, v_head_dim) of a multi-latent (MLA) model: ModelSpec's
    validator requires qk_head_dim and v_head_dim once kv_lora_rank is set."""
    kv_rank, qk_head, v_head = m.kv_lora_rank, m.qk_head_dim, m.v_head_dim
    assert kv_rank is not None and qk_head is not None and v_head is not None, m.name
    return kv_rank, qk_head, v_head


def _num_experts(m: ModelSpec) -> int:
    """Routed experts of an MoE model (the callers check m.is_moe first)."""
    assert m.num_experts is not None, m.name
    return m.num_experts


def _attention(m: ModelSpec) -> int:
    h, a, g = m.hidden_size, m.num_attention_heads, m.kv_heads
    if m.is_mla:
        kv_rank, qk_head, v_head = mla_dims(m)
        qk = qk_head + (m.qk_pos_emb_head_dim if m.qk_pos_emb_head_dim is not None else 64)
        rope = qk - qk_head
        if m.q_lora_rank:
            q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * qk
        else:
            q = h * a * qk
        kv = h * (kv_rank + rope) + kv_rank + kv_rank * a * (qk_head + v_head)
        return q + kv + a * v_head * h
    d = m.head_dim
    q = a * d
    params = h * (q + 2 * d * g) + q * h
    if m.bias:
        params += q + 2 * d * g + h
    return params


def attention_projections(m: ModelSpec) -> int:
    """The projections of a full-attention layer (GQA/MHA or MLA), biases included."""
    return _attention(m)


def linear_attention_dims(m: ModelSpec) -> tuple[int, int, int, int]:
    """(key heads, value heads, d_k, d_v) of a model with linear-attention layers (the
    validator requires them once layer_types has a linear layer)."""
    nk, nv = m.linear_num_key_heads, m.linear_num_value_heads
    dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
    assert nk is not None and nv is not None and dk is not None and dv is not None, m.name
    return nk, nv, dk, dv


def _linear_attention(m: ModelSpec) -> int:
    """A Gated DeltaNet layer (Qwen3-Next, HF modeling_qwen3_next Qwen3NextGatedDeltaNet):
    in_proj_qkvz h x (2*nk*dk + 2*nv*dv), in_proj_ba h x 2nv, the depthwise causal conv over
    the q, k, v channels (2*nk*dk + nv*dv) x kernel, dt_bias and A_log (nv each), the gated
    RMSNorm (dv) and out_proj nv*dv x h."""
    nk, nv, dk, dv = linear_attention_dims(m)
    h = m.hidden_size
    conv = 2 * nk * dk + nv * dv
    return (
        h * (2 * nk * dk + 2 * nv * dv)
        + h * 2 * nv
        + conv * m.linear_conv_kernel_dim
        + 2 * nv
        + dv
        + nv * dv * h
    )


def indexer_params(m: ModelSpec) -> int:
    """DeepSeek-V3.2's lightning indexer (inference/model.py Indexer): wq_b q_lora x H_I*d_I
    (h x H_I*d_I without a query low rank), wk h x d_I, its LayerNorm 2*d_I, weights_proj
    h x H_I."""
    hi, di = m.dsa_index_heads or 0, m.dsa_index_head_dim or 0
    q_in = m.q_lora_rank or m.hidden_size
    return q_in * hi * di + m.hidden_size * di + 2 * di + m.hidden_size * hi


def attention_params(m: ModelSpec, kind: str = "full") -> int:
    """One layer's attention block of this kind: full, sliding and chunked layers have the
    same projections; dsa adds the indexer; linear is a Gated DeltaNet block. An output gate
    (Qwen3-Next) adds an h x q projection, attention sinks a logit per head."""
    if kind == "linear":
        return _linear_attention(m)
    params = _attention(m)
    if m.attention_output_gate:
        params += m.hidden_size * m.num_attention_heads * m.head_dim
    if m.attention_sinks:
        params += m.num_attention_heads
    if kind == "dsa":
        params += indexer_params(m)
    return params


def mean_attention(m: ModelSpec) -> float | int:
    """Attention parameters of the mean layer (an int when every layer is alike)."""
    kinds = m.attention_kinds
    if len(set(kinds)) == 1:
        return attention_params(m, kinds[0])
    return sum(attention_params(m, k) for k in kinds) / len(kinds)


def _mlp(m: ModelSpec, width: int) -> int:
    mats = 3 if m.gated else 2
    params = mats * m.hidden_size * width
    if m.bias:
        params += (2 * width if m.gated else width) + m.hidden_size
    return params


def _norms(m: ModelSpec) -> int:
    per = m.hidden_size if m.norm == "RMSNorm" else 2 * m.hidden_size
    return 2 * per


def layer_params(m: ModelSpec, *, moe: bool) -> LayerParams:
    """One dense (moe=False) or MoE (moe=True) transformer layer, with the attention block of
    the mean layer (`mean_attention`: layers whose attention kinds differ are averaged)."""
    attn = mean_attention(m)
    if not moe:
        return LayerParams(attn, _mlp(m, m.ffn), 0, _norms(m))
    E = _num_experts(m)
    experts = E * _mlp(m, m.expert_ffn)
    shared = m.num_shared_experts * _mlp(m, m.expert_ffn) if m.num_shared_experts else 0
    return LayerParams(attn, shared, experts, _norms(m) + m.hidden_size * E)


def embedding_params(m: ModelSpec, *, vocab: int | None = None) -> tuple[int, int]:
    """(input embedding incl. learned positions, output layer incl. final norm)."""
    v = vocab if vocab is not None else m.vocab_size
    h = m.hidden_size
    emb = v * h
    if m.position_embedding == "learned_absolute":
        emb += (m.seq_length or 2048) * h
    final_norm = h if m.norm == "RMSNorm" else 2 * h
    out = (0 if m.tied_embeddings else v * h) + final_norm
    return emb, out


def total_params(m: ModelSpec) -> int:
    """All parameters (unpadded vocabulary): the number a model card publishes."""
    dense = layer_params(m, moe=False).total * (m.num_layers - m.num_moe_layers)
    moe = layer_params(m, moe=True).total * m.num_moe_layers if m.is_moe else 0
    emb, out = embedding_params(m)
    return round(dense + moe + emb + out)


def active_params(m: ModelSpec) -> int:
    """Parameters one token passes through (routed experts: top-k of E)."""
    if not m.is_moe:
        return total_params(m)
    lp = layer_params(m, moe=True)
    E = _num_experts(m)
    inactive = lp.experts * (E - m.moe_top_k) // E
    return total_params(m) - inactive * m.num_moe_layers
