"""torchtitan: a TOML job config (schema up to v0.2.2) -> Job + Layout.

`[training] local_batch_size, global_batch_size, seq_len`, `[parallelism]` degrees,
`[activation_checkpoint] mode`, the model from `[model] name/flavor` where it is a planner
preset (llama3 8B/70B/405B, deepseek_v3 671B), else --model. The world size is not in the file
(torchrun's --nproc_per_node): --gpus/--nodes give it, or the product of the degrees when none
is -1. Mapping: dp = replicate*shard; FSDP (shard > 1) is ZeRO-3, or ZeRO-2 when parameters
are not resharded after forward (`fsdp_reshard_after_forward` "never", or "default" with PP);
pure replication is ZeRO-0. TP always uses sequence parallelism. With PP the micro-batch is
`pipeline_parallel_microbatch_size`, else `local_batch_size`. Pipeline stages are split the way
torchtitan does (`pipeline_parallel_layers_per_stage`, first/last stage "less layers" counting
the embedding and the output as layers), and each rank's share becomes our first/last stage
layers when uneven. Model states are counted the FSDP way (16 B/param).

torchtitan's ConfigManager ignores keys it does not know: they are warnings here. Keys are
checked in [training], [parallelism], [activation_checkpoint], [model] and the section names;
other sections do not change a plan and are not checked key by key.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path


from planner.errors import SpecError, Violation
from planner.importers.common import (Imported, Overrides, hardware_of, make_job, model_of,
                                      resolve_world, unknown_key)
from planner.layout import Layout
from planner.presets import get_preset, resolve_model

__all__ = ["load", "parse_toml"]

_SECTIONS = frozenset({"job", "profiling", "metrics", "model", "optimizer", "lr_scheduler",
                       "training", "parallelism", "checkpoint", "activation_checkpoint", "compile",
                       "float8", "mx", "comm", "memory_estimation", "fault_tolerance",
                       "experimental", "validation", "quantize", "debug", "dataloader"})
_KEYS = {
    "training": frozenset({"dataset", "dataset_path", "local_batch_size", "global_batch_size",
                           "seq_len", "max_norm", "steps", "enable_cpu_offload",
                           "mixed_precision_param", "mixed_precision_reduce", "gc_freq",
                           "gc_debug", "seed", "deterministic", "debug_moe_force_load_balance",
                           "warmup_steps"}),
    "parallelism": frozenset({
        "data_parallel_replicate_degree", "enable_compiled_autograd", "data_parallel_shard_degree",
        "fsdp_reshard_after_forward", "tensor_parallel_degree", "disable_loss_parallel",
        "enable_async_tensor_parallel", "pipeline_parallel_degree",
        "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size", "pipeline_parallel_split_points",
        "context_parallel_degree", "context_parallel_rotate_method", "expert_parallel_degree",
        "expert_tensor_parallel_degree", "expert_parallel_comm_backend"}),
    "activation_checkpoint": frozenset({
        "mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns",
        "early_stop", "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state",
        "determinism_check", "debug"}),
    "model": frozenset({"name", "flavor", "hf_assets_path", "tokenizer_path", "converters",
                        "print_after_conversion", "print_model"}),
}
_RENAMED = {"training.batch_size": "local_batch_size",
            "training.data_parallel_shard_degree": "[parallelism] data_parallel_shard_degree",
            "training.tensor_parallel_degree": "[parallelism] tensor_parallel_degree",
            "experimental.pipeline_parallel_degree": "[parallelism] pipeline_parallel_degree",
            "experimental.context_parallel_degree": "[parallelism] context_parallel_degree"}
_SINGLE_STAGE = frozenset({"1f1b", "gpipe"})
_MULTI_STAGE = frozenset({"interleaved1f1b", "loopedbfs", "interleavedzerobubble",
                          "zbvzerobubble", "dualpipev"})
_V_SHAPED = frozenset({"zbvzerobubble", "dualpipev"})
_PRESETS = {("llama3", "8b"): "llama3-8b", ("llama3", "70b"): "llama3-70b",
            ("llama3", "405b"): "llama3-405b", ("deepseek_v3", "671b"): "deepseek-v3"}


def parse_toml(path: str | Path, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"torchtitan config {str(path)!r} is not valid TOML: {exc}; fix the "
                        "syntax there") from None


def _int(section: dict, key: str, default: int, *, where: str, minimum: int = 1) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"[{where}] {key} = {value!r} must be an integer >= {minimum}; fix it")
    return value


def _section(data: dict, name: str) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise SpecError(f"[{name}] must be a table, got {type(value).__name__}; fix the file")
    return value


def _check_keys(data: dict, out: list[Violation]) -> None:
    for name, value in data.items():
        if name not in _SECTIONS:
            out.append(unknown_key("torchtitan-unknown-key", f"[{name}]", _SECTIONS,
                                   severity="warning", consequence="torchtitan ignores it"))
            continue
        for key in value if name in _KEYS and isinstance(value, dict) else ():
            if key not in _KEYS[name]:
                new = _RENAMED.get(f"{name}.{key}")
                consequence = (f"torchtitan ignores it; it is now {new}" if new
                               else "torchtitan ignores it; remove it or fix the name")
                out.append(unknown_key("torchtitan-unknown-key", f"{name}.{key}", _KEYS[name],
                                       severity="warning", consequence=consequence))


def _model(data: dict, ov: Overrides, source: str):
    if ov.model is not None:
        return resolve_model(ov.model)
    m = _section(data, "model")
    key = (str(m.get("name", "")).lower(), str(m.get("flavor", "")).lower())
    if key in _PRESETS:
        return get_preset(_PRESETS[key])
    what = (f"[model] name {m.get('name')!r} flavor {m.get('flavor')!r} is not a planner preset"
            if m.get("name") else "no [model] name/flavor")
    return model_of(ov, source=source, what=what)


def _stage_layers(num_layers: int, stages: int, first_less: int, last_less: int) -> list[int]:
    """torchtitan's split: L + first_less + last_less effective layers over the stages, the
    remainder to the earliest; the first/last stage give up first_less/last_less real layers."""
    eff = num_layers + first_less + last_less
    base, extra = divmod(eff, stages)
    sizes = [base + (1 if s < extra else 0) for s in range(stages)]
    sizes[0] -= first_less
    sizes[-1] -= last_less
    return sizes


def _pipeline(par: dict, num_layers: int, pp: int,
              out: list[Violation]) -> tuple[int, int | None, int | None]:
    """(vpp, first_stage_layers, last_stage_layers) with torchtitan's stage checks."""
    if pp == 1:
        return 1, None, None
    schedule = str(par.get("pipeline_parallel_schedule", "1F1B"))
    single = schedule.lower() in _SINGLE_STAGE
    if schedule.lower() not in _SINGLE_STAGE | _MULTI_STAGE:
        out.append(Violation("torchtitan-pp-schedule", f"pipeline_parallel_schedule {schedule!r} "
                                                       "is not one torchtitan knows (1F1B, GPipe, "
                                                       "Interleaved1F1B, LoopedBFS, "
                                                       "InterleavedZeroBubble, ZBVZeroBubble, "
                                                       "DualPipeV)", "error"))
    first_less = _int(par, "pipeline_parallel_first_stage_less_layers", 1, where="parallelism",
                      minimum=0)
    last_less = _int(par, "pipeline_parallel_last_stage_less_layers", 1, where="parallelism",
                     minimum=0)
    per_stage = par.get("pipeline_parallel_layers_per_stage")
    if per_stage is not None:
        per_stage = _int(par, "pipeline_parallel_layers_per_stage", 1, where="parallelism")
        stages = math.ceil((num_layers + first_less + last_less) / per_stage)
        if stages % pp:
            out.append(Violation("torchtitan-pp-stages",
                                 f"{stages} virtual stages ({num_layers} layers + {first_less} + "
                                 f"{last_less}, {per_stage} per stage) must be divisible by "
                                 f"pipeline_parallel_degree ({pp}); change "
                                 "pipeline_parallel_layers_per_stage", "error"))
            return max(1, stages // pp), None, None
        vpp = stages // pp
        if single and vpp != 1:
            out.append(Violation("torchtitan-pp-stages",
                                 f"schedule {schedule} needs exactly 1 stage per rank, got {vpp}; "
                                 "use an interleaved schedule or more layers per stage", "error"))
        if not single and vpp < 2:
            out.append(Violation("torchtitan-pp-stages",
                                 f"schedule {schedule} needs at least 2 stages per rank, got "
                                 f"{vpp}; use 1F1B or fewer layers per stage", "error"))
    else:
        vpp = 1 if single else 2
    stages = pp * vpp
    sizes = _stage_layers(num_layers, stages, first_less, last_less)
    if min(sizes) < 1:
        out.append(Violation("torchtitan-pp-stages",
                             f"{stages} pipeline stages leave a stage with no transformer layer "
                             f"({num_layers} layers); use fewer stages", "error"))
        return vpp, None, None
    v_shape = schedule.lower() in _V_SHAPED
    ranks = [0] * pp
    for s, n in enumerate(sizes):
        loop, pos = divmod(s, pp)
        ranks[pos if not (v_shape and loop % 2) else pp - 1 - pos] += n
    return (vpp, *_as_first_last(ranks, sizes, vpp, out))


def _as_first_last(ranks: list[int], sizes: list[int], vpp: int,
                   out: list[Violation]) -> tuple[int | None, int | None]:
    """Per-rank layer counts as our even split or first/middle/last."""
    if len(set(sizes)) == 1:
        return None, None
    middle = ranks[1:-1]
    if len(set(middle)) <= 1 and all(n % vpp == 0 for n in ranks):
        return ranks[0], ranks[-1]
    total, p = sum(ranks), len(ranks)
    first = ranks[0]
    last = total - first - (p - 2) * ((total - first - ranks[-1]) // max(1, p - 2))
    out.append(Violation("torchtitan-uneven-split",
                         f"torchtitan puts {'/'.join(map(str, ranks))} layers on the pipeline "
                         f"ranks; planner models first {first}, last {last} and the rest even",
                         "warning"))
    return first, last


def _zero(par: dict, shard: int, replicate: int, pp: int, out: list[Violation]) -> int:
    if shard == 1:
        return 0
    policy = str(par.get("fsdp_reshard_after_forward", "default"))
    if replicate > 1:
        out.append(Violation("torchtitan-hsdp",
                             f"HSDP (replicate {replicate} x shard {shard}): planner shards the "
                             "model states over all data-parallel ranks, so it underestimates "
                             "their memory", "warning"))
    if policy == "never" or (policy == "default" and pp > 1):
        return 2
    return 3


def _recompute(data: dict, out: list[Violation]) -> str:
    ac = _section(data, "activation_checkpoint")
    mode = str(ac.get("mode", "selective"))
    if mode not in ("none", "selective", "full"):
        raise SpecError(f"[activation_checkpoint] mode = {mode!r} must be none, selective or full")
    option = str(ac.get("selective_ac_option", "2"))
    if mode == "selective" and option != "op":
        if option.isdigit() and int(option) == 1:
            return "full"
        out.append(Violation("torchtitan-layer-sac",
                             f"selective_ac_option {option!r} checkpoints every {option}th layer "
                             "fully; planner models selective recompute on every layer", "warning"))
    return mode


def _precision(data: dict, out: list[Violation]) -> str:
    model = _section(data, "model")
    converters = model.get("converters", [])
    converters = converters if isinstance(converters, list) else [converters]
    if any("float8" in str(c) for c in converters):
        return "fp8"
    param = str(_section(data, "training").get("mixed_precision_param", "bfloat16"))
    if param == "float32":
        out.append(Violation("torchtitan-fp32", "mixed_precision_param float32: planner does not "
                                                "model fp32 training (it plans bf16)", "warning"))
    return "bf16"


def load(path: str | Path, data: dict, ov: Overrides) -> Imported:
    """Read a parsed torchtitan TOML."""
    source = str(path)
    out: list[Violation] = []
    _check_keys(data, out)
    train, par = _section(data, "training"), _section(data, "parallelism")
    w = "parallelism"
    replicate = _int(par, "data_parallel_replicate_degree", 1, where=w)
    shard = par.get("data_parallel_shard_degree", -1)
    shard = -1 if shard == -1 else _int(par, "data_parallel_shard_degree", 1, where=w)
    tp = _int(par, "tensor_parallel_degree", 1, where=w)
    pp = _int(par, "pipeline_parallel_degree", 1, where=w)
    cp = _int(par, "context_parallel_degree", 1, where=w)
    ep = _int(par, "expert_parallel_degree", 1, where=w)
    etp = _int(par, "expert_tensor_parallel_degree", 1, where=w)
    others = replicate * tp * pp * cp
    hardware = hardware_of(ov)
    if ov.gpus is None and ov.nodes is None and shard != -1:
        num_gpus = others * shard
    else:
        num_gpus = resolve_world(ov, hardware=hardware, source=source,
                                 missing="a torchtitan config has no world size and "
                                         "data_parallel_shard_degree is -1")
    if shard == -1:
        shard = max(1, num_gpus // others)
    if replicate * shard * cp * tp * pp != num_gpus:
        out.append(Violation("torchtitan-world-size",
                             f"data_parallel_replicate({replicate}) * data_parallel_shard({shard})"
                             f" * cp({cp}) * tp({tp}) * pp({pp}) != WORLD_SIZE({num_gpus}) "
                             "(torchtitan's ParallelDims asserts it)", "error"))
    if ep > 1 and (shard * cp * tp) % ep:
        out.append(Violation("torchtitan-ep",
                             f"expert_parallel_degree ({ep}) must divide data_parallel_shard * cp "
                             f"* tp ({shard}*{cp}*{tp}); EP borrows from FSDP, CP and TP", "error"))
    if etp not in (1, tp):
        out.append(Violation("torchtitan-etp", f"expert_tensor_parallel_degree ({etp}) must be 1 "
                                               f"or tensor_parallel_degree ({tp})", "error"))
    model = _model(data, ov, source)
    if not model.is_moe:
        etp = tp                 # no experts: expert TP means nothing; ours defaults to tp
    seq = _int(train, "seq_len", 2048, where="training")
    unit = (tp if tp > 1 else 1) * (2 * cp if cp > 1 else 1)
    if seq % unit:
        out.append(Violation("torchtitan-seq-divisible",
                             f"seq_len ({seq}) must be divisible by tp * 2*cp ({unit}) for sequence"
                             " and context parallelism", "error"))
    local = _int(train, "local_batch_size", 8, where="training")
    dp = replicate * shard
    gbs = train.get("global_batch_size", -1)
    gbs = local * dp if gbs == -1 else _int(train, "global_batch_size", 1, where="training")
    if gbs % (local * dp):
        out.append(Violation("torchtitan-global-batch",
                             f"global_batch_size ({gbs}) must be a multiple of local_batch_size * "
                             f"dp ({local}*{dp} = {local * dp}) (torchtitan asserts it)", "error"))
    mbs = local
    if pp > 1:
        mbs = _int(par, "pipeline_parallel_microbatch_size", 1, where=w)
        if local % mbs:
            out.append(Violation("torchtitan-pp-microbatch",
                                 f"local_batch_size ({local}) must be divisible by "
                                 f"pipeline_parallel_microbatch_size ({mbs})", "error"))
    if par.get("enable_async_tensor_parallel") and not _section(data, "compile").get("enable") \
            and not train.get("compile"):
        out.append(Violation("torchtitan-async-tp-needs-compile",
                             "enable_async_tensor_parallel needs torch.compile ([compile] enable "
                             "= true); torchtitan raises without it", "error"))
    vpp, first, last = _pipeline(par, model.num_layers, pp, out)
    rotate = str(par.get("context_parallel_rotate_method", "allgather"))
    layout = Layout(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, vpp=vpp, etp=etp, sp=tp > 1,
                    zero=_zero(par, shard, replicate, pp, out), micro_batch_size=mbs,
                    recompute=_recompute(data, out), first_stage_layers=first,
                    last_stage_layers=last,
                    cp_comm_type="allgather" if rotate == "allgather" else "p2p",
                    tp_comm_overlap=bool(par.get("enable_async_tensor_parallel", False)))
    job = make_job(model=model, hardware=hardware, num_gpus=num_gpus, seq_length=seq,
                   global_batch_size=gbs, precision=_precision(data, out), accounting="deepspeed",
                   source=source)
    return Imported(job, layout, out, "torchtitan", source)
