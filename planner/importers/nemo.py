"""NeMo: a NeMo 1 / launcher YAML (`trainer.*`, `model.*`) or a NeMo 2 recipe dumped to YAML
(`trainer.strategy.*`, `data.*`, `model.config.*`) -> Job + Layout.

NeMo 1 passes `trainer:` to Lightning's Trainer (an unknown key is a TypeError: an error here)
and reads `model:` with `cfg.get(...)` (an unknown key is ignored: a warning here). The keys
NeMo knows but that do not change a plan are listed in `_MODEL_IGNORED` so they are neither
used nor reported. NeMo 2: the parallel sizes of MegatronStrategy, the batch of the data module,
the model's shape from `model.config` (or its preset class, e.g. Llama3Config70B); unknown
strategy keys are warned about, other NeMo 2 sections are not checked key by key.

Rules with NeMo's severities: SP with TP 1 is switched off by NeMo 1 (warning) and rejected by
NeMo 2 (error); the recompute keys follow Megatron-core's TransformerConfig checks (errors);
`trainer.accumulate_grad_batches` must be 1 (NeMo accumulates through the global batch).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from planner.errors import SpecError, Violation
from planner.importers.common import (Imported, Overrides, accounted_split, hardware_of,
                                      inline_model, make_job, resolve_world, unknown_key,
                                      vocab_from_tokenizer)
from planner.layout import Layout
from planner.presets import get_preset, resolve_model
from planner.specs import ModelSpec

__all__ = ["load", "looks_like_nemo", "is_nemo2"]

_TOP = frozenset({"defaults", "hydra", "run", "name", "restore_from_path", "trainer",
                  "exp_manager", "model", "env_vars", "cluster", "cluster_type", "data", "optim",
                  "log", "resume", "peft", "tokenizer", "_target_"})
# Lightning 2.x Trainer(...) arguments
_TRAINER = frozenset({
    "accelerator", "strategy", "devices", "num_nodes", "precision", "logger", "callbacks",
    "fast_dev_run", "max_epochs", "min_epochs", "max_steps", "min_steps", "max_time",
    "limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
    "overfit_batches", "val_check_interval", "check_val_every_n_epoch", "num_sanity_val_steps",
    "log_every_n_steps", "enable_checkpointing", "enable_progress_bar", "enable_model_summary",
    "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm", "deterministic",
    "benchmark", "inference_mode", "use_distributed_sampler", "profiler", "detect_anomaly",
    "barebones", "plugins", "sync_batchnorm", "reload_dataloaders_every_n_epochs",
    "default_root_dir", "model_registry", "_target_",
})
_MODEL_USED = frozenset({
    "micro_batch_size", "global_batch_size", "tensor_model_parallel_size",
    "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
    "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
    "sequence_parallel", "encoder_seq_length", "max_position_embeddings", "num_layers",
    "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "activation", "normalization", "bias", "position_embedding_type",
    "share_embeddings_and_output_weights", "num_moe_experts", "moe_router_topk",
    "moe_ffn_hidden_size", "tokenizer", "activations_checkpoint_granularity",
    "activations_checkpoint_method", "activations_checkpoint_num_layers", "fp8", "optim", "data",
    "ub_tp_comm_overlap", "fsdp", "fsdp_sharding_strategy", "cp_comm_type",
    "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
})
# Known to NeMo 1 (megatron_gpt_config.yaml and the launcher's training configs), irrelevant to
# a plan: numerics, fusions, initialisation, logging, checkpointing, data loading, fp8 recipe.
_MODEL_IGNORED = frozenset({
    "mcore_gpt", "rampup_batch_size", "init_method_std", "use_scaled_init_method",
    "hidden_dropout", "attention_dropout", "ffn_dropout", "apply_query_key_layer_scaling",
    "layernorm_epsilon", "do_layer_norm_weight_decay", "make_vocab_size_divisible_by",
    "pre_process", "post_process", "persist_layer_norm", "headscale", "transformer_block_type",
    "openai_gelu", "normalize_attention_scores", "rotary_percentage", "rotary_base",
    "scale_positional_embedding", "seq_len_interpolation_factor", "apply_rope_fusion",
    "attention_type", "native_amp_init_scale", "native_amp_growth_interval", "hysteresis",
    "fp32_residual_connection", "fp16_lm_cross_entropy", "megatron_amp_O2",
    "grad_allreduce_chunk_size_mb", "grad_div_ar_fusion", "gradient_accumulation_fusion",
    "bias_activation_fusion", "bias_dropout_add_fusion", "masked_softmax_fusion",
    "cross_entropy_loss_fusion", "get_attention_mask_from_fusion", "seed", "resume_from_checkpoint",
    "use_cpu_initialization", "onnx_safe", "apex_transformer_log_level", "gradient_as_bucket_view",
    "sync_batch_comm", "num_micro_batches_with_partial_activation_checkpoints",
    "activations_checkpoint_layers_per_pipeline", "disable_layer_norm_checkpointing",
    "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "enable_vboost",
    "deterministic_mode", "overlap_p2p_comm", "batch_p2p_comm", "gc_interval", "nsys_profile",
    "memory_profile", "fp8_e4m3", "fp8_hybrid", "fp8_margin", "fp8_interval",
    "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_wgrad", "fp8_params",
    "reduce_amax", "use_emha", "ub_tp_comm_overlap_cfg", "tp_comm_overlap_ag",
    "tp_comm_overlap_rs", "tp_comm_bulk_wgrad", "tp_comm_bulk_dgrad",
    "use_flash_attention", "transformer_engine", "name", "precision", "restore_from_path",
    "tokenizer_model", "mcore_customization_config", "moe_grouped_gemm",
    "moe_token_dispatcher_type", "moe_aux_loss_coeff", "moe_router_load_balancing_type",
    "moe_z_loss_coeff", "moe_input_jitter_eps", "moe_token_dropping", "moe_per_layer_logging",
    "moe_router_pre_softmax", "moe_shared_expert_intermediate_size",
    "num_layers_per_virtual_pipeline_stage",
    "pipeline_model_parallel_split_rank", "encoder_tp_comm_overlap", "context_parallel_comm",
    "validation_drop_last", "sample_weight", "log_token_counts", "position_interpolation_factor",
    "rotary_interleaved", "share_embeddings", "embedding_multiplier_scale",
    "fsdp_grad_reduce_dtype",
    "fsdp_sharded_checkpoint", "fsdp_use_orig_params", "use_te_rng_tracker", "dist_ckpt_format",
    "dist_ckpt_load_on_device", "dist_ckpt_parallel_save", "dist_ckpt_parallel_save_within_dp",
    "dist_ckpt_parallel_load", "dist_ckpt_torch_dist_multiproc",
    "dist_ckpt_assume_constant_structure",
    "dist_ckpt_parallel_dist_opt", "dist_ckpt_load_strictness", "expert_model_parallel_comm",
    "num_tokentypes", "use_transformer_engine_op_fuser", "apply_query_key_layer_scaling_fused",
    "hidden_dropout_prob", "overlap_param_gather_with_optimizer_step", "align_param_gather",
    "optimizer_cpu_offload", "optimizer_offload_fraction", "peft", "answer_only_loss",
    "steps_per_epoch", "nemo_path", "fp8_recipe", "fp8_dot_product_attention",
    "fp8_multi_head_attention", "first_pipeline_num_layers", "last_pipeline_num_layers",
})
_STRATEGY = frozenset({
    "_target_", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "context_parallel_size", "sequence_parallel",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "moe_extended_tp",
    "encoder_tensor_model_parallel_size", "encoder_pipeline_model_parallel_size",
    "pipeline_model_parallel_split_rank", "pipeline_model_parallel_comm_backend",
    "microbatch_group_size_per_vp_stage", "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage", "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "use_te_rng_tracker", "use_tp_pp_dp_mapping",
    "pipeline_dtype", "use_distributed_optimizer", "ddp", "fsdp", "gradient_as_bucket_view",
    "find_unused_parameters", "cluster_environment", "checkpoint_io", "lazy_init",
    "process_group_backend", "timeout", "setup_optimizers", "init_model_parallel",
    "replace_progress_bar", "progress_interval", "ckpt_load_optimizer", "ckpt_save_optimizer",
    "ckpt_async_save", "ckpt_torch_dist_multiproc", "ckpt_assume_constant_structure",
    "ckpt_parallel_save", "ckpt_parallel_save_within_dp", "ckpt_parallel_load",
    "ckpt_parallel_save_optim", "ckpt_load_directly_on_device", "ckpt_load_strictness",
    "ckpt_load_main_params", "ckpt_include_optimizer", "save_ckpt_format", "load_ckpt_format",
    "restore_config", "megatron_log_level", "data_sampler", "parallel_devices",
    "output_data_idx", "use_sharp", "use_gloo_process_groups",
    "hierarchical_context_parallel_sizes",
})
# NeMo 2 model config classes (nemo.collections.llm) that are planner presets
_NEMO2_PRESETS = {
    "llama3config8b": "llama3-8b", "llama3config70b": "llama3-70b",
    "llama31config8b": "llama3-8b", "llama31config70b": "llama3-70b",
    "llama31config405b": "llama3-405b", "llama2config7b": "llama2-7b",
    "llama2config13b": "llama2-13b", "llama2config70b": "llama2-70b",
    "mixtralconfig8x7b": "mixtral-8x7b", "mixtralconfig8x22b": "mixtral-8x22b",
    "deepseekv3config": "deepseek-v3", "qwen3config235b_a22b": "qwen3-235b-a22b",
}
_ACTIVATIONS = {"swiglu": "swiglu", "fast-swiglu": "swiglu", "geglu": "swiglu",
                "fast-geglu": "swiglu", "reglu": "swiglu", "fast-reglu": "swiglu",
                "gelu": "gelu", "fast-gelu": "gelu", "approx-gelu": "gelu",
                "squared-relu": "squared_relu", "relu": "gelu"}
_NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm", "layernorm1p": "LayerNorm",
          "low_precision_layernorm": "LayerNorm"}


def _position(value: Any) -> str:
    """rope and learned_absolute as such; alibi, kerple, none... have no parameters."""
    text = str(value)
    return text if text in ("rope", "learned_absolute") else "none"


def looks_like_nemo(data: Any) -> bool:
    """`trainer:` and `model:` mappings at the top level (NeMo 1 / launcher, or NeMo 2)."""
    return (isinstance(data, dict) and isinstance(data.get("trainer"), dict)
            and isinstance(data.get("model"), dict))


def is_nemo2(data: dict) -> bool:
    strategy = data["trainer"].get("strategy")
    return (isinstance(strategy, dict) and any(k.endswith("_size") for k in strategy)) \
        or isinstance(data["model"].get("config"), dict)


def _map(data: Any, where: str) -> dict:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{where} must be a mapping, got {type(data).__name__}; fix the file")
    return data


def _int(section: dict, key: str, default: int | None, *, where: str,
         minimum: int = 1) -> int | None:
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, str) and re.fullmatch(r"\d+", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{where}.{key} = {value!r} must be an integer >= {minimum}; fix the value")
    return value


def _precision(value: Any, fp8: bool, out: list[Violation]) -> str:
    text = str(value).lower() if value is not None else "32"
    if fp8:
        return "fp8"
    if text.startswith("bf16"):
        return "bf16"
    if text in ("16", "16-mixed", "fp16", "fp16-mixed"):
        return "fp16"
    out.append(Violation("nemo-fp32", f"precision {value!r}: NeMo trains in fp32, which planner "
                                      "does not model (it plans bf16); use bf16-mixed", "warning"))
    return "bf16"


def _recompute_rules(gran: Any, method: Any, layers: Any, names: tuple[str, str, str],
                     out: list[Violation]) -> str:
    """Megatron-core TransformerConfig's recompute checks (errors)."""
    if gran is not None and gran not in ("full", "selective"):
        out.append(Violation("nemo-recompute-flags", f"{names[0]} {gran!r} must be full, selective "
                                                     "or null", "error"))
        return "none"
    if gran == "full" and (method is None or layers is None):
        missing = " and ".join(n for n, v in ((names[1], method), (names[2], layers)) if v is None)
        out.append(Violation("nemo-recompute-flags",
                             f"{names[0]} full also needs {missing} (Megatron-core raises); e.g. "
                             "uniform and 1", "error"))
    if gran == "selective" and layers is not None:
        out.append(Violation("nemo-recompute-flags",
                             f"{names[0]} selective forbids {names[2]} (Megatron-core raises); "
                             "set it to null", "error"))
    return gran or "none"


def _sp(tp: int, sp: bool, *, nemo2: bool, out: list[Violation]) -> bool:
    if not (sp and tp == 1):
        return sp
    what = "sequence_parallel with tensor_model_parallel_size 1"
    if nemo2:
        out.append(Violation("nemo-sp-needs-tp", f"{what}: NeMo 2 raises; set sequence_parallel "
                                                 "false", "error"))
    else:
        out.append(Violation("nemo-sp-needs-tp", f"{what}: NeMo turns it off; set it false",
                             "warning"))
    return False


def _split(section: dict, *, num_layers: int, pp: int, vpp: int, where: str,
           out: list[Violation]) -> tuple[int | None, int | None]:
    """Uneven pipeline stages, in Megatron-core's TransformerConfig fields (NeMo passes them)."""
    first = _int(section, "num_layers_in_first_pipeline_stage", None, where=where, minimum=0)
    last = _int(section, "num_layers_in_last_pipeline_stage", None, where=where, minimum=0)
    emb = bool(section.get("account_for_embedding_in_pipeline_split", False))
    loss = bool(section.get("account_for_loss_in_pipeline_split", False))
    if not (emb or loss):
        return first, last
    if first is not None or last is not None:
        out.append(Violation("nemo-pipeline-split",
                             f"{where}.account_for_*_in_pipeline_split cannot be combined with "
                             "num_layers_in_first/last_pipeline_stage (Megatron-core raises); keep "
                             "one way", "error"))
        return first, last
    first, last, problem = accounted_split(num_layers, pp=pp, vpp=vpp, embedding=emb, loss=loss)
    if problem:
        out.append(Violation("nemo-pipeline-split", f"{problem} (Megatron-core raises)", "error"))
    return first, last


def _world(trainer: dict, ov: Overrides, hardware, source: str) -> int:
    devices = trainer.get("devices")
    per_node = devices if isinstance(devices, int) and devices > 0 else (
        hardware.gpus_per_node if devices in ("auto", -1, "-1") else None)
    nodes = _int(trainer, "num_nodes", 1, where="trainer")
    return resolve_world(ov, hardware=hardware, source=source, gpus_per_node=per_node, nodes=nodes,
                         missing=f"trainer.devices ({devices!r}) is not a GPU count")


# ------------------------------------------------------------------------------ NeMo 1

def _check_keys(data: dict, model: dict, out: list[Violation]) -> None:
    for key in data:
        if key not in _TOP:
            out.append(unknown_key("nemo-unknown-key", key, _TOP, severity="warning",
                                   consequence="NeMo does not read it; remove it"))
    for key in _map(data.get("trainer"), "trainer"):
        if key not in _TRAINER:
            out.append(unknown_key("nemo-unknown-trainer-key", f"trainer.{key}", _TRAINER,
                                   severity="error",
                                   consequence="Lightning's Trainer rejects it (TypeError); "
                                               "remove it"))
    known = _MODEL_USED | _MODEL_IGNORED
    for key in model:
        if key not in known:
            out.append(unknown_key("nemo-unknown-key", f"model.{key}", known, severity="warning",
                                   consequence="NeMo ignores it; remove it or fix the name"))


def _nemo1_model(model: dict, ov: Overrides, source: str, seq: int | None) -> ModelSpec:
    if ov.model is not None:
        return resolve_model(ov.model)
    if not all(model.get(k) for k in ("num_layers", "hidden_size", "num_attention_heads")):
        raise SpecError(f"{source}: no model shape (model.num_layers, model.hidden_size, "
                        "model.num_attention_heads); give --model NAME (a preset such as "
                        "llama3-70b, a model YAML or a HF config.json)")
    tok = _map(model.get("tokenizer"), "model.tokenizer")
    vocab = vocab_from_tokenizer(tok.get("type"), tok.get("model"), tok.get("library"))
    if vocab is None:
        raise SpecError(f"{source}: the vocabulary size is unknown (model.tokenizer type "
                        f"{tok.get('type')!r}); give --model")
    act = str(model.get("activation", "gelu")).lower()
    if act not in _ACTIVATIONS:
        raise SpecError(f"{source}: model.activation {act!r} is not one planner models; use one "
                        f"of {', '.join(_ACTIVATIONS)} or give --model")
    heads = model.get("num_attention_heads")
    experts = model.get("num_moe_experts")
    fields = dict(
        num_layers=model.get("num_layers"), hidden_size=model.get("hidden_size"),
        ffn_hidden_size=model.get("ffn_hidden_size"), num_attention_heads=heads,
        num_kv_heads=model.get("num_query_groups"), kv_channels=model.get("kv_channels"),
        vocab_size=vocab, activation=_ACTIVATIONS[act],
        tied_embeddings=bool(model.get("share_embeddings_and_output_weights", True)),
        normalization=_NORMS.get(str(model.get("normalization", "layernorm")).lower(), "LayerNorm"),
        add_bias_linear=bool(model.get("bias", True)),
        position_embedding_type=_position(model.get("position_embedding_type", "learned_absolute")),
        seq_length=seq,
    )
    if experts and experts > 1:
        fields.update(num_experts=experts, moe_top_k=model.get("moe_router_topk") or 2,
                      moe_ffn_hidden_size=model.get("moe_ffn_hidden_size"))
    return inline_model(fields, source=source, fmt="NeMo")


def _zero(model: dict, optim: dict) -> int:
    if model.get("fsdp"):
        return {"grad": 2, "grad_op": 2}.get(str(model.get("fsdp_sharding_strategy", "full")), 3)
    return 1 if optim.get("name") in ("distributed_fused_adam", "mcore_distributed_optim") else 0


def _nemo1(data: dict, ov: Overrides, source: str) -> Imported:
    out: list[Violation] = []
    trainer, model = _map(data["trainer"], "trainer"), _map(data["model"], "model")
    optim = _map(model.get("optim"), "model.optim")
    mdata = _map(model.get("data"), "model.data")
    _check_keys(data, model, out)
    if _int(trainer, "accumulate_grad_batches", 1, where="trainer") != 1:
        out.append(Violation("nemo-accumulate-grad-batches",
                             "trainer.accumulate_grad_batches must be 1: NeMo accumulates "
                             "gradients through model.global_batch_size", "error"))
    seq = _int(model, "encoder_seq_length", None, where="model") or _int(
        mdata, "seq_length", None, where="model.data")
    if mdata.get("seq_length") and model.get("encoder_seq_length") \
            and mdata["seq_length"] != model["encoder_seq_length"]:
        out.append(Violation("nemo-seq-length-mismatch",
                             f"model.data.seq_length ({mdata['seq_length']}) differs from "
                             f"model.encoder_seq_length ({model['encoder_seq_length']}); make them "
                             "equal (planner uses encoder_seq_length)", "warning"))
    hardware = hardware_of(ov)
    spec = _nemo1_model(model, ov, source, seq)
    num_gpus = _world(trainer, ov, hardware, source)
    w = "model"
    tp = _int(model, "tensor_model_parallel_size", 1, where=w)
    pp = _int(model, "pipeline_model_parallel_size", 1, where=w)
    cp = _int(model, "context_parallel_size", 1, where=w)
    gran = _recompute_rules(model.get("activations_checkpoint_granularity"),
                            model.get("activations_checkpoint_method"),
                            model.get("activations_checkpoint_num_layers"),
                            ("model.activations_checkpoint_granularity",
                             "model.activations_checkpoint_method",
                             "model.activations_checkpoint_num_layers"), out)
    vpp = _int(model, "virtual_pipeline_model_parallel_size", 1, where=w)
    first, last = _split(model, num_layers=spec.num_layers, pp=pp, vpp=vpp, where=w, out=out)
    layout = Layout(
        tp=tp, pp=pp, cp=cp, dp=max(1, num_gpus // (tp * pp * cp)),
        ep=_int(model, "expert_model_parallel_size", 1, where=w),
        etp=_int(model, "expert_tensor_parallel_size", tp, where=w), vpp=vpp,
        sp=_sp(tp, bool(model.get("sequence_parallel", False)), nemo2=False, out=out),
        zero=_zero(model, optim), micro_batch_size=_int(model, "micro_batch_size", 1, where=w),
        recompute=gran, first_stage_layers=first, last_stage_layers=last,
        cp_comm_type=str(model.get("cp_comm_type", "p2p")),
        overlap_grad_reduce=bool(optim.get("overlap_grad_sync", False)),
        overlap_param_gather=bool(optim.get("overlap_param_sync", False)),
        tp_comm_overlap=bool(model.get("ub_tp_comm_overlap", False)))
    job = make_job(model=spec, hardware=hardware, num_gpus=num_gpus, seq_length=seq,
                   global_batch_size=_int(model, "global_batch_size", None, where=w),
                   precision=_precision(trainer.get("precision"), bool(model.get("fp8")), out),
                   source=source)
    return Imported(job, _checked(layout, source), out, "nemo", source)


def _checked(layout: Layout, source: str) -> Layout:
    for name in ("tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch_size"):
        if getattr(layout, name) < 1:
            raise SpecError(f"{source}: {name} = {getattr(layout, name)} must be at least 1")
    if layout.cp_comm_type not in ("p2p", "a2a", "allgather", "a2a+p2p"):
        raise SpecError(f"{source}: cp_comm_type {layout.cp_comm_type!r} must be one of p2p, a2a, "
                        "allgather, a2a+p2p")
    return layout


# ------------------------------------------------------------------------------ NeMo 2

def _target(section: dict) -> str:
    return str(section.get("_target_", "")).rsplit(".", 1)[-1].lower()


def _nemo2_model(model: dict, ov: Overrides, source: str, seq: int | None) -> ModelSpec:
    if ov.model is not None:
        return resolve_model(ov.model)
    config = _map(model.get("config"), "model.config")
    preset = _NEMO2_PRESETS.get(_target(config)) or _NEMO2_PRESETS.get(_target(model))
    if preset and not config.get("num_layers"):
        return get_preset(preset)
    if not all(config.get(k) for k in ("num_layers", "hidden_size", "num_attention_heads")):
        raise SpecError(f"{source}: no model shape (model.config num_layers/hidden_size/"
                        "num_attention_heads, or a preset config class such as Llama3Config70B); "
                        "give --model")
    vocab = config.get("vocab_size") or (get_preset(preset).vocab_size if preset else None)
    if not vocab:
        raise SpecError(f"{source}: the vocabulary size is unknown (no model.config.vocab_size); "
                        "give --model")
    gated = bool(config.get("gated_linear_unit", False))
    fields = dict(
        num_layers=config["num_layers"], hidden_size=config["hidden_size"],
        ffn_hidden_size=config.get("ffn_hidden_size"),
        num_attention_heads=config["num_attention_heads"],
        num_kv_heads=config.get("num_query_groups"), kv_channels=config.get("kv_channels"),
        vocab_size=vocab, activation="swiglu" if gated else "gelu",
        tied_embeddings=bool(config.get("share_embeddings_and_output_weights", False)),
        normalization=_NORMS.get(str(config.get("normalization", "layernorm")).lower(),
                                 "LayerNorm"),
        add_bias_linear=bool(config.get("add_bias_linear", True)),
        position_embedding_type=_position(config.get("position_embedding_type", "rope")),
        seq_length=config.get("seq_length") or seq,
    )
    if config.get("num_moe_experts"):
        fields.update(num_experts=config["num_moe_experts"],
                      moe_top_k=config.get("moe_router_topk") or 2,
                      moe_ffn_hidden_size=config.get("moe_ffn_hidden_size"))
    return inline_model(fields, source=source, fmt="NeMo 2")


def _nemo2_precision(trainer: dict, out: list[Violation]) -> str:
    plugins = trainer.get("plugins")
    items = plugins if isinstance(plugins, list) else [plugins]
    for item in items:
        if isinstance(item, dict) and "precision" in item:
            return _precision(item["precision"], bool(item.get("fp8")), out)
        if isinstance(item, str):
            return _precision(item, False, out)
    return _precision(trainer.get("precision", "32"), False, out)


def _nemo2(data: dict, ov: Overrides, source: str) -> Imported:
    out: list[Violation] = []
    trainer, model = _map(data["trainer"], "trainer"), _map(data["model"], "model")
    strategy = _map(trainer.get("strategy"), "trainer.strategy")
    dmod = _map(data.get("data"), "data")
    config = _map(model.get("config"), "model.config")
    optim_cfg = _map(_map(data.get("optim"), "optim").get("config"), "optim.config")
    ddp = strategy.get("ddp") if isinstance(strategy.get("ddp"), dict) else {}
    for key in strategy:
        if key not in _STRATEGY:
            out.append(unknown_key("nemo-unknown-key", f"trainer.strategy.{key}", _STRATEGY,
                                   severity="warning",
                                   consequence="MegatronStrategy does not know it; remove it"))
    seq = _int(dmod, "seq_length", None, where="data")
    if seq and config.get("seq_length") and config["seq_length"] != seq:
        out.append(Violation("nemo-seq-length-mismatch",
                             f"model.config.seq_length ({config['seq_length']}) must equal "
                             f"data.seq_length ({seq}) (NeMo 2 / Megatron-Bridge raise)", "error"))
    hardware = hardware_of(ov)
    spec = _nemo2_model(model, ov, source, seq)
    num_gpus = _world(trainer, ov, hardware, source)
    w = "trainer.strategy"
    tp = _int(strategy, "tensor_model_parallel_size", 1, where=w)
    pp = _int(strategy, "pipeline_model_parallel_size", 1, where=w)
    cp = _int(strategy, "context_parallel_size", 1, where=w)
    gran = _recompute_rules(config.get("recompute_granularity"), config.get("recompute_method"),
                            config.get("recompute_num_layers"),
                            ("model.config.recompute_granularity", "model.config.recompute_method",
                             "model.config.recompute_num_layers"), out)
    use_dist = optim_cfg.get("use_distributed_optimizer", strategy.get("use_distributed_optimizer"))
    vpp = _int(strategy, "virtual_pipeline_model_parallel_size", 1, where=w)
    first, last = _split(strategy, num_layers=spec.num_layers, pp=pp, vpp=vpp, where=w, out=out)
    layout = Layout(
        tp=tp, pp=pp, cp=cp, dp=max(1, num_gpus // (tp * pp * cp)),
        ep=_int(strategy, "expert_model_parallel_size", 1, where=w),
        etp=_int(strategy, "expert_tensor_parallel_size", tp, where=w), vpp=vpp,
        sp=_sp(tp, bool(strategy.get("sequence_parallel", False)), nemo2=True, out=out),
        zero=1 if use_dist else 0,
        micro_batch_size=_int(dmod, "micro_batch_size", 1, where="data"), recompute=gran,
        first_stage_layers=first, last_stage_layers=last,
        overlap_grad_reduce=bool(ddp.get("overlap_grad_reduce", False)),
        overlap_param_gather=bool(ddp.get("overlap_param_gather", False)))
    job = make_job(model=spec, hardware=hardware, num_gpus=num_gpus,
                   seq_length=seq or spec.seq_length,
                   global_batch_size=_int(dmod, "global_batch_size", None, where="data"),
                   precision=_nemo2_precision(trainer, out), source=source)
    return Imported(job, _checked(layout, source), out, "nemo2", source)


def load(path: str | Path, data: Any, ov: Overrides) -> Imported:
    """Read a NeMo YAML already parsed (`looks_like_nemo(data)` holds)."""
    source = str(path)
    return _nemo2(data, ov, source) if is_nemo2(data) else _nemo1(data, ov, source)
