"""torchtitan: a TOML job config (schemas v0.1.0 to v0.2.2) -> Job + Layout.

`[training] local_batch_size, global_batch_size, seq_len`, `[parallelism]` degrees,
`[activation_checkpoint]`, the model from `[model] name/flavor` (every llama3, llama4, qwen3
and deepseek_v3 flavor of torchtitan 0.2.2; planner/frameworks/torchtitan/flavors.py), else --model. The
world size is not in the file (torchrun's --nproc_per_node): --gpus/--nodes give it, or the
product of the degrees when none is -1. Mapping: dp = replicate*shard; FSDP shards over
dp_shard*cp (torchtitan applies FSDP whenever either is > 1): ZeRO-3, or ZeRO-2 when
parameters are not resharded after forward (`fsdp_reshard_after_forward` "never", or
"default" with PP); pure replication is ZeRO-0. TP always uses sequence parallelism. With PP
the micro-batch is `pipeline_parallel_microbatch_size`, else `local_batch_size`. Pipeline
stages are split the way torchtitan does (`pipeline_parallel_layers_per_stage`, first/last
stage "less layers" counting the embedding and the output as layers), and each rank's share
becomes our first/last stage layers when uneven. Model states are counted the FSDP way
(16 B/param).

Recipe settings: `[activation_checkpoint] mode` none/selective/full; `selective_ac_option` "op"
is torchtitan's op-level SAC (recompute_modules [torchtitan_op]), an integer k checkpoints
every k-th layer of a rank fully (0 and 1: every layer), i.e. recompute full with `recompute_num_layers` = floor(layers of the most loaded
rank / k) spread over its virtual stages; `memory_budget` (compiler-chosen) is a warning.
FP8: the float8 converter (`[model] converters` "float8" / "quantize.linear.float8", settings in
`[float8]` (v0.1) or `[quantize.linear.float8]`): recipe_name unset or "tensorwise" is
tensorwise, "rowwise*" is planned as blockwise (a warning), `enable_fsdp_float8_all_gather`
is fp8_param_gather; the MX converter ("mx" / "quantize.linear.mx") is mxfp8.
`expert_parallel_comm_backend` standard/deepep is the all-to-all / DeepEP dispatcher;
`pipeline_parallel_expert_parallel_overlap` with DualPipeV, pp > 1 and ep > 1 hides the EP
communication. `training.dtype = "bfloat16"` is bf16 gradients and moments (the fp32 master
weights it also drops are still counted: a warning); `enable_cpu_offload` (FSDP parameter /
optimizer offload) is a warning: not modelled. The loss is PyTorch's eager fp32 cross-entropy
(`cross_entropy` pytorch_fp32) unless the loss is compiled; `disable_loss_parallel` gathers the
logits over TP for it (`loss_parallel` false).

torchtitan's ConfigManager ignores keys it does not know: they are warnings here. Keys are
checked in the sections it defines that change a plan and in the section names; a value
outside what torchtitan or planner can take (`*_less_layers = 2**63`) is a one-line error.
"""

from __future__ import annotations

import math
from pathlib import Path

from planner.errors import SpecError, Violation
from planner.frameworks.common import (
    Imported,
    Overrides,
    hardware_of,
    make_job,
    model_of,
    model_replaced,
    resolve_world,
    unknown_key,
)
from planner.frameworks.torchtitan.flavors import Flavor, flavor, flavors_of
from planner.io import TOMLDecodeError, load_toml
from planner.layout import Layout
from planner.presets import resolve_model
from planner.specs import ModelSpec

__all__ = ["load", "parse_toml", "stage_layers", "layer_interval_layers", "recipe_semantics"]

_SECTIONS = frozenset(
    {
        "job",
        "profiling",
        "metrics",
        "model",
        "optimizer",
        "lr_scheduler",
        "training",
        "parallelism",
        "checkpoint",
        "activation_checkpoint",
        "compile",
        "float8",
        "mx",
        "comm",
        "memory_estimation",
        "fault_tolerance",
        "experimental",
        "validation",
        "quantize",
        "debug",
        "dataloader",
    }
)
# torchtitan 0.1.0 config_manager.py and 0.2.2 config/job_config.py dataclass fields (the union)
_FLOAT8 = frozenset(
    {
        "enable_fsdp_float8_all_gather",
        "precompute_float8_dynamic_scale_for_fsdp",
        "force_recompute_fp8_weight_in_bwd",
        "recipe_name",
        "filter_fqns",
        "emulate",
        "moe_fqns_prototype",
    }
)
_MX = frozenset(
    {
        "use_fp8_dim1_cast_triton_kernel",
        "mxfp8_dim1_cast_kernel_choice",
        "recipe_name",
        "filter_fqns",
    }
)
_KEYS = {
    "training": frozenset(
        {
            "dataset",
            "dataset_path",
            "local_batch_size",
            "global_batch_size",
            "seq_len",
            "max_norm",
            "steps",
            "enable_cpu_offload",
            "dtype",
            "mixed_precision_param",
            "mixed_precision_reduce",
            "compile",
            "gc_freq",
            "gc_debug",
            "seed",
            "deterministic",
            "debug_moe_force_load_balance",
            "warmup_steps",
            "dataloader",
        }
    ),
    "parallelism": frozenset(
        {
            "data_parallel_replicate_degree",
            "enable_compiled_autograd",
            "data_parallel_shard_degree",
            "fsdp_reshard_after_forward",
            "tensor_parallel_degree",
            "disable_loss_parallel",
            "enable_async_tensor_parallel",
            "pipeline_parallel_degree",
            "module_fqns_per_model_part",
            "pipeline_parallel_first_stage_less_layers",
            "pipeline_parallel_last_stage_less_layers",
            "pipeline_parallel_layers_per_stage",
            "pipeline_parallel_schedule",
            "pipeline_parallel_schedule_csv",
            "pipeline_parallel_microbatch_size",
            "pipeline_parallel_split_points",
            "pipeline_parallel_expert_parallel_overlap",
            "context_parallel_degree",
            "context_parallel_load_balancer",
            "context_parallel_rotate_method",
            "expert_parallel_degree",
            "expert_tensor_parallel_degree",
            "expert_parallel_comm_backend",
        }
    ),
    "activation_checkpoint": frozenset(
        {
            "mode",
            "selective_ac_option",
            "per_op_sac_force_recompute_mm_shapes_by_fqns",
            "early_stop",
            "memory_budget",
            "visualize_memory_budget_pareto",
            "preserve_rng_state",
            "determinism_check",
            "debug",
        }
    ),
    "model": frozenset(
        {
            "name",
            "flavor",
            "hf_assets_path",
            "tokenizer_path",
            "converters",
            "print_after_conversion",
            "print_model",
        }
    ),
    "compile": frozenset({"enable", "components", "backend", "model", "loss"}),
    "float8": _FLOAT8,
    "mx": _MX,
}
_RENAMED = {
    "training.batch_size": "local_batch_size",
    "training.data_parallel_shard_degree": "[parallelism] data_parallel_shard_degree",
    "training.tensor_parallel_degree": "[parallelism] tensor_parallel_degree",
    "experimental.pipeline_parallel_degree": "[parallelism] pipeline_parallel_degree",
    "experimental.context_parallel_degree": "[parallelism] context_parallel_degree",
}
_SINGLE_STAGE = frozenset({"1f1b", "gpipe"})
_MULTI_STAGE = frozenset(
    {"interleaved1f1b", "loopedbfs", "interleavedzerobubble", "zbvzerobubble", "dualpipev"}
)
_V_SHAPED = frozenset({"zbvzerobubble", "dualpipev"})
_MAX = 10_000_000  # degrees and batch sizes beyond any real cluster are a typo
_MAX_LAYERS = 10_000  # as ModelSpec.num_layers


def parse_toml(path: str | Path, text: str) -> dict:
    try:
        return load_toml(text)
    except TOMLDecodeError as exc:
        raise SpecError(
            f"torchtitan config {str(path)!r} is not valid TOML: {exc}; fix the syntax there",
            field="config",
        ) from None


def _int(
    section: dict, key: str, default: int, *, where: str, minimum: int = 1, maximum: int = _MAX
) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(
            f"[{where}] {key} = {_short(value)} must be an integer >= {minimum}; fix it",
            field=f"{where}.{key}",
            value=value,
        )
    if value > maximum:
        raise SpecError(
            f"[{where}] {key} = {_short(value)} is larger than planner takes "
            f"({maximum:,}; limit: GPUs, as for num_gpus); fix it",
            field=f"{where}.{key}",
            value=value,
        )
    return value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _section(data: dict, name: str) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise SpecError(
            f"[{name}] must be a table, got {type(value).__name__}; fix the file", field=name
        )
    return value


def _quantize(data: dict, kind: str, op: str = "linear") -> dict:
    """[quantize.<op>.<kind>] (v0.2) or [<kind>] (v0.1)."""
    q = _section(data, "quantize")
    sub = q.get(op, {}) if isinstance(q.get(op, {}), dict) else {}
    new = sub.get(kind)
    if isinstance(new, dict):
        return new
    return _section(data, kind) if op == "linear" else {}


def _check_keys(data: dict, out: list[Violation]) -> None:
    for name, value in data.items():
        if name not in _SECTIONS:
            out.append(
                unknown_key(
                    "torchtitan-unknown-key",
                    f"[{name}]",
                    _SECTIONS,
                    severity="warning",
                    consequence="torchtitan ignores it",
                )
            )
            continue
        for key in value if name in _KEYS and isinstance(value, dict) else ():
            if key not in _KEYS[name]:
                new = _RENAMED.get(f"{name}.{key}")
                consequence = (
                    f"torchtitan ignores it; it is now {new}"
                    if new
                    else "torchtitan ignores it; remove it or fix the name"
                )
                out.append(
                    unknown_key(
                        "torchtitan-unknown-key",
                        f"{name}.{key}",
                        _KEYS[name],
                        severity="warning",
                        consequence=consequence,
                    )
                )
    for kind, known in (("float8", _FLOAT8 | {"fqns"}), ("mx", _MX | {"fqns"})):
        for op in ("linear", "grouped_mm"):
            for key in _quantize(data, kind, op) if "quantize" in data else ():
                if key not in known:
                    out.append(
                        unknown_key(
                            "torchtitan-unknown-key",
                            f"quantize.{op}.{kind}.{key}",
                            known,
                            severity="warning",
                            consequence="torchtitan ignores it",
                        )
                    )


_FLAVOR_SHAPE = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "num_experts",
    "moe_top_k",
    "moe_ffn_hidden_size",
)
"""The shape fields a named flavor fixes, compared with --model's where both are given."""


def _model(
    data: dict, ov: Overrides, source: str, out: list[Violation] | None = None
) -> tuple[ModelSpec, Flavor | None]:
    if ov.model is not None:
        model = resolve_model(ov.model)
        m = _section(data, "model")
        named = flavor(str(m.get("name", "")), str(m.get("flavor", "")))
        if named is not None and out is not None:
            replaced = model_replaced(
                [
                    (name, value, name)
                    for name in _FLAVOR_SHAPE
                    if (value := getattr(named.spec, name)) is not None
                ],
                model,
                "torchtitan-model-replaced",
                whose=f"the file's [model] {m.get('name')} {m.get('flavor')}, whose",
            )
            if replaced is not None:
                out.append(replaced)
        return model, None
    m = _section(data, "model")
    name, flavor_name = str(m.get("name", "")), str(m.get("flavor", ""))
    found = flavor(name, flavor_name)
    if found:
        return found.spec, found
    known = flavors_of(name)
    what = (
        f"[model] name {m.get('name')!r} flavor {m.get('flavor')!r} is not a torchtitan "
        "flavor planner knows" + (f" (it knows {', '.join(known)})" if known else "")
        if m.get("name")
        else "no [model] name/flavor"
    )
    return model_of(ov, source=source, what=what), None


def stage_layers(num_layers: int, stages: int, first_less: int, last_less: int) -> list[int]:
    """torchtitan's split (generate_llm_fqn_per_model_part): L + first_less + last_less
    effective layers over the stages, the remainder to the earliest; the first/last stage give
    up first_less/last_less real layers."""
    eff = num_layers + first_less + last_less
    base, extra = divmod(eff, stages)
    sizes = [base + (1 if s < extra else 0) for s in range(stages)]
    sizes[0] -= first_less
    sizes[-1] -= last_less
    return sizes


def _pipeline(
    par: dict, num_layers: int, pp: int, out: list[Violation]
) -> tuple[int, int | None, int | None, list[int]]:
    """(vpp, first_stage_layers, last_stage_layers, layers per rank) with torchtitan's checks."""
    if pp == 1:
        return 1, None, None, [num_layers]
    schedule = str(par.get("pipeline_parallel_schedule", "1F1B"))
    single = schedule.lower() in _SINGLE_STAGE
    if schedule.lower() not in _SINGLE_STAGE | _MULTI_STAGE:
        out.append(
            Violation(
                "torchtitan-pp-schedule",
                f"pipeline_parallel_schedule {schedule!r} "
                "is not one torchtitan knows (1F1B, GPipe, "
                "Interleaved1F1B, LoopedBFS, "
                "InterleavedZeroBubble, ZBVZeroBubble, "
                "DualPipeV)",
                "error",
            )
        )
    w = "parallelism"
    first_less = _int(
        par, "pipeline_parallel_first_stage_less_layers", 1, where=w, minimum=0, maximum=_MAX_LAYERS
    )
    last_less = _int(
        par, "pipeline_parallel_last_stage_less_layers", 1, where=w, minimum=0, maximum=_MAX_LAYERS
    )
    per_stage = par.get("pipeline_parallel_layers_per_stage")
    if per_stage is not None:
        per_stage = _int(par, "pipeline_parallel_layers_per_stage", 1, where=w, maximum=_MAX_LAYERS)
        stages = math.ceil((num_layers + first_less + last_less) / per_stage)
        if stages % pp:
            out.append(
                Violation(
                    "torchtitan-pp-stages",
                    f"{stages} virtual stages ({num_layers} layers + {first_less} + "
                    f"{last_less}, {per_stage} per stage) must be divisible by "
                    f"pipeline_parallel_degree ({pp}); change "
                    "pipeline_parallel_layers_per_stage",
                    "error",
                )
            )
            return max(1, stages // pp), None, None, []
        vpp = stages // pp
        if single and vpp != 1:
            out.append(
                Violation(
                    "torchtitan-pp-stages",
                    f"schedule {schedule} needs exactly 1 stage per rank, got {vpp}; "
                    "use an interleaved schedule or more layers per stage",
                    "error",
                )
            )
        if not single and vpp < 2:
            out.append(
                Violation(
                    "torchtitan-pp-stages",
                    f"schedule {schedule} needs at least 2 stages per rank, got "
                    f"{vpp}; use 1F1B or fewer layers per stage",
                    "error",
                )
            )
    else:
        vpp = 1 if single else 2
    stages = pp * vpp
    if stages > num_layers + first_less + last_less:
        out.append(
            Violation(
                "torchtitan-pp-stages",
                f"{stages} pipeline stages exceed {num_layers} layers + {first_less} "
                f"+ {last_less} (torchtitan raises); use fewer stages",
                "error",
            )
        )
        return vpp, None, None, []
    base = (num_layers + first_less + last_less) // stages
    for key, less in (("first", first_less), ("last", last_less)):
        if less > base:
            out.append(
                Violation(
                    "torchtitan-pp-stages",
                    f"pipeline_parallel_{key}_stage_less_layers ({less}) exceeds the "
                    f"layers per stage ({base}) (torchtitan raises); lower it",
                    "error",
                )
            )
            return vpp, None, None, []
    # the first (last) stage may hold only the embedding (the output): torchtitan allows
    # first_less up to the layers per stage, as Megatron's accounted split does
    sizes = stage_layers(num_layers, stages, first_less, last_less)
    v_shape = schedule.lower() in _V_SHAPED
    ranks = [0] * pp
    for s, n in enumerate(sizes):
        loop, pos = divmod(s, pp)
        ranks[pos if not (v_shape and loop % 2) else pp - 1 - pos] += n
    return (vpp, *_as_first_last(ranks, sizes, out), ranks)


def _as_first_last(
    ranks: list[int], sizes: list[int], out: list[Violation]
) -> tuple[int | None, int | None]:
    """Per-rank layer counts as our even split or first/middle/last (the middle ranks equal);
    otherwise first/last with the rest even, and a warning."""
    if len(set(ranks)) == 1 and len(set(sizes)) == 1:
        return None, None
    middle = ranks[1:-1]
    if len(set(middle)) <= 1:
        if len(set(ranks)) == 1:
            return None, None
        return ranks[0], ranks[-1]
    total, p = sum(ranks), len(ranks)
    first = ranks[0]
    last = total - first - (p - 2) * ((total - first - ranks[-1]) // max(1, p - 2))
    out.append(
        Violation(
            "torchtitan-uneven-split",
            f"torchtitan puts {'/'.join(map(str, ranks))} layers on the pipeline "
            f"ranks; planner models first {first}, last {last} and the rest even",
            "warning",
        )
    )
    return first, last


def _zero(par: dict, shard: int, replicate: int, cp: int, pp: int, out: list[Violation]) -> int:
    """FSDP runs over dp_shard * cp whenever that is > 1 (ParallelDims.fsdp_enabled)."""
    if shard * cp == 1:
        return 0
    policy = str(par.get("fsdp_reshard_after_forward", "default"))
    if policy not in ("default", "always", "never"):
        raise SpecError(
            f"[parallelism] fsdp_reshard_after_forward = {policy!r} must be default, "
            "always or never",
            field="parallelism.fsdp_reshard_after_forward",
            value=policy,
        )
    if replicate > 1:
        out.append(
            Violation(
                "torchtitan-hsdp",
                f"HSDP (replicate {replicate} x shard {shard}): planner shards the "
                "model states over all data-parallel ranks, so it underestimates "
                "their memory",
                "warning",
            )
        )
    if policy == "never" or (policy == "default" and pp > 1):
        return 2
    return 3


def layer_interval_layers(rank_layers: list[int], k: int, vpp: int) -> int:
    """Layers per virtual stage that selective_ac_option k recomputes: torchtitan counts the
    layers of a rank 1, 2, ... and checkpoints those whose count is a multiple of k (0: all),
    floor(n / k) of n; spread over the rank's vpp chunks, rounded up, on the most loaded rank."""
    n = max(rank_layers)
    return n if k == 0 else math.ceil((n // k) / vpp)


def _recompute(data: dict, rank_layers: list[int], vpp: int, out: list[Violation]) -> dict:
    ac = _section(data, "activation_checkpoint")
    mode = str(ac.get("mode", "selective"))
    if mode not in ("none", "selective", "full", "memory_budget"):
        raise SpecError(
            f"[activation_checkpoint] mode = {_short(mode)} must be none, selective, "
            "full or memory_budget",
            field="activation_checkpoint.mode",
            value=mode,
        )
    if mode == "memory_budget":
        out.append(
            Violation(
                "torchtitan-not-modelled",
                "[activation_checkpoint] mode memory_budget: the compiler chooses "
                "what to recompute; planner models selective recompute",
                "warning",
            )
        )
        return {"recompute": "selective"}
    option = str(ac.get("selective_ac_option", "2"))
    if mode != "selective":
        return {"recompute": mode}
    if option == "op":
        return {"recompute": "selective", "recompute_modules": ("torchtitan_op",)}
    if not option.isdigit() or len(option) > 6:
        raise SpecError(
            f"[activation_checkpoint] selective_ac_option = {_short(option)} must be "
            "'op' or a layer interval such as '2' (torchtitan raises)",
            field="activation_checkpoint.selective_ac_option",
            value=option,
        )
    k = int(option)
    if k <= 1 or not rank_layers:
        return {"recompute": "full"}
    n = layer_interval_layers(rank_layers, k, vpp)
    if n == 0:
        return {"recompute": "none"}
    return {"recompute": "full", "recompute_num_layers": n}


def _fp8(data: dict, shard: int, cp: int, out: list[Violation]) -> tuple[str, dict]:
    """(precision, training fields) from the float8 / MX converters."""
    model = _section(data, "model")
    converters = model.get("converters", [])
    converters = [str(c) for c in (converters if isinstance(converters, list) else [converters])]
    names = {c.rsplit(".", 1)[-1] for c in converters}
    linear = {c.rsplit(".", 1)[-1] for c in converters if "grouped_mm" not in c}
    if "mx" in names:
        mx = _quantize(data, "mx") if "mx" in linear else _quantize(data, "mx", "grouped_mm")
        recipe = str(mx.get("recipe_name", "mxfp8"))
        if not recipe.startswith("mxfp8"):
            out.append(
                Violation(
                    "torchtitan-not-modelled",
                    f"MX recipe {recipe!r}: planner models mxfp8; planned as mxfp8",
                    "warning",
                )
            )
        _partial(linear, "mx", out)
        return "fp8", {"fp8_recipe": "mxfp8"}
    if "float8" not in names:
        return "bf16", {}
    f8 = _quantize(data, "float8")
    recipe = f8.get("recipe_name")
    gather = bool(f8.get("enable_fsdp_float8_all_gather", False))
    fields: dict = {"fp8_recipe": "tensorwise"}
    if recipe not in (None, "tensorwise"):
        if str(recipe).startswith("rowwise"):
            out.append(
                Violation(
                    "torchtitan-fp8-rowwise",
                    f"float8 recipe_name {recipe!r} (one scale per row) is planned "
                    "as blockwise scaling, the closest recipe planner models",
                    "warning",
                )
            )
            fields["fp8_recipe"] = "blockwise"
        else:
            raise SpecError(
                f"float8 recipe_name = {_short(recipe)} must be tensorwise, rowwise "
                "or rowwise_with_gw_hp (torchtitan's choices)",
                field="float8.recipe_name",
                value=recipe,
            )
        if gather:
            out.append(
                Violation(
                    "torchtitan-fp8",
                    "enable_fsdp_float8_all_gather with a "
                    "recipe_name: torchtitan asserts they are not "
                    "combined; remove one",
                    "error",
                )
            )
    if gather and shard * cp > 1:
        fields["fp8_param_gather"] = True
    _partial(linear, "float8", out)
    return "fp8", fields


def _partial(linear: set[str], kind: str, out: list[Violation]) -> None:
    if kind not in linear:
        out.append(
            Violation(
                "torchtitan-not-modelled",
                f"{kind} on the MoE grouped GEMMs only: planner plans every layer in "
                "fp8 (the linear layers run in bf16 here)",
                "warning",
            )
        )


def _precision_settings(train: dict, out: list[Violation]) -> dict:
    reduce = str(train.get("mixed_precision_reduce", "float32"))
    if reduce != "float32":
        out.append(
            Violation(
                "torchtitan-reduce-dtype",
                f"mixed_precision_reduce {reduce!r}: torchtitan takes float32 only "
                "(its config rejects anything else)",
                "error",
            )
        )
    if str(train.get("mixed_precision_param", "bfloat16")) == "float32":
        out.append(
            Violation(
                "torchtitan-fp32",
                "mixed_precision_param float32: planner does not "
                "model fp32 training (it plans bf16)",
                "warning",
            )
        )
    fields: dict = {}
    if str(train.get("dtype", "float32")) == "bfloat16":
        fields.update(grad_reduce_in_fp32=False, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
        out.append(
            Violation(
                "torchtitan-not-modelled",
                "training.dtype bfloat16 keeps parameters, gradients and optimizer "
                "states in bf16 with no fp32 master weights; planner still counts "
                "the master weights (an upper bound)",
                "warning",
            )
        )
    if train.get("enable_cpu_offload"):
        out.append(
            Violation(
                "torchtitan-not-modelled",
                "training.enable_cpu_offload: FSDP keeps parameters, gradients and "
                "optimizer states on the host; planner counts them on the GPU",
                "warning",
            )
        )
    return fields


def _eager(data: dict, train: dict, out: list[Violation]) -> None:
    """Without torch.compile the blocks run eager: planner's kernel costs are fitted to
    compiled runs, and torchtitan's 2024-12 8B pairs took 16% longer eager (2.84 against
    2.46 s on 8 GPUs, 2.92 against 2.52 s on 128)."""
    if not (_section(data, "compile").get("enable") or train.get("compile")):
        out.append(
            Violation(
                "torchtitan-not-modelled",
                "torch.compile is off: planner's kernel costs are fitted to "
                "compiled runs, and torchtitan's eager runs took about 16% longer "
                "(its 2024-12 Llama 3 8B tables); the step time is likely low",
                "warning",
            )
        )


def _loss(data: dict, par: dict) -> dict:
    """torchtitan's loss is `cross_entropy(pred.float(), labels)`: eager, an fp32 copy of the
    logits and fp32 log-softmax (cross_entropy pytorch_fp32), unless torch.compile takes the
    loss (`[compile] enable` with "loss" in `components`, whose default is model and loss),
    which fuses the cast into the kernels and counts like Megatron's (vocab_parallel).
    `[training] compile` (v0.0.x) compiles the transformer blocks only. With TP the logits stay
    vocabulary-split for the loss unless `disable_loss_parallel`."""
    comp = _section(data, "compile")
    components = comp.get("components", ["model", "loss"])
    compiled = bool(comp.get("enable")) and (
        (isinstance(components, list) and "loss" in components) or bool(comp.get("loss"))
    )
    return {
        "cross_entropy": "vocab_parallel" if compiled else "pytorch_fp32",
        "loss_parallel": not par.get("disable_loss_parallel", False),
    }


def _schedule(par: dict, pp: int) -> dict:
    """`pipeline_parallel_schedule` DualPipeV is the dualpipev schedule (Interleaved1F1B and
    1F1B are the default 1f1b, interleaved by vpp; the others keep it, and
    torchtitan-pp-schedule reports the unknown ones)."""
    schedule = str(par.get("pipeline_parallel_schedule", "1F1B")).lower()
    return {"pipeline_schedule": "dualpipev"} if schedule == "dualpipev" and pp > 1 else {}


def _moe(par: dict, model: ModelSpec, pp: int, ep: int, out: list[Violation]) -> dict:
    if not model.is_moe:
        return {}
    backend = str(par.get("expert_parallel_comm_backend", "standard"))
    if backend not in ("standard", "deepep"):
        raise SpecError(
            f"[parallelism] expert_parallel_comm_backend = {_short(backend)} must be "
            "standard or deepep",
            field="parallelism.expert_parallel_comm_backend",
            value=backend,
        )
    fields: dict = {"moe_token_dispatcher": "deepep" if backend == "deepep" else "alltoall"}
    schedule = str(par.get("pipeline_parallel_schedule", "1F1B")).lower()
    if (
        schedule == "dualpipev"
        and pp > 1
        and ep > 1
        and par.get("pipeline_parallel_expert_parallel_overlap", True)
    ):
        fields["overlap_moe_expert_parallel_comm"] = True
    return fields


def _flavor_rules(found: Flavor | None, cp: int, seq: int, pp: int, out: list[Violation]) -> None:
    if found is None:
        return
    if cp > 1 and found.attention != "sdpa":
        out.append(
            Violation(
                "torchtitan-cp-attention",
                f"context_parallel_degree {cp} with {found.name} {found.flavor} "
                f"(attn_type {found.attention}): torchtitan's context parallelism "
                "runs only with sdpa attention (it raises); pick an sdpa flavor or "
                "cp 1",
                "error",
            )
        )
    # chunked attention (the _irope flavors' layer_types) and the interleaved MoE layers
    # (moe_layer_freq) are modelled layer by layer: no approximation to report


def _world(par: dict, ov: Overrides, hardware, source: str) -> tuple[int, int, dict]:
    w = "parallelism"
    degrees = {
        k: _int(par, f"{k}_degree", 1, where=w)
        for k in (
            "data_parallel_replicate",
            "tensor_parallel",
            "pipeline_parallel",
            "context_parallel",
            "expert_parallel",
            "expert_tensor_parallel",
        )
    }
    shard = par.get("data_parallel_shard_degree", -1)
    shard = -1 if shard == -1 else _int(par, "data_parallel_shard_degree", 1, where=w)
    others = (
        degrees["data_parallel_replicate"]
        * degrees["tensor_parallel"]
        * degrees["pipeline_parallel"]
        * degrees["context_parallel"]
    )
    if ov.gpus is None and ov.nodes is None and shard != -1:
        num_gpus = others * shard
    else:
        num_gpus = resolve_world(
            ov,
            hardware=hardware,
            source=source,
            missing="a torchtitan config has no world size and data_parallel_shard_degree is -1",
        )
    if shard == -1:
        shard = max(1, num_gpus // others)
    return num_gpus, shard, degrees


def _rules(
    par, train, data, *, num_gpus, shard, replicate, tp, pp, cp, ep, etp, out: list[Violation]
) -> tuple[int, int]:
    """torchtitan's own checks; returns (global batch, micro-batch size)."""
    w = "parallelism"
    if replicate * shard * cp * tp * pp != num_gpus:
        out.append(
            Violation(
                "torchtitan-world-size",
                f"data_parallel_replicate({replicate}) * data_parallel_shard({shard})"
                f" * cp({cp}) * tp({tp}) * pp({pp}) != WORLD_SIZE({num_gpus}) "
                "(torchtitan's ParallelDims asserts it)",
                "error",
            )
        )
    if ep > 1 and (shard * cp * tp) % ep:
        out.append(
            Violation(
                "torchtitan-ep",
                f"expert_parallel_degree ({ep}) must divide data_parallel_shard * cp "
                f"* tp ({shard}*{cp}*{tp}); EP borrows from FSDP, CP and TP",
                "error",
            )
        )
    if etp not in (1, tp):
        out.append(
            Violation(
                "torchtitan-etp",
                f"expert_tensor_parallel_degree ({etp}) must be 1 or tensor_parallel_degree ({tp})",
                "error",
            )
        )
    local = _int(train, "local_batch_size", 8, where="training")
    dp = replicate * shard
    gbs = train.get("global_batch_size", -1)
    gbs = (
        local * dp
        if gbs == -1
        else _int(train, "global_batch_size", 1, where="training", maximum=10**9)
    )
    if gbs % (local * dp):
        out.append(
            Violation(
                "torchtitan-global-batch",
                f"global_batch_size ({gbs}) must be a multiple of local_batch_size * "
                f"dp ({local}*{dp} = {local * dp}) (torchtitan asserts it)",
                "error",
            )
        )
    mbs = local
    if pp > 1:
        mbs = _int(par, "pipeline_parallel_microbatch_size", 1, where=w)
        if local % mbs:
            out.append(
                Violation(
                    "torchtitan-pp-microbatch",
                    f"local_batch_size ({local}) must be divisible by "
                    f"pipeline_parallel_microbatch_size ({mbs})",
                    "error",
                )
            )
    if (
        par.get("enable_async_tensor_parallel")
        and not _section(data, "compile").get("enable")
        and not train.get("compile")
    ):
        out.append(
            Violation(
                "torchtitan-async-tp-needs-compile",
                "enable_async_tensor_parallel needs torch.compile ([compile] enable "
                "= true); torchtitan raises without it",
                "error",
            )
        )
    return gbs, mbs


def load(path: str | Path, data: dict, ov: Overrides) -> Imported:
    """Read a parsed torchtitan TOML."""
    source = str(path)
    out: list[Violation] = []
    _check_keys(data, out)
    train, par = _section(data, "training"), _section(data, "parallelism")
    hardware = hardware_of(ov)
    num_gpus, shard, d = _world(par, ov, hardware, source)
    tp, pp, cp = d["tensor_parallel"], d["pipeline_parallel"], d["context_parallel"]
    replicate, ep, etp = (
        d["data_parallel_replicate"],
        d["expert_parallel"],
        d["expert_tensor_parallel"],
    )
    gbs, mbs = _rules(
        par,
        train,
        data,
        num_gpus=num_gpus,
        shard=shard,
        replicate=replicate,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        out=out,
    )
    model, found = _model(data, ov, source, out)
    if not model.is_moe:
        etp = tp  # no experts: expert TP means nothing; ours defaults to tp
    seq = _int(train, "seq_len", 2048, where="training", maximum=100_000_000)
    unit = (tp if tp > 1 else 1) * (2 * cp if cp > 1 else 1)
    if seq % unit:
        out.append(
            Violation(
                "torchtitan-seq-divisible",
                f"seq_len ({seq}) must be divisible by tp * 2*cp ({unit}) for sequence"
                " and context parallelism",
                "error",
            )
        )
    _flavor_rules(found, cp, seq, pp, out)
    vpp, first, last, ranks = _pipeline(par, model.num_layers, pp, out)
    precision, fp8_fields = _fp8(data, shard, cp, out)
    _eager(data, train, out)
    rotate = str(par.get("context_parallel_rotate_method", "allgather"))
    layout = Layout(
        tp=tp,
        cp=cp,
        ep=ep,
        dp=replicate * shard,
        pp=pp,
        vpp=vpp,
        etp=etp,
        sp=tp > 1,
        zero=_zero(par, shard, replicate, cp, pp, out),
        micro_batch_size=mbs,
        first_stage_layers=first,
        last_stage_layers=last,
        cp_comm_type="allgather" if rotate == "allgather" else "p2p",
        tp_comm_overlap=bool(par.get("enable_async_tensor_parallel", False)),
        **_recompute(data, ranks, vpp, out),
        **_precision_settings(train, out),
        **_moe(par, model, pp, ep, out),
        **_schedule(par, pp),
    )
    job = make_job(
        model=model,
        hardware=hardware,
        num_gpus=num_gpus,
        seq_length=seq,
        global_batch_size=gbs,
        precision=precision,
        source=source,
        **fp8_fields,
        **_training_semantics(data, par),
    )
    return Imported(job, layout, out, "torchtitan", source)


def _training_semantics(data: dict, par: dict) -> dict:
    """The TrainingSpec fields torchtitan's way of training sets: FSDP-style model-state
    accounting (16 B/param) and its loss (`_loss`)."""
    return {"accounting": "deepspeed", **_loss(data, par)}


def recipe_semantics(data: dict, *, num_layers: int, pp: int = 1) -> tuple[dict, dict]:
    """(Layout fields, TrainingSpec fields) that a job config's recipe sections mean the way
    torchtitan runs them: `[activation_checkpoint]` (`_recompute`), `[compile]` /
    `[training] compile` and `disable_loss_parallel` (`_loss`), the model-state accounting;
    `data` holds only those sections. The mapping `load` applies, for a run known by its
    degrees rather than its TOML (the published runs benchmarks/accuracy.py reads)."""
    out: list[Violation] = []
    par = _section(data, "parallelism")
    vpp, _, _, ranks = _pipeline(par, num_layers, pp, out)
    errors = [v.message for v in out if v.severity == "error"]
    if errors:
        raise SpecError(f"torchtitan recipe: {errors[0]}", field="parallelism")
    return _recompute(data, ranks, vpp, out), _training_semantics(data, par)
