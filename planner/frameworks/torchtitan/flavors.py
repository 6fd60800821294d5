"""torchtitan's model flavors (`[model] name`, `flavor`) as planner model shapes.

Source: torchtitan 0.2.2 (PyPI), torchtitan/models/{llama3,llama4,qwen3,deepseek_v3}/__init__.py
(the `*_args` tables) and the model code that derives the widths from them:
- llama3 / llama4 dense MLP: hidden = multiple_of * ceil(int(ffn_dim_multiplier *
  int(2 * 4 * dim / 3)) / multiple_of) (model/model.py FeedForward);
- llama4 MoE experts: int(ffn_dim_multiplier * int(2 * 4 * dim / 3)) / (top_k +
  num_shared_experts), rounded up to multiple_of (auto_scale_hidden_dim); one shared expert of
  that width; MoE on every `interleave_moe_layer_step`-th layer ((layer_id + 1) % step == 0,
  `moe_layer_freq`); the _irope flavors attend within 8192-token chunks on the RoPE layers
  ((layer_id + 1) % 4 != 0, `layer_types`);
- qwen3: hidden_dim and head_dim as given, MoE (moe_inter_dim) on every layer when enabled,
  tied embeddings where enable_weight_tying;
- deepseek_v3: inter_dim (dense), moe_inter_dim (routed and shared experts), n_dense_layers
  leading dense layers, MLA with q_lora_rank 0 meaning uncompressed queries; no MTP.
Defaults of the args classes: llama3 vocab 128256, llama4 vocab 202048 and top_k 1 with one
shared expert (moe/moe.py MoEArgs), qwen3 vocab 151936. Each flavor keeps torchtitan's
rope_theta. `attention` is the flavor's attn_type: torchtitan's context parallelism runs only
with "sdpa" (every model's update_from_config raises otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from planner.specs import ModelSpec

__all__ = ["Flavor", "all_flavors", "flavor", "flavors_of", "find_flavor"]


@dataclass(frozen=True)
class Flavor:
    name: str  # [model] name
    flavor: str  # [model] flavor
    spec: ModelSpec
    attention: str = "sdpa"  # attn_type
    chunked_attention: int | None = None  # llama4 iRoPE: fixed_attn_block_size on 3 of 4 layers
    interleaved_moe: bool = False  # MoE layers alternate with dense ones


_LLAMA = dict(
    activation="swiglu",
    tied_embeddings=False,
    normalization="RMSNorm",
    add_bias_linear=False,
    position_embedding_type="rope",
)


def _llama_ffn(dim: int, multiplier: float | None, multiple_of: int) -> int:
    hidden = int(2 * 4 * dim / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


def _llama3(
    dim: int,
    layers: int,
    heads: int,
    kv: int | None,
    mult: float | None,
    multiple_of: int,
    name: str,
    vocab: int = 128256,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=dim,
        ffn_hidden_size=_llama_ffn(dim, mult, multiple_of),
        num_attention_heads=heads,
        num_kv_heads=kv,
        vocab_size=vocab,
        seq_length=8192,
        rotary_base=500000.0,
        **_LLAMA,
    )


def _llama4(experts: int, step: int, name: str, *, chunk: int | None = None) -> ModelSpec:
    dim, mult, multiple_of, top_k, shared = 5120, 1.2, 2048, 1, 1
    expert = int(mult * int(2 * 4 * dim / 3)) // (top_k + shared)
    expert += -expert % multiple_of
    layers = 48
    pattern = tuple(1 if (i + 1) % step == 0 else 0 for i in range(layers))
    freq = {"moe_layer_freq": pattern} if 0 in pattern else {}
    # iRoPE: use_rope = (layer_id + 1) % every_n_layers_nope (4) != 0; the RoPE layers attend
    # within fixed_attn_block_size chunks, the NoPE layers to the whole sequence
    irope = (
        {}
        if chunk is None
        else {
            "attention_chunk_size": chunk,
            "layer_types": tuple("chunked" if (i + 1) % 4 else "full" for i in range(layers)),
        }
    )
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=dim,
        ffn_hidden_size=_llama_ffn(dim, mult, multiple_of),
        num_attention_heads=40,
        num_kv_heads=8,
        vocab_size=202048,
        seq_length=8192,
        rotary_base=500000.0,
        num_experts=experts,
        moe_top_k=top_k,
        moe_ffn_hidden_size=expert,
        num_shared_experts=shared,
        # torchtitan's MoEArgs defaults (models/moe.py): score_func sigmoid, route_scale 1.0,
        # load_balance_coeff 1e-3 (the auxiliary-loss-free expert bias)
        moe_router_score="sigmoid",
        moe_router_expert_bias=True,
        **freq,
        **irope,
        **_LLAMA,
    )


def _qwen3(
    dim: int,
    layers: int,
    heads: int,
    kv: int,
    hidden: int,
    name: str,
    *,
    tied: bool = False,
    theta: float = 1e6,
    experts: int | None = None,
    moe_inter: int | None = None,
    vocab: int = 151936,
) -> ModelSpec:
    moe = dict(num_experts=experts, moe_top_k=8, moe_ffn_hidden_size=moe_inter) if experts else {}
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=dim,
        ffn_hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv,
        kv_channels=128,
        vocab_size=vocab,
        seq_length=4096,
        rotary_base=theta,
        **dict(_LLAMA, tied_embeddings=tied, qk_norm="head"),
        **moe,
    )


def _deepseek(
    name: str,
    *,
    vocab: int,
    dim: int,
    inter: int,
    moe_inter: int,
    layers: int,
    dense: int,
    heads: int,
    experts: int,
    shared: int,
    top_k: int,
    q_lora: int,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=dim,
        ffn_hidden_size=inter,
        num_attention_heads=heads,
        vocab_size=vocab,
        seq_length=4096,
        rotary_base=10000.0,
        num_experts=experts,
        moe_top_k=top_k,
        moe_ffn_hidden_size=moe_inter,
        num_shared_experts=shared,
        num_dense_layers=dense,
        q_lora_rank=q_lora or None,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        **_LLAMA,
    )


@lru_cache(maxsize=1)
def _table() -> tuple[Flavor, ...]:
    from planner.presets import get_preset

    l3 = [
        Flavor("llama3", "8B", get_preset("llama3-8b")),
        Flavor("llama3", "70B", get_preset("llama3-70b")),
        Flavor("llama3", "405B", get_preset("llama3-405b")),
        Flavor(
            "llama3",
            "debugmodel",
            _llama3(256, 6, 16, None, None, 256, "torchtitan llama3 debugmodel", vocab=2048),
        ),
    ]
    l3 += [
        Flavor("llama3", f"8B_{kind}", get_preset("llama3-8b"), attention=kind)
        for kind in ("flex", "varlen")
    ]
    scout = _llama4(16, 1, "Llama 4 Scout (17Bx16E)")
    maverick = _llama4(128, 2, "Llama 4 Maverick (17Bx128E)")
    l4 = [
        Flavor("llama4", "17bx16e", scout),
        Flavor("llama4", "17bx128e", maverick, interleaved_moe=True),
        Flavor(
            "llama4",
            "17bx16e_irope",
            _llama4(16, 1, "Llama 4 Scout (17Bx16E)", chunk=8192),
            attention="flex",
            chunked_attention=8192,
        ),
        Flavor(
            "llama4",
            "17bx128e_irope",
            _llama4(128, 2, "Llama 4 Maverick (17Bx128E)", chunk=8192),
            attention="flex",
            chunked_attention=8192,
            interleaved_moe=True,
        ),
    ]
    q3 = [
        Flavor("qwen3", f, _qwen3(*shape, name=f"Qwen3-{f}", tied=tied))
        for f, shape, tied in (
            ("0.6B", (1024, 28, 16, 8, 3072), True),
            ("1.7B", (2048, 28, 16, 8, 6144), True),
            ("4B", (2560, 36, 32, 8, 9728), True),
            ("8B", (4096, 36, 32, 8, 12288), False),
            ("14B", (5120, 40, 40, 8, 17408), False),
            ("32B", (5120, 64, 64, 8, 25600), False),
        )
    ]
    q3 += [
        Flavor(
            "qwen3",
            "30B-A3B",
            _qwen3(2048, 48, 32, 4, 6144, "Qwen3-30B-A3B", experts=128, moe_inter=768),
        ),
        Flavor(
            "qwen3",
            "235B-A22B",
            _qwen3(
                4096, 94, 64, 4, 12288, "Qwen3-235B-A22B", theta=5e6, experts=128, moe_inter=1536
            ),
        ),
    ]
    ds = [
        Flavor(
            "deepseek_v3",
            "16B",
            _deepseek(
                "DeepSeek-V3 16B (torchtitan)",
                vocab=102400,
                dim=2048,
                inter=10944,
                moe_inter=1408,
                layers=27,
                dense=1,
                heads=16,
                experts=64,
                shared=2,
                top_k=6,
                q_lora=0,
            ),
            attention="flex",
        ),
        Flavor(
            "deepseek_v3",
            "236B",
            _deepseek(
                "DeepSeek-V2 236B (torchtitan)",
                vocab=102400,
                dim=5120,
                inter=12288,
                moe_inter=1536,
                layers=60,
                dense=1,
                heads=128,
                experts=160,
                shared=2,
                top_k=6,
                q_lora=1536,
            ),
            attention="flex",
        ),
        Flavor("deepseek_v3", "671B", get_preset("deepseek-v3"), attention="flex"),
    ]
    return tuple(l3 + l4 + q3 + ds)


def all_flavors() -> tuple[Flavor, ...]:
    return _table()


def flavor(name: str, flavor_name: str) -> Flavor | None:
    """The flavor `[model] name/flavor` names (case-insensitive), else None."""
    key = (name.lower(), flavor_name.lower())
    return next((f for f in _table() if (f.name.lower(), f.flavor.lower()) == key), None)


def flavors_of(name: str) -> list[str]:
    return [f.flavor for f in _table() if f.name.lower() == name.lower()]


def _shape(m: ModelSpec) -> tuple:
    return (
        m.num_layers,
        m.hidden_size,
        m.ffn,
        m.num_attention_heads,
        m.kv_heads,
        m.head_dim,
        m.vocab_size,
        m.activation,  # torchtitan's MLPs are SiLU-gated: another activation has no flavor
        # its qwen3 attention normalizes each query / key head (q_norm, k_norm), llama3's and
        # llama4's do not (Llama 4's weightless L2 norm is left out of torchtitan's llama4:
        # the export says so, writer._notes)
        m.qk_norm == "head",
        m.norm_placement,  # no torchtitan model has Gemma 3's sandwich norms
        m.norm_zero_centered,  # nor (1 + w) norm weights
        m.moe_shared_expert_gate,  # nor a gated shared expert
        m.softmax_scale,
        m.add_qkv_bias,
        m.glu_linear_offset,
        m.activation_clamp,
        m.tied_embeddings,
        m.num_experts or 0,
        m.expert_ffn,
        m.moe_top_k if m.is_moe else 0,
        m.num_shared_experts,
        m.moe_layers,
        m.attention_kinds,
        m.q_lora_rank,
        m.kv_lora_rank,
        m.qk_head_dim,
        m.v_head_dim,
    )


def find_flavor(model: ModelSpec) -> Flavor | None:
    """The first (canonical) flavor with this model's shape (the RoPE base aside)."""
    return _by_shape().get(_shape(model))


@lru_cache(maxsize=1)
def _by_shape() -> dict[tuple, Flavor]:
    """The table by shape, the first flavor of each (the search's torchtitan filter asks for
    every layout it ranks: one look-up instead of the table's shapes each time)."""
    out: dict[tuple, Flavor] = {}
    for f in _table():
        out.setdefault(_shape(f.spec), f)
    return out
