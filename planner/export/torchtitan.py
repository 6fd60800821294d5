"""torchtitan: the TOML job config of torchtitan <= v0.2.2 (`--job.config_file FILE`).

Output: a header comment (planner version, job, layout, the estimate when given; the schema
version; how the ZeRO stage maps), then `[job]`, `[model]` (name/flavor for the torchtitan
models we can name: Llama 3 8B/70B/405B, DeepSeek-V3), `[training]`, `[parallelism]`,
`[activation_checkpoint]`. Written by hand (no TOML library) so the comments stay in place.
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
  upper bound for zero 1.
- zero 0 -> plain replication (`data_parallel_replicate_degree = dp`, shard 1), i.e. DDP;
  with cp > 1 torchtitan still shards over the CP ranks (its FSDP mesh is dp_shard * cp).

Pipeline stages: torchtitan counts the embedding and the output as layers
(`pipeline_parallel_first/last_stage_less_layers`), so the export sets those and
`pipeline_parallel_layers_per_stage` to reproduce the planned split exactly: even (0/0),
Megatron's accounted split (1/1), or explicit first/last sizes (vpp 1 only).
torchtitan always pairs TP with sequence parallelism.

Refused with an InfeasibleError: fp16 (torchtitan trains in bf16), expert TP other than 1
or tp, EP not dividing shard*cp*tp, a sequence not divisible by tp*(2*cp), explicit
first/last stage sizes with virtual stages or larger than the middle stages.
"""

from __future__ import annotations

import json

from planner.errors import InfeasibleError
from planner.export.common import header_lines, pipeline_split
from planner.layout import Layout

__all__ = ["render", "sections", "check_supported", "TORCHTITAN_MODELS", "SCHEMA"]

SCHEMA = "torchtitan <= v0.2.2 TOML job config"

TORCHTITAN_MODELS = {   # planner preset -> torchtitan [model] name, flavor
    "llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B"),
    "llama3-405b": ("llama3", "405B"), "deepseek-v3": ("deepseek_v3", "671B"),
}


def _fsdp_degrees(layout: Layout) -> tuple[int, int]:
    """(data_parallel_replicate_degree, data_parallel_shard_degree) for the ZeRO stage."""
    return (layout.dp, 1) if layout.zero == 0 else (1, layout.dp)


def check_supported(job, layout: Layout) -> None:
    m, tr = job.model, job.training
    _, shard = _fsdp_degrees(layout)
    seq_unit = layout.tp * (2 * layout.cp if layout.cp > 1 else 1)
    problems = [
        (tr.precision == "fp16", "precision fp16: torchtitan trains in bf16 (FSDP2 mixed "
                                 "precision) without loss scaling; set precision bf16"),
        (m.is_moe and layout.etp not in (1, layout.tp),
         f"etp {layout.etp}: torchtitan's expert TP is tp ({layout.tp}) or 1; set one of them"),
        (m.is_moe and (shard * layout.cp * layout.tp) % layout.ep,
         f"ep ({layout.ep}) must divide data_parallel_shard_degree*cp*tp "
         f"({shard}*{layout.cp}*{layout.tp} = {shard * layout.cp * layout.tp}): EP borrows "
         f"from FSDP, CP and TP" + ("; zero_stage 0 replicates instead of sharding, use zero_stage 1"
                                    if layout.zero == 0 else "; lower ep")),
        (tr.seq_length % seq_unit,
         f"seq_length ({tr.seq_length}) must be divisible by tp*(2*cp if cp>1) ({seq_unit}): "
         "torchtitan shards the sequence over TP (always sequence-parallel) and CP; change "
         "seq_length, tp or cp"),
    ]
    for broken, msg in problems:
        if broken:
            raise InfeasibleError(f"cannot export to torchtitan: {msg}")


def _pipeline(job, layout: Layout) -> dict:
    if layout.pp == 1:
        return {}
    L = job.model.num_layers
    split = pipeline_split(L, layout)
    stages = layout.pp * layout.vpp
    if split.kind == "even":
        per, first_less, last_less = L // stages, 0, 0
    elif split.kind == "accounted":
        per, first_less, last_less = split.middle, 1, 1
    else:
        per = split.middle if layout.pp > 2 else max(split.first, split.last)
        if layout.vpp > 1 or split.first > per or split.last > per:
            raise InfeasibleError(
                f"cannot export to torchtitan: first/last stage layers ({split.first}/{split.last}, "
                f"middle {split.middle}, vpp {layout.vpp}) cannot be expressed; torchtitan only "
                "makes the first/last stage smaller, without virtual stages; remove "
                "first_stage_layers/last_stage_layers or set vpp 1")
        first_less, last_less = per - split.first, per - split.last
    return {
        "pipeline_parallel_schedule": "Interleaved1F1B" if layout.vpp > 1 else "1F1B",
        "pipeline_parallel_microbatch_size": layout.micro_batch_size,
        "pipeline_parallel_layers_per_stage": per,
        "pipeline_parallel_first_stage_less_layers": first_less,
        "pipeline_parallel_last_stage_less_layers": last_less,
    }


def _parallelism(job, layout: Layout) -> dict:
    replicate, shard = _fsdp_degrees(layout)
    par: dict = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard}
    if layout.zero >= 1:
        par["fsdp_reshard_after_forward"] = "always" if layout.zero == 3 else "never"
    par["tensor_parallel_degree"] = layout.tp
    par["pipeline_parallel_degree"] = layout.pp
    par.update(_pipeline(job, layout))
    par["context_parallel_degree"] = layout.cp
    if layout.cp > 1:
        par["context_parallel_rotate_method"] = "allgather" if layout.cp_comm_type == "allgather" else "alltoall"
    par["expert_parallel_degree"] = layout.ep if job.model.is_moe else 1
    par["expert_tensor_parallel_degree"] = layout.etp if job.model.is_moe else 1
    return par


def _model_key(model) -> str | None:
    from planner.presets import get_preset
    for key in TORCHTITAN_MODELS:
        if get_preset(key) == model:
            return key
    return None


def sections(job, layout: Layout) -> dict[str, dict]:
    """The TOML tables as plain dicts (what `render` writes)."""
    check_supported(job, layout)
    tr = job.training
    m = layout.num_microbatches(tr.global_batch_size)
    out: dict[str, dict] = {"job": {"description": f"{job.model.name} on {job.num_gpus} x "
                                                   f"{job.hardware.name}, {layout.name} (planner)"}}
    key = _model_key(job.model)
    if key:
        name, flavor = TORCHTITAN_MODELS[key]
        out["model"] = {"name": name, "flavor": flavor}
    local = layout.micro_batch_size * (m if layout.pp > 1 else 1)
    out["training"] = {"local_batch_size": local, "global_batch_size": tr.global_batch_size,
                       "seq_len": tr.seq_length}
    out["parallelism"] = _parallelism(job, layout)
    ac = {"mode": layout.recompute}
    if layout.recompute == "selective":
        ac["selective_ac_option"] = "op"
    out["activation_checkpoint"] = ac
    return out


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(v)   # a TOML basic string (our strings are plain ASCII)


def _notes(job, layout: Layout) -> list[str]:
    tr = job.training
    m = layout.num_microbatches(tr.global_batch_size)
    zero = {0: "zero 0 -> replicate over dp (DDP)",
            1: "zero 1 -> FSDP over dp, reshard_after_forward never (ZeRO-2-like: torchtitan has no ZeRO-1)",
            2: "zero 2 -> FSDP over dp, reshard_after_forward never (ZeRO-2-like)",
            3: "zero 3 -> FSDP over dp (ZeRO-3)"}[layout.zero]
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
    if _model_key(job.model) is None:
        notes.append(f"[model]: set name/flavor to torchtitan's definition of {job.model.name} "
                     "(not one we can name).")
    if tr.precision == "fp8":
        notes.append("precision fp8: enable torchtitan's float8 converter for your version "
                     "([model] converters).")
    if layout.tp > 1 and layout.tp_comm_overlap:
        notes.append("tp_comm_overlap: add enable_async_tensor_parallel = true under [parallelism] "
                     "once torch.compile is on (torchtitan refuses async TP without it).")
    if layout.tp > 1 and not layout.sp:
        notes.append("torchtitan always uses sequence parallelism with TP (the plan had it off).")
    if layout.cp > 1 and layout.cp_comm_type not in ("p2p", "allgather"):
        notes.append(f"cp_comm_type {layout.cp_comm_type}: torchtitan <= v0.2.2 has ring "
                     "attention only (rotate method alltoall = ring passing).")
    return notes


def render(job, layout: Layout, *, estimate=None) -> str:
    tables = sections(job, layout)
    head = header_lines(job, layout, f"torchtitan job config ({SCHEMA})", estimate=estimate)
    out = [f"# {line}".rstrip() for line in head + [""] + _notes(job, layout)]
    for name, table in tables.items():
        out += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"
