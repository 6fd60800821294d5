"""Megatron-Bridge export: a plan as a recipe override file (a `ConfigContainer` in YAML, the
form `ConfigContainer.to_yaml()` writes and recipes merge with `--config-file`), read back
by `planner validate` through `planner.frameworks.nemo.bridge` (format `megatron-bridge`).

Sections (Megatron-Bridge 0.6.2 megatron/bridge/training/config.py): `model` (the
GPTModelProvider: a preset provider class by `_target_` where the model is one, else the
Megatron-Core shape fields; the parallel sizes, recompute, offload, MoE dispatch, CUDA graphs),
`train` (micro/global batch), `dataset.seq_length`, `ddp`, `optimizer` and
`mixed_precision` (a recipe name). What Megatron-Core (the engine Bridge runs) refuses is
refused here too (`refusals`, the same list the search filter reads); Bridge's provider
takes a float rotary_base, so that one Megatron-LM flag limit does not apply.
"""

from __future__ import annotations

import yaml

from planner.errors import InfeasibleError
from planner.frameworks.megatron.writer import refusals as megatron_refusals
from planner.frameworks.megatron.writer import variant_keys
from planner.frameworks.nemo.writer import _BRIDGE_FP8, _config_fields, _Dumper, _fsdp, _parallel
from planner.frameworks.writing import gemma3_local_run, header_lines, pattern_keys
from planner.layout import Layout

__all__ = [
    "render",
    "bridge_config",
    "refusals",
    "runs_as",
    "PROVIDERS",
    "GEMMA3_PROVIDER",
    "gemma3_keys",
]

# planner presets -> Megatron-Bridge 0.6.2 model provider classes (megatron.bridge.models);
# the reader's table (bridge._PRESETS) maps them back
PROVIDERS = {
    "llama3-8b": "megatron.bridge.models.Llama3ModelProvider8B",
    "llama3-70b": "megatron.bridge.models.Llama3ModelProvider70B",
    "llama3-405b": "megatron.bridge.models.Llama31ModelProvider405B",
    "llama2-7b": "megatron.bridge.models.Llama2ModelProvider7B",
    "llama2-13b": "megatron.bridge.models.Llama2ModelProvider13B",
    "llama2-70b": "megatron.bridge.models.Llama2ModelProvider70B",
    "mixtral-8x7b": "megatron.bridge.models.MixtralModelProvider8x7B",
    "mixtral-8x22b": "megatron.bridge.models.MixtralModelProvider8x22B",
    "deepseek-v3": "megatron.bridge.models.DeepSeekV3ModelProvider",
    "qwen3-235b-a22b": "megatron.bridge.models.Qwen3MoEModelProvider235B_A22B",
    "gemma-3-12b": "megatron.bridge.models.Gemma3ModelProvider12B",
    "gemma-3-27b": "megatron.bridge.models.Gemma3ModelProvider27B",
}
GEMMA3_PROVIDER = "megatron.bridge.models.Gemma3ModelProvider"
"""The provider of a sandwich-norm (Gemma 3) model that is not a preset: its gemma3_layer_spec
builds the norms on the attention and MLP outputs (TERowParallelLinearLayerNorm), the
zero-centred norm weights and the sqrt(h) embedding scale (Gemma3LanguageModelEmbedding),
megatron/bridge/models/gemma/gemma3_provider.py."""
_PREFIX = "cannot export to Megatron-Bridge: "


def refusals(job, layout: Layout) -> list[str]:
    """Why Megatron-Bridge cannot run this layout (Megatron-Core's own refusals), one message
    each; empty when it runs. The export and `planner plan --framework megatron-bridge` read
    this list."""
    return megatron_refusals(job, layout, bridge=True)


def runs_as(job, layout: Layout) -> Layout:
    """The layout as this export runs it (what reading it back gives): the CP communication
    type means nothing at cp 1."""
    return layout.with_(cp_comm_type=layout.cp_comm_type if layout.cp > 1 else "p2p")


def _preset(model) -> str | None:
    """The preset with a provider class of its own that this model is (the 2026 families'
    presets too: Gemma 3's size classes)."""
    from planner.presets import get_preset

    return next((k for k in PROVIDERS if get_preset(k) == model), None)


# the Megatron-Core callables of planner's activations, written as Megatron-Bridge's to_yaml
# writes a function ({_target_: module.name, _call_: false}: utils/yaml_utils.py); its
# activation_map.py maps HF's gelu_pytorch_tanh to megatron.core.activations.fast_gelu
ACTIVATION_FUNCS = {
    "swiglu": "torch.nn.functional.silu",
    "geglu": "megatron.core.activations.fast_gelu",
    "reglu": "torch.nn.functional.relu",
    "quick_geglu": "megatron.core.activations.quick_gelu",
    "relu": "torch.nn.functional.relu",
    "squared_relu": "megatron.core.activations.squared_relu",
}


def _activation_func(m) -> dict:
    """`activation_func` for a GPTModelProvider, whose default is F.gelu (TransformerConfig):
    nothing for gelu; gpt-oss's GLU offset and clamp as its GPTOSSProvider sets them
    (glu_linear_offset, activation_func_clamp_value)."""
    target = ACTIVATION_FUNCS.get(m.activation)
    out: dict = {"activation_func": {"_target_": target, "_call_": False}} if target else {}
    if m.glu_linear_offset:
        out["glu_linear_offset"] = m.glu_linear_offset
    if m.activation_clamp is not None:
        out["activation_func_clamp_value"] = m.activation_clamp
    return out


def _shape(job) -> dict:
    m, tr = job.model, job.training
    d: dict = {
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "ffn_hidden_size": m.ffn,
        "num_attention_heads": m.num_attention_heads,
        "num_query_groups": m.kv_heads,
        "kv_channels": m.kv_channels,
        "vocab_size": m.vocab_size,
        "gated_linear_unit": m.gated,
        **_activation_func(m),
        **({"qk_layernorm": True} if m.qk_norm == "head" else {}),
        **({"qk_l2_norm": True} if m.qk_norm == "l2" else {}),
        "share_embeddings_and_output_weights": m.tied_embeddings,
        "normalization": "RMSNorm" if m.norm == "RMSNorm" else "LayerNorm",
        **({"layernorm_zero_centered_gamma": True} if m.norm_zero_centered else {}),
        "add_bias_linear": m.bias,
        **({"add_qkv_bias": True} if m.qkv_bias_only else {}),
        "position_embedding_type": m.position_embedding,
    }
    if m.is_moe:
        d.update(
            num_moe_experts=m.num_experts,
            moe_router_topk=m.moe_top_k,
            moe_ffn_hidden_size=m.expert_ffn,
        )
        if m.num_shared_experts:
            d["moe_shared_expert_intermediate_size"] = m.num_shared_experts * m.expert_ffn
        if m.moe_shared_expert_gate:
            d["moe_shared_expert_gate"] = True
        if m.moe_capacity_factor != 1.0:
            d["moe_expert_capacity_factor"] = m.moe_capacity_factor
    if m.is_mla:
        d["multi_latent_attention"] = True
        for k in (
            "q_lora_rank",
            "kv_lora_rank",
            "qk_head_dim",
            "qk_pos_emb_head_dim",
            "v_head_dim",
        ):
            if getattr(m, k, None) is not None:
                d[k] = getattr(m, k)
    if m.softmax_scale is not None:
        d["softmax_scale"] = m.softmax_scale
    d.update(pattern_keys(m))
    variant = variant_keys(m)
    if "experimental_attention_variant" in variant:
        # a GPTModelProvider's default_layer_spec builds standard attention on every layer:
        # the variants need Megatron-Core's block spec (as Bridge's Qwen3-Next bridge sets it)
        d["transformer_layer_spec"] = {"_target_": EXPERIMENTAL_BLOCK_SPEC, "_call_": False}
    d.update(variant)
    del tr
    return d


EXPERIMENTAL_BLOCK_SPEC = (
    "megatron.core.models.gpt.experimental_attention_variant_module_specs."
    "get_transformer_block_with_experimental_attention_variant_spec"
)
"""The block spec of Megatron-Core's experimental attention variants (Gated DeltaNet, DSA),
written as Bridge's to_yaml writes a function."""


def gemma3_keys(m) -> dict:
    """Gemma 3's layer in the form Gemma3ModelProvider takes it (gemma3_provider.py): the
    window an int (its Gemma3TEDotProductAttention makes it (window, 0) on the window
    layers), the layer pattern `interleaved_attn_pattern` (n, 1) (layer l, from 1, global
    when l % (n + 1) == 0) instead of window_attn_skip_freq, `rotary_base` (local, global)
    (provide() unpacks it: a single number fails there) and `softmax_scale` always (the
    class's default is 1/sqrt(256), Gemma 3 12B's head dim)."""
    base = m.rotary_base or 10000.0
    out: dict = {"interleaved_attn_pattern": [gemma3_local_run(m), 1]}
    if m.window_size:
        out["window_size"] = m.window_size
    out["rotary_base"] = [m.rotary_base_local or base, base]
    out["softmax_scale"] = m.softmax_scale or m.head_dim**-0.5
    return out


def bridge_config(job, layout: Layout) -> dict:
    """The ConfigContainer mapping (model, train, dataset, ddp, optimizer, mixed_precision)."""
    found = refusals(job, layout)
    if found:
        raise InfeasibleError(_PREFIX + found[0])
    tr = job.training
    preset = _preset(job.model)
    sandwich = job.model.norm_placement == "sandwich"
    model: dict = {"_target_": PROVIDERS[preset]} if preset else _shape(job)
    if sandwich and not preset:
        model = {"_target_": GEMMA3_PROVIDER, **model}
    model["seq_length"] = tr.seq_length
    model.update({k: v for k, v in _parallel(job, layout).items() if v is not None})
    if layout.cp > 1:
        model["cp_comm_type"] = layout.cp_comm_type
    model.update({k: v for k, v in _config_fields(job, layout) if v is not None})
    if sandwich:
        for key in ("window_size", "window_attn_skip_freq"):
            model.pop(key, None)
        model.update(gemma3_keys(job.model))
    if job.model.is_moe and "overlap_moe_expert_parallel_comm" not in model:
        model["overlap_moe_expert_parallel_comm"] = False
    if tr.precision == "fp8":
        name, gather = _BRIDGE_FP8[tr.recipe]
    else:
        name, gather = {"bf16": "bf16_mixed", "fp16": "fp16_mixed"}[tr.precision], None
    ddp: dict = {
        "grad_reduce_in_fp32": layout.grad_reduce_in_fp32,
        "overlap_grad_reduce": layout.overlap_grad_reduce,
        "overlap_param_gather": layout.overlap_param_gather,
        "use_distributed_optimizer": layout.zero >= 1,
    }
    if _fsdp(layout):
        ddp.update(use_megatron_fsdp=True, data_parallel_sharding_strategy=_fsdp(layout))
    optimizer: dict = {"use_distributed_optimizer": layout.zero >= 1}
    if (layout.exp_avg_dtype, layout.exp_avg_sq_dtype) != ("fp32", "fp32"):
        optimizer.update(
            use_precision_aware_optimizer=True,
            exp_avg_dtype=layout.exp_avg_dtype,
            exp_avg_sq_dtype=layout.exp_avg_sq_dtype,
        )
    out: dict = {
        "model": model,
        "train": {
            "micro_batch_size": layout.micro_batch_size,
            "global_batch_size": tr.global_batch_size,
        },
        "dataset": {"seq_length": tr.seq_length},
        "ddp": ddp,
        "optimizer": optimizer,
        "mixed_precision": name,
    }
    if layout.tp_comm_overlap and layout.sp and layout.tp > 1:
        out["comm_overlap"] = {"tp_comm_overlap": True}
    fp8_gather = tr.precision == "fp8" and gather is not None and gather != tr.fp8_param_gather
    if fp8_gather:
        # a recipe name cannot carry the override: a MixedPrecisionConfig mapping instead
        out["mixed_precision"] = _mixed_precision_mapping(job, layout)
    elif not layout.grad_reduce_in_fp32:
        # the recipe's grad_reduce_in_fp32 (True) would override the ddp section's
        out["mixed_precision"] = _mixed_precision_mapping(job, layout)
    return out


def _mixed_precision_mapping(job, layout: Layout) -> dict:
    tr = job.training
    mp: dict = {
        "bf16": tr.precision != "fp16",
        "fp16": tr.precision == "fp16",
        "grad_reduce_in_fp32": layout.grad_reduce_in_fp32,
    }
    if tr.precision == "fp8":
        mp.update(fp8="hybrid", fp8_recipe=tr.recipe, fp8_param_gather=tr.fp8_param_gather)
    return mp


def render(job, layout: Layout, *, estimate=None) -> str:
    cfg = bridge_config(job, layout)
    head = header_lines(
        job, layout, "Megatron-Bridge recipe overrides (ConfigContainer YAML)", estimate=estimate
    )
    head += [
        "",
        "Merge over a Megatron-Bridge recipe (e.g. run_recipe.py --config-file this.yaml): "
        "data, tokenizer, optimizer hyper-parameters and checkpointing come from it.",
        "torchrun sets the world size: launch on the plan's GPUs "
        f"({job.num_gpus}); `planner validate --gpus {job.num_gpus}` reads this file back.",
    ]
    if job.model.is_mla and "_target_" not in cfg["model"]:
        head.append(
            "Multi-latent attention: merge over an MLA recipe (DeepSeek-V3's or Moonlight's: "
            "their providers are MLATransformerConfigs); a GPTModelProvider has no "
            "q_lora_rank / kv_lora_rank and would reject them."
        )
    if cfg["model"].get("_target_") == GEMMA3_PROVIDER:
        head.append(
            "Gemma3ModelProvider: the published Gemma 3 checkpoints (4B and up) also scale the "
            "global layers' RoPE linearly by 8 (config.json rope_scaling), which planner does "
            "not read; set rope_scaling_factor 8.0 to continue from one (the classes "
            "Gemma3ModelProvider4B / 12B / 27B set it)."
        )
    body = yaml.dump(cfg, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return "\n".join([f"# {line}".rstrip() for line in head] + [body.rstrip()]) + "\n"
