"""Preset models, their aliases, and Hugging Face `config.json` import.

Each preset cites the public config it copies. `resolve_model` turns a preset name, alias,
model YAML path, HF config.json path or inline mapping into a `ModelSpec`.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from planner.errors import SpecError
from planner.specs import ModelSpec, parse_spec, read_yaml, ref_path

__all__ = ["PRESETS", "ALIASES", "PUBLISHED_PARAMS", "get_preset", "resolve_model",
           "model_from_hf_config"]

_LLAMA = dict(activation="swiglu", tied_embeddings=False)

PRESETS: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-2-7b-hf config.json; Touvron et al. 2023 (arXiv:2307.09288): 4k context
    "llama2-7b": dict(name="Llama 2 7B", num_layers=32, hidden_size=4096, ffn_hidden_size=11008,
                      num_attention_heads=32, vocab_size=32000, seq_length=4096,
                      rotary_base=10000.0, **_LLAMA),
    # meta-llama/Llama-2-13b-hf config.json
    "llama2-13b": dict(name="Llama 2 13B", num_layers=40, hidden_size=5120, ffn_hidden_size=13824,
                       num_attention_heads=40, vocab_size=32000, seq_length=4096,
                       rotary_base=10000.0, **_LLAMA),
    # meta-llama/Llama-2-70b-hf config.json (GQA, 8 KV heads)
    "llama2-70b": dict(name="Llama 2 70B", num_layers=80, hidden_size=8192, ffn_hidden_size=28672,
                       num_attention_heads=64, num_kv_heads=8, vocab_size=32000, seq_length=4096,
                       rotary_base=10000.0, **_LLAMA),
    # meta-llama/Meta-Llama-3-8B config.json; Llama 3 paper (arXiv:2407.21783) Table 3: 8k pre-training
    "llama3-8b": dict(name="Llama 3 8B", num_layers=32, hidden_size=4096, ffn_hidden_size=14336,
                      num_attention_heads=32, num_kv_heads=8, vocab_size=128256, seq_length=8192,
                      rotary_base=500000.0, **_LLAMA),
    # meta-llama/Meta-Llama-3-70B config.json
    "llama3-70b": dict(name="Llama 3 70B", num_layers=80, hidden_size=8192, ffn_hidden_size=28672,
                       num_attention_heads=64, num_kv_heads=8, vocab_size=128256, seq_length=8192,
                       rotary_base=500000.0, **_LLAMA),
    # meta-llama/Llama-3.1-405B config.json; Llama 3 paper Table 3
    "llama3-405b": dict(name="Llama 3.1 405B", num_layers=126, hidden_size=16384,
                        ffn_hidden_size=53248, num_attention_heads=128, num_kv_heads=8,
                        vocab_size=128256, seq_length=8192, rotary_base=500000.0,
                        **_LLAMA),
    # Brown et al. 2020 (arXiv:2005.14165) Table 2.1: 96 layers, d 12288, 96 heads, 2048 ctx;
    # GPT-2 BPE vocabulary (50257), tied embeddings, learned positions, 4h GELU MLP, biases
    "gpt3-175b": dict(name="GPT-3 175B", num_layers=96, hidden_size=12288, ffn_hidden_size=49152,
                      num_attention_heads=96, vocab_size=50257, seq_length=2048,
                      activation="gelu", tied_embeddings=True),
    # mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024 (arXiv:2401.04088): 32k context
    "mixtral-8x7b": dict(name="Mixtral 8x7B", num_layers=32, hidden_size=4096,
                         ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8,
                         vocab_size=32000, seq_length=32768, num_experts=8, moe_top_k=2,
                         rotary_base=1e6, **_LLAMA),
    # mistralai/Mixtral-8x22B-v0.1 config.json (64k context)
    "mixtral-8x22b": dict(name="Mixtral 8x22B", num_layers=56, hidden_size=6144,
                          ffn_hidden_size=16384, num_attention_heads=48, num_kv_heads=8,
                          vocab_size=32768, seq_length=65536, num_experts=8, moe_top_k=2,
                          rotary_base=1e6, **_LLAMA),
    # deepseek-ai/DeepSeek-V3 config.json; DeepSeek-V3 report (arXiv:2412.19437) §4.2: MLA,
    # 3 dense layers, 256 routed + 1 shared expert, top-8, 4k pre-training sequences
    "deepseek-v3": dict(name="DeepSeek-V3", num_layers=61, hidden_size=7168,
                        ffn_hidden_size=18432, num_attention_heads=128, vocab_size=129280,
                        seq_length=4096, num_experts=256, moe_top_k=8, moe_ffn_hidden_size=2048,
                        num_shared_experts=1, num_dense_layers=3, q_lora_rank=1536,
                        kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
                        v_head_dim=128, rotary_base=10000.0, **_LLAMA),
    # Qwen/Qwen3-235B-A22B config.json; Qwen3 report (arXiv:2505.09388): 4k stage-1 pre-training
    "qwen3-235b-a22b": dict(name="Qwen3-235B-A22B", num_layers=94, hidden_size=4096,
                            ffn_hidden_size=12288, num_attention_heads=64, num_kv_heads=4,
                            kv_channels=128, vocab_size=151936, seq_length=4096,
                            num_experts=128, moe_top_k=8, moe_ffn_hidden_size=1536,
                            rotary_base=1e6, **_LLAMA),
}

ALIASES = {
    "7b": "llama2-7b", "8b": "llama3-8b", "13b": "llama2-13b", "70b": "llama3-70b",
    "175b": "gpt3-175b", "405b": "llama3-405b", "671b": "deepseek-v3",
    "llama3.1-405b": "llama3-405b", "llama3.1-8b": "llama3-8b", "llama3.1-70b": "llama3-70b",
    "gpt3": "gpt3-175b", "qwen3-235b": "qwen3-235b-a22b",
}

# Published totals (model cards / papers), for the tests and `planner models`.
PUBLISHED_PARAMS = {
    "llama2-7b": 6.74e9, "llama2-13b": 13.0e9, "llama2-70b": 69.0e9, "llama3-8b": 8.03e9,
    "llama3-70b": 70.6e9, "llama3-405b": 405.9e9, "gpt3-175b": 175e9, "mixtral-8x7b": 46.7e9,
    "mixtral-8x22b": 141e9, "deepseek-v3": 671e9, "qwen3-235b-a22b": 235e9,
}


def get_preset(name: str) -> ModelSpec:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in PRESETS:
        close = difflib.get_close_matches(name.lower(), list(PRESETS) + list(ALIASES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SpecError(f"model {name!r} is not a preset, alias or file; {hint}"
                        f"presets: {', '.join(PRESETS)}; aliases: {', '.join(ALIASES)}")
    return ModelSpec(**PRESETS[key])


def resolve_model(ref: str | dict | ModelSpec, *, base: Path | None = None) -> ModelSpec:
    """Preset/alias, path to model YAML or HF config.json, or an inline mapping."""
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, dict):
        return parse_spec(ModelSpec, ref, where="model")
    text = str(ref)
    path = ref_path(text, base)
    looks_like_file = text.endswith((".json", ".yaml", ".yml")) or "/" in text
    if looks_like_file or (path.exists() and path.is_file()):
        data = read_yaml(path, what="model file")   # YAML is a superset of JSON
        if isinstance(data, dict) and ("architectures" in data or "model_type" in data):
            return model_from_hf_config(data, source=str(path))
        return parse_spec(ModelSpec, data, where="model")
    return get_preset(text)


_HF_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe",
             "deepseek_v3", "deepseek_v2"}


def model_from_hf_config(cfg: dict, *, source: str = "config.json") -> ModelSpec:
    """Map a Hugging Face config.json (Llama/Mistral/Mixtral/Qwen2/Qwen3(-MoE)/DeepSeek-V3)."""
    mtype = str(cfg.get("model_type", "")).lower()
    if mtype not in _HF_TYPES:
        raise SpecError(f"{source}: model_type {mtype!r} is not supported; supported: "
                        f"{', '.join(sorted(_HF_TYPES))} (or write a model YAML, see README)")

    def need(key: str):
        if key not in cfg:
            raise SpecError(f"{source}: missing {key!r}, which a {mtype} config.json must have")
        return cfg[key]

    h, a = need("hidden_size"), need("num_attention_heads")
    spec: dict[str, Any] = dict(
        name=cfg.get("_name_or_path") or Path(source).parent.name or mtype,
        num_layers=need("num_hidden_layers"), hidden_size=h,
        ffn_hidden_size=need("intermediate_size"), num_attention_heads=a,
        num_kv_heads=cfg.get("num_key_value_heads") or a, vocab_size=need("vocab_size"),
        activation="swiglu", tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )
    head_dim = cfg.get("head_dim")
    if head_dim and head_dim != h // a:
        spec["kv_channels"] = head_dim
    if mtype == "mixtral":
        spec.update(num_experts=need("num_local_experts"), moe_top_k=need("num_experts_per_tok"))
    if mtype in ("qwen3_moe", "qwen2_moe"):
        spec.update(num_experts=need("num_experts"), moe_top_k=need("num_experts_per_tok"),
                    moe_ffn_hidden_size=need("moe_intermediate_size"))
        if cfg.get("shared_expert_intermediate_size"):
            # Qwen2-MoE: one shared expert of its own width, expressed in units of f_e
            spec["num_shared_experts"] = max(1, round(cfg["shared_expert_intermediate_size"]
                                                      / cfg["moe_intermediate_size"]))
    if mtype in ("deepseek_v3", "deepseek_v2"):
        spec.update(num_experts=need("n_routed_experts"), moe_top_k=need("num_experts_per_tok"),
                    moe_ffn_hidden_size=need("moe_intermediate_size"),
                    num_shared_experts=cfg.get("n_shared_experts") or 0,
                    num_dense_layers=cfg.get("first_k_dense_replace") or 0,
                    q_lora_rank=cfg.get("q_lora_rank"), kv_lora_rank=need("kv_lora_rank"),
                    qk_head_dim=need("qk_nope_head_dim"),
                    qk_pos_emb_head_dim=need("qk_rope_head_dim"), v_head_dim=need("v_head_dim"))
        spec.pop("num_kv_heads")
    theta = cfg.get("rope_theta")
    if isinstance(theta, (int, float)) and not isinstance(theta, bool) and theta > 0:
        spec["rotary_base"] = float(theta)
    seq = cfg.get("max_position_embeddings")
    if seq:
        spec["seq_length"] = min(int(seq), 8192)   # train at <= 8k unless told otherwise
    return parse_spec(ModelSpec, spec, where=f"model ({source})")
