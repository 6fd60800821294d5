"""torchtitan: the TOML job config of torchtitan <= v0.2.2 (`--job.config_file FILE`).

Output: a header comment (planner version, job, layout, the estimate when given; the schema
version; how the ZeRO stage maps), then `[job]`, `[model]` (name/flavor of the torchtitan flavor
with the model's shape: every llama3, llama4, qwen3 and deepseek_v3 flavor,
planner/frameworks/torchtitan/flavors.py; a RoPE base that differs from the flavor's is noted, torchtitan
has no knob for it), `[training]`, `[parallelism]`, `[activation_checkpoint]`, `[compile]`
(on, with the loss, when the plan counts a fused loss: torchtitan's eager loss holds ~3x the
bytes) and the FP8 converter's table. Written by hand (no TOML library) so the comments stay in place.
Newer torchtitan (the 2026-02 refactor) takes Python configs: the same degrees go into
`ParallelismConfig`, `num_pp_microbatches` replaces the micro-batch size, and the batch is
counted in tokens; the header says what to put there.

ZeRO mapping (torchtitan has FSDP2, which is ZeRO-3-like, and no ZeRO-1):
- zero 3 -> FSDP over dp (`data_parallel_shard_degree = dp`, replicate 1),
  `fsdp_reshard_after_forward = "always"`: parameters re-gathered for backward.
- zero 1 and 2 -> FSDP over dp with `fsdp_reshard_after_forward = "never"`: parameters stay
  gathered from forward to backward, gradients are reduce-scattered and optimizer states
  sharded. That is ZeRO-2's memory (at most ZeRO-1's) and the same reduce-scatter +
  all-gather volume as Megatron's distributed optimizer, so the plan's estimate stays an
  upper bound for zero 1. With dp 1 and cp > 1 FSDP runs over the CP ranks alone (its mesh
  is dp_shard * cp), which is how torchtitan reads it back.
- zero 0 -> plain replication (`data_parallel_replicate_degree = dp`, shard 1), i.e. DDP;
  refused with cp > 1, where torchtitan always shards over the CP ranks.

Pipeline stages: torchtitan counts the embedding and the output as layers
(`pipeline_parallel_first/last_stage_less_layers`) and gives every virtual stage the same
`pipeline_parallel_layers_per_stage`; the export sets those to reproduce each rank's layers
exactly: per = middle rank's layers / vpp, first_less = middle - first, last_less = middle -
last (even: 0/0; Megatron's accounted split: 1/1). With vpp > 1 the first (last) rank's
smaller share sits in its first (last) virtual stage, where Megatron spreads it over the
chunks; the per-rank counts, and so the memory, are the same. torchtitan always pairs TP with
sequence parallelism.

Recipe settings in torchtitan's terms: recompute full with `recompute_num_layers` N ->
`selective_ac_option` k, the interval that checkpoints N layers per virtual stage (torchtitan's
layer SAC); fp8 tensorwise -> the float8 converter (`[quantize.linear.float8]`, and
`[quantize.grouped_mm.float8]` for MoE experts), fp8_param_gather ->
`enable_fsdp_float8_all_gather`; mxfp8 -> the MX converter; the DeepEP dispatcher ->
`expert_parallel_comm_backend = "deepep"`; overlapped EP communication -> the DualPipeV schedule
(vpp 2, even split, no recompute) with `pipeline_parallel_expert_parallel_overlap`.

Refused with an InfeasibleError, each naming the setting: fp16 (torchtitan trains in bf16),
expert TP other than 1 or tp, EP not dividing shard*cp*tp, a sequence not divisible by
tp*(2*cp), zero 0 with cp > 1, cp > 1 with a flavor that is not sdpa attention, first/last
stages larger than the middle ones; settings torchtitan lacks: fp8 delayed or blockwise
scaling, MXFP8 parameter all-gather, bf16 gradient reduction or moments (v0.2.2 reduces in
fp32 and keeps fp32 states), selective recompute of other modules than core_attn, a
`recompute_num_layers` no interval gives, activation offloading, CUDA graphs, the hybridep
dispatcher, a Megatron pipeline layout string, MTP layers.
"""

from __future__ import annotations

import json
import math

from planner.errors import InfeasibleError
from planner.frameworks.torchtitan.flavors import Flavor, find_flavor
from planner.frameworks.writing import header_lines, pipeline_split, store_problems
from planner.layout import Layout

__all__ = [
    "render",
    "sections",
    "check_supported",
    "refusals",
    "runs_as",
    "SCHEMA",
    "layer_interval",
]

SCHEMA = "torchtitan <= v0.2.2 TOML job config"


def _fsdp_degrees(layout: Layout) -> tuple[int, int]:
    """(data_parallel_replicate_degree, data_parallel_shard_degree) for the ZeRO stage."""
    return (layout.dp, 1) if layout.zero == 0 else (1, layout.dp)


def _refuse(msg: str) -> None:
    raise InfeasibleError(f"{_PREFIX}{msg}")


def refusals(job, layout: Layout) -> list[str]:
    """Why torchtitan cannot run this layout, one message each (values and fix); empty when
    it runs. The export (`check_supported`, and the pipeline, activation-checkpoint and
    DualPipeV tables `sections` builds) and the search filter (`planner plan --framework
    torchtitan`) both read this list."""
    found = [
        msg
        for broken, msg in _problems(job, layout)
        + _recipe_problems(job, layout)
        + store_problems(layout, "torchtitan")
        if broken
    ]
    if found:
        return found
    try:  # what only building the tables finds (their own refusals)
        _parallelism(job, layout)
        _activation_checkpoint(job, layout)
    except InfeasibleError as exc:
        return [exc.message.removeprefix(_PREFIX)]
    return []


_PREFIX = "cannot export to torchtitan: "


def runs_as(job, layout: Layout) -> Layout:
    """The layout as this export runs it (what reading it back gives): FSDP2 has no ZeRO-1
    (zero 1 is FSDP without resharding after forward: ZeRO-2) and nothing to shard over one
    rank (dp * cp = 1: ZeRO 0); no async TP (it needs torch.compile); the CP rotation is
    allgather or alltoall (p2p); the MoE all-to-all (or DeepEP)."""
    zero = 0 if layout.dp * layout.cp == 1 else (2 if layout.zero == 1 else layout.zero)
    moe = {}
    if job.model.is_moe:
        moe["moe_token_dispatcher"] = (
            "deepep" if layout.moe_token_dispatcher == "deepep" else "alltoall"
        )
    return layout.with_(
        zero=zero,
        tp_comm_overlap=False,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        cp_comm_type="allgather" if layout.cp == 1 or layout.cp_comm_type == "allgather" else "p2p",
        **moe,
    )


def check_supported(job, layout: Layout) -> None:
    found = [
        msg for broken, msg in _problems(job, layout) + _recipe_problems(job, layout) if broken
    ]
    if found:
        _refuse(found[0])


def _problems(job, layout: Layout) -> list[tuple[bool, str]]:
    m, tr = job.model, job.training
    _, shard = _fsdp_degrees(layout)
    seq_unit = layout.tp * (2 * layout.cp if layout.cp > 1 else 1)
    found = find_flavor(m)
    problems = [
        (
            tr.precision == "fp16",
            "precision fp16: torchtitan trains in bf16 (FSDP2 mixed "
            "precision) without loss scaling; set precision bf16",
        ),
        (
            m.is_moe and layout.etp not in (1, layout.tp),
            f"etp {layout.etp}: torchtitan's expert TP is tp ({layout.tp}) or 1; set one of them",
        ),
        (
            m.is_moe and m.moe_capacity_factor != 1.0,
            f"moe_capacity_factor {m.moe_capacity_factor:g}: torchtitan's MoE is dropless (its "
            "MoEArgs have no capacity factor); set 1.0 or export megatron",
        ),
        (
            m.is_moe and layout.moe_pad_expert_input_to_capacity,
            "moe_pad_expert_input_to_capacity: torchtitan's MoE is dropless (no padding to a "
            "capacity); turn it off or export megatron",
        ),
        (
            m.is_moe and (shard * layout.cp * layout.tp) % layout.ep,
            f"ep ({layout.ep}) must divide data_parallel_shard_degree*cp*tp "
            f"({shard}*{layout.cp}*{layout.tp} = {shard * layout.cp * layout.tp}): EP borrows "
            f"from FSDP, CP and TP"
            + (
                "; zero_stage 0 replicates instead of sharding, use zero_stage 1"
                if layout.zero == 0
                else "; lower ep"
            ),
        ),
        (
            tr.seq_length % seq_unit,
            f"seq_length ({tr.seq_length}) must be divisible by tp*(2*cp if cp>1) ({seq_unit}): "
            "torchtitan shards the sequence over TP (always sequence-parallel) and CP; change "
            "seq_length, tp or cp",
        ),
        (
            layout.zero == 0 and layout.cp > 1,
            f"zero_stage 0 with cp {layout.cp}: torchtitan always shards the model states over "
            "the CP ranks (its FSDP mesh is dp_shard * cp), so it has no ZeRO-0 there; use "
            "zero_stage 1, 2 or 3",
        ),
        (
            found is not None and layout.cp > 1 and found.attention != "sdpa",
            f"cp {layout.cp} with {found.name if found else ''} {found.flavor if found else ''}: "
            f"its attention ({found.attention if found else ''}) does not run with torchtitan's "
            "context parallelism (sdpa only); set cp 1",
        ),
        (
            m.mtp_num_layers > 0,
            f"mtp_num_layers {m.mtp_num_layers}: torchtitan's models have no multi-token "
            "prediction; set mtp_num_layers 0",
        ),
    ]
    return problems


def _recipe_problems(job, layout: Layout) -> list[tuple[bool, str]]:
    tr = job.training
    problems = [
        (
            tr.precision == "fp8" and tr.fp8_recipe in ("delayed", "blockwise"),
            f"fp8_recipe {tr.fp8_recipe}: torchtitan's float8 (torchao) scales tensorwise or "
            "rowwise, and mxfp8 on Blackwell; set fp8_recipe tensorwise or mxfp8",
        ),
        (
            tr.precision == "fp8" and tr.fp8_param_gather and tr.recipe == "mxfp8",
            "fp8_param_gather with mxfp8: torchtitan all-gathers MXFP8 weights in bf16; set "
            "fp8_param_gather false",
        ),
        (
            tr.precision == "fp8" and tr.fp8_param_gather and _fsdp_degrees(layout)[1] == 1,
            "fp8_param_gather without FSDP sharding (zero 0 or dp 1): torchtitan's float8 "
            "all-gather is an FSDP feature; set zero_stage 1-3 with dp > 1 or fp8_param_gather false",
        ),
        (
            not layout.grad_reduce_in_fp32,
            "grad_reduce_in_fp32 false: torchtitan <= v0.2.2 reduces gradients in fp32 "
            "(mixed_precision_reduce takes float32 only); set grad_reduce_in_fp32 true",
        ),
        (
            "bf16" in (layout.exp_avg_dtype, layout.exp_avg_sq_dtype),
            "bf16 optimizer moments: torchtitan keeps fp32 Adam states (training.dtype bfloat16 "
            "would drop the fp32 master weights too); set exp_avg_dtype/exp_avg_sq_dtype fp32",
        ),
        (
            layout.recompute == "selective"
            and layout.selective_modules not in (("core_attn",), ("torchtitan_op",)),
            f"recompute_modules {list(layout.selective_modules)}: torchtitan's selective "
            "recompute is per op ('op', recompute_modules [torchtitan_op]) or every k-th layer, "
            "not by module; use recompute_modules [torchtitan_op] or recompute full",
        ),
        (
            layout.cpu_offloading_num_layers > 0,
            f"cpu_offloading_num_layers {layout.cpu_offloading_num_layers}: torchtitan does not "
            "offload activations (enable_cpu_offload offloads FSDP states); set it 0",
        ),
        (
            layout.cuda_graphs != "none",
            f"cuda_graphs {layout.cuda_graphs}: torchtitan has no CUDA graphs for training; set "
            "cuda_graphs none",
        ),
        (
            job.model.is_moe and layout.moe_token_dispatcher == "hybridep",
            "moe_token_dispatcher hybridep: torchtitan dispatches with all-to-all or DeepEP; set "
            "alltoall or deepep",
        ),
        (
            layout.pipeline_model_parallel_layout is not None,
            "pipeline_model_parallel_layout: torchtitan takes per-stage sizes "
            "(layers_per_stage, first/last_stage_less_layers); set first_stage_layers / "
            "last_stage_layers instead",
        ),
    ]
    return problems


def _pipeline(job, layout: Layout) -> dict:
    if layout.pp == 1:
        return {}
    L, v = job.model.num_layers, layout.vpp
    split = pipeline_split(L, layout)
    if split.kind == "even":
        per, first_less, last_less = L // (layout.pp * v), 0, 0
    else:
        # each virtual stage `per` layers; the first / last rank's first / last stage smaller
        middle = split.middle if layout.pp > 2 else max(split.first, split.last)
        per = math.ceil(middle / v)
        first_less, last_less = v * per - split.first, v * per - split.last
        if layout.pp > 2 and middle % v:
            _refuse(f"the middle ranks' {middle} layers do not split into vpp {v} equal stages")
        if split.first > v * per or split.last > v * per or max(first_less, last_less) > per:
            _refuse(
                f"first/last stage layers ({split.first}/{split.last}, middle "
                f"{split.middle}, vpp {v}) cannot be expressed: torchtitan only makes the "
                "first/last virtual stage smaller, by at most a stage; set "
                "first_stage_layers/last_stage_layers closer to the middle ranks'"
            )
    return {
        "pipeline_parallel_schedule": "Interleaved1F1B" if v > 1 else "1F1B",
        "pipeline_parallel_microbatch_size": layout.micro_batch_size,
        "pipeline_parallel_layers_per_stage": per,
        "pipeline_parallel_first_stage_less_layers": first_less,
        "pipeline_parallel_last_stage_less_layers": last_less,
    }


def _dualpipe(job, layout: Layout, par: dict) -> None:
    """pipeline_schedule dualpipev, or overlap_moe_expert_parallel_comm: torchtitan overlaps EP
    with PP in DualPipeV only; DualPipe (two parameter copies) it does not have."""
    if layout.pipeline_schedule == "dualpipe":
        _refuse(
            "pipeline_schedule dualpipe: torchtitan has DualPipeV (one parameter copy, two "
            "chunks a rank), not DualPipe; set pipeline_schedule dualpipev with vpp 2"
        )
    if layout.pipeline_schedule == "dualpipev":
        if layout.pp == 1 or layout.vpp != 2 or layout.uneven:
            _refuse(
                f"pipeline_schedule dualpipev with pp {layout.pp}, vpp {layout.vpp}: "
                "torchtitan's DualPipeV runs two stages a rank (pp > 1, vpp 2, an even "
                "split); set those"
            )
        par["pipeline_parallel_schedule"] = "DualPipeV"
        return
    if not (layout.overlap_moe_expert_parallel_comm and job.model.is_moe and layout.ep > 1):
        return
    if layout.pp == 1 or layout.vpp != 2 or layout.uneven or layout.recompute != "none":
        _refuse(
            "overlap_moe_expert_parallel_comm: torchtitan overlaps EP communication only in "
            "the DualPipeV schedule (pp > 1, vpp 2, an even split, no activation "
            "checkpointing); change those or set it false"
        )
    par["pipeline_parallel_schedule"] = "DualPipeV"
    par["pipeline_parallel_expert_parallel_overlap"] = True


def _parallelism(job, layout: Layout) -> dict:
    replicate, shard = _fsdp_degrees(layout)
    par: dict = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard}
    if layout.zero >= 1:
        par["fsdp_reshard_after_forward"] = "always" if layout.zero == 3 else "never"
    par["tensor_parallel_degree"] = layout.tp
    par["pipeline_parallel_degree"] = layout.pp
    par.update(_pipeline(job, layout))
    _dualpipe(job, layout, par)
    par["context_parallel_degree"] = layout.cp
    if layout.cp > 1:
        par["context_parallel_rotate_method"] = (
            "allgather" if layout.cp_comm_type == "allgather" else "alltoall"
        )
    moe = job.model.is_moe
    par["expert_parallel_degree"] = layout.ep if moe else 1
    par["expert_tensor_parallel_degree"] = layout.etp if moe else 1
    if layout.tp > 1 and not job.training.loss_parallel:
        par["disable_loss_parallel"] = True
    if moe and layout.moe_token_dispatcher == "deepep":
        par["expert_parallel_comm_backend"] = "deepep"
    return par


def layer_interval(layer_counts: list[int], n: int, vpp: int) -> int | None:
    """The selective_ac_option k that checkpoints `n` layers per virtual stage on the most
    loaded rank (the importer's reading: ceil(floor(max_layers / k) / vpp)), else None."""
    from planner.frameworks.torchtitan.reader import layer_interval_layers

    top = max(layer_counts)
    return next(
        (k for k in range(2, top + 1) if layer_interval_layers(layer_counts, k, vpp) == n), None
    )


def _activation_checkpoint(job, layout: Layout) -> dict:
    if layout.recompute == "selective":
        return {"mode": "selective", "selective_ac_option": "op"}
    if layout.recompute != "full" or layout.recompute_num_layers is None:
        return {"mode": layout.recompute}
    from planner.layout import stage_layer_counts

    first, middle, last = stage_layer_counts(job.model.num_layers, layout)
    counts = [first, int(middle), last]
    per_stage = math.ceil(max(counts) / layout.vpp)
    n = layout.recompute_num_layers
    if n >= per_stage:
        return {"mode": "full"}
    if n == 0:
        return {"mode": "none"}
    k = layer_interval(counts, n, layout.vpp)
    if k is None:
        _refuse(
            f"recompute_num_layers {n}: torchtitan checkpoints every k-th layer of a rank, "
            f"and no k gives {n} of the {max(counts)} layers on the most loaded rank; "
            "choose another recompute_num_layers"
        )
    return {"mode": "selective", "selective_ac_option": str(k)}


def _fp8_tables(job, layout: Layout) -> tuple[list[str], dict[str, dict]]:
    """([model] converters, their tables) for precision fp8."""
    tr = job.training
    if tr.precision != "fp8":
        return [], {}
    moe = job.model.is_moe
    if tr.recipe == "mxfp8":
        converters = ["quantize.linear.mx"] + (["quantize.grouped_mm.mx"] if moe else [])
        tables = {"quantize.linear.mx": {"recipe_name": "mxfp8_cublas"}}
        if moe:
            tables["quantize.grouped_mm.mx"] = {"recipe_name": "mxfp8", "fqns": ["experts"]}
        return converters, tables
    converters = ["quantize.linear.float8"] + (["quantize.grouped_mm.float8"] if moe else [])
    f8: dict = {}
    if tr.fp8_param_gather:
        f8 = {
            "enable_fsdp_float8_all_gather": True,
            "precompute_float8_dynamic_scale_for_fsdp": True,
        }
    tables = {"quantize.linear.float8": f8}
    if moe:
        tables["quantize.grouped_mm.float8"] = {"fqns": ["experts"]}
    return converters, tables


def sections(job, layout: Layout) -> dict[str, dict]:
    """The TOML tables as plain dicts (what `render` writes)."""
    check_supported(job, layout)
    tr = job.training
    m = layout.num_microbatches(tr.global_batch_size)
    out: dict[str, dict] = {
        "job": {
            "description": f"{job.model.name} on {job.num_gpus} x "
            f"{job.hardware.name}, {layout.name} (planner)"
        }
    }
    found = find_flavor(job.model)
    converters, fp8 = _fp8_tables(job, layout)
    model: dict = {"name": found.name, "flavor": found.flavor} if found else {}
    if converters:
        model["converters"] = converters
    if model:
        out["model"] = model
    local = layout.micro_batch_size * (m if layout.pp > 1 else 1)
    out["training"] = {
        "local_batch_size": local,
        "global_batch_size": tr.global_batch_size,
        "seq_len": tr.seq_length,
    }
    out["parallelism"] = _parallelism(job, layout)
    out["activation_checkpoint"] = _activation_checkpoint(job, layout)
    if tr.cross_entropy == "vocab_parallel":
        # torchtitan's eager loss holds ~3x the logits' bytes (cost.memory.LOSS_PEAK_BYTES);
        # compiling it keeps the fused loss the plan counted
        out["compile"] = {"enable": True, "components": ["model", "loss"]}
    out.update(fp8)
    return out


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(v)  # a TOML basic string (our strings are plain ASCII)


def _router(m) -> str:
    scale = f", scaled x{m.moe_router_scaling:g}" if m.moe_router_scaling else ""
    bias = ", an expert bias" if m.moe_router_expert_bias else ""
    pre = " over all experts before the top-k" if m.moe_router_pre_softmax else ""
    return f"a {m.moe_router_score}{pre}{scale}{bias}"


def _notes(job, layout: Layout, found: Flavor | None) -> list[str]:
    tr = job.training
    m = layout.num_microbatches(tr.global_batch_size)
    zero = {
        0: "zero 0 -> replicate over dp (DDP)",
        1: "zero 1 -> FSDP over dp, reshard_after_forward never (ZeRO-2-like: torchtitan has no ZeRO-1)",
        2: "zero 2 -> FSDP over dp, reshard_after_forward never (ZeRO-2-like)",
        3: "zero 3 -> FSDP over dp (ZeRO-3)",
    }[layout.zero]
    if layout.zero and layout.dp == 1 and layout.cp > 1:
        zero += f"; with dp 1 FSDP shards over the {layout.cp} CP ranks"
    notes = [
        f"Schema: {SCHEMA} (torchrun ... -m torchtitan.train --job.config_file THIS_FILE).",
        "Newer torchtitan (Python configs): the same degrees in ParallelismConfig; "
        + (f"num_pp_microbatches = {m}; " if layout.pp > 1 else "")
        + f"global batch = {tr.global_batch_size * tr.seq_length} tokens.",
        f"ZeRO mapping: {zero}.",
        "Degrees: replicate * shard * cp * tp * pp = world "
        f"({' * '.join(str(x) for x in (*_fsdp_degrees(layout), layout.cp, layout.tp, layout.pp))} "
        f"= {job.num_gpus}).",
    ]
    if layout.pp == 1 and m > 1:
        notes.append(f"{m} micro-batches run as gradient accumulation (global / (local * dp)).")
    if found is None:
        notes.append(
            f"[model]: set name/flavor to torchtitan's definition of {job.model.name} "
            "(not one we can name)."
        )
        if job.model.norm_placement == "sandwich":
            notes.append(
                "Gemma 3's layer: torchtitan's models (llama3, llama4, qwen3, deepseek_v3) "
                "have no norms on the attention and MLP outputs, no second RoPE base for the "
                "window layers and no other logits scale: the definition you name must build "
                "them (the plan counts the sandwich norms' activations)."
            )
    elif job.model.rotary_base and job.model.rotary_base != found.spec.rotary_base:
        notes.append(
            f"RoPE base: the plan's model has {job.model.rotary_base:g}; torchtitan's "
            f"{found.name} {found.flavor} uses {found.spec.rotary_base:g} (no TOML knob; "
            "it changes no memory or time)."
        )
    if found is not None and job.model.qk_norm != found.spec.qk_norm:
        kind = {
            "l2": "a weightless L2 norm of the queries and keys, Llama 4's use_qk_norm",
            "layer": "one RMSNorm over all query / key heads",
        }.get(job.model.qk_norm, job.model.qk_norm)
        notes.append(
            f"QK norm: the plan's model has qk_norm {job.model.qk_norm} ({kind}); torchtitan's "
            f"{found.name} {found.flavor} trains without it ({found.name}'s model args have no "
            "such norm; no TOML knob; it changes no planner number)."
        )
    router = (
        "moe_router_score",
        "moe_router_scaling",
        "moe_router_expert_bias",
        "moe_router_pre_softmax",
    )
    if (
        found is not None
        and job.model.is_moe
        and any(getattr(job.model, k) != getattr(found.spec, k) for k in router)
    ):
        notes.append(
            f"Router: the plan's model scores experts with {_router(job.model)}; torchtitan's "
            f"{found.name} {found.flavor} with {_router(found.spec)} (its MoEArgs, models/"
            "moe.py; no TOML knob; it changes no planner number)."
        )
    if found is not None and job.model.rotary_percent != found.spec.rotary_percent:
        notes.append(
            f"RoPE share: the plan's model rotates {job.model.rotary_percent:g} of each "
            f"head; torchtitan's {found.name} {found.flavor} rotates "
            f"{found.spec.rotary_percent:g} (no TOML knob; it changes no memory or "
            "time)."
        )
    notes += _recipe_notes(job, layout)
    if tr.cross_entropy == "vocab_parallel":
        notes.append(
            "[compile]: torch.compile of the blocks and the loss, as the plan counts a "
            "fused loss; torchtitan's eager loss (compile off) holds ~3x the logits' "
            "bytes on the last stage: re-validate if you turn it off."
        )
    if layout.tp > 1 and layout.tp_comm_overlap:
        notes.append(
            "tp_comm_overlap: add enable_async_tensor_parallel = true under [parallelism] "
            "(torchtitan refuses async TP without torch.compile)."
        )
    if layout.tp > 1 and not layout.sp:
        notes.append("torchtitan always uses sequence parallelism with TP (the plan had it off).")
    if layout.cp > 1 and layout.cp_comm_type not in ("p2p", "allgather"):
        notes.append(
            f"cp_comm_type {layout.cp_comm_type}: torchtitan <= v0.2.2 has ring "
            "attention only (rotate method alltoall = ring passing)."
        )
    return notes


def _recipe_notes(job, layout: Layout) -> list[str]:
    tr, notes = job.training, []
    if tr.precision == "fp8":
        if tr.fp8_recipe is None:
            notes.append(
                "fp8: the plan leaves the recipe unset (Megatron's default, delayed); "
                "torchtitan scales tensorwise, which is what this file asks for."
            )
        notes.append(
            'fp8 converters use the v0.2 names; torchtitan v0.1 calls them "float8" / '
            '"mx" with [float8] / [mx] tables.'
        )
        if job.model.is_moe:
            notes.append(
                "fp8 on the MoE experts uses torchtitan's grouped-GEMM converter "
                "(a prototype in v0.2.2)."
            )
    if job.model.is_moe and layout.ep > 1 and layout.moe_token_dispatcher == "allgather":
        notes.append(
            "moe_token_dispatcher allgather: torchtitan dispatches tokens with "
            "all-to-all (expert_parallel_comm_backend standard)."
        )
    if layout.selective_modules == ("core_attn",):
        notes.append(
            'recompute selective [core_attn] -> selective_ac_option "op": torchtitan\'s '
            "op-level checkpointing keeps less (every other matmul output and the "
            "attention output) and reruns the other matmuls; it reads back as "
            "recompute_modules [torchtitan_op]."
        )
    ac = layout.recompute_num_layers
    if layout.recompute == "full" and ac is not None:
        notes.append(
            f"recompute_num_layers {ac}: torchtitan checkpoints every k-th layer of a "
            "rank (selective_ac_option k) rather than the first N of each stage; the "
            "same number of layers recompute."
        )
    return notes


def render(job, layout: Layout, *, estimate=None) -> str:
    tables = sections(job, layout)
    head = header_lines(
        job, layout, f"torchtitan job config ({SCHEMA})", estimate=estimate, eager_loss=True
    )
    out = [
        f"# {line}".rstrip() for line in head + [""] + _notes(job, layout, find_flavor(job.model))
    ]
    for name, table in tables.items():
        out += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"
