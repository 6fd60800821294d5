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

__all__ = ["LayerParams", "layer_params", "embedding_params", "total_params",
           "active_params", "padded_vocab", "mla_dims"]


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one layer by how they are sharded."""

    attention: int      # TP-sharded
    mlp: int            # TP-sharded (dense MLP or shared experts)
    experts: int        # EP x ETP-sharded (routed experts, all of them)
    replicated: int     # norms, router: on every TP rank

    @property
    def total(self) -> int:
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
    """One dense (moe=False) or MoE (moe=True) transformer layer."""
    attn = _attention(m)
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
    return dense + moe + emb + out


def active_params(m: ModelSpec) -> int:
    """Parameters one token passes through (routed experts: top-k of E)."""
    if not m.is_moe:
        return total_params(m)
    lp = layer_params(m, moe=True)
    E = _num_experts(m)
    inactive = lp.experts * (E - m.moe_top_k) // E
    return total_params(m) - inactive * m.num_moe_layers
