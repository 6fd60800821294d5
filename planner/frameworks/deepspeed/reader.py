"""DeepSpeed: a `ds_config.json`, alone or with the Megatron-DeepSpeed launch that uses it
-> Job + Layout.

A ds_config alone holds neither the model nor the world size: --model and --gpus/--nodes give
them. Its degrees: TP from `tensor_parallel.autotp_size`, PP from `pipeline.stages`, Ulysses
sequence parallelism `sequence_parallel_size` (planned as cp with a2a); the rest is DP, so
DP = world / (tp*pp*sp). With a Megatron-DeepSpeed launch (a script passing `--deepspeed
--deepspeed_config FILE`, read with the Megatron reader, or the script that follows the JSON in
planner's own DeepSpeed export) the degrees, the model shape, the sequence length and the world
size come from its flags (`--num-key-value-heads`, `--ds-sequence-parallel-size` as cp with a2a, FPDT named as not modelled,
`--no-pipeline-parallel`, `--zero-stage`...); its flags are not checked against a list (we have
none for Megatron-DeepSpeed). A ds_config the script writes itself (`cat <<EOT > $DS_CONFIG`,
`sed ... TEMPLATE > FILE`, `echo '{...}' > FILE`) is read from the script.

DeepSpeed's own rules, not Megatron's: its pipeline engine balances the layers over the stages
itself (Megatron-DeepSpeed's `partition_method='type:transformer'`, or BLOOM's
`--pp-partition-method 'type:transformer|embedding'`), so 70 layers on pp 12 is valid: the
per-stage counts DeepSpeed's partitioner gives become first/last_stage_layers; with `bf16` and
ZeRO stage 0 the engine runs its BF16 optimizer, which shards the fp32 master weights and Adam
states over DP like ZeRO-1, so it is planned as zero 1.

The batch keys resolve the way DeepSpeed's config does (any two of train_batch_size,
train_micro_batch_size_per_gpu, gradient_accumulation_steps give the third) and must satisfy
train_batch_size == micro * GAS * DP. An `activation_checkpointing` section is read as full
recompute (DeepSpeed's checkpointing API checkpoints whole layers); without a launch the
sequence length is the model's. Model states are counted the DeepSpeed way (16 B/param).
Unknown top-level keys are ignored by DeepSpeed (a warning here; `_comment` is accepted);
`zero_optimization` is a pydantic model with extra="forbid" (an unknown key is an error).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.errors import SpecError, Violation, clip
from planner.frameworks.common import (
    Imported,
    Overrides,
    hardware_of,
    make_job,
    model_of,
    read_text,
    resolve_world,
    unknown_key,
)
from planner.frameworks.deepspeed.writer import partition_split
from planner.frameworks.megatron import reader as megatron
from planner.frameworks.megatron.recipe import read_recompute
from planner.layout import Layout
from planner.readers import bash as shell
from planner.specs import MAX_BATCH

__all__ = [
    "load",
    "load_text",
    "load_script",
    "parse_json",
    "looks_like_deepspeed",
    "looks_like_megatron_deepspeed",
]

_TOP = frozenset(
    {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "steps_per_print",
        "optimizer",
        "scheduler",
        "fp16",
        "bf16",
        "bfloat16",
        "amp",
        "gradient_clipping",
        "prescale_gradients",
        "gradient_predivide_factor",
        "sparse_gradients",
        "zero_optimization",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
        "activation_checkpointing",
        "flops_profiler",
        "wall_clock_breakdown",
        "memory_breakdown",
        "tensorboard",
        "wandb",
        "csv_monitor",
        "comet",
        "comms_logger",
        "autotuning",
        "elasticity",
        "pipeline",
        "data_efficiency",
        "curriculum_learning",
        "compression_training",
        "aio",
        "checkpoint",
        "data_types",
        "communication_data_type",
        "seq_parallel_communication_data_type",
        "sparse_attention",
        "dump_state",
        "disable_allgather",
        "nebula",
        "eigenvalue",
        "progressive_layer_drop",
        "quantize_training",
        "weight_quantization",
        "hybrid_engine",
        "tensor_parallel",
        "sequence_parallel_size",
        "timers",
        "torch_autocast",
        "compile",
        "graph_harvesting",
        "use_data_before_expert_parallelism",
        "load_universal_checkpoint",
        "use_node_local_storage",
        "zero_optimization_stage",
        "gradient_accumulation_dtype",
        "dataloader_drop_last",
        "mics_shard_size",
        "mics_hierarchical_params_gather",
        "train_batch_size_per_gpu",
        "fp8",
        "monitor_config",
        "activation_checkpointing_config",
    }
)
_ZERO = frozenset(
    {
        "stage",
        "contiguous_gradients",
        "reduce_scatter",
        "reduce_bucket_size",
        "use_multi_rank_bucket_allreduce",
        "allgather_partitions",
        "allgather_bucket_size",
        "overlap_comm",
        "load_from_fp32_weights",
        "elastic_checkpoint",
        "offload_param",
        "offload_optimizer",
        "sub_group_size",
        "cpu_offload_param",
        "cpu_offload_use_pin_memory",
        "cpu_offload",
        "prefetch_bucket_size",
        "stage3_prefetch_bucket_size",
        "param_persistence_threshold",
        "stage3_param_persistence_threshold",
        "model_persistence_threshold",
        "stage3_model_persistence_threshold",
        "max_live_parameters",
        "stage3_max_live_parameters",
        "max_reuse_distance",
        "stage3_max_reuse_distance",
        "gather_16bit_weights_on_model_save",
        "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save",
        "module_granularity_threshold",
        "use_all_reduce_for_fetch_params",
        "stage3_use_all_reduce_for_fetch_params",
        "ignore_unused_parameters",
        "legacy_stage1",
        "round_robin_gradients",
        "zero_hpz_partition_size",
        "zero_quantized_weights",
        "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients",
        "zeropp_loco_param",
        "mics_shard_size",
        "mics_hierarchical_params_gather",
        "memory_efficient_linear",
        "pipeline_loading_checkpoint",
        "override_module_apply",
        "log_trace_cache_warnings",
        "stage3_module_granularity_threshold",
    }
)


def looks_like_megatron_deepspeed(text: str) -> bool:
    """A launch script for Megatron-DeepSpeed: it passes --deepspeed / --deepspeed_config."""
    return bool(re.search(r"--deepspeed(_config|-config)?\b", text))


def looks_like_deepspeed(data: Any) -> bool:
    return isinstance(data, dict) and any(
        k in data
        for k in (
            "train_batch_size",
            "train_micro_batch_size_per_gpu",
            "zero_optimization",
            "gradient_accumulation_steps",
        )
    )


def parse_json(path: str | Path, text: str, *, what: str, trailing: bool = False) -> Any:
    """The JSON object in `text`; with `trailing`, (object, the text after it)."""
    try:
        data, end = json.JSONDecoder().raw_decode(text.lstrip())
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{what} {str(path)!r} is not valid JSON at line {exc.lineno}, column "
            f"{exc.colno}: {exc.msg}; fix the syntax there",
            field=what,
        ) from None
    rest = text.lstrip()[end:]
    if trailing:
        return data, rest
    if rest.strip():
        raise SpecError(
            f"{what} {str(path)!r} has text after the JSON object; remove it", field=what
        )
    return data


def _count(data: dict, key: str, source: str) -> int | None:
    """A positive integer, None if absent or "auto" (HF Trainer fills it)."""
    value = data.get(key)
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(
            f"{source}: {key} = {clip(repr(value), 40)} must be a positive integer; fix the value",
            field=key,
            value=value,
        )
    if value > MAX_BATCH:
        raise SpecError(
            f"{source}: {key} = {clip(repr(value), 40)} is larger than planner takes "
            f"({MAX_BATCH:,} sequences); fix the value",
            field=key,
            value=value,
        )
    return value


def _section(data: dict, key: str, source: str) -> dict:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(
            f"{source}: {key} must be an object, got {type(value).__name__}; fix it", field=key
        )
    return value


# the Hugging Face Trainer's defaults for what a ds_config leaves "auto" (TrainingArguments:
# per_device_train_batch_size 8, gradient_accumulation_steps 1; its DeepSpeed integration sets
# train_batch_size = world * per_device_train_batch_size * gradient_accumulation_steps)
HF_MICRO_BATCH = 8
HF_GRAD_ACCUMULATION = 1


def _auto_batch(
    data: dict, dp: int, ov: Overrides, out: list[Violation]
) -> tuple[int | None, int | None, int | None]:
    """The batch keys with "auto" filled as the Trainer fills them: --micro-batch-size /
    --global-batch-size, else its defaults; one note per "auto" key saying which. A number in
    the file that an option replaces is a warning too."""
    keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    auto = {k for k in keys if data.get(k) == "auto"}
    tbs, mbs, gas = (None if k in auto else data.get(k) for k in keys)
    for key, given, flag in (
        ("train_batch_size", ov.global_batch_size, "--global-batch-size"),
        ("train_micro_batch_size_per_gpu", ov.micro_batch_size, "--micro-batch-size"),
    ):
        if (
            given is not None
            and key not in auto
            and data.get(key) is not None
            and data.get(key) != given
        ):
            out.append(
                Violation(
                    "deepspeed-batch-replaced",
                    f"{flag} {given} replaces the ds_config's {key} "
                    f"{clip(repr(data.get(key)), 20)}",
                    "warning",
                )
            )
    if ov.global_batch_size is not None:
        tbs = ov.global_batch_size
    if ov.micro_batch_size is not None:
        mbs = ov.micro_batch_size
    notes = []
    if "train_micro_batch_size_per_gpu" in auto:
        if ov.micro_batch_size is not None:
            notes.append(f"train_micro_batch_size_per_gpu {mbs} from --micro-batch-size")
        elif tbs is not None and "gradient_accumulation_steps" in auto:
            mbs = max(1, tbs // dp)
            notes.append(
                f"train_micro_batch_size_per_gpu {mbs} = train_batch_size {tbs} / "
                f"DP {dp} (gradient_accumulation_steps 1; give --micro-batch-size)"
            )
        elif tbs is None:
            mbs = HF_MICRO_BATCH
            notes.append(
                f"train_micro_batch_size_per_gpu {mbs}, the Trainer's default "
                "per_device_train_batch_size (give --micro-batch-size)"
            )
    if "gradient_accumulation_steps" in auto:
        if tbs is not None and mbs is not None:
            gas = max(1, tbs // (mbs * dp))
            notes.append(f"gradient_accumulation_steps {gas} = {tbs} / ({mbs} x DP {dp})")
        else:
            gas = HF_GRAD_ACCUMULATION
            notes.append(f"gradient_accumulation_steps {gas}, the Trainer's default")
    if "train_batch_size" in auto:
        if ov.global_batch_size is not None:
            notes.append(f"train_batch_size {tbs} from --global-batch-size")
        elif mbs is not None:
            tbs = mbs * (gas or HF_GRAD_ACCUMULATION) * dp
            notes.append(
                f"train_batch_size {tbs} = micro batch {mbs} x gradient accumulation "
                f"{gas or HF_GRAD_ACCUMULATION} x DP {dp}, as the Trainer computes it "
                "(give --global-batch-size)"
            )
    for note in notes:
        out.append(
            Violation(
                "deepspeed-auto-value",
                f'"auto" (filled by the Hugging Face Trainer, which planner does '
                f"not run): planner took {note}",
                "warning",
            )
        )
    return tbs, mbs, gas


def _batch(
    data: dict, dp: int, source: str, out: list[Violation], ov: Overrides | None = None
) -> tuple[int, int]:
    """(train_batch_size, micro batch), resolved as DeepSpeed does, with its assertion;
    "auto" values (the Hugging Face Trainer's) filled by _auto_batch."""
    filled = dict(data)
    for key, value in zip(
        ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"),
        _auto_batch(data, dp, ov or Overrides(), out),
    ):
        filled[key] = value
    tbs = _count(filled, "train_batch_size", source)
    mbs = _count(filled, "train_micro_batch_size_per_gpu", source)
    gas = _count(filled, "gradient_accumulation_steps", source)
    if tbs is None and mbs is None:
        raise SpecError(
            f"{source}: neither train_batch_size nor train_micro_batch_size_per_gpu "
            'is a number (DeepSpeed needs one of them); set them ("auto" is filled '
            "by the Hugging Face Trainer, which planner does not run)",
            field="train_batch_size",
        )
    if tbs is not None and mbs is not None and gas is None:
        gas = max(1, tbs // (mbs * dp))
    elif tbs is not None and mbs is None:
        gas = gas or 1
        mbs = max(1, tbs // (gas * dp))
    elif tbs is None:
        gas = gas or 1
        tbs = mbs * gas * dp
    if tbs != mbs * gas * dp:
        out.append(
            Violation(
                "deepspeed-batch-size",
                f"train_batch_size ({tbs}) must equal train_micro_batch_size_per_gpu "
                f"* gradient_accumulation_steps * DP ({mbs} * {gas} * {dp} = "
                f"{mbs * gas * dp}) (DeepSpeed asserts it)",
                "error",
            )
        )
    return tbs, mbs


def _precision(data: dict, source: str, out: list[Violation]) -> str:
    on = {k: _section(data, k, source).get("enabled") for k in ("bf16", "fp16")}
    if on["bf16"] is True and on["fp16"] is True:
        out.append(
            Violation(
                "deepspeed-precision-exclusive",
                "bf16.enabled and fp16.enabled are both true (DeepSpeed asserts "
                "they are exclusive); keep one",
                "error",
            )
        )
    if on["bf16"] is True:
        return "bf16"
    if on["fp16"] is True:
        return "fp16"
    if "auto" in on.values():
        out.append(
            Violation(
                "deepspeed-auto-value",
                'bf16/fp16 enabled is "auto" (the Hugging Face Trainer decides); '
                "planner plans bf16",
                "warning",
            )
        )
    else:
        out.append(
            Violation(
                "deepspeed-fp32",
                "neither bf16 nor fp16 is enabled: DeepSpeed trains in fp32, which "
                "planner does not model (it plans bf16); enable bf16",
                "warning",
            )
        )
    return "bf16"


def _degree(value: Any, key: str, source: str) -> int:
    if value is None or value == "auto":
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(
            f"{source}: {key} = {clip(repr(value), 40)} must be a positive integer; fix the value",
            field=key,
            value=value,
        )
    if value > MAX_BATCH:
        raise SpecError(
            f"{source}: {key} = {clip(repr(value), 40)} is larger than planner takes "
            f"({MAX_BATCH:,} sequences); fix the value",
            field=key,
            value=value,
        )
    return value


def _check_keys(data: dict, zero_cfg: dict, out: list[Violation]) -> None:
    for key in data:
        if key not in _TOP and key != "_comment":
            out.append(
                unknown_key(
                    "deepspeed-unknown-key",
                    key,
                    _TOP,
                    severity="warning",
                    consequence="DeepSpeed ignores it; remove it or fix the name",
                )
            )
    for key in zero_cfg:
        if key not in _ZERO:
            out.append(
                unknown_key(
                    "deepspeed-unknown-zero-key",
                    f"zero_optimization.{key}",
                    _ZERO,
                    severity="error",
                    consequence="DeepSpeed's ZeRO config rejects it (extra fields "
                    "are forbidden); remove it or fix the name",
                )
            )


def _stage(zero_cfg: dict, source: str, out: list[Violation]) -> int:
    stage = zero_cfg.get("stage", 0)
    if not isinstance(stage, int) or isinstance(stage, bool) or not 0 <= stage <= 3:
        out.append(
            Violation(
                "deepspeed-zero-stage",
                f"zero_optimization.stage = {stage!r} must be 0, 1, 2 or 3",
                "error",
            )
        )
        stage = 3 if isinstance(stage, int) and stage > 3 else 0
    for part in ("offload_optimizer", "offload_param"):
        device = _section(zero_cfg, part, source).get("device", "none")
        if device not in (None, "none"):
            out.append(
                Violation(
                    "deepspeed-offload",
                    f"zero_optimization.{part}.device = {device!r}: planner does not "
                    "model offload and counts those states in GPU memory",
                    "warning",
                )
            )
    return stage


@dataclass
class _Degrees:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sp: bool = False
    recompute: str = "none"
    recompute_num_layers: int | None = None


def _from_config(data: dict, source: str) -> _Degrees:
    tp = _degree(
        _section(data, "tensor_parallel", source).get("autotp_size"),
        "tensor_parallel.autotp_size",
        source,
    )
    return _Degrees(
        tp=tp,
        etp=tp,
        pp=_degree(_section(data, "pipeline", source).get("stages"), "pipeline.stages", source),
        cp=_degree(data.get("sequence_parallel_size"), "sequence_parallel_size", source),
        recompute=("full" if _section(data, "activation_checkpointing", source) else "none"),
    )


def _from_flags(
    flags: megatron.Flags,
    data: dict,
    stage: int,
    source: str,
    out: list[Violation],
    num_layers: int,
) -> _Degrees:
    """Megatron-DeepSpeed's flags: the degrees, SP, recompute; its ZeRO/pipeline rules."""
    tp = flags.int("--tensor-model-parallel-size", 1)
    pp = flags.int("--pipeline-model-parallel-size", 1)
    no_pipe = flags.has("--no-pipeline-parallel")
    if no_pipe and pp > 1:
        out.append(
            Violation(
                "deepspeed-no-pipeline-parallel",
                f"--no-pipeline-parallel with --pipeline-model-parallel-size {pp}: "
                "without DeepSpeed's pipeline engine there is no pipeline; set it 1",
                "error",
            )
        )
    if stage >= 2 and not no_pipe:
        out.append(
            Violation(
                "deepspeed-pipeline-zero",
                f"ZeRO stage {stage} runs on DeepSpeed's pipeline engine, which takes "
                "stage 0 or 1 only; add --no-pipeline-parallel (pp 1) or use stage 1",
                "error",
            )
        )
    flag_stage = flags.int("--zero-stage")
    if flag_stage is not None and flag_stage != stage:
        out.append(
            Violation(
                "deepspeed-flags-mismatch",
                f"--zero-stage {flag_stage} differs from zero_optimization.stage "
                f"{stage} in the ds_config (the engine uses the ds_config); make them "
                "equal",
                "warning",
            )
        )
    sp = flags.has("--sequence-parallel")
    if sp and tp == 1:
        out.append(
            Violation(
                "deepspeed-sp-needs-tp",
                "--sequence-parallel with tensor-model-parallel-size 1 does nothing; drop the flag",
                "warning",
            )
        )
        sp = False
    _ulysses(flags, out)
    gran, _, num = read_recompute(flags, max(1, num_layers // max(1, pp)), out, "deepspeed")
    if gran == "none" and _section(data, "activation_checkpointing", source):
        gran = "full"
    return _Degrees(
        tp=tp,
        pp=pp,
        cp=flags.int("--ds-sequence-parallel-size", 1),
        ep=flags.int("--moe-expert-parallel-size", 1),
        etp=tp
        if flags.has("--enable-expert-tensor-parallelism") or not flags.has("--num-experts")
        else 1,
        sp=sp,
        recompute=gran,
        recompute_num_layers=num,
    )


_FPDT = (
    "--ds-sequence-parallel-fpdt",
    "--ds-sequence-parallel-fpdt-chunk-size",
    "--ds-sequence-parallel-fpdt-offloading",
)


def _ulysses(flags: megatron.Flags, out: list[Violation]) -> None:
    """DeepSpeed-Ulysses (--ds-sequence-parallel-size N; Jacobs et al. 2023, arXiv 2309.14509)
    splits the sequence over N ranks and exchanges heads with all-to-all: planned as cp N with
    cp_comm_type a2a. Megatron-DeepSpeed's parallel_state (microsoft/Megatron-DeepSpeed,
    megatron/core/parallel_state.py) takes the SP group out of the data-parallel ranks,
    DP = world / (tp * pp * sp), and reduces gradients over sp * dp, as cp does here. FPDT
    (its chunked, offloaded variant) is not modelled: a warning."""
    given = [f for f in _FPDT if flags.has(f)]
    if given:
        out.append(
            Violation(
                "deepspeed-fpdt-not-modelled",
                f"{' and '.join(given)}: DeepSpeed's FPDT (chunked, offloaded "
                "Ulysses attention) is not modelled; planner plans plain Ulysses "
                "(cp with all-to-all), so its activation memory is an upper bound",
                "warning",
            )
        )


def _flag_batch(flags: megatron.Flags, tbs: int, mbs: int, out: list[Violation]) -> None:
    """The ds_config batch keys are not derived from the flags: they must agree."""
    for flag, value, key in (
        ("--global-batch-size", tbs, "train_batch_size"),
        ("--micro-batch-size", mbs, "train_micro_batch_size_per_gpu"),
    ):
        given = flags.int(flag)
        if given is not None and given != value:
            out.append(
                Violation(
                    "deepspeed-flags-mismatch",
                    f"{flag} {given} differs from {key} {value} in the ds_config; make them equal",
                    "warning",
                )
            )


def _pipeline(
    model, pp: int, method: str, source: str, out: list[Violation]
) -> tuple[int | None, int | None]:
    """first/last_stage_layers as DeepSpeed's partitioner places the layers (None: even)."""
    if pp <= 1 or model.num_layers % pp == 0 and "embed" not in method:
        return None, None
    split = partition_split(model.num_layers, pp, method=method, tied=model.tied_embeddings)
    if split.note:
        out.append(Violation("deepspeed-pipeline-partition", split.note, "warning"))
    return split.first, split.last


def _bf16_optimizer(stage: int, precision: str, out: list[Violation]) -> int:
    """ZeRO stage 0 with bf16: DeepSpeed's BF16 optimizer shards fp32 states like ZeRO-1."""
    if stage == 0 and precision == "bf16":
        out.append(
            Violation(
                "deepspeed-bf16-optimizer",
                "zero_optimization.stage 0 with bf16: DeepSpeed runs its BF16 "
                "optimizer, which shards the fp32 master weights and Adam states "
                "over data parallelism like ZeRO-1; planned as zero 1",
                "warning",
            )
        )
        return 1
    return stage


def load(
    path: str | Path,
    data: Any,
    ov: Overrides,
    *,
    launch: str | None = None,
    launch_source: str | None = None,
    reading=None,
) -> Imported:
    """Read a parsed ds_config (a dict), with the Megatron-DeepSpeed launch text if any
    (`reading`: that launch, already read by `megatron.read_launch`)."""
    source = str(path)
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: a ds_config must be a JSON object; see DeepSpeed's docs", field="ds_config"
        )
    out: list[Violation] = []
    zero_cfg = _section(data, "zero_optimization", source)
    _check_keys(data, zero_cfg, out)
    stage = _stage(zero_cfg, source, out)
    hardware = hardware_of(ov)
    method = "type:transformer"
    if launch is None and reading is None:
        deg = _from_config(data, source)
        if deg.pp > 1 and stage >= 2:
            out.append(
                Violation(
                    "deepspeed-pipeline-zero",
                    f"pipeline.stages {deg.pp} with ZeRO stage {stage}: DeepSpeed's "
                    "pipeline engine supports ZeRO stage 0 or 1 only; use stage 1",
                    "error",
                )
            )
        model = model_of(ov, source=source, what="a ds_config has none")
        num_gpus = resolve_world(
            ov, hardware=hardware, source=source, missing="a ds_config has no world size"
        )
        seq = None
    else:
        where = launch_source or source
        found, flags, more = reading or megatron.read_launch(
            launch, where, check=False, prefix="deepspeed", ov=ov
        )
        out += more
        seq = flags.int("--seq-length")
        model = megatron.model_from_flags(flags, ov, where, seq, out, dialect="Megatron-DeepSpeed")
        deg = _from_flags(flags, data, stage, source, out, model.num_layers)
        method = flags.text("--pp-partition-method", method, fix="set it in the script")
        num_gpus = megatron.world_size(found, ov, hardware, where, out)
    dp = max(1, num_gpus // (deg.tp * deg.pp * deg.cp))
    tbs, mbs = _batch(data, dp, source, out, ov)
    if launch is not None or reading is not None:
        _flag_batch(flags, tbs, mbs, out)
    precision = _precision(data, source, out)
    first, last = _pipeline(model, deg.pp, method, source, out)
    layout = Layout(
        tp=deg.tp,
        pp=deg.pp,
        cp=deg.cp,
        dp=dp,
        ep=deg.ep,
        etp=deg.etp,
        sp=deg.sp,
        zero=_bf16_optimizer(stage, precision, out),
        micro_batch_size=mbs,
        recompute=deg.recompute,
        recompute_num_layers=deg.recompute_num_layers,
        first_stage_layers=first,
        last_stage_layers=last,
        cp_comm_type="a2a" if deg.cp > 1 else "p2p",
        overlap_grad_reduce=bool(zero_cfg.get("overlap_comm", False)),
        overlap_param_gather=bool(zero_cfg.get("overlap_comm", False)) and stage == 3,
    )
    job = make_job(
        model=model,
        hardware=hardware,
        num_gpus=num_gpus,
        seq_length=seq,
        global_batch_size=tbs,
        precision=precision,
        accounting="deepspeed",
        source=source,
    )
    return Imported(job, layout, out, "deepspeed", source)


def load_text(path: str | Path, text: str, ov: Overrides) -> Imported:
    """A ds_config.json; a launch script after the JSON object (planner's DeepSpeed export
    writes both in one text) is read as the Megatron-DeepSpeed command."""
    data, rest = parse_json(path, text, what="ds_config", trailing=True)
    note: list[Violation] = []
    if rest.strip():
        ov = _own_export_vocab(data, rest, ov, note)
    imported = load(path, data, ov, launch=rest if rest.strip() else None)
    imported.violations.extend(note)
    return imported


_OWN_VOCAB = re.compile(r"^# The vocabulary \((\d+)\) comes from the tokenizer", re.M)


def _own_export_vocab(data: Any, rest: str, ov: Overrides, out: list[Violation]) -> Overrides:
    """planner's own `--format deepspeed` export leaves the tokenizer to the user
    ($TOKENIZER_MODEL) and says the vocabulary in its header: read back, that is the model's
    (a note), unless --vocab-size or --model gives one."""
    comment = data.get("_comment") if isinstance(data, dict) else None
    first = comment[0] if isinstance(comment, list) and comment else comment
    m = _OWN_VOCAB.search(rest)
    if (
        not (isinstance(first, str) and first.startswith("Generated by planner") and m)
        or ov.vocab_size is not None
        or ov.model is not None
    ):
        return ov
    vocab = int(m.group(1))
    out.append(
        Violation(
            "deepspeed-export-vocabulary",
            f"planner's own DeepSpeed export: the vocabulary ({vocab:,}) is the one "
            "its header names (the tokenizer is $TOKENIZER_MODEL); give "
            "--vocab-size V for another",
            "warning",
        )
    )
    return replace(ov, vocab_size=vocab)


def load_script(path: str | Path, text: str, ov: Overrides) -> Imported:
    """A Megatron-DeepSpeed launch script: the ds_config it names (--deepspeed_config FILE):
    the one the script writes itself, else the file beside the script, then from the working
    directory; and its flags."""
    source = str(path)
    reading = megatron.read_launch(text, source, check=False, prefix="deepspeed", ov=ov)
    flags = reading[1]
    raw = next(
        (
            flags.values[f][0]
            for f in ("--deepspeed_config", "--deepspeed-config")
            if flags.values.get(f)
        ),
        None,
    )
    if raw is None:
        raise SpecError(
            f"{source}: a Megatron-DeepSpeed script without --deepspeed_config FILE; "
            "add it (planner reads the batch and ZeRO settings from there)",
            field="--deepspeed_config",
        )
    written, content = reading[0].script.file(raw)
    if written:
        return load(
            source,
            _written(source, raw, content, reading[0].script.missing),
            ov,
            launch_source=source,
            reading=reading,
        )
    name = flags.text(
        "--deepspeed_config", fix="name the ds_config file in the script"
    ) or flags.text("--deepspeed-config", fix="name the ds_config file in the script")
    candidates = [Path(source).parent / name, Path(name)]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise SpecError(
            f"{source}: --deepspeed_config {name} not found (looked in "
            f"{', '.join(str(c) for c in candidates)}); put the ds_config there",
            field="--deepspeed_config",
            value=name,
        )
    data = parse_json(found, read_text(found, what="ds_config"), what="ds_config")
    return load(found, data, ov, launch_source=source, reading=reading)


def _written(source: str, raw: str, content: str | None, missing: list[str]) -> Any:
    """The ds_config a script writes itself, parsed; one error naming what is missing (the
    template file a `sed ... TEMPLATE > FILE` fills, when it is not beside the script)."""
    shown = shell.display(raw)
    if content is None and missing:
        name = shell.display(missing[0])
        where = Path(source).parent / name
        raise SpecError(
            f"{source}: the script fills its ds_config {shown} from the template "
            f"file {name}, which is not beside the script (looked for {where} and "
            f"{name} in the working directory); put the template there or validate "
            "the generated ds_config.json with --model and --gpus",
            field="--deepspeed_config",
            value=name,
        )
    if content is None:
        raise SpecError(
            f"{source}: the script writes its ds_config {shown} with a command "
            "planner does not run; write it with a here-document (cat <<EOT > FILE) "
            "or validate the generated ds_config.json with --model and --gpus",
            field="--deepspeed_config",
            value=shown,
        )
    names = shell.unresolved_names(content)
    if names:
        raise SpecError(
            f"{source}: the ds_config the script writes ({shown}) {shell.why(names)};"
            " set them in the script or give --set NAME=VALUE",
            field="--deepspeed_config",
            value=shown,
        )
    return parse_json(shown, content, what="the ds_config written by the script as")
