"""NeMo: a NeMo 1 / NeMo-launcher style YAML, with the NeMo 2 and Megatron-Bridge equivalents.

Output: a header comment (planner version, job, layout, the estimate when given), the YAML
(`trainer.*` and `model.*` with the names of frameworks.md), then a comment block giving the
same values as NeMo 2 recipe fields (`recipe.trainer.strategy.*`, `recipe.data.*`) and as
Megatron-Bridge `ConfigContainer` fields (`cfg.model.*`, `cfg.train.*`, `cfg.ddp.*`).

The YAML holds what the plan decides; merge it over NeMo's `megatron_gpt_config.yaml` (Hydra
overrides), which supplies the data, the tokenizer and the optimizer hyper-parameters.

Mappings: zero 1 and 2 -> `model.optim.name: distributed_fused_adam` (Apex's distributed Adam
shards gradients as well as optimizer states, so it is ZeRO-2-like; at most ZeRO-1's memory);
zero 0 -> `fused_adam`; zero 3 -> `model.fsdp: true` with `fsdp_sharding_strategy: full`
(NeMo 1's FSDP; no pipeline parallelism). SP is written off at TP = 1 (NeMo turns it off;
NeMo 2 rejects it). Uneven pipeline splits use Megatron-Core's TransformerConfig field names
(`num_layers_in_first/last_pipeline_stage`, `account_for_*_in_pipeline_split`), which NeMo
passes through to Megatron-Core. Dropout is 0, as the memory estimate assumes.

Refused with an InfeasibleError: multi-latent attention (NeMo 1 has none: use NeMo 2's
DeepSeek recipes with the degrees of the megatron export) and zero 3 with pp > 1.
"""

from __future__ import annotations

import yaml

from planner.errors import InfeasibleError
from planner.export.common import header_lines, nodes_and_devices, pipeline_split
from planner.layout import Layout

__all__ = ["render", "nemo_config", "check_supported"]

_ACTIVATION = {"swiglu": "fast-swiglu", "gelu": "gelu", "squared_relu": "squared-relu"}
_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp8": "bf16-mixed"}


def check_supported(job, layout: Layout) -> None:
    if job.model.is_mla:
        raise InfeasibleError(
            f"cannot export to NeMo 1: {job.model.name} uses multi-latent attention, which NeMo 1 "
            "lacks; use NeMo 2's DeepSeek recipe with the degrees of `--format megatron`")
    if layout.zero == 3 and layout.pp > 1:
        raise InfeasibleError(
            f"cannot export to NeMo 1: zero_stage 3 (FSDP) with pp {layout.pp}; NeMo 1's FSDP "
            "has no pipeline parallelism; set pp 1 or zero_stage 1")


def _model_shape(job) -> dict:
    m, tr = job.model, job.training
    d = {
        "encoder_seq_length": tr.seq_length,
        "max_position_embeddings": max(tr.seq_length, m.seq_length or 0),
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "ffn_hidden_size": m.ffn,
        "num_attention_heads": m.num_attention_heads, "num_query_groups": m.kv_heads,
        "kv_channels": m.kv_channels,
        "activation": _ACTIVATION[m.activation],
        "normalization": "rmsnorm" if m.norm == "RMSNorm" else "layernorm",
        "bias": m.bias, "position_embedding_type": m.position_embedding,
        "share_embeddings_and_output_weights": m.tied_embeddings,
        "hidden_dropout": 0.0, "attention_dropout": 0.0,
    }
    if m.is_moe:
        d.update(num_moe_experts=m.num_experts, moe_router_topk=m.moe_top_k,
                 moe_ffn_hidden_size=m.expert_ffn, moe_token_dispatcher_type="alltoall",
                 moe_grouped_gemm=True)
        if m.num_shared_experts:
            d["moe_shared_expert_intermediate_size"] = m.num_shared_experts * m.expert_ffn
        if m.num_dense_layers:
            d["moe_layer_freq"] = [0] * m.num_dense_layers + [1] * m.num_moe_layers
    return d


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
    split = pipeline_split(job.model.num_layers, layout)
    if split.kind == "accounted":
        d.update(account_for_embedding_in_pipeline_split=True,
                 account_for_loss_in_pipeline_split=True)
    elif split.kind == "explicit":
        if layout.first_stage_layers is not None:
            d["num_layers_in_first_pipeline_stage"] = layout.first_stage_layers
        if layout.last_stage_layers is not None:
            d["num_layers_in_last_pipeline_stage"] = layout.last_stage_layers
    return d


def _recompute(layout: Layout) -> dict:
    full = layout.recompute == "full"
    return {
        "activations_checkpoint_granularity": None if layout.recompute == "none" else layout.recompute,
        "activations_checkpoint_method": "uniform" if full else None,
        "activations_checkpoint_num_layers": 1 if full else None,
    }


def _optim(layout: Layout) -> dict:
    if layout.zero in (1, 2):
        return {"name": "distributed_fused_adam", "overlap_grad_sync": layout.overlap_grad_reduce,
                "overlap_param_sync": layout.overlap_grad_reduce and layout.overlap_param_gather}
    return {"name": "fused_adam"}


def nemo_config(job, layout: Layout) -> dict:
    """The YAML mapping (trainer, model)."""
    check_supported(job, layout)
    tr = job.training
    nodes, per_node = nodes_and_devices(job.num_gpus, job.hardware.gpus_per_node)
    model: dict = {"micro_batch_size": layout.micro_batch_size,
                   "global_batch_size": tr.global_batch_size}
    model.update(_parallel(job, layout))
    model.update(_model_shape(job))
    model.update(_recompute(layout))
    if tr.precision == "fp8":
        model.update(fp8=True, fp8_hybrid=True)
    if layout.tp_comm_overlap and layout.sp and layout.tp > 1:
        model["ub_tp_comm_overlap"] = True
    if layout.zero == 3:
        model.update(fsdp=True, fsdp_sharding_strategy="full")
    model["optim"] = _optim(layout)
    return {"trainer": {"num_nodes": nodes, "devices": per_node,
                        "precision": _PRECISION[tr.precision]},
            "model": model}


class _Dumper(yaml.SafeDumper):
    """Block mappings, flow lists (moe_layer_freq stays on a few lines)."""


_Dumper.add_representer(
    list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def _py(v) -> str:
    return repr(v)


def _nemo2_lines(job, layout: Layout) -> list[str]:
    tr = job.training
    nodes, per_node = nodes_and_devices(job.num_gpus, job.hardware.gpus_per_node)
    par = [("tensor_model_parallel_size", layout.tp), ("pipeline_model_parallel_size", layout.pp),
           ("virtual_pipeline_model_parallel_size", layout.vpp if layout.vpp > 1 else None),
           ("context_parallel_size", layout.cp)]
    if job.model.is_moe:
        par += [("expert_model_parallel_size", layout.ep), ("expert_tensor_parallel_size", layout.etp)]
    par.append(("sequence_parallel", layout.sp and layout.tp > 1))
    rec = [("recompute_granularity", None if layout.recompute == "none" else layout.recompute)]
    if layout.recompute == "full":
        rec += [("recompute_method", "uniform"), ("recompute_num_layers", 1)]
    prec = {"bf16": 'bf16_mixed()', "fp16": 'fp16_mixed()', "fp8": 'bf16_with_fp8_mixed()'}[tr.precision]
    lines = [
        "NeMo 2 equivalents (nemo.collections.llm recipe, e.g. "
        f"pretrain_recipe(num_nodes={nodes}, num_gpus_per_node={per_node})):",
    ]
    lines += [f"  recipe.trainer.strategy.{k} = {_py(v)}" for k, v in par]
    lines += [f"  recipe.data.micro_batch_size = {layout.micro_batch_size}",
              f"  recipe.data.global_batch_size = {tr.global_batch_size}",
              f"  recipe.data.seq_length = {tr.seq_length}"]
    lines += [f"  recipe.model.config.{k} = {_py(v)}" for k, v in rec]
    lines.append(f"  recipe.trainer.plugins = {prec}")
    if layout.zero >= 1:
        lines.append("  recipe.optim.config.use_distributed_optimizer = True")
    if layout.zero >= 2:
        strategy = "optim_grads" if layout.zero == 2 else "optim_grads_params"
        lines.append(f"  recipe.trainer.strategy.fsdp = 'megatron'  "
                     f"(ddp data_parallel_sharding_strategy = '{strategy}')")
    lines += [
        "Megatron-Bridge equivalents (ConfigContainer cfg):",
        "  cfg.model.<the strategy fields above> (same names), e.g. "
        f"cfg.model.tensor_model_parallel_size = {layout.tp}",
        f"  cfg.model.seq_length = {tr.seq_length}  (must equal cfg.dataset.seq_length)",
        f"  cfg.train.micro_batch_size = {layout.micro_batch_size}",
        f"  cfg.train.global_batch_size = {tr.global_batch_size}",
    ]
    lines += [f"  cfg.model.{k} = {_py(v)}" for k, v in rec]
    if layout.zero >= 1:
        lines.append("  cfg.ddp.use_distributed_optimizer = True; "
                     "cfg.optimizer.use_distributed_optimizer = True")
    if layout.zero >= 2:
        strategy = "optim_grads" if layout.zero == 2 else "optim_grads_params"
        lines.append(f"  cfg.ddp.use_megatron_fsdp = True; "
                     f"cfg.ddp.data_parallel_sharding_strategy = '{strategy}'")
    return lines


def render(job, layout: Layout, *, estimate=None) -> str:
    cfg = nemo_config(job, layout)
    head = header_lines(job, layout, "NeMo 1 / NeMo-launcher training config (YAML)",
                        estimate=estimate)
    head += ["", "Merge over NeMo's megatron_gpt_config.yaml: data, tokenizer and optimizer "
                 "hyper-parameters come from there."]
    if layout.zero == 2:
        head.append("zero 2 -> distributed_fused_adam (shards gradients and optimizer states).")
    elif layout.zero == 1:
        head.append("zero 1 -> distributed_fused_adam (it also shards gradients: ZeRO-2-like).")
    body = yaml.dump(cfg, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    out = [f"# {line}".rstrip() for line in head] + [body.rstrip()]
    out += [""] + [f"# {line}".rstrip() for line in _nemo2_lines(job, layout)]
    return "\n".join(out) + "\n"
