"""Preset models, their aliases, and Hugging Face `config.json` import.

Each preset cites the public config it copies. `resolve_model` turns a preset name, alias,
model YAML path, HF config.json path or inline mapping into a `ModelSpec`.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

from planner.errors import SpecError, clip, short
from planner.io import load_json, read_text, read_yaml, ref_path, safe_is_dir, safe_is_file
from planner.specs import ModelSpec, parse_spec

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
    # 3 dense layers, 256 routed + 1 shared expert, top-8, 4k pre-training sequences; config.json
    # n_group 8, topk_group 4 (§2.1.2: node-limited routing, at most 4 nodes per token)
    "deepseek-v3": dict(name="DeepSeek-V3", num_layers=61, hidden_size=7168,
                        ffn_hidden_size=18432, num_attention_heads=128, vocab_size=129280,
                        seq_length=4096, num_experts=256, moe_top_k=8, moe_ffn_hidden_size=2048,
                        num_shared_experts=1, num_dense_layers=3, q_lora_rank=1536,
                        kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
                        v_head_dim=128, rotary_base=10000.0, moe_router_num_groups=8,
                        moe_router_group_topk=4, **_LLAMA),
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
        close = difflib.get_close_matches(name.lower()[:100], list(PRESETS) + list(ALIASES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SpecError(f"model {short(name)} is not a preset, alias or file; {hint}"
                        f"presets: {', '.join(PRESETS)}; aliases: {', '.join(ALIASES)}")
    return ModelSpec(**PRESETS[key])


def resolve_model(ref: str | dict | ModelSpec, *, base: Path | None = None) -> ModelSpec:
    """Preset/alias, path to a model YAML or HF config.json, a folder holding a config.json
    (a Hugging Face checkpoint), or an inline mapping."""
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, dict):
        return parse_spec(ModelSpec, ref, where="model")
    text = str(ref)
    path = ref_path(text, base)
    if safe_is_dir(path):
        inner = path / "config.json"
        if not safe_is_file(inner):
            raise SpecError(f"model folder {short(str(path), 200)} has no config.json; give a "
                            "Hugging Face checkpoint folder, a config.json, a model YAML or a "
                            "preset", field="model", value=text)
        path = inner
    looks_like_file = text.endswith((".json", ".yaml", ".yml")) or "/" in text
    if looks_like_file or safe_is_file(path):
        if path.suffix.lower() == ".json":
            data = load_json(read_text(path, what="model file"), what="model file",
                             source=short(str(path), 200))
        else:
            data = read_yaml(path, what="model file")   # YAML is a superset of JSON
        if isinstance(data, dict) and ("architectures" in data or "model_type" in data):
            return model_from_hf_config(data, source=str(path))
        return parse_spec(ModelSpec, data, where="model")
    return get_preset(text)


_HF_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe",
             "deepseek_v3", "deepseek_v2"}


class _HfConfig:
    """Typed access to a config.json: each value planner uses is checked where it is read,
    so a wrong type or a zero is one line naming the key (never a crash further on)."""

    def __init__(self, cfg: dict, source: str, mtype: str):
        self.cfg, self.source, self.mtype = cfg, short(source, 200), mtype

    def _bad(self, key: str, value: Any, want: str) -> SpecError:
        return SpecError(f"{self.source}: {key} = {short(value)}: must be {want}; fix the value",
                         field=key, value=value)

    def count(self, key: str, *, minimum: int = 1, required: bool = True) -> int | None:
        """A whole number >= minimum; absent (or null) is an error when required, else None."""
        value = self.cfg.get(key)
        if value is None:
            if required:
                raise SpecError(f"{self.source}: missing {key!r}, which a {self.mtype} "
                                "config.json must have", field=key, value=None)
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            want = "a positive whole number" if minimum == 1 else f"a whole number >= {minimum}"
            raise self._bad(key, value, want)
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._bad(key, value, "true or false")
        return value

    def positive(self, key: str) -> float | None:
        value = self.cfg.get(key)
        if value is None:
            return None
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value <= 0):
            raise self._bad(key, value, "a positive number")
        return float(value)

    def name(self) -> str:
        value = self.cfg.get("_name_or_path")
        if isinstance(value, str) and value.strip():
            return clip(value.strip(), 255)
        return self.mtype


def model_from_hf_config(cfg: dict, *, source: str = "config.json") -> ModelSpec:
    """Map a Hugging Face config.json (Llama/Mistral/Mixtral/Qwen2/Qwen3(-MoE)/DeepSeek-V3).

    The name is the config's own (`_name_or_path`, else `model_type`), not its folder's."""
    raw_type = cfg.get("model_type", "")
    mtype = raw_type.lower() if isinstance(raw_type, str) else ""
    if mtype not in _HF_TYPES:
        raise SpecError(f"{short(source, 200)}: model_type {short(raw_type)} is not supported; "
                        f"supported: {', '.join(sorted(_HF_TYPES))} (or write a model YAML, see "
                        "README)", field="model_type", value=raw_type)
    hf = _HfConfig(cfg, source, mtype)
    need = hf.count
    h, a = need("hidden_size"), need("num_attention_heads")
    spec: dict[str, Any] = dict(
        name=hf.name(),
        num_layers=need("num_hidden_layers"), hidden_size=h,
        ffn_hidden_size=need("intermediate_size"), num_attention_heads=a,
        num_kv_heads=need("num_key_value_heads", required=False) or a,
        vocab_size=need("vocab_size"),
        activation="swiglu", tied_embeddings=hf.flag("tie_word_embeddings", False),
    )
    head_dim = need("head_dim", required=False)
    if head_dim and head_dim != h // a:
        spec["kv_channels"] = head_dim
    if mtype == "mixtral":
        spec.update(num_experts=need("num_local_experts"), moe_top_k=need("num_experts_per_tok"))
    if mtype in ("qwen3_moe", "qwen2_moe"):
        spec.update(num_experts=need("num_experts"), moe_top_k=need("num_experts_per_tok"),
                    moe_ffn_hidden_size=need("moe_intermediate_size"))
        shared = need("shared_expert_intermediate_size", minimum=0, required=False)
        if shared:
            # Qwen2-MoE: one shared expert of its own width, expressed in units of f_e
            spec["num_shared_experts"] = max(1, round(shared / spec["moe_ffn_hidden_size"]))
    if mtype in ("deepseek_v3", "deepseek_v2"):
        spec.update(num_experts=need("n_routed_experts"), moe_top_k=need("num_experts_per_tok"),
                    moe_ffn_hidden_size=need("moe_intermediate_size"),
                    num_shared_experts=need("n_shared_experts", minimum=0, required=False) or 0,
                    num_dense_layers=need("first_k_dense_replace", minimum=0,
                                          required=False) or 0,
                    q_lora_rank=need("q_lora_rank", required=False),
                    kv_lora_rank=need("kv_lora_rank"),
                    qk_head_dim=need("qk_nope_head_dim"),
                    qk_pos_emb_head_dim=need("qk_rope_head_dim", minimum=0),
                    v_head_dim=need("v_head_dim"))
        groups, topk = need("n_group", required=False), need("topk_group", required=False)
        if groups and topk and topk < groups:      # group-limited routing (V3: 8 groups, 4)
            spec.update(moe_router_num_groups=groups, moe_router_group_topk=topk)
        spec.pop("num_kv_heads")
    theta = hf.positive("rope_theta")
    if theta is not None:
        spec["rotary_base"] = theta
    seq = need("max_position_embeddings", required=False)
    if seq:
        spec["seq_length"] = min(seq, 8192)   # train at <= 8k unless told otherwise
    return parse_spec(ModelSpec, spec, where=f"model ({short(source, 200)})")
