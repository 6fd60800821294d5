"""NeMo: a NeMo 1 / launcher YAML (`trainer.*`, `model.*`), a NeMo 2 recipe dumped to YAML
(`trainer.strategy.*`, `data.*`, `model.config.*`) or a Megatron-Bridge `ConfigContainer` YAML
(`model.*`, `train.*`, `ddp.*`, `optimizer.*`, `mixed_precision`; planner/frameworks/nemo/bridge.py)
-> Job + Layout.

The file's OmegaConf interpolations are resolved first (planner/readers/omegaconf.py);
a value planner reads that does not resolve is a one-line error.

NeMo 1 passes `trainer:` to Lightning's Trainer (an unknown key is a TypeError: an error here)
and reads `model:` with `cfg.get(...)`, passing every Megatron-Core TransformerConfig /
ModelParallelConfig field through (an unknown key is ignored: a warning here). The keys NeMo
and Megatron-Core know come from planner/frameworks/nemo/nemo_keys.yaml (each list with its source and
version) plus `_NEMO1_CONFIG_KEYS` (the keys of NeMo's own megatron_gpt_config.yaml and the
launcher's training configs). A known key that changes memory or time and that planner does
not model is a warning naming it (`nemo-not-modelled`), only when it is set to something other
than its neutral default. NeMo 2: the parallel sizes of MegatronStrategy, the batch of the
data module, the model's shape from `model.config` (or its preset class, e.g.
Llama3Config70B); unknown strategy keys are warned about, other NeMo 2 sections are not
checked key by key.

The production recipe settings (recompute modules and partial recompute, CPU offloading, bf16
gradients and moments, FP8 recipe and FP8 parameter gather, MoE dispatcher, CUDA graphs,
pipeline layout, MTP, Megatron-FSDP) are read by planner/frameworks/nemo/mcore.py under their
Megatron-Core names; NeMo 1's own spellings: `activations_checkpoint_*`, `fp8_params`,
`model.optim.grad_sync_dtype` / `fsdp_grad_reduce_dtype` (bf16 gradients),
`model.optim.dtype` with distributed_fused_adam (bf16 moments), `enable_cuda_graph`.

Rules with NeMo's severities: SP with TP 1 is switched off by NeMo 1 (warning) and rejected by
NeMo 2 (error); the recompute keys follow Megatron-core's TransformerConfig checks (errors);
`trainer.accumulate_grad_batches` must be 1 (NeMo accumulates through the global batch).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from planner.errors import SpecError, Violation, short
from planner.frameworks.common import (
    Imported,
    Overrides,
    accounted_split,
    hardware_of,
    inline_model,
    make_job,
    model_replaced,
    resolve_world,
    unknown_key,
    vocab_from_tokenizer,
)
from planner.frameworks.nemo import mcore
from planner.frameworks.nemo.mcore import Settings, as_bool
from planner.layout import Layout
from planner.presets import get_preset, resolve_model
from planner.readers.omegaconf import Unresolved, resolve
from planner.specs import ModelSpec

__all__ = ["load", "looks_like_nemo", "is_nemo2", "prepare", "check_mapping"]

_TOP = frozenset(
    {
        "defaults",
        "hydra",
        "run",
        "name",
        "restore_from_path",
        "trainer",
        "exp_manager",
        "model",
        "env_vars",
        "cluster",
        "cluster_type",
        "data",
        "optim",
        "log",
        "resume",
        "peft",
        "tokenizer",
        "_target_",
        # read by NeMo 1's MegatronTrainerBuilder (S3 checkpointing; NeMo's own
        # megatron_gpt_config.yaml has it)
        "s3_checkpointing",
    }
)
# Lightning 2.x Trainer(...) arguments
_TRAINER = frozenset(
    {
        "accelerator",
        "strategy",
        "devices",
        "num_nodes",
        "precision",
        "logger",
        "callbacks",
        "fast_dev_run",
        "max_epochs",
        "min_epochs",
        "max_steps",
        "min_steps",
        "max_time",
        "limit_train_batches",
        "limit_val_batches",
        "limit_test_batches",
        "limit_predict_batches",
        "overfit_batches",
        "val_check_interval",
        "check_val_every_n_epoch",
        "num_sanity_val_steps",
        "log_every_n_steps",
        "enable_checkpointing",
        "enable_progress_bar",
        "enable_model_summary",
        "accumulate_grad_batches",
        "gradient_clip_val",
        "gradient_clip_algorithm",
        "deterministic",
        "benchmark",
        "inference_mode",
        "use_distributed_sampler",
        "profiler",
        "detect_anomaly",
        "barebones",
        "plugins",
        "sync_batchnorm",
        "reload_dataloaders_every_n_epochs",
        "default_root_dir",
        "model_registry",
        "_target_",
    }
)
_MODEL_USED = frozenset(
    {
        "micro_batch_size",
        "global_batch_size",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "sequence_parallel",
        "encoder_seq_length",
        "max_position_embeddings",
        "num_layers",
        "hidden_size",
        "ffn_hidden_size",
        "num_attention_heads",
        "num_query_groups",
        "kv_channels",
        "activation",
        "qk_layernorm",
        "qk_l2_norm",
        "add_qkv_bias",
        "normalization",
        "bias",
        "position_embedding_type",
        "share_embeddings_and_output_weights",
        "num_moe_experts",
        "moe_router_topk",
        "moe_ffn_hidden_size",
        "tokenizer",
        "activations_checkpoint_granularity",
        "activations_checkpoint_method",
        "activations_checkpoint_num_layers",
        "fp8",
        "optim",
        "data",
        "ub_tp_comm_overlap",
        "fsdp",
        "fsdp_sharding_strategy",
        "cp_comm_type",
        "num_layers_in_first_pipeline_stage",
        "num_layers_in_last_pipeline_stage",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
        "rotary_base",
        "rotary_percent",
        "rotary_percentage",
        "override_vocab_size",
        "moe_shared_expert_intermediate_size",
        "moe_layer_freq",
        "moe_expert_capacity_factor",
        "moe_router_num_groups",
        "moe_router_group_topk",
        "fp8_params",
        "fp8_recipe",
        "fsdp_grad_reduce_dtype",
        "enable_cuda_graph",
        "recompute_modules",
    }
)
# The keys of NeMo 1's megatron_gpt_config.yaml and the launcher's training configs that the
# dataclass lists do not cover (NeMo reads them itself or passes them to callbacks).
_NEMO1_CONFIG_KEYS = frozenset(
    {
        "activations_checkpoint_layers_per_pipeline",
        "align_param_gather",
        "answer_only_loss",
        "apply_query_key_layer_scaling_fused",
        "batch_p2p_comm",
        "context_parallel_comm",
        "deterministic_mode",
        "disable_layer_norm_checkpointing",
        "dist_ckpt_assume_constant_structure",
        "dist_ckpt_format",
        "dist_ckpt_load_on_device",
        "dist_ckpt_load_strictness",
        "dist_ckpt_parallel_dist_opt",
        "dist_ckpt_parallel_load",
        "dist_ckpt_parallel_save",
        "dist_ckpt_parallel_save_within_dp",
        "dist_ckpt_torch_dist_multiproc",
        "embedding_multiplier_scale",
        "enable_vboost",
        "encoder_tp_comm_overlap",
        "expert_model_parallel_comm",
        "first_pipeline_num_layers",
        "fp8_dot_product_attention",
        "fp8_multi_head_attention",
        "fsdp_sharded_checkpoint",
        "fsdp_use_orig_params",
        "gradient_as_bucket_view",
        "hidden_dropout_prob",
        "hysteresis",
        "last_pipeline_num_layers",
        "log_token_counts",
        "memory_profile",
        "moe_per_layer_logging",
        "moe_router_pre_softmax",
        "native_amp_growth_interval",
        "native_amp_init_scale",
        "nemo_path",
        "nsys_profile",
        "num_layers_per_virtual_pipeline_stage",
        "num_tokentypes",
        "optimizer_cpu_offload",
        "optimizer_offload_fraction",
        "overlap_p2p_comm",
        "overlap_param_gather_with_optimizer_step",
        "peft",
        "position_interpolation_factor",
        "post_process",
        "pre_process",
        "resume_from_checkpoint",
        "sample_weight",
        "share_embeddings",
        "steps_per_epoch",
        "sync_batch_comm",
        "tokenizer_model",
        "tp_comm_bulk_dgrad",
        "tp_comm_bulk_wgrad",
        "tp_comm_overlap_ag",
        "tp_comm_overlap_rs",
        "use_emha",
        "use_flash_attention",
        "validation_drop_last",
        "wgrad_deferral_limit",
        "nccl_communicator_config_path",
        "megatron_timer_kwargs",
        "reset_lr_steps",
        "cpu_offloading_double_buffering",
        "sharp",
        "restore_from_path",
    }
)
# Known NeMo 1 keys that change memory or time and that planner does not model, with the value
# that changes nothing: a warning names them when a file sets anything else (the
# TransformerConfig fields among them are mcore.NOT_MODELLED, checked for every format).
_NOT_MODELLED = {
    "drop_layers": ([], "skips those layers' compute"),
    "sharp": (False, "SHARP in-network reductions speed up data-parallel collectives"),
    "num_micro_batches_with_partial_activation_checkpoints": (
        None,
        "partial recompute per micro-batch",
    ),
    "activations_checkpoint_layers_per_pipeline": (None, "fewer recomputed layers on later stages"),
    "rampup_batch_size": (None, "a batch-size ramp"),
    "optimizer_cpu_offload": (False, "optimizer states on the host"),
    "num_distributed_optimizer_instances": (1, "several distributed-optimizer instances"),
    "megatron_amp_O2": (True, "without O2 NeMo keeps fp32 parameters"),
}
_STRATEGY = frozenset(
    {
        "_target_",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "context_parallel_size",
        "sequence_parallel",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "moe_extended_tp",
        "encoder_tensor_model_parallel_size",
        "encoder_pipeline_model_parallel_size",
        "pipeline_model_parallel_split_rank",
        "pipeline_model_parallel_comm_backend",
        "microbatch_group_size_per_vp_stage",
        "num_layers_in_first_pipeline_stage",
        "num_layers_in_last_pipeline_stage",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
        "use_te_rng_tracker",
        "use_tp_pp_dp_mapping",
        "pipeline_dtype",
        "use_distributed_optimizer",
        "ddp",
        "fsdp",
        "gradient_as_bucket_view",
        "find_unused_parameters",
        "cluster_environment",
        "checkpoint_io",
        "lazy_init",
        "process_group_backend",
        "timeout",
        "setup_optimizers",
        "init_model_parallel",
        "replace_progress_bar",
        "progress_interval",
        "ckpt_load_optimizer",
        "ckpt_save_optimizer",
        "ckpt_async_save",
        "ckpt_torch_dist_multiproc",
        "ckpt_assume_constant_structure",
        "ckpt_parallel_save",
        "ckpt_parallel_save_within_dp",
        "ckpt_parallel_load",
        "ckpt_parallel_save_optim",
        "ckpt_load_directly_on_device",
        "ckpt_load_strictness",
        "ckpt_load_main_params",
        "ckpt_include_optimizer",
        "save_ckpt_format",
        "load_ckpt_format",
        "restore_config",
        "megatron_log_level",
        "data_sampler",
        "parallel_devices",
        "output_data_idx",
        "use_sharp",
        "use_gloo_process_groups",
        "hierarchical_context_parallel_sizes",
        # NeMo 2.4 MegatronStrategy.__init__ arguments
        "num_distributed_optimizer_instances",
        "nccl_communicator_config_path",
        "pipeline_model_parallel_layout",
    }
)
# NeMo 2 model config classes (nemo.collections.llm) that are planner presets
_NEMO2_PRESETS = {
    "llama3config8b": "llama3-8b",
    "llama3config70b": "llama3-70b",
    "llama31config8b": "llama3-8b",
    "llama31config70b": "llama3-70b",
    "llama31config405b": "llama3-405b",
    "llama2config7b": "llama2-7b",
    "llama2config13b": "llama2-13b",
    "llama2config70b": "llama2-70b",
    "mixtralconfig8x7b": "mixtral-8x7b",
    "mixtralconfig8x22b": "mixtral-8x22b",
    "deepseekv3config": "deepseek-v3",
    "qwen3config235b_a22b": "qwen3-235b-a22b",
}
_ACTIVATIONS = {
    "swiglu": "swiglu",
    "fast-swiglu": "swiglu",
    "geglu": "geglu",
    "fast-geglu": "geglu",
    "reglu": "reglu",
    "fast-reglu": "reglu",
    "gelu": "gelu",
    "fast-gelu": "gelu",
    "approx-gelu": "gelu",
    "squared-relu": "squared_relu",
    "relu": "relu",
}
_PROVIDER_DEFAULTS = (
    "qk_norm",
    "moe_router_score",
    "moe_router_scaling",
    "moe_router_expert_bias",
    "moe_router_pre_softmax",
)
"""ModelSpec fields a Megatron-Bridge / NeMo 2 provider class sets for its model that a recipe
giving the shape keys may leave out: read from the class's preset where the keys are silent."""
_NEMO1_REJECTS = frozenset({"relu", "fast-gelu", "approx-gelu"})
"""Activation names other Megatron stacks use that NeMo 1's activation_to_func (nemo/
collections/nlp/modules/common/megatron/utils.py: gelu, geglu, reglu, swiglu, squared-relu and
the fast- GLUs) rejects: read for the cost, reported as a broken rule."""
_NORMS = {
    "rmsnorm": "RMSNorm",
    "layernorm": "LayerNorm",
    "layernorm1p": "LayerNorm",
    "low_precision_layernorm": "LayerNorm",
}


def _position(value: Any) -> str:
    """rope and learned_absolute as such; alibi, kerple, none... have no parameters."""
    text = str(value)
    return text if text in ("rope", "learned_absolute") else "none"


def looks_like_nemo(data: Any) -> bool:
    """`trainer:` and `model:` mappings at the top level (NeMo 1 / launcher, or NeMo 2), or a
    Megatron-Bridge ConfigContainer (`model:` and `train:`)."""
    from planner.frameworks.nemo.bridge import looks_like_bridge

    return (
        isinstance(data, dict)
        and isinstance(data.get("trainer"), dict)
        and isinstance(data.get("model"), dict)
    ) or looks_like_bridge(data)


def is_nemo2(data: dict) -> bool:
    strategy = data["trainer"].get("strategy")
    return (
        isinstance(strategy, dict) and any(k.endswith("_size") for k in strategy)
    ) or isinstance(data["model"].get("config"), dict)


def check_mapping(data: Any, where: str = "", depth: int = 0) -> None:
    """Every key a string (YAML allows `1:` or `[a]:` keys; NeMo's OmegaConf rejects them)."""
    if depth > 64:
        raise SpecError(
            f"{where or 'the file'} nests more than 64 levels; flatten it", field=where or None
        )
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        if isinstance(data, dict) and not isinstance(key, str):
            raise SpecError(
                f"{where or 'the top level'} has the key {key!r} "
                f"({type(key).__name__}); NeMo's keys are strings: quote it or fix "
                "the indentation",
                field=where or None,
            )
        check_mapping(value, f"{where}.{key}" if where else str(key), depth + 1)


def _map(data: Any, where: str) -> dict:
    if isinstance(data, Unresolved):
        data.fail()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(
            f"{where} must be a mapping, got {type(data).__name__}; fix the file", field=where
        )
    return data


def _int(
    section: dict, key: str, default: int | None, *, where: str, minimum: int = 1
) -> int | None:
    return mcore.as_int(section, key, default, where=where, minimum=minimum)


def _precision(value: Any, fp8: bool, out: list[Violation]) -> str:
    if isinstance(value, Unresolved):
        value.fail()
    text = str(value).lower() if value is not None else "32"
    if fp8:
        return "fp8"
    if text.startswith("bf16"):
        return "bf16"
    if text in ("16", "16-mixed", "fp16", "fp16-mixed"):
        return "fp16"
    out.append(
        Violation(
            "nemo-fp32",
            f"precision {value!r}: NeMo trains in fp32, which planner "
            "does not model (it plans bf16); use bf16-mixed",
            "warning",
        )
    )
    return "bf16"


def _sp(tp: int, sp: bool, *, nemo2: bool, out: list[Violation]) -> bool:
    if not (sp and tp == 1):
        return sp
    what = "sequence_parallel with tensor_model_parallel_size 1"
    if nemo2:
        out.append(
            Violation(
                "nemo-sp-needs-tp", f"{what}: NeMo 2 raises; set sequence_parallel false", "error"
            )
        )
    else:
        out.append(
            Violation("nemo-sp-needs-tp", f"{what}: NeMo turns it off; set it false", "warning")
        )
    return False


def split(
    section: dict, *, num_layers: int, pp: int, vpp: int, where: str, out: list[Violation]
) -> tuple[int | None, int | None]:
    """Uneven pipeline stages, in Megatron-core's TransformerConfig fields (NeMo passes them)."""
    first = _int(section, "num_layers_in_first_pipeline_stage", None, where=where, minimum=0)
    last = _int(section, "num_layers_in_last_pipeline_stage", None, where=where, minimum=0)
    emb = as_bool(section, "account_for_embedding_in_pipeline_split", False, where=where)
    loss = as_bool(section, "account_for_loss_in_pipeline_split", False, where=where)
    if not (emb or loss):
        return first, last
    if first is not None or last is not None:
        out.append(
            Violation(
                "nemo-pipeline-split",
                f"{where}.account_for_*_in_pipeline_split cannot be combined with "
                "num_layers_in_first/last_pipeline_stage (Megatron-core raises); keep "
                "one way",
                "error",
            )
        )
        return first, last
    first, last, problem = accounted_split(num_layers, pp=pp, vpp=vpp, embedding=emb, loss=loss)
    if problem:
        out.append(Violation("nemo-pipeline-split", f"{problem} (Megatron-core raises)", "error"))
    return first, last


def world(trainer: dict, ov: Overrides, hardware, source: str) -> int:
    devices = trainer.get("devices")
    if isinstance(devices, Unresolved):
        devices.fail()
    per_node = (
        devices
        if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0
        else (hardware.gpus_per_node if devices in ("auto", -1, "-1") else None)
    )
    nodes = _int(trainer, "num_nodes", 1, where="trainer")
    return resolve_world(
        ov,
        hardware=hardware,
        source=source,
        gpus_per_node=per_node,
        nodes=nodes,
        missing=f"trainer.devices ({devices!r}) is not a GPU count",
    )


def _not_modelled(section: dict, where: str, out: list[Violation]) -> None:
    mcore.warn_not_modelled(section, _NOT_MODELLED, where=where, rule="nemo-not-modelled", out=out)


# ------------------------------------------------------------------------------ NeMo 1


def _nemo1_known() -> frozenset[str]:
    return (
        _MODEL_USED
        | _NEMO1_CONFIG_KEYS
        | mcore.known_keys("transformer_config", "model_parallel_config", "nemo1_model")
    )


def _check_keys(data: dict, model: dict, out: list[Violation]) -> None:
    for key in data:
        if key not in _TOP:
            out.append(
                unknown_key(
                    "nemo-unknown-key",
                    key,
                    _TOP,
                    severity="warning",
                    consequence="NeMo does not read it; remove it",
                )
            )
    for key in _map(data.get("trainer"), "trainer"):
        if key not in _TRAINER:
            out.append(
                unknown_key(
                    "nemo-unknown-trainer-key",
                    f"trainer.{key}",
                    _TRAINER,
                    severity="error",
                    consequence="Lightning's Trainer rejects it (TypeError); remove it",
                )
            )
    known = _nemo1_known()
    for key in model:
        if key not in known:
            out.append(
                unknown_key(
                    "nemo-unknown-key",
                    f"model.{key}",
                    known,
                    severity="warning",
                    consequence="NeMo ignores it; remove it or fix the name",
                )
            )


def _vocab(model: dict, source: str, ov: Overrides | None = None) -> int:
    """--vocab-size first, then model.override_vocab_size, then the tokenizer's."""
    if ov is not None and ov.vocab_size is not None:
        return ov.vocab_size
    override = _int(model, "override_vocab_size", None, where="model")
    if override:
        return override
    tok = _map(model.get("tokenizer"), "model.tokenizer")
    names = [tok.get(k) for k in ("type", "model", "library")]
    for n in names:
        if isinstance(n, Unresolved):
            n.fail()
    vocab = vocab_from_tokenizer(*names)
    if vocab is None:
        raise SpecError(
            f"{source}: the vocabulary size is unknown (model.tokenizer type "
            f"{tok.get('type')!r}); give --vocab-size V, --model or "
            "model.override_vocab_size",
            field="model.tokenizer",
        )
    return vocab


_MCORE_SHAPE = {
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "ffn_hidden_size": "ffn_hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "num_kv_heads",
    "kv_channels": "kv_channels",
    "num_moe_experts": "num_experts",
    "moe_router_topk": "moe_top_k",
    "moe_ffn_hidden_size": "moe_ffn_hidden_size",
    "moe_expert_capacity_factor": "moe_capacity_factor",
    "moe_router_num_groups": "moe_router_num_groups",
    "moe_router_group_topk": "moe_router_group_topk",
    "mtp_num_layers": "mtp_num_layers",
}
"""Megatron-Core TransformerConfig's shape keys (NeMo 1 model.*, NeMo 2 model.config,
Megatron-Bridge model) and the ModelSpec field each sets."""


def _replacing(
    model: ModelSpec,
    keys: dict,
    where: str,
    out: list[Violation],
    *,
    rule: str = "nemo-model-replaced",
    preset: str | None = None,
) -> ModelSpec:
    """--model's model, with a warning naming the shape keys the file states that differ
    (a preset config class, such as Llama3Config70B, states its preset's shape)."""
    stated = [
        (f"{where}.{key}", keys[key], name)
        for key, name in _MCORE_SHAPE.items()
        if isinstance(keys, dict) and keys.get(key) is not None
    ]
    whose = "the file's"
    if preset is not None and not stated:
        spec = get_preset(preset)
        stated = [
            (key, value, name)
            for key, name in _MCORE_SHAPE.items()
            if (value := getattr(spec, name)) is not None
        ]
        whose = f"the file's {where} is {preset}, whose"
    replaced = model_replaced(stated, model, rule, whose=whose)
    if replaced is not None:
        out.append(replaced)
    return model


def _nemo1_model(
    model: dict, ov: Overrides, source: str, seq: int | None, out: list[Violation]
) -> ModelSpec:
    if ov.model is not None:
        return _replacing(resolve_model(ov.model), model, "model", out)
    w = "model"
    if not all(model.get(k) for k in ("num_layers", "hidden_size", "num_attention_heads")):
        raise SpecError(
            f"{source}: no model shape (model.num_layers, model.hidden_size, "
            "model.num_attention_heads); give --model NAME (a preset such as "
            "llama3-70b, a model YAML or a HF config.json)",
            field="model.num_layers",
        )
    act = str(model.get("activation", "gelu")).lower()
    if act not in _ACTIVATIONS:
        raise SpecError(
            f"{source}: model.activation {act!r} is not one planner models; use one "
            f"of {', '.join(_ACTIVATIONS)} or give --model",
            field="model.activation",
            value=act,
        )
    if act in _NEMO1_REJECTS:
        out.append(
            Violation(
                "nemo-activation",
                f"model.activation {act!r}: NeMo 1's activation_to_func accepts "
                f"{', '.join(a for a in _ACTIVATIONS if a not in _NEMO1_REJECTS)} and raises "
                f"on {act!r} (ValueError at model build); use one of them",
                "error",
            )
        )
    num_layers = _int(model, "num_layers", None, where=w)
    fields = dict(
        num_layers=num_layers,
        hidden_size=_int(model, "hidden_size", None, where=w),
        ffn_hidden_size=_int(model, "ffn_hidden_size", None, where=w),
        num_attention_heads=_int(model, "num_attention_heads", None, where=w),
        num_kv_heads=_int(model, "num_query_groups", None, where=w),
        kv_channels=_int(model, "kv_channels", None, where=w),
        vocab_size=_vocab(model, source, ov),
        activation=_ACTIVATIONS[act],
        **mcore.qk_fields(model, where=w),
        tied_embeddings=as_bool(model, "share_embeddings_and_output_weights", True, where=w),
        normalization=_NORMS.get(str(model.get("normalization", "layernorm")).lower(), "LayerNorm"),
        # layernorm1p: NeMo 1's LayerNorm with (1 + w) weights (layernorm_zero_centered_gamma)
        norm_zero_centered=str(model.get("normalization", "")).lower() == "layernorm1p",
        add_bias_linear=as_bool(model, "bias", True, where=w),
        add_qkv_bias=as_bool(model, "add_qkv_bias", False, where=w)
        and not as_bool(model, "bias", True, where=w),
        position_embedding_type=_position(model.get("position_embedding_type", "learned_absolute")),
        seq_length=seq,
        rotary_base=_rotary(model, w),
        rotary_percent=_rotary_share(model, w, "rotary_percentage"),
    )
    fields.update(mcore.moe_fields(model, where=w, num_layers=num_layers, out=out, prefix="nemo"))
    fields.update(mcore.mla_fields(model, where=w))
    fields.update(mcore.window_fields(model, where=w, num_layers=num_layers))
    return inline_model(fields, source=source, fmt="NeMo")


def _rotary(section: dict, where: str) -> float | None:
    value = section.get("rotary_base")
    if isinstance(value, Unresolved):
        value.fail()
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise SpecError(
            f"{where}.rotary_base = {value!r} must be a positive number; fix it",
            field=f"{where}.rotary_base",
            value=value,
        )
    return float(value)


def _rotary_share(section: dict, where: str, key: str) -> float:
    """The share of each head RoPE rotates: NeMo 1's `rotary_percentage`, Megatron-Core's
    (NeMo 2, Megatron-Bridge) `rotary_percent`; 1.0 when unset, as in both."""
    value = section.get(key)
    if isinstance(value, Unresolved):
        value.fail()
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SpecError(
            f"{where}.{key} = {value!r} must be a share of the head dim in (0, 1]; fix it",
            field=f"{where}.{key}",
            value=value,
        )
    return float(value)


def _nemo1_zero(model: dict, optim: dict, out: list[Violation]) -> int:
    if as_bool(model, "fsdp", False, where="model"):
        strategy = str(model.get("fsdp_sharding_strategy", "full"))
        if strategy == "hybrid":
            out.append(
                Violation(
                    "nemo-hsdp",
                    "model.fsdp_sharding_strategy hybrid shards within "
                    "a node and replicates across nodes; planner "
                    "shards over all data-parallel ranks, so it "
                    "underestimates the model-state memory",
                    "warning",
                )
            )
        return {"grad": 2, "grad_op": 2}.get(strategy, 3)
    name = optim.get("name")
    if isinstance(name, Unresolved):
        name.fail()
    return 1 if name in ("distributed_fused_adam", "mcore_distributed_optim") else 0


def _nemo1_grads_and_moments(model: dict, optim: dict, zero: int, out: list[Violation]) -> Settings:
    """bf16 gradient reduction (optim.grad_sync_dtype; FSDP: fsdp_grad_reduce_dtype) and, for
    Apex's distributed_fused_adam, optimizer-state dtype (optim.dtype)."""
    s = Settings()
    if zero == 3 or as_bool(model, "fsdp", False, where="model"):
        dtype = model.get("fsdp_grad_reduce_dtype")
        key = "model.fsdp_grad_reduce_dtype"
    else:
        dtype = optim.get("grad_sync_dtype")
        key = "model.optim.grad_sync_dtype"
    if isinstance(dtype, Unresolved):
        dtype.fail()
    if dtype is not None:
        text = str(dtype).lower()
        if text not in ("32", "fp32", "float32", "16", "fp16", "float16", "bf16", "bfloat16"):
            raise SpecError(
                f"{key} = {dtype!r} must be fp32, bf16 or fp16; fix the value",
                field=key,
                value=dtype,
            )
        s.layout["grad_reduce_in_fp32"] = text in ("32", "fp32", "float32")
    if optim.get("name") == "distributed_fused_adam" and optim.get("dtype") is not None:
        dtype = mcore.state_dtype(optim, "dtype", where="model.optim", prefix="nemo", out=out)
        s.layout.update(exp_avg_dtype=dtype, exp_avg_sq_dtype=dtype)
        if dtype != "fp32":
            out.append(
                Violation(
                    "nemo-not-modelled",
                    "model.optim.dtype bf16: Apex's distributed Adam then keeps no "
                    "fp32 master weights either; planner still counts them (an "
                    "upper bound)",
                    "warning",
                )
            )
    return s


def _nemo1_layout(
    model: dict, optim: dict, spec: ModelSpec, num_gpus: int, fp8: bool, out: list[Violation]
) -> tuple[Layout, Settings]:
    w = "model"
    tp = _int(model, "tensor_model_parallel_size", 1, where=w)
    pp = _int(model, "pipeline_model_parallel_size", 1, where=w)
    cp = _int(model, "context_parallel_size", 1, where=w)
    s = mcore.read_recompute(
        model,
        names=(
            "activations_checkpoint_granularity",
            "activations_checkpoint_method",
            "activations_checkpoint_num_layers",
        ),
        where=w,
        rule="nemo-recompute-flags",
        out=out,
    )
    s.update(
        mcore.read_transformer(
            model,
            where=w,
            prefix="nemo",
            num_layers=spec.num_layers,
            pp=pp,
            recompute=s.layout["recompute"],
            fp8=fp8,
            out=out,
        )
    )
    zero = _nemo1_zero(model, optim, out)
    s.update(_nemo1_grads_and_moments(model, optim, zero, out))
    vpp = _int(model, "virtual_pipeline_model_parallel_size", 1, where=w)
    first, last = split(model, num_layers=spec.num_layers, pp=pp, vpp=vpp, where=w, out=out)
    layout = Layout(
        tp=tp,
        pp=pp,
        cp=cp,
        dp=max(1, num_gpus // (tp * pp * cp)),
        ep=_int(model, "expert_model_parallel_size", 1, where=w),
        etp=_int(model, "expert_tensor_parallel_size", tp, where=w),
        vpp=vpp,
        sp=_sp(tp, as_bool(model, "sequence_parallel", False, where=w), nemo2=False, out=out),
        zero=zero,
        micro_batch_size=_int(model, "micro_batch_size", 1, where=w),
        first_stage_layers=first,
        last_stage_layers=last,
        cp_comm_type=str(model.get("cp_comm_type", "p2p")),
        overlap_grad_reduce=as_bool(optim, "overlap_grad_sync", False, where="model.optim"),
        overlap_param_gather=as_bool(optim, "overlap_param_sync", False, where="model.optim"),
        tp_comm_overlap=as_bool(model, "ub_tp_comm_overlap", False, where=w),
        **s.layout,
    )
    return layout, s


def _nemo1(data: dict, ov: Overrides, source: str) -> Imported:
    out: list[Violation] = []
    trainer, model = _map(data["trainer"], "trainer"), _map(data["model"], "model")
    optim = _map(model.get("optim"), "model.optim")
    mdata = _map(model.get("data"), "model.data")
    _check_keys(data, model, out)
    _not_modelled(model, "model", out)
    if _int(trainer, "accumulate_grad_batches", 1, where="trainer") != 1:
        out.append(
            Violation(
                "nemo-accumulate-grad-batches",
                "trainer.accumulate_grad_batches must be 1: NeMo accumulates "
                "gradients through model.global_batch_size",
                "error",
            )
        )
    seq = _int(model, "encoder_seq_length", None, where="model") or _int(
        mdata, "seq_length", None, where="model.data"
    )
    data_seq = _int(mdata, "seq_length", None, where="model.data")
    if data_seq and model.get("encoder_seq_length") and data_seq != seq:
        out.append(
            Violation(
                "nemo-seq-length-mismatch",
                f"model.data.seq_length ({data_seq}) differs from "
                f"model.encoder_seq_length ({seq}); make them equal (planner uses "
                "encoder_seq_length)",
                "warning",
            )
        )
    hardware = hardware_of(ov)
    spec = _nemo1_model(model, ov, source, seq, out)
    num_gpus = world(trainer, ov, hardware, source)
    fp8 = as_bool(model, "fp8", False, where="model")
    layout, s = _nemo1_layout(model, optim, spec, num_gpus, fp8, out)
    if s.model:
        spec = spec.model_copy(update=s.model)
    job = make_job(
        model=spec,
        hardware=hardware,
        num_gpus=num_gpus,
        seq_length=seq,
        global_batch_size=_int(model, "global_batch_size", None, where="model"),
        precision=_precision(trainer.get("precision"), fp8, out),
        source=source,
        **s.training,
    )
    return Imported(job, checked(layout, source), out, "nemo", source)


def checked(layout: Layout, source: str) -> Layout:
    for name in ("tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch_size"):
        if getattr(layout, name) < 1:
            raise SpecError(
                f"{source}: {name} = {getattr(layout, name)} must be at least 1",
                field=name,
                value=getattr(layout, name),
            )
    if layout.cp_comm_type not in ("p2p", "a2a", "allgather", "a2a+p2p"):
        raise SpecError(
            f"{source}: cp_comm_type {layout.cp_comm_type!r} must be one of p2p, a2a, "
            "allgather, a2a+p2p",
            field="cp_comm_type",
            value=layout.cp_comm_type,
        )
    return layout


# ------------------------------------------------------------------------------ NeMo 2


def target(section: dict) -> str:
    return str(section.get("_target_", "")).rsplit(".", 1)[-1].lower()


# Megatron-Core activation callables by name (the last part of a `_target_`, or the short names
# of Megatron-Bridge's utils/activation_map.py): what each is, gated (gated_linear_unit) or not
_MCORE_ACTIVATIONS = {
    "silu": ("swiglu", None),
    "gelu": ("geglu", "gelu"),
    "fast_gelu": ("geglu", "gelu"),
    "gelu_pytorch_tanh": ("geglu", "gelu"),
    "openai_gelu": ("geglu", "gelu"),
    "squared_relu": (None, "squared_relu"),
    "relu2": (None, "squared_relu"),
    "relu": ("reglu", "relu"),
    "quick_gelu": ("quick_geglu", None),
}


def mcore_activation(config: dict, gated: bool, *, where: str) -> str:
    """The activation of a TransformerConfig-named mapping: `activation_func` as Megatron-Bridge's
    to_yaml writes a callable ({_target_: megatron.core.activations.fast_gelu, _call_: false})
    or by its short name; absent, gated_linear_unit alone says swiglu (the recipes' gated
    models are SwiGLU's) or gelu."""
    func = config.get("activation_func")
    if func is None:
        return "swiglu" if gated else "gelu"
    name = func.get("_target_") if isinstance(func, dict) else func
    key = str(name).rsplit(".", 1)[-1] if isinstance(name, str) else None
    kind = _MCORE_ACTIVATIONS.get(key or "", (None, None))[0 if gated else 1]
    if kind is None:
        known = ", ".join(
            k for k, v in _MCORE_ACTIVATIONS.items() if v[0 if gated else 1] is not None
        )
        raise SpecError(
            f"{where}.activation_func = {short(name)}: planner prices "
            f"{'gated (gated_linear_unit true)' if gated else 'ungated'} MLPs with {known}; "
            "fix the value or gated_linear_unit",
            field=f"{where}.activation_func",
            value=name,
        )
    return kind


def mcore_model(
    config: dict,
    ov: Overrides,
    source: str,
    seq: int | None,
    *,
    preset: str | None,
    fmt: str,
    where: str,
    out: list[Violation],
) -> ModelSpec:
    """The model of a Megatron-Core TransformerConfig-named mapping (NeMo 2 model.config,
    Megatron-Bridge model): --model, else a preset class with no shape keys, else the keys."""
    if ov.model is not None:
        return _replacing(
            resolve_model(ov.model),
            config,
            where,
            out,
            rule=f"{'bridge' if fmt == 'Megatron-Bridge' else 'nemo'}-model-replaced",
            preset=preset,
        )
    if preset and not config.get("num_layers"):
        return get_preset(preset)
    mcore.unpriced(config, where=where, source=source, out=out, fmt=fmt)
    if not all(config.get(k) for k in ("num_layers", "hidden_size", "num_attention_heads")):
        raise SpecError(
            f"{source}: no model shape ({where} num_layers/hidden_size/"
            "num_attention_heads, or a preset config class such as Llama3Config70B); "
            "give --model",
            field="model",
        )
    vocab = (
        ov.vocab_size
        or _int(config, "vocab_size", None, where=where)
        or (get_preset(preset).vocab_size if preset else None)
    )
    if not vocab:
        raise SpecError(
            f"{source}: the vocabulary size is unknown (no {where}.vocab_size); "
            "give --vocab-size V or --model",
            field=f"{where}.vocab_size",
        )
    gated = as_bool(config, "gated_linear_unit", False, where=where)
    num_layers = _int(config, "num_layers", None, where=where)
    fields = dict(
        num_layers=num_layers,
        hidden_size=_int(config, "hidden_size", None, where=where),
        ffn_hidden_size=_int(config, "ffn_hidden_size", None, where=where),
        num_attention_heads=_int(config, "num_attention_heads", None, where=where),
        num_kv_heads=_int(config, "num_query_groups", None, where=where),
        kv_channels=_int(config, "kv_channels", None, where=where),
        vocab_size=vocab,
        activation=mcore_activation(config, gated, where=where),
        **mcore.qk_fields(config, where=where),
        glu_linear_offset=mcore.as_number(config, "glu_linear_offset", where=where) or 0.0,
        activation_clamp=mcore.as_number(config, "activation_func_clamp_value", where=where),
        tied_embeddings=as_bool(config, "share_embeddings_and_output_weights", False, where=where),
        normalization=_NORMS.get(
            str(config.get("normalization", "layernorm")).lower(), "LayerNorm"
        ),
        norm_zero_centered=as_bool(config, "layernorm_zero_centered_gamma", False, where=where),
        attention_output_gate=as_bool(config, "attention_output_gate", False, where=where),
        add_bias_linear=as_bool(config, "add_bias_linear", True, where=where),
        add_qkv_bias=as_bool(config, "add_qkv_bias", False, where=where)
        and not as_bool(config, "add_bias_linear", True, where=where),
        position_embedding_type=_position(config.get("position_embedding_type", "rope")),
        seq_length=_int(config, "seq_length", None, where=where) or seq,
        rotary_base=None
        if target(config).startswith("gemma3modelprovider")
        else _rotary(config, where),
        rotary_percent=_rotary_share(config, where, "rotary_percent"),
    )
    fields.update(
        mcore.moe_fields(config, where=where, num_layers=num_layers, out=out, prefix="nemo")
    )
    if preset:  # a provider class's own settings where the keys are silent (Qwen3's set
        # qk_layernorm, DeepSeek-V3's its sigmoid router)
        for key in _PROVIDER_DEFAULTS:
            if key.startswith("qk") or fields.get("num_experts"):
                fields.setdefault(key, getattr(get_preset(preset), key))
    fields.update(mcore.mla_fields(config, where=where))
    if target(config).startswith("gemma3modelprovider"):
        head = fields["kv_channels"] or fields["hidden_size"] // fields["num_attention_heads"]
        fields.update(
            mcore.gemma3_fields(config, where=where, num_layers=num_layers, head_dim=head)
        )
        return inline_model(fields, source=source, fmt=fmt)
    scale = mcore.as_number(config, "softmax_scale", where=where)
    head = fields["kv_channels"] or fields["hidden_size"] // fields["num_attention_heads"]
    if scale is not None and not math.isclose(scale, head**-0.5):
        fields["softmax_scale"] = scale
    fields.update(mcore.window_fields(config, where=where, num_layers=num_layers))
    variant = mcore.variant_fields(config, where=where, num_layers=num_layers)
    if variant and fmt == "Megatron-Bridge":
        mcore.check_variant_spec(config, where=where, out=out)
    if variant and "layer_types" in fields:
        raise SpecError(
            f"{source}: {where}.experimental_attention_variant with window_size: Megatron-Core "
            "builds the variant's layers without windows; drop one of them",
            field=f"{where}.experimental_attention_variant",
        )
    fields.update(variant)
    return inline_model(fields, source=source, fmt=fmt)


def _nemo2_precision(trainer: dict, out: list[Violation]) -> tuple[str, Settings]:
    """(precision, settings) from trainer.plugins: a MegatronMixedPrecision mapping, a recipe
    name (bf16_with_fp8_current_scaling_mixed ...) or a precision string."""
    plugins = trainer.get("plugins")
    items = plugins if isinstance(plugins, list) else [plugins]
    for item in items:
        if isinstance(item, Unresolved):
            item.fail()
        if isinstance(item, dict) and target(item) in {k.lower() for k in mcore.RECIPES} | {
            "fp16_with_fp8_mixed"
        }:
            return mcore.precision_recipe(
                target(item), where="trainer.plugins", prefix="nemo", out=out
            )
        if isinstance(item, dict) and "precision" in item:
            return _plugin(item, out)
        if isinstance(item, str):
            if item.removesuffix("()").replace("-", "_") in mcore.RECIPES:
                return mcore.precision_recipe(item, where="trainer.plugins", prefix="nemo", out=out)
            return _precision(item, False, out), Settings()
    return _precision(trainer.get("precision", "32"), False, out), Settings()


def _plugin(item: dict, out: list[Violation]) -> tuple[str, Settings]:
    """MegatronMixedPrecision(precision, fp8, fp8_recipe, fp8_param_gather, grad_reduce_in_fp32)."""
    w = "trainer.plugins"
    fp8 = item.get("fp8") not in (None, False, "", "none")
    precision = _precision(item["precision"], fp8, out)
    s = mcore.fp8_settings(item, where=w, prefix="nemo", fp8=fp8, out=out)
    if "grad_reduce_in_fp32" in item:
        s.layout["grad_reduce_in_fp32"] = as_bool(item, "grad_reduce_in_fp32", True, where=w)
    return precision, s


def _nemo2_zero(strategy: dict, ddp: dict, optim_cfg: dict) -> tuple[int, Settings]:
    zero, s = mcore.read_ddp(ddp, where="trainer.strategy.ddp")
    fsdp = strategy.get("fsdp")
    if isinstance(fsdp, Unresolved):
        fsdp.fail()
    use_dist = optim_cfg.get("use_distributed_optimizer", strategy.get("use_distributed_optimizer"))
    if fsdp == "megatron":
        zero = mcore.sharding_stage(ddp, where="trainer.strategy.ddp")
    elif fsdp not in (None, False):
        raise SpecError(
            f"trainer.strategy.fsdp = {fsdp!r}: planner reads 'megatron' "
            "(Megatron-FSDP); NeMo 2.4 has no other FSDP for MegatronStrategy",
            field="trainer.strategy.fsdp",
            value=fsdp,
        )
    if zero in (None, 0) and use_dist:
        zero = 1
    return zero or 0, s


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
            out.append(
                unknown_key(
                    "nemo-unknown-key",
                    f"trainer.strategy.{key}",
                    _STRATEGY,
                    severity="warning",
                    consequence="MegatronStrategy does not know it; remove it",
                )
            )
    seq = _int(dmod, "seq_length", None, where="data")
    config_seq = _int(config, "seq_length", None, where="model.config")
    if seq and config_seq and config_seq != seq:
        out.append(
            Violation(
                "nemo-seq-length-mismatch",
                f"model.config.seq_length ({config_seq}) must equal "
                f"data.seq_length ({seq}) (NeMo 2 / Megatron-Bridge raise)",
                "error",
            )
        )
    hardware = hardware_of(ov)
    preset = _NEMO2_PRESETS.get(target(config)) or _NEMO2_PRESETS.get(target(model))
    spec = mcore_model(
        config, ov, source, seq, preset=preset, fmt="NeMo 2", where="model.config", out=out
    )
    num_gpus = world(trainer, ov, hardware, source)
    precision, prec = _nemo2_precision(trainer, out)
    w = "trainer.strategy"
    tp = _int(strategy, "tensor_model_parallel_size", 1, where=w)
    pp = _int(strategy, "pipeline_model_parallel_size", 1, where=w)
    cp = _int(strategy, "context_parallel_size", 1, where=w)
    s = mcore.read_recompute(
        config,
        names=("recompute_granularity", "recompute_method", "recompute_num_layers"),
        where="model.config",
        rule="nemo-recompute-flags",
        out=out,
    )
    s.update(
        mcore.read_transformer(
            config,
            where="model.config",
            prefix="nemo",
            num_layers=spec.num_layers,
            pp=pp,
            recompute=s.layout["recompute"],
            fp8=precision == "fp8",
            out=out,
        )
    )
    if strategy.get("pipeline_model_parallel_layout") is not None:
        s.update(
            mcore.read_transformer(
                {"pipeline_model_parallel_layout": strategy["pipeline_model_parallel_layout"]},
                where=w,
                prefix="nemo",
                num_layers=spec.num_layers,
                pp=pp,
                recompute="none",
                fp8=False,
                out=out,
            )
        )
    zero, ddp_settings = _nemo2_zero(strategy, ddp, optim_cfg)
    s.update(ddp_settings).update(prec)
    s.update(mcore.read_optimizer(optim_cfg, where="optim.config", prefix="nemo", out=out))
    vpp = _int(strategy, "virtual_pipeline_model_parallel_size", 1, where=w)
    first, last = split(strategy, num_layers=spec.num_layers, pp=pp, vpp=vpp, where=w, out=out)
    s.layout.setdefault("overlap_grad_reduce", False)
    s.layout.setdefault("overlap_param_gather", False)
    layout = Layout(
        tp=tp,
        pp=pp,
        cp=cp,
        dp=max(1, num_gpus // (tp * pp * cp)),
        ep=_int(strategy, "expert_model_parallel_size", 1, where=w),
        etp=_int(strategy, "expert_tensor_parallel_size", tp, where=w),
        vpp=vpp,
        sp=_sp(tp, as_bool(strategy, "sequence_parallel", False, where=w), nemo2=True, out=out),
        zero=zero,
        micro_batch_size=_int(dmod, "micro_batch_size", 1, where="data"),
        first_stage_layers=first,
        last_stage_layers=last,
        **s.layout,
    )
    if s.model:
        spec = spec.model_copy(update=s.model)
    job = make_job(
        model=spec,
        hardware=hardware,
        num_gpus=num_gpus,
        seq_length=seq or spec.seq_length,
        global_batch_size=_int(dmod, "global_batch_size", None, where="data"),
        precision=precision,
        source=source,
        **s.training,
    )
    return Imported(job, checked(layout, source), out, "nemo2", source)


# ---------------------------------------------------------------------------------- load


def prepare(data: Any, ov: Overrides) -> Any:
    """String keys checked, then interpolations resolved (gpu_name from --hardware)."""
    check_mapping(data)
    return resolve(data, architecture=hardware_of(ov).architecture)


def load(path: str | Path, data: Any, ov: Overrides) -> Imported:
    """Read a NeMo YAML already parsed (`looks_like_nemo(data)` holds)."""
    from planner.frameworks.nemo import bridge

    source = str(path)
    recipe = bridge.recipe_under(data, ov, base=Path(source).parent)
    notes: list[Violation] = []
    if recipe is not None:
        data, ov, notes = recipe
    data = prepare(data, ov)
    if bridge.looks_like_bridge(data):
        imported = bridge.load(source, data, ov)
        imported.violations.extend(notes)
        return imported
    return _nemo2(data, ov, source) if is_nemo2(data) else _nemo1(data, ov, source)
