"""NeMo: a NeMo 1 / NeMo-launcher style YAML, with the NeMo 2 and Megatron-Bridge equivalents.

Output: a header comment (planner version, job, layout, the estimate when given), the YAML
(`trainer.*` and `model.*` with the names of docs/reference/framework-rules.md#nemo-keys),
then a comment block giving the same values as NeMo 2 recipe fields
(`recipe.trainer.strategy.*`, `recipe.data.*`, `recipe.model.config.*`,
`recipe.trainer.plugins`, `recipe.optim.config.*`) and as Megatron-Bridge `ConfigContainer`
fields (`cfg.model.*`, `cfg.train.*`, `cfg.ddp.*`, `cfg.optimizer.*`, `cfg.mixed_precision`).

The YAML holds what the plan decides and reads back with `planner validate` as it is: the full
model shape, the RoPE base (`rotary_base`), and the tokenizer where the model's vocabulary is
a known one's (Hugging Face name, or Megatron's GPT-2 BPE), else `override_vocab_size` (the
vocabulary padded to a multiple of 128 x tp, as Megatron pads it; NeMo builds the embedding
with exactly that size). Merge it over NeMo's `megatron_gpt_config.yaml` (Hydra overrides),
which supplies the data and the optimizer hyper-parameters.

Mappings: zero 1 and 2 -> `model.optim.name: distributed_fused_adam` (Apex's distributed Adam
shards gradients as well as optimizer states, so it is ZeRO-2-like; at most ZeRO-1's memory);
zero 0 -> `fused_adam`; zero 3 -> `model.fsdp: true` with `fsdp_sharding_strategy: full`
(NeMo 1's FSDP; no pipeline parallelism). SP is written off at TP = 1 (NeMo turns it off;
NeMo 2 rejects it). Uneven pipeline splits use Megatron-Core's TransformerConfig field names
(`num_layers_in_first/last_pipeline_stage`, `account_for_*_in_pipeline_split`), which NeMo
passes through to Megatron-Core. Dropout is 0, as the memory estimate assumes.

Recipe settings (NeMo 1 passes Megatron-Core's TransformerConfig fields through under their own
names): `fp8_recipe`, `fp8_params` (fp8 parameter gather), `recompute_modules`, method block
with `activations_checkpoint_num_layers` N (partial full recompute), `cpu_offloading*`,
`moe_token_dispatcher_type` (flex + `moe_flex_dispatcher_backend` for deepep / hybridep),
`overlap_moe_expert_parallel_comm`, `enable_cuda_graph` (per-layer graphs),
`pipeline_model_parallel_layout`, `mtp_num_layers`; bf16 gradients as
`optim.grad_sync_dtype: bf16` (FSDP: `fsdp_grad_reduce_dtype: bf16`); bf16 moments as Apex's
`optim.dtype: bf16`.

Refused with an InfeasibleError, each naming the setting: multi-latent attention (NeMo 1 has
none: use NeMo 2's DeepSeek recipes with the degrees of the megatron export), zero 3 with
pp > 1; what NeMo 1 cannot express: full-iteration CUDA graphs, bf16 gradient reduction or
moments without the distributed optimizer or FSDP, different dtypes for the two Adam moments.
"""

from __future__ import annotations

import yaml

from planner.errors import InfeasibleError
from planner.frameworks.writing import (
    gemma_layer_problems,
    header_lines,
    nodes_and_devices,
    pattern_keys,
    pipeline_split,
    store_problems,
)
from planner.layout import Layout

__all__ = ["render", "nemo_config", "check_supported", "refusals", "runs_as", "tokenizer"]

_ACTIVATION = {
    "swiglu": "fast-swiglu",
    "geglu": "fast-geglu",
    "reglu": "fast-reglu",
    "gelu": "gelu",
    "squared_relu": "squared-relu",
}
"""planner's activations -> NeMo 1's model.activation (its get_activation_fn accepts gelu,
geglu, reglu, swiglu, squared-relu and the fast- GLUs; no plain relu, no quick-GELU)."""
_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp8": "bf16-mixed"}
# planner presets -> the Hugging Face repository whose tokenizer they use (presets.py)
_HF_TOKENIZERS = {
    "Llama 2 7B": "meta-llama/Llama-2-7b-hf",
    "Llama 2 13B": "meta-llama/Llama-2-13b-hf",
    "Llama 2 70B": "meta-llama/Llama-2-70b-hf",
    "Llama 3 8B": "meta-llama/Meta-Llama-3-8B",
    "Llama 3 70B": "meta-llama/Meta-Llama-3-70B",
    "Llama 3.1 405B": "meta-llama/Llama-3.1-405B",
    "Mixtral 8x7B": "mistralai/Mixtral-8x7B-v0.1",
    "Mixtral 8x22B": "mistralai/Mixtral-8x22B-v0.1",
    "Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
}
# NeMo 2 (nemo.collections.llm.recipes.precision.mixed_precision) and Megatron-Bridge
# (megatron.bridge.training.mixed_precision) recipe per fp8_recipe, with its fp8_param_gather
_NEMO2_FP8 = {
    "delayed": ("bf16_with_fp8_mixed", True),
    "tensorwise": ("bf16_with_fp8_current_scaling_mixed", True),
    "mxfp8": ("bf16_with_mxfp8_mixed", True),
    "blockwise": ("bf16_with_fp8_subchannel_scaling_mixed", False),
}
_BRIDGE_FP8 = {
    "delayed": ("bf16_with_fp8_delayed_scaling_mixed", True),
    "tensorwise": ("bf16_with_fp8_current_scaling_mixed", True),
    "mxfp8": ("bf16_with_mxfp8_mixed", True),
    "blockwise": ("bf16_with_fp8_subchannel_scaling_mixed", False),
}


def refusals(job, layout: Layout) -> list[str]:
    """Why NeMo 1 cannot run this layout, one message each (values and fix); empty when it
    runs. The export (`check_supported`) and the search filter (`planner plan --framework
    nemo`) both read this list."""
    moments = (layout.exp_avg_dtype, layout.exp_avg_sq_dtype)
    sharded = layout.zero in (1, 2, 3)
    problems = gemma_layer_problems(job.model, "NeMo 1") + [
        (
            layout.pipeline_schedule in ("dualpipe", "dualpipev"),
            f"pipeline_schedule {layout.pipeline_schedule}: DualPipe is not in NeMo's Megatron "
            "core; use 1f1b (interleaved with vpp > 1)",
        ),
        (
            "torchtitan_op" in layout.selective_modules,
            "recompute_modules [torchtitan_op]: torchtitan's op-level checkpointing; NeMo's "
            "selective recompute is by module: use recompute_modules core_attn (and mlp, "
            "layernorm ...) or recompute full",
        ),
        (
            job.model.is_mla,
            f"{job.model.name} uses multi-latent attention, which NeMo 1 lacks; use NeMo "
            "2's DeepSeek recipe with the degrees of `--format megatron`, or export megatron-bridge",
        ),
        (
            layout.zero == 3 and layout.pp > 1,
            f"zero_stage 3 (FSDP) with pp {layout.pp}; NeMo 1's FSDP has no pipeline "
            "parallelism; set pp 1 or zero_stage 1",
        ),
        (
            layout.cuda_graphs == "full",
            "cuda_graphs full: NeMo 1 captures per-layer graphs only (enable_cuda_graph); "
            "use cuda_graphs partial, or NeMo 2 / Megatron-Bridge (cuda_graph_impl local, "
            "cuda_graph_scope full_iteration)",
        ),
        (
            not layout.grad_reduce_in_fp32 and not sharded,
            "grad_reduce_in_fp32 false with zero_stage 0: NeMo 1 reduces gradients in bf16 "
            "only through the distributed optimizer (optim.grad_sync_dtype) or FSDP; set "
            "zero_stage 1 or grad_reduce_in_fp32 true",
        ),
        (
            "bf16" in moments and (layout.zero not in (1, 2) or moments[0] != moments[1]),
            f"exp_avg_dtype {moments[0]} / exp_avg_sq_dtype {moments[1]}: NeMo 1 sets one "
            "dtype for both Adam moments, and only in Apex's distributed Adam "
            "(optim.dtype, zero_stage 1 or 2); make them equal with zero_stage 1 or 2",
        ),
    ]
    from planner.frameworks.megatron.writer import layer_kind_problems

    m = job.model
    kinds = set(m.attention_kinds)
    problems += [
        (broken, msg.replace("Megatron-Core's GPT model", "NeMo 1's GPT model"))
        for broken, msg in layer_kind_problems(m, layout)
    ] + [
        (
            "linear" in kinds,
            "layer_types has Gated DeltaNet layers: NeMo 1's GPT model builds none "
            "(Megatron-Core's experimental attention variants); export megatron or "
            "megatron-bridge",
        ),
        (
            "dsa" in kinds,
            "layer_types has DSA layers: NeMo 1's GPT model builds none; export megatron or "
            "megatron-bridge",
        ),
        (
            m.attention_output_gate,
            "attention_output_gate (Qwen3-Next's gated attention): NeMo 1 has none; export "
            "megatron or megatron-bridge",
        ),
        (
            m.norm_zero_centered and m.norm == "RMSNorm",
            "norm_zero_centered with RMSNorm ((1 + w) weights): NeMo 1's layernorm1p is a "
            "LayerNorm; export megatron (--apply-layernorm-1p) or megatron-bridge",
        ),
        (
            m.moe_shared_expert_gate,
            "moe_shared_expert_gate (the shared experts' sigmoid gate): NeMo 1 has no key for "
            "it; export megatron or megatron-bridge",
        ),
    ]
    problems.append(
        (
            job.model.attention_sinks,
            "attention_sinks (gpt-oss): NeMo 1 has no learnable softmax offset",
        )
    )
    problems.append(
        (
            job.model.qk_norm in ("l2", "layer"),
            f"qk_norm {job.model.qk_norm}: NeMo 1's GPT model normalizes queries and keys per "
            "head only (model.qk_layernorm); "
            + (
                "export megatron or megatron-bridge (qk_l2_norm)"
                if job.model.qk_norm == "l2"
                else "no export writes it"
            ),
        )
    )
    problems.append(
        (
            job.model.activation not in _ACTIVATION
            or bool(job.model.glu_linear_offset)
            or job.model.activation_clamp is not None,
            f"activation {job.model.activation}"
            + (" with a GLU offset / clamp" if job.model.activation in _ACTIVATION else "")
            + f": NeMo 1's model.activation is one of {', '.join(_ACTIVATION.values())} "
            "(no plain ReLU, quick-GELU, GLU offset or clamp); export megatron-bridge",
        )
    )
    problems += store_problems(layout, "NeMo 1", config_fields=True)
    return [msg for broken, msg in problems if broken]


def runs_as(job, layout: Layout) -> Layout:
    """The layout as this export runs it (what reading it back gives): one distributed
    optimizer for zero 1 and 2 (distributed_fused_adam, read back and counted as zero 1), its
    overlap flags only with it."""
    dist = layout.zero in (1, 2)
    return layout.with_(
        zero=1 if layout.zero == 2 else layout.zero,
        overlap_grad_reduce=layout.overlap_grad_reduce and dist,
        overlap_param_gather=layout.overlap_param_gather and layout.overlap_grad_reduce and dist,
        cp_comm_type="p2p",
    )  # the export leaves it to NeMo's default (p2p)


def check_supported(job, layout: Layout) -> None:
    found = refusals(job, layout)
    if found:
        raise InfeasibleError(f"cannot export to NeMo 1: {found[0]}")


def tokenizer(job, layout: Layout) -> dict:
    """model.tokenizer (and override_vocab_size) that give the model's vocabulary back."""
    from planner.cost.params import padded_vocab
    from planner.frameworks.common import vocab_from_tokenizer

    m = job.model
    hf = _HF_TOKENIZERS.get(m.name)
    if hf and vocab_from_tokenizer(hf) == m.vocab_size:
        return {"tokenizer": {"library": "huggingface", "type": hf}}
    if m.vocab_size == 50257:
        return {"tokenizer": {"library": "megatron", "type": "GPT2BPETokenizer"}}
    return {"override_vocab_size": padded_vocab(m.vocab_size, layout.tp)}


def _model_shape(job, layout: Layout) -> dict:
    m, tr = job.model, job.training
    d = {
        "encoder_seq_length": tr.seq_length,
        "max_position_embeddings": max(tr.seq_length, m.seq_length or 0),
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "ffn_hidden_size": m.ffn,
        "num_attention_heads": m.num_attention_heads,
        "num_query_groups": m.kv_heads,
        "kv_channels": m.kv_channels,
        "activation": _ACTIVATION[m.activation],
        **({"qk_layernorm": True} if m.qk_norm == "head" else {}),
        "normalization": "rmsnorm"
        if m.norm == "RMSNorm"
        else "layernorm1p"
        if m.norm_zero_centered
        else "layernorm",
        "bias": m.bias,
        **({"add_qkv_bias": True} if m.qkv_bias_only else {}),
        "position_embedding_type": m.position_embedding,
    }
    if m.position_embedding == "rope" and m.rotary_base is not None:
        d["rotary_base"] = m.rotary_base
    if m.position_embedding == "rope" and m.rotary_percent != 1.0:
        d["rotary_percentage"] = m.rotary_percent  # NeMo 1's name (megatron_gpt_config)
    d.update(
        share_embeddings_and_output_weights=m.tied_embeddings,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    d.update(tokenizer(job, layout))
    if m.is_moe:
        d.update(
            num_moe_experts=m.num_experts,
            moe_router_topk=m.moe_top_k,
            moe_ffn_hidden_size=m.expert_ffn,
            moe_grouped_gemm=True,
        )
        d.update(_dispatcher(layout, m.moe_capacity_factor))
        if m.num_shared_experts:
            d["moe_shared_expert_intermediate_size"] = m.num_shared_experts * m.expert_ffn
        if m.moe_capacity_factor != 1.0:
            d["moe_expert_capacity_factor"] = m.moe_capacity_factor
    if m.mtp_num_layers:
        d["mtp_num_layers"] = m.mtp_num_layers
    d.update(pattern_keys(m))  # MoE layers, windows (sinks: refused above)
    return d


def _dispatcher(layout: Layout, capacity: float = 1.0) -> dict:
    d = layout.moe_token_dispatcher
    out: dict = (
        {"moe_token_dispatcher_type": d}
        if d in ("alltoall", "allgather")
        else {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": d}
    )
    if layout.overlap_moe_expert_parallel_comm:
        out["overlap_moe_expert_parallel_comm"] = True
    if layout.moe_pad_expert_input_to_capacity:  # drop-and-pad: the factor is written, 1.0 too
        out["moe_expert_capacity_factor"] = capacity
        out["moe_pad_expert_input_to_capacity"] = True
    return out


def _parallel(job, layout: Layout) -> dict:
    d = {
        "tensor_model_parallel_size": layout.tp,
        "pipeline_model_parallel_size": layout.pp,
        "virtual_pipeline_model_parallel_size": layout.vpp if layout.vpp > 1 else None,
        "context_parallel_size": layout.cp,
    }
    if job.model.is_moe:
        d.update(expert_model_parallel_size=layout.ep, expert_tensor_parallel_size=layout.etp)
    d["sequence_parallel"] = layout.sp and layout.tp > 1
    if layout.pipeline_model_parallel_layout is not None:
        d["pipeline_model_parallel_layout"] = layout.pipeline_model_parallel_layout
        return d
    split = pipeline_split(job.model.num_layers, layout)
    if split.kind == "accounted":
        d.update(
            account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True
        )
    elif split.kind == "explicit":
        if layout.first_stage_layers is not None:
            d["num_layers_in_first_pipeline_stage"] = layout.first_stage_layers
        if layout.last_stage_layers is not None:
            d["num_layers_in_last_pipeline_stage"] = layout.last_stage_layers
    return d


def _recompute_fields(layout: Layout) -> dict:
    """Megatron-Core's recompute_granularity / method / num_layers for the plan."""
    if layout.recompute == "full":
        n = layout.recompute_num_layers
        return {
            "granularity": "full",
            "method": "uniform" if n is None else "block",
            "num_layers": 1 if n is None else n,
        }
    return {
        "granularity": None if layout.recompute == "none" else layout.recompute,
        "method": None,
        "num_layers": None,
    }


def _recompute(layout: Layout) -> dict:
    r = _recompute_fields(layout)
    d = {
        "activations_checkpoint_granularity": r["granularity"],
        "activations_checkpoint_method": r["method"],
        "activations_checkpoint_num_layers": r["num_layers"],
    }
    if layout.recompute == "selective" and layout.selective_modules != ("core_attn",):
        d["recompute_modules"] = list(layout.selective_modules)
    if layout.cpu_offloading_num_layers:
        d.update(
            cpu_offloading=True,
            cpu_offloading_num_layers=layout.cpu_offloading_num_layers,
            cpu_offloading_activations=True,
            cpu_offloading_weights=False,
        )
    if layout.cuda_graphs == "partial":
        d.update(enable_cuda_graph=True, use_te_rng_tracker=True)
    return d


def _optim(layout: Layout) -> dict:
    if layout.zero in (1, 2):
        d = {
            "name": "distributed_fused_adam",
            "overlap_grad_sync": layout.overlap_grad_reduce,
            "overlap_param_sync": layout.overlap_grad_reduce and layout.overlap_param_gather,
        }
        if not layout.grad_reduce_in_fp32:
            d["grad_sync_dtype"] = "bf16"
        if layout.exp_avg_dtype == "bf16":
            d["dtype"] = "bf16"
        return d
    return {"name": "fused_adam"}


def nemo_config(job, layout: Layout) -> dict:
    """The YAML mapping (trainer, model)."""
    check_supported(job, layout)
    tr = job.training
    nodes, per_node = nodes_and_devices(job.num_gpus, job.hardware.gpus_per_node)
    model: dict = {
        "micro_batch_size": layout.micro_batch_size,
        "global_batch_size": tr.global_batch_size,
    }
    model.update(_parallel(job, layout))
    model.update(_model_shape(job, layout))
    model.update(_recompute(layout))
    if layout.activation_func_fp8_input_store:  # a TransformerConfig field NeMo 1 passes on
        model["activation_func_fp8_input_store"] = True
    if tr.precision == "fp8":
        model.update(fp8=True, fp8_hybrid=True, fp8_recipe=tr.recipe)
        if tr.fp8_param_gather:
            model["fp8_params"] = True
    if layout.tp_comm_overlap and layout.sp and layout.tp > 1:
        model["ub_tp_comm_overlap"] = True
    if layout.zero == 3:
        model.update(fsdp=True, fsdp_sharding_strategy="full")
        if not layout.grad_reduce_in_fp32:
            model["fsdp_grad_reduce_dtype"] = "bf16"
    model["optim"] = _optim(layout)
    return {
        "trainer": {"num_nodes": nodes, "devices": per_node, "precision": _PRECISION[tr.precision]},
        "model": model,
    }


class _Dumper(yaml.SafeDumper):
    """Block mappings, flow lists (moe_layer_freq stays on a few lines)."""


_Dumper.add_representer(
    list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)


def _py(v) -> str:
    return repr(v)


def _config_fields(job, layout: Layout) -> list[tuple[str, object]]:
    """TransformerConfig fields (NeMo 2 model.config.*, Megatron-Bridge model.*)."""
    m = job.model
    r = _recompute_fields(layout)
    out: list[tuple[str, object]] = [("recompute_granularity", r["granularity"])]
    if r["granularity"] == "full":
        out += [("recompute_method", r["method"]), ("recompute_num_layers", r["num_layers"])]
    if layout.recompute == "selective" and layout.selective_modules != ("core_attn",):
        out.append(("recompute_modules", list(layout.selective_modules)))
    if layout.cpu_offloading_num_layers:
        out += [
            ("cpu_offloading", True),
            ("cpu_offloading_num_layers", layout.cpu_offloading_num_layers),
        ]
    if m.position_embedding == "rope" and m.rotary_base is not None:
        out.append(("rotary_base", m.rotary_base))
    if m.position_embedding == "rope" and m.rotary_percent != 1.0:
        out.append(("rotary_percent", m.rotary_percent))
    if m.is_moe:
        out += list(_dispatcher(layout, m.moe_capacity_factor).items())
    if layout.cuda_graphs != "none":
        out.append(
            ("cuda_graph_impl", "local" if layout.cuda_graphs == "full" else "transformer_engine")
        )
        if layout.cuda_graphs == "full":
            out.append(("cuda_graph_scope", "full_iteration"))
    if m.mtp_num_layers:
        out.append(("mtp_num_layers", m.mtp_num_layers))
    if layout.activation_func_fp8_input_store:
        out.append(("activation_func_fp8_input_store", True))
    return out


def _precision_lines(job, layout: Layout, prefix: str, table: dict) -> list[str]:
    tr = job.training
    if tr.precision != "fp8":
        name = {"bf16": "bf16_mixed", "fp16": "fp16_mixed"}[tr.precision]
        lines = [f"{prefix} = {name}()" if "plugins" in prefix else f"{prefix} = {name!r}"]
    else:
        name, gather = table[tr.recipe]
        lines = [f"{prefix} = {name}()" if "plugins" in prefix else f"{prefix} = {name!r}"]
        if gather != tr.fp8_param_gather:
            lines.append(f"{prefix}.fp8_param_gather = {tr.fp8_param_gather}")
        if tr.recipe == "tensorwise":
            lines.append(f"{prefix}.first_last_layers_bf16 = False  (the plan is fp8 throughout)")
    if not layout.grad_reduce_in_fp32 and tr.precision != "fp16":
        lines.append(f"{prefix}.grad_reduce_in_fp32 = False")
    return [f"  {line}" for line in lines]


def _optimizer_lines(layout: Layout, prefix: str) -> list[str]:
    if layout.exp_avg_dtype == "fp32" and layout.exp_avg_sq_dtype == "fp32":
        return []
    dt = {"fp32": "torch.float32", "bf16": "torch.bfloat16"}
    return [
        f"  {prefix}.use_precision_aware_optimizer = True",
        f"  {prefix}.exp_avg_dtype = {dt[layout.exp_avg_dtype]}",
        f"  {prefix}.exp_avg_sq_dtype = {dt[layout.exp_avg_sq_dtype]}",
    ]


def _fsdp(layout: Layout) -> str | None:
    return {2: "optim_grads", 3: "optim_grads_params"}.get(layout.zero)


def _nemo2_lines(job, layout: Layout) -> list[str]:
    tr = job.training
    nodes, per_node = nodes_and_devices(job.num_gpus, job.hardware.gpus_per_node)
    par = [
        ("tensor_model_parallel_size", layout.tp),
        ("pipeline_model_parallel_size", layout.pp),
        ("virtual_pipeline_model_parallel_size", layout.vpp if layout.vpp > 1 else None),
        ("context_parallel_size", layout.cp),
    ]
    if job.model.is_moe:
        par += [
            ("expert_model_parallel_size", layout.ep),
            ("expert_tensor_parallel_size", layout.etp),
        ]
    par.append(("sequence_parallel", layout.sp and layout.tp > 1))
    if layout.pipeline_model_parallel_layout is not None:
        par.append(("pipeline_model_parallel_layout", layout.pipeline_model_parallel_layout))
    lines = [
        "NeMo 2 equivalents (nemo.collections.llm recipe, e.g. "
        f"pretrain_recipe(num_nodes={nodes}, num_gpus_per_node={per_node})):",
    ]
    lines += [f"  recipe.trainer.strategy.{k} = {_py(v)}" for k, v in par]
    lines += [
        f"  recipe.data.micro_batch_size = {layout.micro_batch_size}",
        f"  recipe.data.global_batch_size = {tr.global_batch_size}",
        f"  recipe.data.seq_length = {tr.seq_length}",
    ]
    lines += [f"  recipe.model.config.{k} = {_py(v)}" for k, v in _config_fields(job, layout)]
    lines += _precision_lines(job, layout, "recipe.trainer.plugins", _NEMO2_FP8)
    if layout.zero >= 1:
        lines.append("  recipe.optim.config.use_distributed_optimizer = True")
    lines += _optimizer_lines(layout, "recipe.optim.config")
    if _fsdp(layout):
        lines.append(
            f"  recipe.trainer.strategy.fsdp = 'megatron'  "
            f"(ddp data_parallel_sharding_strategy = '{_fsdp(layout)}')"
        )
    if not layout.grad_reduce_in_fp32:
        lines.append("  recipe.trainer.strategy.ddp.grad_reduce_in_fp32 = False")
    return lines


def _bridge_lines(job, layout: Layout) -> list[str]:
    tr = job.training
    lines = [
        "Megatron-Bridge equivalents (ConfigContainer cfg):",
        "  cfg.model.<the strategy fields above> (same names), e.g. "
        f"cfg.model.tensor_model_parallel_size = {layout.tp}",
        f"  cfg.model.seq_length = {tr.seq_length}  (must equal cfg.dataset.seq_length)",
        f"  cfg.train.micro_batch_size = {layout.micro_batch_size}",
        f"  cfg.train.global_batch_size = {tr.global_batch_size}",
    ]
    lines += [f"  cfg.model.{k} = {_py(v)}" for k, v in _config_fields(job, layout)]
    lines += _precision_lines(job, layout, "cfg.mixed_precision", _BRIDGE_FP8)
    if layout.zero >= 1:
        lines.append(
            "  cfg.ddp.use_distributed_optimizer = True; "
            "cfg.optimizer.use_distributed_optimizer = True"
        )
    lines += _optimizer_lines(layout, "cfg.optimizer")
    if _fsdp(layout):
        lines.append(
            f"  cfg.ddp.use_megatron_fsdp = True; "
            f"cfg.ddp.data_parallel_sharding_strategy = '{_fsdp(layout)}'"
        )
    return lines


def _head_notes(job, layout: Layout) -> list[str]:
    notes = [
        "",
        "Merge over NeMo's megatron_gpt_config.yaml: data and optimizer "
        "hyper-parameters come from there.",
    ]
    if layout.zero == 2:
        notes.append("zero 2 -> distributed_fused_adam (shards gradients and optimizer states).")
    elif layout.zero == 1:
        notes.append("zero 1 -> distributed_fused_adam (it also shards gradients: ZeRO-2-like).")
    if layout.exp_avg_dtype == "bf16":
        notes.append(
            "optim.dtype bf16: Apex's distributed Adam keeps bf16 moments and no fp32 "
            "master weights (the plan counts them: an upper bound)."
        )
    if "override_vocab_size" in tokenizer(job, layout):
        notes.append(
            "override_vocab_size: the vocabulary padded to a multiple of 128 x tp; set "
            "model.tokenizer to yours."
        )
    return notes


def render(job, layout: Layout, *, estimate=None) -> str:
    cfg = nemo_config(job, layout)
    head = header_lines(
        job, layout, "NeMo 1 / NeMo-launcher training config (YAML)", estimate=estimate
    )
    head += _head_notes(job, layout)
    body = yaml.dump(cfg, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    out = [f"# {line}".rstrip() for line in head] + [body.rstrip()]
    out += [""] + [
        f"# {line}".rstrip() for line in _nemo2_lines(job, layout) + _bridge_lines(job, layout)
    ]
    return "\n".join(out) + "\n"
