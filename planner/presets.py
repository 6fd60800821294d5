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
from planner.fields import ROUTER_SCORES
from planner.io import load_json, read_text, read_yaml, ref_path, safe_is_dir, safe_is_file
from planner.specs import ModelSpec, parse_spec

__all__ = [
    "PRESETS",
    "FAMILY_PRESETS",
    "FAMILY_ALIASES",
    "ALIASES",
    "PUBLISHED_PARAMS",
    "get_preset",
    "resolve_model",
    "model_from_hf_config",
]

_LLAMA = dict(activation="swiglu", tied_embeddings=False)
# Qwen3 (Qwen config.json files): heads of 128, the 151,936-token vocabulary, RoPE base 1e6;
# 4k stage-1 pre-training sequences (Qwen3 report, arXiv:2505.09388)
# and an RMSNorm on each query and key head (Qwen3Attention q_norm / k_norm)
# DeepSeek-V3's router (deepseek-ai/DeepSeek-V3 config.json: scoring_func sigmoid,
# routed_scaling_factor 2.5, topk_method noaux_tc: the auxiliary-loss-free bias, report §2.1.2)
_DEEPSEEK_ROUTER: dict[str, Any] = dict(
    moe_router_score="sigmoid", moe_router_scaling=2.5, moe_router_expert_bias=True
)
_QWEN3: dict[str, Any] = dict(
    kv_channels=128, vocab_size=151936, seq_length=4096, rotary_base=1e6, qk_norm="head", **_LLAMA
)

PRESETS: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-2-7b-hf config.json; Touvron et al. 2023 (arXiv:2307.09288): 4k context
    "llama2-7b": dict(
        name="Llama 2 7B",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        vocab_size=32000,
        seq_length=4096,
        rotary_base=10000.0,
        **_LLAMA,
    ),
    # meta-llama/Llama-2-13b-hf config.json
    "llama2-13b": dict(
        name="Llama 2 13B",
        num_layers=40,
        hidden_size=5120,
        ffn_hidden_size=13824,
        num_attention_heads=40,
        vocab_size=32000,
        seq_length=4096,
        rotary_base=10000.0,
        **_LLAMA,
    ),
    # meta-llama/Llama-2-70b-hf config.json (GQA, 8 KV heads)
    "llama2-70b": dict(
        name="Llama 2 70B",
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_kv_heads=8,
        vocab_size=32000,
        seq_length=4096,
        rotary_base=10000.0,
        **_LLAMA,
    ),
    # meta-llama/Meta-Llama-3-8B config.json; Llama 3 paper (arXiv:2407.21783) Table 3: 8k pre-training
    "llama3-8b": dict(
        name="Llama 3 8B",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_kv_heads=8,
        vocab_size=128256,
        seq_length=8192,
        rotary_base=500000.0,
        **_LLAMA,
    ),
    # meta-llama/Meta-Llama-3-70B config.json
    "llama3-70b": dict(
        name="Llama 3 70B",
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_kv_heads=8,
        vocab_size=128256,
        seq_length=8192,
        rotary_base=500000.0,
        **_LLAMA,
    ),
    # meta-llama/Llama-3.1-405B config.json; Llama 3 paper Table 3
    "llama3-405b": dict(
        name="Llama 3.1 405B",
        num_layers=126,
        hidden_size=16384,
        ffn_hidden_size=53248,
        num_attention_heads=128,
        num_kv_heads=8,
        vocab_size=128256,
        seq_length=8192,
        rotary_base=500000.0,
        **_LLAMA,
    ),
    # Brown et al. 2020 (arXiv:2005.14165) Table 2.1: 96 layers, d 12288, 96 heads, 2048 ctx;
    # GPT-2 BPE vocabulary (50257), tied embeddings, learned positions, 4h GELU MLP, biases
    "gpt3-175b": dict(
        name="GPT-3 175B",
        num_layers=96,
        hidden_size=12288,
        ffn_hidden_size=49152,
        num_attention_heads=96,
        vocab_size=50257,
        seq_length=2048,
        activation="gelu",
        tied_embeddings=True,
    ),
    # mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024 (arXiv:2401.04088): 32k context
    "mixtral-8x7b": dict(
        name="Mixtral 8x7B",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_kv_heads=8,
        vocab_size=32000,
        seq_length=32768,
        num_experts=8,
        moe_top_k=2,
        rotary_base=1e6,
        **_LLAMA,
    ),
    # mistralai/Mixtral-8x22B-v0.1 config.json (64k context)
    "mixtral-8x22b": dict(
        name="Mixtral 8x22B",
        num_layers=56,
        hidden_size=6144,
        ffn_hidden_size=16384,
        num_attention_heads=48,
        num_kv_heads=8,
        vocab_size=32768,
        seq_length=65536,
        num_experts=8,
        moe_top_k=2,
        rotary_base=1e6,
        **_LLAMA,
    ),
    # deepseek-ai/DeepSeek-V3 config.json; DeepSeek-V3 report (arXiv:2412.19437) §4.2: MLA,
    # 3 dense layers, 256 routed + 1 shared expert, top-8, 4k pre-training sequences; config.json
    # n_group 8, topk_group 4 (§2.1.2: node-limited routing, at most 4 nodes per token).
    # No MTP layer here although the published model has one (config.json
    # num_nextn_predict_layers 1; the report's MTP depth D = 1, §4.2): the preset plans the 671B
    # main model (the published total; the 14B MTP module is apart), and its training exports
    # stay what the goldens hold. The HF import reads the MTP layer, and the serving reader gives
    # the deepseek-ai checkpoint ids theirs (planner/frameworks/engines/checkpoint.py).
    "deepseek-v3": dict(
        name="DeepSeek-V3",
        num_layers=61,
        hidden_size=7168,
        ffn_hidden_size=18432,
        num_attention_heads=128,
        vocab_size=129280,
        seq_length=4096,
        num_experts=256,
        moe_top_k=8,
        moe_ffn_hidden_size=2048,
        num_shared_experts=1,
        num_dense_layers=3,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        rotary_base=10000.0,
        moe_router_num_groups=8,
        moe_router_group_topk=4,
        **_DEEPSEEK_ROUTER,
        **_LLAMA,
    ),
    # Qwen/Qwen3-30B-A3B config.json (tests/data/hf/Qwen3-30B-A3B): 48 layers of 2048, 32
    # heads of 128, 4 KV heads, 128 experts of 768 top-8 on every layer; 4k stage-1
    # pre-training as the 235B (Qwen3 report, arXiv:2505.09388)
    "qwen3-30b-a3b": dict(
        _QWEN3,
        name="Qwen3-30B-A3B",
        num_layers=48,
        hidden_size=2048,
        ffn_hidden_size=6144,
        num_attention_heads=32,
        num_kv_heads=4,
        num_experts=128,
        moe_top_k=8,
        moe_ffn_hidden_size=768,
    ),
    # Qwen/Qwen3-32B config.json (tests/data/hf/Qwen3-32B): 64 layers of 5120, 64 heads of 128,
    # 8 KV heads, MLP 25600
    "qwen3-32b": dict(
        _QWEN3,
        name="Qwen3-32B",
        num_layers=64,
        hidden_size=5120,
        ffn_hidden_size=25600,
        num_attention_heads=64,
        num_kv_heads=8,
    ),
    # Qwen/Qwen3-235B-A22B config.json; Qwen3 report (arXiv:2505.09388): 4k stage-1 pre-training
    "qwen3-235b-a22b": dict(
        _QWEN3,
        name="Qwen3-235B-A22B",
        num_layers=94,
        hidden_size=4096,
        ffn_hidden_size=12288,
        num_attention_heads=64,
        num_kv_heads=4,
        num_experts=128,
        moe_top_k=8,
        moe_ffn_hidden_size=1536,
    ),
}

# Shapes shared by a family's presets (each preset below sets what differs).
# gpt-oss (openai/gpt-oss-120b and -20b config.json): 2880 wide, 64 heads of 64, 8 KV heads,
# 128-token windows on every other layer, sinks, biases, top-4 MXFP4 experts of 2880; the
# experts' gated MLP is quick-GELU's, x * sigmoid(1.702 x), with its inputs clamped to
# swiglu_limit 7.0 and 1 added to the linear half (transformers GptOssExperts:
# `(up + 1) * glu`; Megatron-Bridge GPTOSSProvider: quick_gelu, glu_linear_offset 1.0,
# activation_func_clamp_value 7.0)
_GPT_OSS: dict[str, Any] = dict(
    activation="quick_geglu",
    glu_linear_offset=1.0,
    activation_clamp=7.0,
    tied_embeddings=False,
    hidden_size=2880,
    ffn_hidden_size=2880,
    num_attention_heads=64,
    num_kv_heads=8,
    kv_channels=64,
    vocab_size=201088,
    seq_length=4096,
    moe_top_k=4,
    moe_ffn_hidden_size=2880,
    window_size=128,
    attention_sinks=True,
    add_bias_linear=True,
    normalization="RMSNorm",
    position_embedding_type="rope",
    expert_precision="mxfp4",
    rotary_base=150000.0,
)
# Llama 4 (Scout and Maverick text_config): 48 layers of 5120, 40 heads, 8 KV heads, dense MLP
# 16384, experts of 8192 top-1 + 1 shared, chunked attention (8192) on 3 of 4 layers
_LLAMA4: dict[str, Any] = dict(
    num_layers=48,
    hidden_size=5120,
    ffn_hidden_size=16384,
    num_attention_heads=40,
    num_kv_heads=8,
    kv_channels=128,
    vocab_size=202048,
    seq_length=8192,
    moe_top_k=1,
    moe_ffn_hidden_size=8192,
    num_shared_experts=1,
    layer_types="(['chunked']*3+['full'])*12",
    attention_chunk_size=8192,
    rotary_base=500000.0,
    qk_norm="l2",  # use_qk_norm: Llama4TextL2Norm on the RoPE layers' queries and keys
    moe_router_score="sigmoid",  # Llama4TextMoe: sigmoid of the top-1 logit, no bias
    **_LLAMA,
)
# GLM-4.5 and GLM-4.6 (zai-org config.json, glm4_moe): one shape
_GLM: dict[str, Any] = dict(
    num_layers=92,
    hidden_size=5120,
    ffn_hidden_size=12288,
    num_attention_heads=96,
    num_kv_heads=8,
    kv_channels=128,
    vocab_size=151552,
    seq_length=4096,
    num_experts=160,
    moe_top_k=8,
    moe_ffn_hidden_size=1536,
    num_shared_experts=1,
    num_dense_layers=3,
    rotary_base=1e6,
    rotary_percent=0.5,
    qk_norm="head",  # use_qk_norm true (GLM-4.5-Air's config.json: false)
    add_qkv_bias=True,  # attention_bias true: q, k, v biases (Glm4MoeAttention)
    # Glm4MoeTopkRouter: sigmoid scores with e_score_correction_bias; routed_scaling_factor 2.5
    **_DEEPSEEK_ROUTER,
    **_LLAMA,
)
# Qwen3-Next and Qwen3.5: gated full attention (heads of 256, 2 KV heads) every 4th layer,
# Gated DeltaNet (16 QK heads of 128, V heads of 128) on the others, 1 shared expert, 25% RoPE
_QWEN_HYBRID: dict[str, Any] = dict(
    num_kv_heads=2,
    kv_channels=256,
    seq_length=4096,
    num_shared_experts=1,
    linear_num_key_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    attention_output_gate=True,
    rotary_base=1e7,
    rotary_percent=0.25,
    qk_norm="head",
    norm_zero_centered=True,  # Qwen3NextRMSNorm / Qwen3_5MoeRMSNorm: x * (1 + weight)
    moe_shared_expert_gate=True,  # the shared expert's sigmoid gate (shared_expert_gate)
    **_LLAMA,
)

# The model families of 2026 (docs/config.md "Layer pattern"): kept apart from PRESETS so the
# figures tests/test_presets.py pins stay those of the older presets; get_preset reads both.
# what Gemma 3's sizes share (Gemma3TextConfig's defaults and the files' 1,024-token window)
_GEMMA3_COMMON: dict[str, Any] = dict(
    vocab_size=262208,
    seq_length=4096,
    activation="geglu",
    tied_embeddings=True,
    rotary_base=1e6,
    rotary_base_local=10000.0,  # rope_local_base_freq: the window layers' base
    window_size=1024,
    qk_norm="head",
    norm_placement="sandwich",  # Gemma3DecoderLayer's post-attention and post-MLP norms
    norm_zero_centered=True,  # Gemma3RMSNorm: x * (1 + weight)
)

FAMILY_PRESETS: dict[str, dict[str, Any]] = {
    # moonshotai/Kimi-K2-Instruct config.json (model_type kimi_k2, DeepSeek-V3's architecture):
    # 384 routed experts, 1 dense layer, 64 heads; Kimi K2 report (arXiv:2507.20534): 4k
    # pre-training sequences
    "kimi-k2": dict(
        name="Kimi K2",
        num_layers=61,
        hidden_size=7168,
        ffn_hidden_size=18432,
        num_attention_heads=64,
        vocab_size=163840,
        seq_length=4096,
        num_experts=384,
        moe_top_k=8,
        moe_ffn_hidden_size=2048,
        num_shared_experts=1,
        num_dense_layers=1,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        rotary_base=50000.0,
        # moonshotai/Kimi-K2-Instruct config.json: DeepSeek-V3's router, routed_scaling_factor 2.827
        **dict(_DEEPSEEK_ROUTER, moe_router_scaling=2.827),
        **_LLAMA,
    ),
    # deepseek-ai/DeepSeek-V3.2-Exp config.json (model_type deepseek_v32): DeepSeek-V3 plus
    # the lightning indexer (index_n_heads 64, index_head_dim 128, index_topk 2048) on every
    # layer; its report (DeepSeek_V3_2.pdf in that repo): continued training at 128k
    "deepseek-v3.2": dict(
        PRESETS["deepseek-v3"],
        name="DeepSeek-V3.2",
        seq_length=131072,
        dsa_index_topk=2048,
        dsa_index_heads=64,
        dsa_index_head_dim=128,
    ),
    # openai/gpt-oss-120b config.json: 36 layers alternating 128-token sliding windows with
    # full attention, sinks, biases, 128 experts top-4 in MXFP4; initial_context_length 4096
    "gpt-oss-120b": dict(
        _GPT_OSS,
        name="gpt-oss-120b",
        num_layers=36,
        num_experts=128,
        layer_types="['sliding','full']*18",
    ),
    # openai/gpt-oss-20b config.json: 24 layers, 32 experts, otherwise as gpt-oss-120b
    "gpt-oss-20b": dict(
        _GPT_OSS,
        name="gpt-oss-20b",
        num_layers=24,
        num_experts=32,
        layer_types="['sliding','full']*12",
    ),
    # meta-llama/Llama-4-Scout-17B-16E config.json text_config: 16 experts + 1 shared
    # (intermediate_size 8192) on every layer, dense MLP 16384, chunked attention of 8192 on
    # the rope layers (3 of 4; every 4th is a NoPE full-attention layer)
    "llama4-scout": dict(_LLAMA4, name="Llama 4 Scout 17B-16E", num_experts=16),
    # meta-llama/Llama-4-Maverick-17B-128E config.json text_config: 128 experts on every
    # second layer (interleave_moe_layer_step 2: layers 1, 3, ... are MoE)
    "llama4-maverick": dict(
        _LLAMA4, name="Llama 4 Maverick 17B-128E", num_experts=128, moe_layer_freq="([0]+[1]*1)*24"
    ),
    # zai-org/GLM-4.5 config.json (model_type glm4_moe): 92 layers, 3 dense, 160 experts + 1
    # shared, top-8, 96 heads of 128, 8 KV heads
    "glm-4.5": dict(_GLM, name="GLM-4.5"),
    # zai-org/GLM-4.6 config.json: GLM-4.5's shape (a longer context window)
    "glm-4.6": dict(_GLM, name="GLM-4.6"),
    # zai-org/GLM-4.5-Air config.json (tests/data/hf/GLM-4.5-Air): 46 layers of 4096, 1 dense
    # (MLP 10944), 128 experts of 1408 top-8 + 1 shared, 96 heads of 128, 8 KV heads
    "glm-4.5-air": dict(
        _GLM,
        name="GLM-4.5-Air",
        num_layers=46,
        hidden_size=4096,
        ffn_hidden_size=10944,
        num_experts=128,
        moe_ffn_hidden_size=1408,
        num_dense_layers=1,
        qk_norm="none",
        moe_router_scaling=None,  # routed_scaling_factor 1.0
    ),
    # MiniMaxAI/MiniMax-M2 config.json (model_type minimax_m2; tests/data/hf/MiniMax-M2): 62
    # layers of 3072, softmax attention on every layer (48 heads of 128, 8 KV heads, RoPE on 64
    # of each head's 128), 256 experts of 1536 top-8, no shared expert, vocabulary 200,064. As
    # the DeepSeek-V3 preset, the preset plans the main model; its config.json reads the three
    # MTP modules (use_mtp).
    "minimax-m2": dict(
        name="MiniMax-M2",
        num_layers=62,
        hidden_size=3072,
        ffn_hidden_size=1536,
        num_attention_heads=48,
        num_kv_heads=8,
        kv_channels=128,
        vocab_size=200064,
        seq_length=4096,
        num_experts=256,
        moe_top_k=8,
        moe_ffn_hidden_size=1536,
        rotary_base=5e6,
        rotary_percent=0.5,
        qk_norm="layer",  # use_qk_norm with qk_norm_type per_layer: one RMSNorm over all heads
        moe_router_score="sigmoid",  # scoring_func sigmoid
        moe_router_expert_bias=True,  # use_routing_bias (e_score_correction_bias)
        **_LLAMA,
    ),
    # google/gemma-3-12b-it config.json (model_type gemma3; tests/data/hf/gemma-3-12b-it: the
    # language model's text_config, with Gemma3TextConfig's defaults where it is silent): 48
    # layers of 3840, 16 heads of 256 and 8 KV heads, a GeGLU MLP of 15,360, tied embeddings of
    # 262,208, five 1,024-token sliding-window layers to one global. The vision encoder (SigLIP,
    # 417M, Gemma 3 report arXiv:2503.19786 Table 1) is not planned.
    "gemma-3-12b": dict(
        name="Gemma-3-12B",
        num_layers=48,
        hidden_size=3840,
        ffn_hidden_size=15360,
        num_attention_heads=16,
        num_kv_heads=8,
        kv_channels=256,
        layer_types="(['sliding']*5+['full'])*8",
        **_GEMMA3_COMMON,
    ),
    # google/gemma-3-27b-it: 62 layers of 5376, 32 heads of 128 and 16 KV heads, GeGLU of
    # 21,504, otherwise as 12B (62 = 10 x 6 + 2: the last two layers sliding, transformers'
    # (i + 1) % 6 rule); its 25.60B non-embedding parameters are the report's Table 1 figure
    # (test_gemma3_non_embedding_counts_by_hand)
    "gemma-3-27b": dict(
        name="Gemma-3-27B",
        num_layers=62,
        hidden_size=5376,
        ffn_hidden_size=21504,
        num_attention_heads=32,
        num_kv_heads=16,
        kv_channels=128,
        layer_types="(['sliding']*5+['full'])*10+['sliding']*2",
        softmax_scale=168**-0.5,  # query_pre_attn_scalar 168 = 5376 / 32, heads of 128
        **_GEMMA3_COMMON,
    ),
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json (model_type qwen3_next): 48 layers, three
    # Gated DeltaNet layers (16 QK / 32 V heads of 128) then one gated full-attention layer
    # (16 heads of 256, 2 KV heads); 512 experts top-10 + 1 shared of 512
    "qwen3-next-80b-a3b": dict(
        _QWEN_HYBRID,
        name="Qwen3-Next-80B-A3B",
        num_layers=48,
        hidden_size=2048,
        ffn_hidden_size=5120,
        num_attention_heads=16,
        vocab_size=151936,
        num_experts=512,
        moe_top_k=10,
        moe_ffn_hidden_size=512,
        layer_types="(['linear']*3+['full'])*12",
        linear_num_value_heads=32,
    ),
    # Qwen/Qwen3.5-35B-A3B (model_type qwen3_5_moe, the language model under text_config):
    # transformers' Qwen3_5MoeTextConfig defaults (configuration_qwen3_5_moe.py, checkpoint
    # Qwen/Qwen3.5-35B-A3B): 40 layers of 2048, three Gated DeltaNet layers (16 QK / 32 V heads
    # of 128) then one gated full-attention layer (16 heads of 256, 2 KV heads), 256 experts
    # top-8 + 1 shared of 512 on every layer (no dense MLP, no intermediate_size), vocabulary
    # 248,320. The vision encoder is not counted (tests/test_families.py FAMILIES).
    "qwen3.5-35b-a3b": dict(
        _QWEN_HYBRID,
        name="Qwen3.5-35B-A3B",
        num_layers=40,
        hidden_size=2048,
        num_attention_heads=16,
        vocab_size=248320,
        num_experts=256,
        moe_top_k=8,
        moe_ffn_hidden_size=512,
        layer_types="(['linear']*3+['full'])*10",
        linear_num_value_heads=32,
    ),
    # Qwen/Qwen3.5-397B-A17B model card: 60 layers of 4096, 15 x (3 x Gated DeltaNet + 1 x
    # gated attention), DeltaNet 16 QK / 64 V heads of 128, attention 32 Q / 2 KV heads of 256,
    # 512 experts top-10 + 1 shared of 1024 on every layer, vocabulary 248,320; trained with
    # multi-token prediction (text_config mtp_num_hidden_layers 1). As the DeepSeek-V3 preset,
    # the preset plans the main model (mtp_num_layers 0); its config.json reads the MTP layer.
    "qwen3.5-397b-a17b": dict(
        _QWEN_HYBRID,
        name="Qwen3.5-397B-A17B",
        num_layers=60,
        hidden_size=4096,
        num_attention_heads=32,
        vocab_size=248320,
        num_experts=512,
        moe_top_k=10,
        moe_ffn_hidden_size=1024,
        layer_types="(['linear']*3+['full'])*15",
        linear_num_value_heads=64,
    ),
}

ALIASES = {
    "7b": "llama2-7b",
    "8b": "llama3-8b",
    "13b": "llama2-13b",
    "70b": "llama3-70b",
    "175b": "gpt3-175b",
    "405b": "llama3-405b",
    "671b": "deepseek-v3",
    "llama3.1-405b": "llama3-405b",
    "llama3.1-8b": "llama3-8b",
    "llama3.1-70b": "llama3-70b",
    "gpt3": "gpt3-175b",
    "qwen3-235b": "qwen3-235b-a22b",
    "qwen3-30b": "qwen3-30b-a3b",
}
FAMILY_ALIASES = {
    "kimi-k2-instruct": "kimi-k2",
    "deepseek-v3.2-exp": "deepseek-v3.2",
    "llama4-17b-16e": "llama4-scout",
    "llama4-17b-128e": "llama4-maverick",
    "qwen3-next": "qwen3-next-80b-a3b",
    "glm4.5": "glm-4.5",
    "glm4.6": "glm-4.6",
    "glm4.5-air": "glm-4.5-air",
    "minimax-m2.1": "minimax-m2",
    "gemma3-12b": "gemma-3-12b",
    "gemma-3-12b-it": "gemma-3-12b",
    "gemma3-27b": "gemma-3-27b",
    "gemma-3-27b-it": "gemma-3-27b",
    "qwen3.5": "qwen3.5-397b-a17b",
    "qwen3.5-397b": "qwen3.5-397b-a17b",
    "qwen3.5-35b": "qwen3.5-35b-a3b",
}

# Published totals (model cards / papers), for the tests and `planner models`.
PUBLISHED_PARAMS = {
    "llama2-7b": 6.74e9,
    "llama2-13b": 13.0e9,
    "llama2-70b": 69.0e9,
    "llama3-8b": 8.03e9,
    "llama3-70b": 70.6e9,
    "llama3-405b": 405.9e9,
    "gpt3-175b": 175e9,
    "mixtral-8x7b": 46.7e9,
    "mixtral-8x22b": 141e9,
    "deepseek-v3": 671e9,
    "qwen3-30b-a3b": 30.5e9,
    "qwen3-32b": 32.8e9,
    "qwen3-235b-a22b": 235e9,
    # the 2026 families (sources and the two documented gaps: tests/test_families.py FAMILIES)
    "gpt-oss-120b": 116.83e9,
    "gpt-oss-20b": 20.91e9,
    "llama4-maverick": 400e9,
    "llama4-scout": 109e9,
    "glm-4.5": 355e9,
    "glm-4.6": 355e9,
    "glm-4.5-air": 106e9,
    "minimax-m2": 230e9,
    "gemma-3-12b": 11.771e9,  # the language model: Gemma 3 report Table 1, 1,012M + 10,759M
    "gemma-3-27b": 27.016e9,  # 1,416M + 25,600M
    "qwen3-next-80b-a3b": 80e9,
    "deepseek-v3.2": 671e9,
    "kimi-k2": 1.04e12,
    "qwen3.5-35b-a3b": 35e9,
    "qwen3.5-397b-a17b": 397e9,
}


def get_preset(name: str) -> ModelSpec:
    key = ALIASES.get(name.lower(), FAMILY_ALIASES.get(name.lower(), name.lower()))
    if key in FAMILY_PRESETS:
        return ModelSpec(**FAMILY_PRESETS[key])
    if key not in PRESETS:
        names = list(PRESETS) + list(FAMILY_PRESETS)
        close = difflib.get_close_matches(name.lower()[:100], names + list(ALIASES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SpecError(
            f"model {short(name)} is not a preset, alias or file; {hint}"
            f"presets: {', '.join(names)}; aliases: {', '.join(ALIASES)}"
        )
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
            raise SpecError(
                f"model folder {short(str(path), 200)} has no config.json; give a "
                "Hugging Face checkpoint folder, a config.json, a model YAML or a "
                "preset",
                field="model",
                value=text,
            )
        path = inner
    looks_like_file = text.endswith((".json", ".yaml", ".yml")) or "/" in text
    if looks_like_file or safe_is_file(path):
        if path.suffix.lower() == ".json":
            data = load_json(
                read_text(path, what="model file"), what="model file", source=short(str(path), 200)
            )
        else:
            data = read_yaml(path, what="model file")  # YAML is a superset of JSON
        if isinstance(data, dict) and ("architectures" in data or "model_type" in data):
            return model_from_hf_config(data, source=str(path))
        return parse_spec(ModelSpec, data, where="model")
    return get_preset(text)


_HF_TYPES = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "qwen2_moe",
    "deepseek_v3",
    "deepseek_v2",
    "kimi_k2",
    "deepseek_v32",
    "gpt_oss",
    "llama4",
    "glm4_moe",
    "glm_moe_dsa",
    "qwen3_next",
    "qwen3_5_moe",
    "minimax_m2",
    "gemma3",
    "gemma3_text",
}
_DEEPSEEK_LIKE = {"deepseek_v3", "deepseek_v2", "kimi_k2", "deepseek_v32"}
_NESTED = {"llama4", "qwen3_5_moe", "gemma3"}  # the language model's keys under text_config
_GEMMA3 = {"gemma3", "gemma3_text"}
_GEMMA3_DEFAULTS: dict[str, Any] = {
    # transformers' Gemma3TextConfig.__init__ defaults (huggingface/transformers
    # src/transformers/models/gemma3/configuration_gemma3.py): the published config.json files
    # leave them out (google/gemma-3-12b-it's text_config gives hidden_size, intermediate_size,
    # the head and layer counts, rope_scaling and sliding_window only)
    "vocab_size": 262_208,
    "head_dim": 256,
    "num_key_value_heads": 4,
    "hidden_activation": "gelu_pytorch_tanh",
    "tie_word_embeddings": True,
    "rope_theta": 1_000_000.0,
    "attention_bias": False,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "rope_local_base_freq": 10_000.0,
    "query_pre_attn_scalar": 256,
}
_GELU_NAMES = {"gelu_pytorch_tanh", "gelu", "gelu_new", "gelu_fast", "gelu_tanh"}
_QWEN_HYBRID = {"qwen3_next", "qwen3_5_moe"}


_HF_GATED_ACTS = {
    "silu": "swiglu",
    "swish": "swiglu",
    **{g: "geglu" for g in _GELU_NAMES},
    "relu": "reglu",
}
"""hidden_act of the gated-MLP families (LlamaMLP-like: act(gate_proj(x)) * up_proj(x)) ->
ModelSpec.activation; transformers' ACT2FN names."""


def _linear_biases(hf: _HfConfig, mtype: str) -> dict[str, Any]:
    """LlamaAttention / Qwen3Attention put a bias on q, k, v and o with `attention_bias`, and
    LlamaMLP on its three matrices with `mlp_bias`: both (every linear layer biased) is
    add_bias_linear; one without the other has no planner field (add_bias_linear biases
    every linear layer, add_qkv_bias q, k and v alone), so it is one line naming it."""
    if mtype not in ("llama", "qwen3", "qwen3_moe"):
        return {}
    attn = hf.flag("attention_bias", False)
    mlp = hf.flag("mlp_bias", False) if mtype == "llama" else False  # Qwen3's MLP has none
    if attn and mlp:
        return {"add_bias_linear": True}
    if attn or mlp:
        key = "attention_bias" if attn else "mlp_bias"
        raise hf._bad(
            key,
            True,
            "false here: biases on the "
            + ("attention's q, k, v, o" if attn else "MLP")
            + " alone have no planner field (add_bias_linear biases every linear layer, "
            "add_qkv_bias q, k and v); write a model YAML with the nearest",
        )
    return {}


def _gated_act(hf: _HfConfig) -> str:
    """The gated MLP's activation from `hidden_act` (the families' default silu where absent);
    a name planner cannot write is one line naming it."""
    act = hf.cfg.get("hidden_act", "silu")
    if not isinstance(act, str) or act not in _HF_GATED_ACTS:
        raise hf._bad("hidden_act", act, f"one of {', '.join(_HF_GATED_ACTS)}")
    return _HF_GATED_ACTS[act]


class _HfConfig:
    """Typed access to a config.json: each value planner uses is checked where it is read,
    so a wrong type or a zero is one line naming the key (never a crash further on)."""

    def __init__(self, cfg: dict, source: str, mtype: str):
        self.cfg, self.source, self.mtype = cfg, short(source, 200), mtype

    def _bad(self, key: str, value: Any, want: str) -> SpecError:
        return SpecError(
            f"{self.source}: {key} = {short(value)}: must be {want}; fix the value",
            field=key,
            value=value,
        )

    def count(self, key: str, *, minimum: int = 1, required: bool = True) -> int | None:
        """A whole number >= minimum; absent (or null) is an error when required, else None."""
        value = self.cfg.get(key)
        if value is None:
            if required:
                raise SpecError(
                    f"{self.source}: missing {key!r}, which a {self.mtype} config.json must have",
                    field=key,
                    value=None,
                )
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
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
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
        raise SpecError(
            f"{short(source, 200)}: model_type {short(raw_type)} is not supported; "
            f"supported: {', '.join(sorted(_HF_TYPES))} (or write a model YAML, see "
            "README)",
            field="model_type",
            value=raw_type,
        )
    outer = _HfConfig(cfg, source, mtype)
    outer_name = outer.name()
    # the wrapper's tie_word_embeddings (Qwen3_5MoeConfig has one) where text_config has none
    outer_tied = outer.flag("tie_word_embeddings", False)
    if mtype in _NESTED and "text_config" in cfg:
        inner = cfg["text_config"]
        if not isinstance(inner, dict):
            raise SpecError(
                f"{short(source, 200)}: text_config = {short(inner)}: must be a "
                "mapping of the language model's keys; fix the file",
                field="text_config",
                value=inner,
            )
        cfg = dict(inner, _name_or_path=cfg.get("_name_or_path", inner.get("_name_or_path")))
    if mtype in _GEMMA3:
        cfg = {**_GEMMA3_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    hf = _HfConfig(cfg, source, mtype)
    need = hf.count
    h, a = need("hidden_size"), need("num_attention_heads")
    ffn_key = "intermediate_size_mlp" if mtype == "llama4" else "intermediate_size"
    # Qwen3.5's Qwen3_5MoeTextConfig has no intermediate_size: every layer is MoE, and
    # _family_2026 demands it only where mlp_only_layers / decoder_sparse_step make dense layers
    spec: dict[str, Any] = dict(
        name=outer_name if hf.name() == mtype else hf.name(),
        num_layers=need("num_hidden_layers"),
        hidden_size=h,
        ffn_hidden_size=need(ffn_key, required=mtype not in _QWEN_HYBRID),
        num_attention_heads=a,
        num_kv_heads=need("num_key_value_heads", required=False) or a,
        vocab_size=need("vocab_size"),
        activation=_gated_act(hf) if mtype not in _GEMMA3 else "geglu",
        tied_embeddings=hf.flag("tie_word_embeddings", outer_tied),
    )
    spec["qk_norm"] = _qk_norm(hf, mtype)
    # query / key / value biases alone: Qwen2Attention's always, Glm4MoeAttention's with
    # attention_bias (its o_proj has none)
    if mtype in ("qwen2", "qwen2_moe") or (
        mtype in ("glm4_moe", "glm_moe_dsa") and hf.flag("attention_bias", False)
    ):
        spec["add_qkv_bias"] = True
    spec.update(_linear_biases(hf, mtype))
    head_dim = need("head_dim", required=False)
    if head_dim and head_dim != h // a:
        spec["kv_channels"] = head_dim
    if mtype == "mixtral":
        spec.update(num_experts=need("num_local_experts"), moe_top_k=need("num_experts_per_tok"))
    if mtype in ("qwen3_moe", "qwen2_moe"):
        spec.update(
            num_experts=need("num_experts"),
            moe_top_k=need("num_experts_per_tok"),
            moe_ffn_hidden_size=need("moe_intermediate_size"),
        )
        shared = need("shared_expert_intermediate_size", minimum=0, required=False)
        if shared:
            # Qwen2-MoE: one shared expert of its own width, expressed in units of f_e, behind
            # a sigmoid gate (Qwen2MoeSparseMoeBlock.shared_expert_gate)
            spec["num_shared_experts"] = max(1, round(shared / spec["moe_ffn_hidden_size"]))
            spec["moe_shared_expert_gate"] = True
    if mtype in _DEEPSEEK_LIKE or (mtype == "glm_moe_dsa" and "kv_lora_rank" in cfg):
        spec.update(
            num_experts=need("n_routed_experts"),
            moe_top_k=need("num_experts_per_tok"),
            moe_ffn_hidden_size=need("moe_intermediate_size"),
            num_shared_experts=need("n_shared_experts", minimum=0, required=False) or 0,
            num_dense_layers=need("first_k_dense_replace", minimum=0, required=False) or 0,
            q_lora_rank=need("q_lora_rank", required=False),
            kv_lora_rank=need("kv_lora_rank"),
            qk_head_dim=need("qk_nope_head_dim"),
            qk_pos_emb_head_dim=need("qk_rope_head_dim", minimum=0),
            v_head_dim=need("v_head_dim"),
        )
        groups, topk = need("n_group", required=False), need("topk_group", required=False)
        if groups and topk and topk < groups:  # group-limited routing (V3: 8 groups, 4)
            spec.update(moe_router_num_groups=groups, moe_router_group_topk=topk)
        spec.pop("num_kv_heads")
        # DeepSeek-V3 config.json: num_nextn_predict_layers 1, the MTP module (report §2.2)
        mtp = _mtp_layers(hf)
        if mtp:
            spec["mtp_num_layers"] = mtp
    if mtype not in ("deepseek_v3", "deepseek_v2") and mtype not in (
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "qwen2_moe",
    ):
        spec.update(_family_2026(hf, mtype, spec))
    else:
        spec.update(_classic_window(hf, mtype, spec["num_layers"]))
    if spec.get("num_experts"):
        spec.update(_router(hf, mtype))
    theta, factor = _rope(hf)
    if theta is not None:
        spec["rotary_base"] = theta
    if factor is not None:
        spec["rotary_percent"] = factor
    seq = need("max_position_embeddings", required=False)
    if seq:
        spec["seq_length"] = min(seq, 8192)  # train at <= 8k unless told otherwise
    return parse_spec(ModelSpec, spec, where=f"model ({short(source, 200)})")


_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


def _mtp_layers(hf: _HfConfig) -> int:
    """Multi-token-prediction depth: num_nextn_predict_layers (DeepSeek-V3, Kimi K2, GLM-4.5,
    Qwen3-Next) or mtp_num_hidden_layers (Qwen3.5's text_config); two that differ are an error."""
    found = {k: v for k in _MTP_KEYS if (v := hf.count(k, minimum=0, required=False)) is not None}
    if len(set(found.values())) > 1:
        a, b = _MTP_KEYS
        raise SpecError(
            f"{hf.source}: {a} = {found[a]} and {b} = {found[b]} disagree on the "
            "multi-token-prediction depth; keep one of them",
            field=b,
            value=found[b],
        )
    return next(iter(found.values()), 0)


def _rope(hf: _HfConfig) -> tuple[float | None, float | None]:
    """RoPE theta and the rotated share: rope_theta and partial_rotary_factor at the top level
    or in rope_parameters (newer transformers write rope_parameters: rope_theta,
    partial_rotary_factor, mrope_*). The factor (0 < f <= 1) becomes rotary_percent, which
    changes no planner number (RoPE has no parameters and runs among the elementwise kernels,
    docs/cost-model.md "Layer kinds") but is written by the exports."""
    rope = hf.cfg.get("rope_parameters")
    if rope is not None and not isinstance(rope, dict):
        raise hf._bad("rope_parameters", rope, "a mapping (rope_type, rope_theta, ...)")
    nested = _HfConfig(rope or {}, hf.source, hf.mtype)
    factors = {}
    for where, key in ((hf, "partial_rotary_factor"), (nested, "partial_rotary_factor")):
        f = where.positive(key)
        name = key if where is hf else f"rope_parameters.{key}"
        if f is not None and f > 1:
            raise hf._bad(name, f, "a fraction of the head dim in (0, 1]")
        if f is not None:
            factors[name] = f
    if len(set(factors.values())) > 1:
        raise SpecError(
            f"{hf.source}: partial_rotary_factor = {factors['partial_rotary_factor']} "
            "and rope_parameters.partial_rotary_factor = "
            f"{factors['rope_parameters.partial_rotary_factor']} disagree; keep one "
            "of them",
            field="rope_parameters.partial_rotary_factor",
            value=factors["rope_parameters.partial_rotary_factor"],
        )
    factor = next(iter(factors.values()), None)
    top, inner = hf.positive("rope_theta"), nested.positive("rope_theta")
    if top is not None and inner is not None and top != inner:
        raise SpecError(
            f"{hf.source}: rope_theta = {short(top)} and rope_parameters.rope_theta "
            f"= {short(inner)} disagree; keep one of them",
            field="rope_parameters.rope_theta",
            value=inner,
        )
    return (top if top is not None else inner), factor


def _family_2026(hf: _HfConfig, mtype: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The per-layer keys of the 2026 families (docs/config.md "Layer pattern"):
    Kimi K2 and DeepSeek-V3.2 (DeepSeek-V3's keys; V3.2 adds index_topk, index_n_heads,
    index_head_dim), gpt-oss (layer_types, sliding_window, sinks, biases, MXFP4 experts from
    quantization_config), Llama 4 (text_config: intermediate_size for the experts and the
    shared expert, intermediate_size_mlp for dense layers, interleave_moe_layer_step or
    moe_layers, attention_chunk_size on the RoPE layers of no_rope_layers), GLM-4.5/4.6
    (n_routed_experts, first_k_dense_replace; glm_moe_dsa adds the index_* keys), Qwen3-Next
    and Qwen3.5 (layer_types or full_attention_interval, linear_* keys, gated attention by
    attn_output_gate (on unless false), decoder_sparse_step, mlp_only_layers; intermediate_size
    only where they make a layer dense, as Qwen3.5 has none). num_nextn_predict_layers or
    mtp_num_hidden_layers (Qwen3.5) becomes mtp_num_layers, and Qwen3.5's
    mtp_use_dedicated_embeddings mtp_dedicated_embeddings."""
    need, cfg = hf.count, hf.cfg
    L = spec["num_layers"]
    out: dict[str, Any] = {}
    mtp = _mtp_layers(hf)
    if mtp:
        out["mtp_num_layers"] = mtp
    if hf.flag("mtp_use_dedicated_embeddings", False):  # Qwen3.5: an embedding per MTP layer
        out["mtp_dedicated_embeddings"] = True
    if mtype in ("deepseek_v32", "glm_moe_dsa") and cfg.get("index_topk") is not None:
        out.update(
            dsa_index_topk=need("index_topk"),
            dsa_index_heads=need("index_n_heads"),
            dsa_index_head_dim=need("index_head_dim"),
        )
    if mtype == "gpt_oss":
        f = need("intermediate_size")
        out.update(
            num_experts=need("num_local_experts"),
            moe_top_k=need("num_experts_per_tok"),
            moe_ffn_hidden_size=f,
            attention_sinks=True,
            add_bias_linear=hf.flag("attention_bias", True),
            normalization="RMSNorm",
            position_embedding_type="rope",
            # transformers GptOssExperts: (up + 1) * gate * sigmoid(1.702 gate), both halves
            # clamped to swiglu_limit (GptOssConfig's default 7.0)
            activation="quick_geglu",
            glu_linear_offset=1.0,
            activation_clamp=hf.positive("swiglu_limit") or 7.0,
        )
        out.update(_layer_types(hf, L, default="full"))
        quant = cfg.get("quantization_config")
        if isinstance(quant, dict) and str(quant.get("quant_method", "")).lower() == "mxfp4":
            out["expert_precision"] = "mxfp4"
    elif mtype == "llama4":
        out.update(
            num_experts=need("num_local_experts"),
            moe_top_k=need("num_experts_per_tok"),
            moe_ffn_hidden_size=need("intermediate_size"),
            num_shared_experts=1,
        )
        moe_idx = cfg.get("moe_layers")
        if moe_idx is not None:
            if not isinstance(moe_idx, list) or any(
                type(i) is not int or not 0 <= i < L for i in moe_idx
            ):
                raise hf._bad("moe_layers", moe_idx, f"a list of layer indices below {L}")
            pattern = [1 if i in set(moe_idx) else 0 for i in range(L)]
        else:
            step = need("interleave_moe_layer_step", required=False) or 1
            # HF Llama4TextConfig: moe_layers = range(step - 1, L, step)
            pattern = [1 if (i + 1) % step == 0 else 0 for i in range(L)]
        if 0 in pattern:
            out["moe_layer_freq"] = tuple(pattern)
        chunk = need("attention_chunk_size", required=False)
        if chunk:
            rope = cfg.get("no_rope_layers")
            if not rope:
                every = need("no_rope_layer_interval", required=False) or 4
                rope = [int((i + 1) % every != 0) for i in range(L)]
            if not isinstance(rope, list) or len(rope) != L or any(v not in (0, 1) for v in rope):
                raise hf._bad("no_rope_layers", rope, f"a 0/1 list of {L} entries")
            out.update(
                attention_chunk_size=chunk,
                layer_types=tuple("chunked" if v else "full" for v in rope),
            )
    elif mtype in ("glm4_moe", "glm_moe_dsa") and "kv_lora_rank" not in cfg:
        out.update(
            num_experts=need("n_routed_experts"),
            moe_top_k=need("num_experts_per_tok"),
            moe_ffn_hidden_size=need("moe_intermediate_size"),
            num_shared_experts=need("n_shared_experts", minimum=0, required=False) or 0,
            num_dense_layers=need("first_k_dense_replace", minimum=0, required=False) or 0,
        )
    elif mtype == "minimax_m2":
        # MiniMax-M2 (MiniMaxAI/MiniMax-M2 config.json, transformers' MiniMaxM2Config): every
        # layer MoE, intermediate_size the experts' width, attn_type_list 1 = softmax attention
        # on every layer (0 is MiniMax-01's lightning attention, which M2 has none of), the MTP
        # modules num_mtp_modules x mtp_transformer_layers where use_mtp, RoPE on rotary_dim of
        # each head
        kinds = cfg.get("attn_type_list")
        if kinds is not None:
            if (
                not isinstance(kinds, list)
                or len(kinds) != L
                or any(k not in (0, 1) for k in kinds)
            ):
                raise hf._bad("attn_type_list", kinds, f"a 0/1 list of {L} entries")
            if 0 in kinds:
                lightning = [i for i, k in enumerate(kinds) if k == 0]
                raise SpecError(
                    f"{hf.source}: attn_type_list has lightning-attention layers (0) at "
                    f"{short(lightning)}: planner has no cost for MiniMax-01 / M1's lightning "
                    "attention; to approximate it, write a model YAML with layer_types "
                    "'linear' (Gated DeltaNet's cost) for those layers, see docs/config.md",
                    field="attn_type_list",
                    value=short(lightning),
                )
        f_e = need("intermediate_size")
        out.update(
            num_experts=need("num_local_experts"),
            moe_top_k=need("num_experts_per_tok"),
            moe_ffn_hidden_size=f_e,
        )
        shared = need("shared_intermediate_size", minimum=0, required=False)
        if shared:
            out["num_shared_experts"] = max(1, round(shared / f_e))
        if hf.flag("use_mtp", False):
            depth = need("mtp_transformer_layers", required=False) or 1
            out["mtp_num_layers"] = need("num_mtp_modules") * depth
        rotary = need("rotary_dim", required=False)
        head = spec.get("kv_channels") or spec["hidden_size"] // spec["num_attention_heads"]
        if rotary:
            if rotary > head:
                raise hf._bad("rotary_dim", rotary, f"at most the head dim ({head})")
            out["rotary_percent"] = rotary / head
    elif mtype in _GEMMA3:
        # Gemma 3 (Gemma3TextConfig; the defaults above where the file is silent): a GeGLU MLP
        # (hidden_activation gelu_pytorch_tanh), tied embeddings, no biases, and five
        # sliding-window layers to one global: layer_types where given, else transformers'
        # own rule from sliding_window_pattern P (layer i global when (i + 1) % P == 0).
        # Gemma3DecoderLayer normalizes each sublayer's input and output (the sandwich:
        # post_attention_layernorm, post_feedforward_layernorm); the window layers rotate
        # with rope_local_base_freq, the global ones with rope_theta; the logits scale is
        # 1/sqrt(query_pre_attn_scalar) (Gemma3Attention.scaling), carried where it is not
        # 1/sqrt(head_dim). The sqrt(h) embedding scale is not counted apart.
        act = cfg.get("hidden_activation")
        if not isinstance(act, str) or act not in _GELU_NAMES:
            raise hf._bad("hidden_activation", act, f"one of {', '.join(sorted(_GELU_NAMES))}")
        every = need("sliding_window_pattern")
        scalar = hf.positive("query_pre_attn_scalar")
        head = spec.get("kv_channels") or spec["hidden_size"] // spec["num_attention_heads"]
        out.update(
            activation="geglu",
            add_bias_linear=hf.flag("attention_bias", False),
            normalization="RMSNorm",
            position_embedding_type="rope",
            window_size=need("sliding_window"),
            norm_placement="sandwich",
            norm_zero_centered=True,  # Gemma3RMSNorm: x * (1 + weight)
            rotary_base_local=hf.positive("rope_local_base_freq"),
        )
        if scalar is not None and scalar != head:
            out["softmax_scale"] = scalar**-0.5
        out.update(
            _layer_types(
                hf,
                L,
                default=tuple("full" if (i + 1) % every == 0 else "sliding" for i in range(L)),
            )
        )
        if not {"sliding", "sliding_attention"} & set(out.get("layer_types", ())):
            out.pop("window_size")  # every layer global: no window to carry
            out.pop("rotary_base_local")
    elif mtype in ("qwen3_next", "qwen3_5_moe"):
        f_e = need("moe_intermediate_size")
        out.update(
            num_experts=need("num_experts"),
            moe_top_k=need("num_experts_per_tok"),
            moe_ffn_hidden_size=f_e,
            attention_output_gate=hf.flag("attn_output_gate", True),
            linear_num_key_heads=need("linear_num_key_heads"),
            linear_num_value_heads=need("linear_num_value_heads"),
            linear_key_head_dim=need("linear_key_head_dim"),
            linear_value_head_dim=need("linear_value_head_dim"),
            linear_conv_kernel_dim=need("linear_conv_kernel_dim", required=False) or 4,
        )
        shared = need("shared_expert_intermediate_size", minimum=0, required=False)
        if shared:  # behind a sigmoid gate (Qwen3NextSparseMoeBlock.shared_expert_gate)
            out.update(num_shared_experts=max(1, round(shared / f_e)), moe_shared_expert_gate=True)
        out["norm_zero_centered"] = True  # Qwen3NextRMSNorm: x * (1 + weight)
        step = need("decoder_sparse_step", required=False) or 1
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or any(type(i) is not int for i in only):
            raise hf._bad("mlp_only_layers", only, "a list of layer indices")
        pattern = [0 if (i in only or (i + 1) % step) else 1 for i in range(L)]
        if 0 in pattern:
            out["moe_layer_freq"] = tuple(pattern)
            if spec.get("ffn_hidden_size") is None:  # no silent width for the dense layers
                dense = [i for i, x in enumerate(pattern) if not x]
                raise SpecError(
                    f"{hf.source}: missing 'intermediate_size', the dense MLP width of layers "
                    f"{short(dense)} (mlp_only_layers / decoder_sparse_step); add it",
                    field="intermediate_size",
                    value=None,
                )
        every = need("full_attention_interval", required=False) or 4
        out.update(
            _layer_types(
                hf, L, default=tuple("full" if (i + 1) % every == 0 else "linear" for i in range(L))
            )
        )
    return out


_QK_HEAD_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "gemma3", "gemma3_text"}
"""Families whose attention always normalizes each query and key head (transformers'
Qwen3Attention, Qwen3NextAttention, Qwen3_5MoeAttention, Gemma3Attention: q_norm / k_norm)."""


def _qk_norm(hf: _HfConfig, mtype: str) -> str:
    """ModelSpec.qk_norm: the families above; GLM-4.5's use_qk_norm (per head); Llama 4's
    use_qk_norm (Llama4TextL2Norm, weightless; transformers' default true); MiniMax-M2's
    use_qk_norm with qk_norm_type per_layer (one RMSNorm over all heads) or per_head."""
    if mtype in _QK_HEAD_NORM:
        return "head"
    if mtype in ("glm4_moe", "glm_moe_dsa"):
        return "head" if hf.flag("use_qk_norm", False) else "none"
    if mtype == "llama4":
        return "l2" if hf.flag("use_qk_norm", True) else "none"
    if mtype == "minimax_m2" and hf.flag("use_qk_norm", False):
        kind = hf.cfg.get("qk_norm_type", "per_layer")
        if kind not in ("per_layer", "per_head"):
            raise hf._bad("qk_norm_type", kind, "per_layer or per_head")
        return "layer" if kind == "per_layer" else "head"
    return "none"


_SIGMOID_ROUTERS = {"deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "glm_moe_dsa", "llama4"}
"""Families whose router scores experts with a sigmoid whatever the file says (transformers'
DeepseekV3TopkRouter and Glm4MoeTopkRouter, with e_score_correction_bias; Llama4TextMoe's
top-1 sigmoid, without)."""


def _router(hf: _HfConfig, mtype: str) -> dict[str, Any]:
    """ModelSpec's router fields: `scoring_func` where a file gives it (DeepSeek remote code,
    MiniMax-M2), else sigmoid for the families above and softmax for the others;
    `routed_scaling_factor` (1 = none; transformers' DeepseekV3Config default 2.5,
    Glm4MoeConfig's 1.0); the auxiliary-loss-free expert bias for DeepSeek-V3's family
    (topk_method noaux_tc, transformers' only method) and GLM (always), MiniMax-M2's
    use_routing_bias. DeepSeek-V2's softmax routers (greedy, group_limited_greedy) have none."""
    score = hf.cfg.get("scoring_func", "sigmoid" if mtype in _SIGMOID_ROUTERS else "softmax")
    if score not in ROUTER_SCORES:
        raise hf._bad("scoring_func", score, "softmax or sigmoid")
    v3 = mtype in ("deepseek_v3", "deepseek_v32", "kimi_k2")
    default_scale = 2.5 if v3 else None
    scale = hf.positive("routed_scaling_factor") or default_scale
    if v3:
        bias = hf.cfg.get("topk_method", "noaux_tc") == "noaux_tc"
    elif mtype in ("glm4_moe", "glm_moe_dsa"):
        bias = True
    elif mtype == "minimax_m2":
        bias = hf.flag("use_routing_bias", False)
    else:
        bias = False
    # norm_topk_prob (the top-k weights renormalised): transformers' configs default it to
    # false for Qwen2-MoE, Qwen3-MoE and DeepSeek-V2, true for the others that read it; a
    # softmax router without it is Megatron's pre-softmax one, a sigmoid router without it
    # has no Megatron form (its top-k weights are always renormalised)
    norm = True
    if mtype in _NORM_TOPK_READERS:
        norm = hf.flag("norm_topk_prob", mtype not in ("qwen2_moe", "qwen3_moe", "deepseek_v2"))
    if not norm and score == "sigmoid":
        raise hf._bad(
            "norm_topk_prob",
            False,
            "true with a sigmoid router (Megatron-Core renormalises its top-k weights; no "
            "export can write it)",
        )
    return {
        "moe_router_score": score,
        "moe_router_scaling": None if scale in (None, 1.0) else scale,
        "moe_router_expert_bias": bias and score == "sigmoid",
        "moe_router_pre_softmax": not norm,
    }


_NORM_TOPK_READERS = frozenset(
    {
        "qwen2_moe",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_5_moe",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "kimi_k2",
        "glm4_moe",
        "glm_moe_dsa",
    }
)
"""The families whose transformers router reads norm_topk_prob (Mixtral's and gpt-oss's always
renormalise the top-k; Llama 4 routes to one expert)."""


_QWEN_WINDOWED = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}


def _classic_window(hf: _HfConfig, mtype: str, L: int) -> dict[str, Any]:
    """Sliding-window attention of the Llama-era families, as transformers applies it: a
    layer_types list where the file has one; else Mistral's and Mixtral's sliding_window (when
    not null) on every layer (MistralAttention passes it to every layer), and Qwen2's / Qwen3's
    only with use_sliding_window, on the layers from max_window_layers on (Qwen2Config: the
    first max_window_layers layers attend in full); Llama has none."""
    if hf.cfg.get("layer_types") is not None:
        return _layer_types(hf, L, default="full")
    if mtype in ("mistral", "mixtral"):
        window = hf.count("sliding_window", required=False)
        return {"layer_types": ("sliding",) * L, "window_size": window} if window else {}
    if mtype in _QWEN_WINDOWED and hf.flag("use_sliding_window", False):
        window = hf.count("sliding_window")
        full = hf.count("max_window_layers", minimum=0, required=False)
        full = L if full is None else min(full, L)
        if full >= L:
            return {}
        kinds = tuple("full" if i < full else "sliding" for i in range(L))
        return {"layer_types": kinds, "window_size": window}
    return {}


def _layer_types(hf: _HfConfig, L: int, *, default: str | tuple[str, ...]) -> dict[str, Any]:
    """layer_types (HF's full_attention / sliding_attention / linear_attention per layer) and
    sliding_window; `default` where the config lists no layer_types."""
    types = hf.cfg.get("layer_types")
    out: dict[str, Any] = {}
    if types is None:
        if isinstance(default, tuple):
            out["layer_types"] = default
        return out
    if not isinstance(types, list) or len(types) != L or not all(isinstance(t, str) for t in types):
        raise hf._bad("layer_types", types, f"a list of {L} layer kinds")
    out["layer_types"] = tuple(types)
    if any(t == "sliding_attention" for t in types):
        out["window_size"] = hf.count("sliding_window")
    return out
