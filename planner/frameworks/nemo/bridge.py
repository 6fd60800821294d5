"""Megatron-Bridge: a `ConfigContainer` written as YAML (`ConfigContainer.to_yaml()`, or a
recipe's YAML override file) -> Job + Layout (format `megatron-bridge`).

Sections (Megatron-Bridge 0.6.2 megatron/bridge/training/config.py): `model` (a
GPTModelProvider: Megatron-Core's TransformerConfig and ModelParallelConfig fields, the
parallel sizes among them, plus `seq_length`, `vocab_size`, `rotary_base` ...; or a provider
class with no shape keys, e.g. Llama3ModelProvider70B, when it is a planner preset), `train`
(`micro_batch_size`, `global_batch_size`), `dataset` (`seq_length`, which must equal the
model's), `ddp` (DistributedDataParallelConfig: `grad_reduce_in_fp32`, `use_megatron_fsdp`,
`data_parallel_sharding_strategy`, overlap flags), `optimizer` (OptimizerConfig:
`use_distributed_optimizer`, `exp_avg_dtype`, `exp_avg_sq_dtype`) and `mixed_precision`
(a recipe name such as `bf16_with_fp8_current_scaling_mixed`, or a MixedPrecisionConfig
mapping; it sets `grad_reduce_in_fp32` over the ddp section's, as Megatron-Bridge does).

A partial override file (a performance or override YAML: some of those sections, no model
shape) is read over --model: a whole ConfigContainer YAML there (a recipe written out with
`to_yaml()`) is the recipe the file overrides (merged mapping by mapping, as OmegaConf.merge
does); a preset, model YAML or config.json gives the model only, and the keys it does not set take
ConfigContainer's defaults, not a recipe's (a warning says so; planner has no Bridge recipes).
The file has no world size (torchrun's): --gpus/--nodes give it. Unknown keys in the top
level, `train`, `ddp`, `optimizer` and `mixed_precision` are warnings (Bridge's dataclasses
name every field; `model` holds provider-specific fields and is not checked key by key).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.errors import SpecError, Violation, short
from planner.frameworks.common import (
    Imported,
    Overrides,
    hardware_of,
    make_job,
    resolve_world,
    unknown_key,
)
from planner.frameworks.nemo import mcore
from planner.frameworks.nemo.mcore import Settings, as_bool, as_int
from planner.io import read_yaml
from planner.layout import Layout
from planner.readers.omegaconf import Unresolved

__all__ = ["looks_like_bridge", "load"]

# Megatron-Bridge model providers that are planner presets
_PRESETS = {
    "llama3modelprovider8b": "llama3-8b",
    "llama3modelprovider70b": "llama3-70b",
    "llama31modelprovider8b": "llama3-8b",
    "llama31modelprovider70b": "llama3-70b",
    "llama31modelprovider405b": "llama3-405b",
    "llama2modelprovider7b": "llama2-7b",
    "llama2modelprovider13b": "llama2-13b",
    "llama2modelprovider70b": "llama2-70b",
    "mixtralmodelprovider8x7b": "mixtral-8x7b",
    "mixtralmodelprovider8x22b": "mixtral-8x22b",
    "deepseekv3modelprovider": "deepseek-v3",
    "qwen3moemodelprovider235b_a22b": "qwen3-235b-a22b",
    "gemma3modelprovider12b": "gemma-3-12b",
    "gemma3modelprovider27b": "gemma-3-27b",
}
_SECTIONS = ("train", "ddp", "optimizer", "mixed_precision")


# ConfigContainer sections a planner config never has (ours: model, hardware, num_gpus,
# training, parallel): one of them at the top level makes a (partial) Bridge file
_BRIDGE_ONLY = (
    "train",
    "ddp",
    "optimizer",
    "mixed_precision",
    "comm_overlap",
    "dataset",
    "scheduler",
    "checkpoint",
    "logger",
    "dist",
    "rng",
    "profiling",
    "tokenizer",
    "peft",
    "validation",
)
_PLANNER_ONLY = ("num_gpus", "parallel", "training", "hardware", "trainer")


def looks_like_bridge(data: Any) -> bool:
    """`model:` and `train:` mappings at the top level and no `trainer:` (NeMo's); or a partial
    override file (a performance or override YAML: some ConfigContainer sections, no planner or
    NeMo keys), read over the --model it overrides."""
    if not isinstance(data, dict) or "trainer" in data:
        return False
    if isinstance(data.get("model"), dict) and isinstance(data.get("train"), dict):
        return True
    return (
        any(k in data for k in _BRIDGE_ONLY)
        and not any(k in data for k in _PLANNER_ONLY)
        and all(isinstance(v, (dict, str)) or v is None for v in data.values())
    )


def _full(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("model"), dict)
        and isinstance(data.get("train"), dict)
    )


def _merge(base: dict, over: dict) -> dict:
    """`over` on top of `base`, mapping by mapping (as OmegaConf.merge does)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


def recipe_under(data: Any, ov: Overrides, *, base: Path):
    """An override file whose --model is a whole ConfigContainer YAML (a recipe written out
    with to_yaml()): (the override merged over it, the options without --model, a note);
    None otherwise (--model is then a preset, model YAML or config.json)."""
    model = data.get("model") if isinstance(data, dict) else None
    shaped = isinstance(model, dict) and any(model.get(k) for k in ("num_layers", "hidden_size"))
    if (
        ov.model is None
        or shaped
        or not looks_like_bridge(data)
        or not ov.model.lower().endswith((".yaml", ".yml"))
    ):
        return None
    path = Path(ov.model)
    if not path.is_absolute() and not path.is_file() and (base / path).is_file():
        path = base / path
    if not path.is_file():
        return None
    recipe = read_yaml(path, what="Megatron-Bridge recipe")
    if not _full(recipe):
        return None
    note = Violation(
        "bridge-overrides",
        f"read as Megatron-Bridge overrides of the recipe {short(str(path), 80)} "
        f"(--model): the file's {', '.join(map(str, data))} merged over it",
        "warning",
    )
    return _merge(recipe, data), replace(ov, model=None), [note]


def _override_note(data: dict, model: dict, ov: Overrides, out: list[Violation]) -> None:
    """A file that is not a whole ConfigContainer (no model shape of its own): the overrides
    of --model; what it leaves out takes ConfigContainer's defaults, not a recipe's."""
    if ov.model is None or any(model.get(k) for k in ("num_layers", "hidden_size")):
        return
    missing = [k for k in ("train", "ddp", "optimizer", "mixed_precision") if k not in data]
    said = f" (no {', '.join(missing)} section{'s' if len(missing) > 1 else ''})" if missing else ""
    out.append(
        Violation(
            "bridge-overrides",
            f"read as Megatron-Bridge overrides of --model {ov.model}{said}: the "
            "keys the file does not set take ConfigContainer's defaults (tp/pp/cp "
            "1, micro batch 1, no distributed optimizer, bf16_mixed), not a "
            "recipe's (planner has no Bridge recipes); give the recipe's values "
            "in the file",
            "warning",
        )
    )


def _map(data: dict, key: str) -> dict:
    value = data.get(key)
    if isinstance(value, Unresolved):
        value.fail()
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(
            f"{key} must be a mapping, got {type(value).__name__}; fix the file", field=key
        )
    return value


def _check_keys(data: dict, out: list[Violation]) -> None:
    lists = {
        "train": mcore.key_list("bridge_train"),
        "ddp": mcore.key_list("ddp_config"),
        "optimizer": mcore.key_list("optimizer_config"),
        "mixed_precision": mcore.key_list("bridge_mixed_precision"),
    }
    top = mcore.key_list("bridge_container") | {"_target_"}
    for key in data:
        if key not in top:
            out.append(
                unknown_key(
                    "bridge-unknown-key",
                    str(key),
                    top,
                    severity="warning",
                    consequence="ConfigContainer has no such section",
                )
            )
    for name, known in lists.items():
        section = data.get(name)
        for key in section if isinstance(section, dict) else ():
            if key not in known and key != "_target_":
                out.append(
                    unknown_key(
                        "bridge-unknown-key",
                        f"{name}.{key}",
                        known,
                        severity="warning",
                        consequence="Megatron-Bridge has no such field; remove it or fix the name",
                    )
                )


def _precision(data: dict, out: list[Violation]) -> tuple[str, Settings]:
    mp = data.get("mixed_precision")
    if isinstance(mp, Unresolved):
        mp.fail()
    if mp is None:
        return "bf16", Settings()  # ConfigContainer's default: bf16_mixed
    if isinstance(mp, str):
        return mcore.precision_recipe(mp, where="mixed_precision", prefix="bridge", out=out)
    if not isinstance(mp, dict):
        raise SpecError(
            f"mixed_precision = {mp!r} must be a recipe name or a mapping",
            field="mixed_precision",
            value=mp,
        )
    fp8 = mp.get("fp8") not in (None, False, "", "none")
    if as_bool(mp, "fp16", False, where="mixed_precision"):
        precision = "fp8" if fp8 else "fp16"
    else:
        precision = "fp8" if fp8 else "bf16"
    if mp.get("fp4") not in (None, False, ""):
        out.append(
            Violation(
                "bridge-not-modelled",
                "mixed_precision.fp4: planner does not model "
                "NVFP4 training; planned as fp8 blockwise",
                "warning",
            )
        )
        precision = "fp8"
    s = mcore.fp8_settings(
        mp, where="mixed_precision", prefix="bridge", fp8=precision == "fp8", out=out
    )
    if mp.get("fp4") not in (None, False, ""):
        s.training.update(fp8_recipe="blockwise")
    s.layout["grad_reduce_in_fp32"] = as_bool(
        mp, "grad_reduce_in_fp32", True, where="mixed_precision"
    )
    return precision, s


def _zero(ddp: dict, optimizer: dict) -> tuple[int, Settings]:
    zero, s = mcore.read_ddp(ddp, where="ddp")
    if zero in (None, 0) and as_bool(
        optimizer, "use_distributed_optimizer", False, where="optimizer"
    ):
        zero = 1
    return zero or 0, s


def load(source: str, data: dict, ov: Overrides) -> Imported:
    """Read a resolved Megatron-Bridge ConfigContainer mapping."""
    from planner.frameworks.nemo.reader import checked, mcore_model, split, target

    out: list[Violation] = []
    _check_keys(data, out)
    model, train, ddp = _map(data, "model"), _map(data, "train"), _map(data, "ddp")
    optimizer, dataset = _map(data, "optimizer"), _map(data, "dataset")
    seq = as_int(dataset, "seq_length", None, where="dataset") or as_int(
        dataset, "sequence_length", None, where="dataset"
    )
    model_seq = as_int(model, "seq_length", None, where="model")
    if seq and model_seq and seq != model_seq:
        out.append(
            Violation(
                "bridge-seq-length-mismatch",
                f"model.seq_length ({model_seq}) must equal dataset.seq_length "
                f"({seq}) (Megatron-Bridge asserts)",
                "error",
            )
        )
    hardware = hardware_of(ov)
    _override_note(data, model, ov, out)
    if ov.model is None:  # a Mamba provider class refuses before the shape check
        mcore.unpriced(model, where="model", source=source, out=[], fmt="Megatron-Bridge")
    if (
        ov.model is None
        and not any(model.get(k) for k in ("num_layers", "hidden_size"))
        and not _PRESETS.get(target(model))
    ):
        raise SpecError(
            f"{source}: a Megatron-Bridge override file without a model shape; give "
            "--model NAME (the preset, model YAML or HF config.json of the recipe "
            "it overrides)",
            field="model",
        )
    spec = mcore_model(
        model,
        ov,
        source,
        seq,
        preset=_PRESETS.get(target(model)),
        fmt="Megatron-Bridge",
        where="model",
        out=out,
    )
    num_gpus = resolve_world(
        ov, hardware=hardware, source=source, missing="a Megatron-Bridge config has no world size"
    )
    precision, prec = _precision(data, out)
    w = "model"
    tp = as_int(model, "tensor_model_parallel_size", 1, where=w)
    pp = as_int(model, "pipeline_model_parallel_size", 1, where=w)
    cp = as_int(model, "context_parallel_size", 1, where=w)
    s = mcore.read_recompute(
        model,
        names=("recompute_granularity", "recompute_method", "recompute_num_layers"),
        where=w,
        rule="bridge-recompute-flags",
        out=out,
    )
    s.update(
        mcore.read_transformer(
            model,
            where=w,
            prefix="bridge",
            num_layers=spec.num_layers,
            pp=pp,
            recompute=s.layout["recompute"],
            fp8=precision == "fp8",
            out=out,
        )
    )
    zero, ddp_settings = _zero(ddp, optimizer)
    s.update(ddp_settings).update(prec)
    s.update(mcore.read_optimizer(optimizer, where="optimizer", prefix="bridge", out=out))
    vpp = as_int(model, "virtual_pipeline_model_parallel_size", 1, where=w)
    first, last = split(model, num_layers=spec.num_layers, pp=pp, vpp=vpp, where=w, out=out)
    sp = as_bool(model, "sequence_parallel", False, where=w)
    if sp and tp == 1:
        out.append(
            Violation(
                "nemo-sp-needs-tp",
                "model.sequence_parallel with "
                "tensor_model_parallel_size 1: Megatron-Bridge "
                "raises; set sequence_parallel false",
                "error",
            )
        )
        sp = False
    s.layout.setdefault("overlap_grad_reduce", False)
    s.layout.setdefault("overlap_param_gather", False)
    layout = Layout(
        tp=tp,
        pp=pp,
        cp=cp,
        dp=max(1, num_gpus // (tp * pp * cp)),
        ep=as_int(model, "expert_model_parallel_size", 1, where=w),
        etp=as_int(model, "expert_tensor_parallel_size", tp, where=w),
        vpp=vpp,
        sp=sp,
        zero=zero,
        micro_batch_size=as_int(train, "micro_batch_size", 1, where="train"),
        first_stage_layers=first,
        last_stage_layers=last,
        cp_comm_type=str(model.get("cp_comm_type") or "p2p"),
        tp_comm_overlap=as_bool(
            _map(data, "comm_overlap"), "tp_comm_overlap", False, where="comm_overlap"
        ),
        **s.layout,
    )
    if s.model:
        spec = spec.model_copy(update=s.model)
    job = make_job(
        model=spec,
        hardware=hardware,
        num_gpus=num_gpus,
        seq_length=seq or spec.seq_length,
        global_batch_size=as_int(train, "global_batch_size", None, where="train"),
        precision=precision,
        source=source,
        **s.training,
    )
    return Imported(job, checked(layout, source), out, "megatron-bridge", source)
