"""What NeMo 1, NeMo 2 and Megatron-Bridge files share: Megatron-Core's own config names.

All three pass a mapping of Megatron-Core `TransformerConfig` fields (NeMo 1 `model.*`, NeMo 2
`model.config.*`, Megatron-Bridge `model.*`), of `DistributedDataParallelConfig` fields and of
`OptimizerConfig` fields to Megatron-Core. This module owns the key lists
(`planner/frameworks/nemo/nemo_keys.yaml`, with their sources and versions) and reads the production
recipe settings from those mappings into the Layout / Job fields of the same names:

- recompute: `recompute_granularity/method/num_layers` (NeMo 1: `activations_checkpoint_*`),
  `recompute_modules`; method block with N layers = `recompute_num_layers` N;
- `cpu_offloading` + `cpu_offloading_num_layers` (activations; `cpu_offloading_weights` is a
  warning: not modelled);
- `moe_token_dispatcher_type` (+ `moe_flex_dispatcher_backend`, `moe_enable_deepep`),
  `overlap_moe_expert_parallel_comm`;
- CUDA graphs: `cuda_graph_impl` (`local`/`transformer_engine` = partial, `full_iteration` or
  scope/modules `full_iteration` = full), the older `enable_cuda_graph` / `external_cuda_graph`;
- `pipeline_model_parallel_layout`, `mtp_num_layers`, `fp8_recipe`, `fp8_param_gather`;
- DDP: `grad_reduce_in_fp32`, `use_megatron_fsdp` + `data_parallel_sharding_strategy`
  (no_shard / optim / optim_grads / optim_grads_params = ZeRO 0-3), the overlap flags;
- optimizer: `exp_avg_dtype`, `exp_avg_sq_dtype` (with `use_precision_aware_optimizer`, which
  Megatron-Core requires for anything but fp32).

Megatron-Core's own checks on these are errors (`<prefix>-recompute-flags`,
`<prefix>-cpu-offloading`, `<prefix>-precision-aware-optimizer`); a known setting that changes
memory or time and that planner does not model is a warning naming it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from planner.errors import SpecError, Violation
from planner.fields import ROUTER_SCORES
from planner.frameworks.common import (
    NOT_WRITTEN_KEYS,
    NOT_WRITTEN_MESSAGE,
    UNPRICED_KEYS,
    UNPRICED_MESSAGE,
)
from planner.readers.omegaconf import Unresolved

__all__ = [
    "key_list",
    "known_keys",
    "Settings",
    "read_recompute",
    "read_transformer",
    "window_fields",
    "read_ddp",
    "read_optimizer",
    "precision_recipe",
    "RECIPES",
    "as_bool",
    "as_int",
]

_KEYS_FILE = Path(__file__).resolve().parent / "nemo_keys.yaml"


@lru_cache(maxsize=1)
def _lists() -> dict[str, frozenset[str]]:
    data = yaml.load(
        _KEYS_FILE.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    return {k: frozenset(v) for k, v in data.items() if isinstance(v, list)}


def key_list(name: str) -> frozenset[str]:
    """One list of planner/frameworks/nemo/nemo_keys.yaml (e.g. "transformer_config")."""
    return _lists()[name]


def known_keys(*names: str) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for name in names:
        out |= key_list(name)
    return out


# ------------------------------------------------------------------------- value readers


def as_bool(section: dict, key: str, default: bool, *, where: str) -> bool:
    value = section.get(key, default)
    if isinstance(value, Unresolved):
        value.fail()
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise SpecError(
        f"{where}.{key} = {value!r} must be true or false; fix the value",
        field=f"{where}.{key}",
        value=value,
    )


def qk_fields(config: dict, *, where: str) -> dict[str, Any]:
    """{qk_norm: ...} where a TransformerConfig-named mapping states qk_layernorm or qk_l2_norm
    (empty where it states neither: the model's or the preset's stays): head (an RMSNorm per
    query / key head), l2 (Llama 4's weightless L2 norm) or none; both true is an error."""
    if not {"qk_layernorm", "qk_l2_norm"} & set(config):
        return {}
    head = as_bool(config, "qk_layernorm", False, where=where)
    l2 = as_bool(config, "qk_l2_norm", False, where=where)
    if head and l2:
        raise SpecError(
            f"{where}.qk_layernorm and {where}.qk_l2_norm are both true; Megatron-Core applies "
            "one query / key norm: keep one",
            field=f"{where}.qk_l2_norm",
            value=True,
        )
    return {"qk_norm": "head" if head else "l2" if l2 else "none"}


def as_number(section: dict, key: str, *, where: str) -> float | None:
    """A real-valued key (a finite int or float); absent or null is None."""
    value = section.get(key)
    if isinstance(value, Unresolved):
        value.fail()
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        hint = " (a number, not a quoted string)" if isinstance(value, str) else ""
        raise SpecError(
            f"{where}.{key} = {value!r} must be a number{hint}; fix the value",
            field=f"{where}.{key}",
            value=value,
        )
    return float(value)


def as_int(
    section: dict,
    key: str,
    default: int | None,
    *,
    where: str,
    minimum: int = 1,
    maximum: int = 10_000_000,
) -> int | None:
    """An integer key; a numeric string ("8") is an error as Megatron-Core's dataclasses
    reject it too (they compare it with numbers)."""
    value = section.get(key)
    if isinstance(value, Unresolved):
        value.fail()
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        hint = " (a number, not a quoted string)" if isinstance(value, str) else ""
        raise SpecError(
            f"{where}.{key} = {value!r} must be an integer{hint}; fix the value",
            field=f"{where}.{key}",
            value=value,
        )
    if not minimum <= value <= maximum:
        raise SpecError(
            f"{where}.{key} = {value} must be between {minimum} and {maximum}; fix the value",
            field=f"{where}.{key}",
            value=value,
        )
    return value


def _text(section: dict, key: str, *, where: str) -> str | None:
    value = section.get(key)
    if isinstance(value, Unresolved):
        value.fail()
    if value is None:
        return None
    if not isinstance(value, str):
        raise SpecError(
            f"{where}.{key} = {value!r} must be a string; fix the value",
            field=f"{where}.{key}",
            value=value,
        )
    return value


@dataclass
class Settings:
    """Layout and training fields read from a file (only what it says)."""

    layout: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)

    def update(self, other: Settings) -> Settings:
        self.layout.update(other.layout)
        self.training.update(other.training)
        self.model.update(other.model)
        return self


# ------------------------------------------------------------------------------ recompute

_MODULES = ("core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts")
_MCORE_ONLY_MODULES = ("gdn_norm_out",)


def read_recompute(
    section: dict, *, names: tuple[str, str, str], where: str, rule: str, out: list[Violation]
) -> Settings:
    """Megatron-Core's recompute fields (names: granularity, method, num_layers keys) with its
    checks (errors); recompute_modules with selective."""
    gran = _text(section, names[0], where=where)
    method = _text(section, names[1], where=where)
    layers = as_int(section, names[2], None, where=where, minimum=0)
    g, m, n = (f"{where}.{k}" for k in names)
    if gran is not None and gran not in ("full", "selective"):
        out.append(Violation(rule, f"{g} {gran!r} must be full, selective or null", "error"))
        return Settings({"recompute": "none"})
    if gran == "full" and (method is None or layers is None):
        missing = " and ".join(k for k, v in ((m, method), (n, layers)) if v is None)
        out.append(
            Violation(
                rule,
                f"{g} full also needs {missing} (Megatron-core raises); e.g. uniform and 1",
                "error",
            )
        )
    if gran == "full" and method is not None and method not in ("uniform", "block"):
        out.append(Violation(rule, f"{m} {method!r} must be uniform or block", "error"))
    if gran == "selective" and layers is not None:
        out.append(
            Violation(
                rule, f"{g} selective forbids {n} (Megatron-core raises); set it to null", "error"
            )
        )
    s = Settings({"recompute": gran or "none"})
    if gran == "full" and method == "block" and layers is not None:
        s.layout["recompute_num_layers"] = layers
    modules = section.get("recompute_modules")
    if isinstance(modules, Unresolved):
        modules.fail()
    if modules is not None and gran == "selective":
        s.layout["recompute_modules"] = _modules(
            modules, where=f"{where}.recompute_modules", rule=rule, out=out
        )
    return s


def _modules(value: Any, *, where: str, rule: str, out: list[Violation]) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise SpecError(
            f"{where} = {value!r} must be a list of module names; fix the value",
            field=where,
            value=value,
        )
    kept = []
    for name in items:
        if name in _MODULES:
            kept.append(name)
        elif name in _MCORE_ONLY_MODULES:
            out.append(
                Violation(
                    f"{rule.split('-')[0]}-not-modelled",
                    f"{where} {name!r}: planner does not model it (its "
                    "activations are counted as kept)",
                    "warning",
                )
            )
        else:
            out.append(
                Violation(
                    rule,
                    f"{where} {name!r} is not a module Megatron-Core "
                    f"recomputes ({', '.join(_MODULES)}); fix the name",
                    "error",
                )
            )
    return tuple(dict.fromkeys(kept))


# ------------------------------------------------------------------- TransformerConfig keys

_DISPATCHERS = {"alltoall": "alltoall", "allgather": "allgather"}
_FLEX = {"deepep": "deepep", "hybridep": "hybridep"}


NOT_MODELLED = {
    "fp8_dot_product_attention": (False, "FP8 attention"),
    "fp8_multi_head_attention": (False, "FP8 attention"),
    "fp32_residual_connection": (False, "fp32 residual stream"),
    "cross_entropy_fusion_impl": (
        "native",
        "Transformer Engine's cross-entropy in place on the bf16 logits (less memory than counted)",
    ),
    "distribute_saved_activations": (False, "recompute inputs split over the TP ranks"),
    "delay_wgrad_compute": (False, "weight gradients delayed for EP overlap"),
    "moe_shared_expert_overlap": (False, "shared experts overlapped with the dispatch"),
    "defer_embedding_wgrad_compute": (
        False,
        "the output layer's weight gradient deferred to the pipeline flush",
    ),
}
"""TransformerConfig fields (Megatron-Core) that change memory or time and that the cost model
does not apply, with the value that changes nothing (Megatron-LM's flags of the same names
are in recipe.NOT_MODELLED)."""


def warn_not_modelled(
    section: dict, table: dict, *, where: str, rule: str, out: list[Violation]
) -> None:
    """A `rule` warning for each key of `table` that `section` sets to anything but its
    neutral value (None stands for an empty list or False too)."""
    for key, (neutral, what) in table.items():
        value = section.get(key, neutral)
        if (
            isinstance(value, Unresolved)
            or value == neutral
            or (value is None and neutral in ([], False))
        ):
            continue
        out.append(
            Violation(
                rule, f"{where}.{key} = {value!r}: planner does not model it ({what})", "warning"
            )
        )


def read_transformer(
    tc: dict,
    *,
    where: str,
    prefix: str,
    num_layers: int,
    pp: int,
    recompute: str,
    fp8: bool,
    out: list[Violation],
) -> Settings:
    """Offloading, MoE dispatch, CUDA graphs, pipeline layout, MTP and FP8 recipe from a
    TransformerConfig-named mapping; the fields of NOT_MODELLED it sets are warnings."""
    warn_not_modelled(tc, NOT_MODELLED, where=where, rule=f"{prefix}-not-modelled", out=out)
    s = Settings()
    s.update(
        _offloading(
            tc,
            where=where,
            prefix=prefix,
            num_layers=num_layers,
            pp=pp,
            recompute=recompute,
            out=out,
        )
    )
    s.update(_dispatcher(tc, where=where, prefix=prefix, out=out))
    if "overlap_moe_expert_parallel_comm" in tc:
        s.layout["overlap_moe_expert_parallel_comm"] = as_bool(
            tc, "overlap_moe_expert_parallel_comm", False, where=where
        )
    if "moe_pad_expert_input_to_capacity" in tc:
        s.layout["moe_pad_expert_input_to_capacity"] = as_bool(
            tc, "moe_pad_expert_input_to_capacity", False, where=where
        )
    if "activation_func_fp8_input_store" in tc:
        s.layout["activation_func_fp8_input_store"] = as_bool(
            tc, "activation_func_fp8_input_store", False, where=where
        )
    graphs = cuda_graphs(tc, where=where)
    if graphs is not None:
        s.layout["cuda_graphs"] = graphs
    layout = tc.get("pipeline_model_parallel_layout")
    if isinstance(layout, Unresolved):
        layout.fail()
    if layout is not None:
        if not isinstance(layout, str):
            raise SpecError(
                f"{where}.pipeline_model_parallel_layout = {layout!r}: planner reads "
                "the string form (e.g. 'Et*4|(t*4|)*14tmL'); write it as a string",
                field=f"{where}.pipeline_model_parallel_layout",
                value=layout,
            )
        s.layout["pipeline_model_parallel_layout"] = layout
    mtp = as_int(tc, "mtp_num_layers", None, where=where, minimum=0, maximum=100)
    if mtp is not None:
        s.model["mtp_num_layers"] = mtp
    s.update(fp8_settings(tc, where=where, prefix=prefix, fp8=fp8, out=out))
    return s


def _offloading(
    tc: dict,
    *,
    where: str,
    prefix: str,
    num_layers: int,
    pp: int,
    recompute: str,
    out: list[Violation],
) -> Settings:
    s = Settings()
    if as_bool(tc, "fine_grained_activation_offloading", False, where=where):
        out.append(
            Violation(
                f"{prefix}-not-modelled",
                f"{where}.fine_grained_activation_offloading: planner does not "
                "model it (activations are counted on the GPU)",
                "warning",
            )
        )
    if not as_bool(tc, "cpu_offloading", False, where=where):
        return s
    n = as_int(tc, "cpu_offloading_num_layers", 0, where=where, minimum=-10_000_000)
    rule = f"{prefix}-cpu-offloading"
    if not 0 <= n < num_layers:
        out.append(
            Violation(
                rule,
                f"{where}.cpu_offloading_num_layers ({n}) must be between 0 "
                f"and num_layers - 1 ({num_layers - 1}) (Megatron-Core "
                "raises)",
                "error",
            )
        )
    if pp > 1:
        out.append(
            Violation(
                rule,
                f"{where}.cpu_offloading with pipeline_model_parallel_size "
                f"{pp}: Megatron-Core has no CPU offloading with pipeline "
                "parallelism; set pp 1 or cpu_offloading false",
                "error",
            )
        )
    if recompute != "none":
        out.append(
            Violation(
                rule,
                f"{where}.cpu_offloading with recompute {recompute}: "
                "Megatron-Core does not offload when activations are "
                "recomputed; choose one",
                "error",
            )
        )
    if as_bool(tc, "cpu_offloading_weights", False, where=where):
        out.append(
            Violation(
                f"{prefix}-not-modelled",
                f"{where}.cpu_offloading_weights: planner does not model weight "
                "offloading (weights are counted on the GPU)",
                "warning",
            )
        )
    if as_bool(tc, "cpu_offloading_activations", True, where=where) and 0 <= n < num_layers:
        s.layout["cpu_offloading_num_layers"] = n
    return s


def _dispatcher(tc: dict, *, where: str, prefix: str, out: list[Violation]) -> Settings:
    kind = _text(tc, "moe_token_dispatcher_type", where=where)
    deepep = as_bool(tc, "moe_enable_deepep", False, where=where)
    if kind is None and not deepep:
        return Settings()
    if deepep or kind == "flex":
        backend = _text(tc, "moe_flex_dispatcher_backend", where=where) or "deepep"
        if deepep and kind not in (None, "flex"):
            out.append(
                Violation(
                    f"{prefix}-moe-dispatcher",
                    f"{where}.moe_enable_deepep needs moe_token_dispatcher_type "
                    f"flex, not {kind!r} (Megatron-Core raises)",
                    "error",
                )
            )
        if backend not in _FLEX:
            out.append(
                Violation(
                    f"{prefix}-not-modelled",
                    f"{where}.moe_flex_dispatcher_backend {backend!r}: planner "
                    "models deepep and hybridep; timed as alltoall",
                    "warning",
                )
            )
            return Settings({"moe_token_dispatcher": "alltoall"})
        return Settings({"moe_token_dispatcher": _FLEX[backend]})
    if kind not in _DISPATCHERS:
        raise SpecError(
            f"{where}.moe_token_dispatcher_type = {kind!r} must be allgather, "
            "alltoall or flex; fix the value",
            field=f"{where}.moe_token_dispatcher_type",
            value=kind,
        )
    return Settings({"moe_token_dispatcher": _DISPATCHERS[kind]})


def cuda_graphs(tc: dict, *, where: str) -> str | None:
    """none | partial | full from cuda_graph_impl/scope/modules or the older booleans; None
    when the mapping says nothing about CUDA graphs."""
    impl = _text(tc, "cuda_graph_impl", where=where)
    scope = tc.get("cuda_graph_scope", tc.get("cuda_graph_modules"))
    if isinstance(scope, Unresolved):
        scope.fail()
    scopes = scope if isinstance(scope, list) else [scope]
    full_scope = any(str(x) in ("full_iteration", "full_iteration_inference") for x in scopes)
    if impl is not None:
        if impl not in ("none", "local", "transformer_engine", "full_iteration"):
            raise SpecError(
                f"{where}.cuda_graph_impl = {impl!r} must be none, local, "
                "transformer_engine or full_iteration; fix the value",
                field=f"{where}.cuda_graph_impl",
                value=impl,
            )
        if impl == "none":
            return "none"
        return "full" if impl == "full_iteration" or (impl == "local" and full_scope) else "partial"
    if as_bool(tc, "enable_cuda_graph", False, where=where):
        return "full" if full_scope else "partial"
    if as_bool(tc, "external_cuda_graph", False, where=where):
        return "partial"
    return None


# -------------------------------------------------------------------------------- FP8

_FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")


def fp8_settings(
    section: dict, *, where: str, prefix: str, fp8: bool, out: list[Violation]
) -> Settings:
    """fp8_recipe and fp8_param_gather (fp8_params, its older name) where fp8 is on."""
    s = Settings()
    recipe = _text(section, "fp8_recipe", where=where)
    gather = None
    for key in ("fp8_param_gather", "fp8_params", "fp8_param"):
        if section.get(key) is not None:
            gather = as_bool(section, key, False, where=where)
            break
    if not fp8:
        if gather:
            out.append(
                Violation(
                    f"{prefix}-fp8-off",
                    f"{where}.fp8_param_gather without fp8: it has no effect; "
                    "remove it or enable fp8",
                    "warning",
                )
            )
        return s
    if recipe is not None:
        if recipe in _FP8_RECIPES:
            s.training["fp8_recipe"] = recipe
        else:
            out.append(
                Violation(
                    f"{prefix}-not-modelled",
                    f"{where}.fp8_recipe {recipe!r}: planner models delayed, "
                    "tensorwise, mxfp8 and blockwise; timed as delayed",
                    "warning",
                )
            )
    if gather is not None:
        s.training["fp8_param_gather"] = gather
    if as_bool(section, "first_last_layers_bf16", False, where=where):
        out.append(
            Violation(
                f"{prefix}-not-modelled",
                f"{where}.first_last_layers_bf16: planner times every layer in fp8 "
                "(the bf16 layers are slower)",
                "warning",
            )
        )
    return s


# (precision, fp8_recipe, fp8_param_gather, grad_reduce_in_fp32) of the named mixed-precision
# recipes: Megatron-Bridge megatron/bridge/training/mixed_precision.py (0.6.2) and NeMo 2
# nemo/collections/llm/recipes/precision/mixed_precision.py (2.4.0).
RECIPES: dict[str, tuple[str, str | None, bool, bool]] = {
    "bf16_mixed": ("bf16", None, False, True),
    "fp16_mixed": ("fp16", None, False, False),
    "bf16_with_fp8_mixed": ("fp8", "delayed", True, True),
    "bf16_with_fp8_delayed_scaling_mixed": ("fp8", "delayed", True, True),
    "bf16_with_mxfp8_mixed": ("fp8", "mxfp8", True, True),
    "bf16_with_fp8_current_scaling_mixed": ("fp8", "tensorwise", True, True),
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": ("fp8", "tensorwise", True, True),
    "nanov2_bf16_with_fp8_current_scaling_mixed": ("fp8", "blockwise", True, True),
    "bf16_with_fp8_subchannel_scaling_mixed": ("fp8", "blockwise", False, True),
}
_FP16_FP8 = (
    "fp16_with_fp8_mixed",
    "fp16_with_fp8_delayed_scaling_mixed",
    "fp16_with_mxfp8_mixed",
    "fp16_with_fp8_current_scaling_mixed",
    "fp16_with_fp8_subchannel_scaling_mixed",
)
_FP4 = (
    "bf16_with_nvfp4_mixed",
    "nemotron_3_super_bf16_with_nvfp4_mixed",
    "nemotron_3_ultra_bf16_with_nvfp4_mixed",
)


def precision_recipe(
    name: str, *, where: str, prefix: str, out: list[Violation]
) -> tuple[str, Settings]:
    """A named mixed-precision recipe as (precision, settings)."""
    key = name.strip().removesuffix("()").rsplit(".", 1)[-1].replace("-", "_")
    if key in RECIPES:
        precision, recipe, gather, grad32 = RECIPES[key]
    elif key in _FP16_FP8:
        out.append(
            Violation(
                f"{prefix}-not-modelled",
                f"{where} {name!r}: fp16 with fp8 is planned as bf16 with fp8 "
                "(the same bytes; fp16 loss scaling is not modelled)",
                "warning",
            )
        )
        precision, recipe, gather, grad32 = RECIPES[key.replace("fp16_with", "bf16_with")]
        grad32 = False
    elif key in _FP4:
        out.append(
            Violation(
                f"{prefix}-not-modelled",
                f"{where} {name!r}: planner does not model NVFP4 training; planned "
                "as fp8 blockwise (an upper bound on its memory and time)",
                "warning",
            )
        )
        precision, recipe, gather, grad32 = "fp8", "blockwise", False, True
    else:
        names = ", ".join(sorted(RECIPES) + list(_FP16_FP8) + list(_FP4))
        raise SpecError(
            f"{where} = {name!r} is not a mixed-precision recipe Megatron-Bridge or "
            f"NeMo knows; use one of {names}",
            field=where,
            value=name,
        )
    s = Settings({"grad_reduce_in_fp32": grad32})
    if precision == "fp8":
        s.training.update(fp8_recipe=recipe, fp8_param_gather=gather)
    if "current_scaling" in key:  # these recipes set first_last_layers_bf16 = True
        out.append(
            Violation(
                f"{prefix}-not-modelled",
                f"{where} {name!r} keeps the first and last layer in bf16; "
                "planner times every layer in fp8",
                "warning",
            )
        )
    return precision, s


# ------------------------------------------------------------------------ DDP / optimizer

_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def read_ddp(ddp: dict, *, where: str) -> tuple[int | None, Settings]:
    """(ZeRO stage or None when the mapping does not say, settings) from a
    DistributedDataParallelConfig mapping."""
    s = Settings()
    if "grad_reduce_in_fp32" in ddp:
        s.layout["grad_reduce_in_fp32"] = as_bool(ddp, "grad_reduce_in_fp32", True, where=where)
    for key in ("overlap_grad_reduce", "overlap_param_gather"):
        if key in ddp:
            s.layout[key] = as_bool(ddp, key, False, where=where)
    zero = None
    if as_bool(ddp, "use_distributed_optimizer", False, where=where):
        zero = 1
    if as_bool(ddp, "use_megatron_fsdp", False, where=where) or as_bool(
        ddp, "use_custom_fsdp", False, where=where
    ):
        zero = sharding_stage(ddp, where=where)
    return zero, s


def sharding_stage(ddp: dict, *, where: str) -> int:
    strategy = _text(ddp, "data_parallel_sharding_strategy", where=where) or "no_shard"
    if strategy not in _SHARDING:
        raise SpecError(
            f"{where}.data_parallel_sharding_strategy = {strategy!r} must be one of "
            f"{', '.join(_SHARDING)}; fix the value",
            field=f"{where}.data_parallel_sharding_strategy",
            value=strategy,
        )
    return _SHARDING[strategy]


_DTYPES = {
    "fp32": "fp32",
    "float32": "fp32",
    "torch.float32": "fp32",
    "float": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "fp16": "bf16",
    "float16": "bf16",
    "torch.float16": "bf16",
    "half": "bf16",
    "torch.half": "bf16",
}
_FP8_DTYPES = ("fp8", "uint8", "torch.uint8")


def read_optimizer(opt: dict, *, where: str, prefix: str, out: list[Violation]) -> Settings:
    """exp_avg_dtype / exp_avg_sq_dtype (with Megatron-Core's precision-aware rule)."""
    s = Settings()
    for key in ("exp_avg_dtype", "exp_avg_sq_dtype"):
        dtype = state_dtype(opt, key, where=where, prefix=prefix, out=out)
        if dtype is not None:
            s.layout[key] = dtype
    lower = [k for k, v in s.layout.items() if v != "fp32"]
    if lower and not as_bool(opt, "use_precision_aware_optimizer", False, where=where):
        out.append(
            Violation(
                f"{prefix}-precision-aware-optimizer",
                f"{where}.{lower[0]} {opt.get(lower[0])!r} needs "
                "use_precision_aware_optimizer true (Megatron-Core asserts)",
                "error",
            )
        )
    if as_bool(opt, "use_precision_aware_optimizer", False, where=where) and as_bool(
        opt, "store_param_remainders", True, where=where
    ):
        # Megatron-Core OptimizerConfig: "Store the 16-bit FP32 parameter remainders in the
        # optimizer state ... lowers GPU memory usage by 2 bytes per parameter" (precision-
        # aware optimizer, fp32 main params), True by default; planner counts a 4-byte
        # master weight
        out.append(
            Violation(
                f"{prefix}-param-remainders",
                f"{where}.store_param_remainders = True (Megatron-Core's default with "
                "use_precision_aware_optimizer): planner does not model it (the "
                "fp32 master weights kept as the bf16 parameters plus 16-bit remainders: 2 "
                "bytes a parameter where planner counts 4, so the optimizer states are "
                "estimated high)",
                "warning",
            )
        )
    if as_bool(opt, "optimizer_cpu_offload", False, where=where):
        out.append(
            Violation(
                f"{prefix}-not-modelled",
                f"{where}.optimizer_cpu_offload: planner does not model optimizer "
                "offloading (the states are counted on the GPU)",
                "warning",
            )
        )
    return s


def state_dtype(
    section: dict, key: str, *, where: str, prefix: str, out: list[Violation]
) -> str | None:
    value = section.get(key)
    if isinstance(value, Unresolved):
        value.fail()
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in _DTYPES:
        if text not in (
            "fp32",
            "float32",
            "torch.float32",
            "float",
            "bf16",
            "bfloat16",
            "torch.bfloat16",
        ):
            out.append(
                Violation(
                    f"{prefix}-not-modelled",
                    f"{where}.{key} {value!r}: counted as bf16 (2 bytes, the same size)",
                    "warning",
                )
            )
        return _DTYPES[text]
    if text in _FP8_DTYPES:
        out.append(
            Violation(
                f"{prefix}-not-modelled",
                f"{where}.{key} {value!r}: planner counts fp8 moments as bf16 "
                "(2 bytes, an upper bound)",
                "warning",
            )
        )
        return "bf16"
    raise SpecError(
        f"{where}.{key} = {value!r} must be fp32 or bf16 (torch.float32, "
        "torch.bfloat16); fix the value",
        field=f"{where}.{key}",
        value=value,
    )


# ---------------------------------------------------------------------------- model shape


def moe_fields(
    cfg: dict, *, where: str, num_layers: int, out: list[Violation], prefix: str
) -> dict[str, Any]:
    """ModelSpec MoE fields from Megatron-Core's MoE keys (empty for a dense model)."""
    experts = as_int(cfg, "num_moe_experts", None, where=where, minimum=1)
    if not experts or experts < 2:
        return {}
    fields: dict[str, Any] = dict(
        num_experts=experts,
        moe_top_k=as_int(cfg, "moe_router_topk", 2, where=where),
        moe_ffn_hidden_size=as_int(cfg, "moe_ffn_hidden_size", None, where=where),
    )
    expert_ffn = fields["moe_ffn_hidden_size"] or as_int(cfg, "ffn_hidden_size", None, where=where)
    shared = as_int(cfg, "moe_shared_expert_intermediate_size", None, where=where)
    if shared and expert_ffn:
        n = max(1, round(shared / expert_ffn))
        if n * expert_ffn != shared:
            out.append(
                Violation(
                    f"{prefix}-approximated",
                    f"{where}.moe_shared_expert_intermediate_size ({shared}) is "
                    f"not a multiple of the expert width ({expert_ffn}); planner "
                    f"models {n} shared expert(s) of that width",
                    "warning",
                )
            )
        fields["num_shared_experts"] = n
        fields["moe_shared_expert_gate"] = as_bool(
            cfg, "moe_shared_expert_gate", False, where=where
        )
    dense = _dense_layers(
        cfg.get("moe_layer_freq"), num_layers=num_layers, where=where, prefix=prefix, out=out
    )
    if isinstance(dense, tuple):
        fields["moe_layer_freq"] = dense
    elif dense:
        fields["num_dense_layers"] = dense
    capacity = cfg.get("moe_expert_capacity_factor")
    if isinstance(capacity, Unresolved):
        capacity.fail()
    if capacity is not None:
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, (int, float))
            or not 0.1 <= capacity <= 100
        ):
            raise SpecError(
                f"{where}.moe_expert_capacity_factor = {capacity!r} must be a number "
                "between 0.1 and 100; fix the value",
                field=f"{where}.moe_expert_capacity_factor",
                value=capacity,
            )
        fields["moe_capacity_factor"] = float(capacity)
    groups = as_int(cfg, "moe_router_num_groups", None, where=where, minimum=1)
    group_topk = as_int(cfg, "moe_router_group_topk", None, where=where, minimum=1)
    if groups is not None or group_topk is not None:  # ModelSpec checks they go together
        fields.update(moe_router_num_groups=groups, moe_router_group_topk=group_topk)
    fields.update(router_fields(cfg, where=where))
    return fields


def router_fields(cfg: dict, *, where: str) -> dict[str, Any]:
    """ModelSpec's router fields from the keys a mapping gives (the others stay the model's or
    the preset's): moe_router_score_function, moe_router_topk_scaling_factor (1 = none),
    moe_router_enable_expert_bias."""
    out: dict[str, Any] = {}
    score = cfg.get("moe_router_score_function")
    if isinstance(score, Unresolved):
        score.fail()
    if score is not None:
        if score not in ROUTER_SCORES:
            raise SpecError(
                f"{where}.moe_router_score_function = {score!r}: planner writes and reads "
                "softmax or sigmoid; fix the value",
                field=f"{where}.moe_router_score_function",
                value=score,
            )
        out["moe_router_score"] = score
    scale = as_number(cfg, "moe_router_topk_scaling_factor", where=where)
    if scale is not None:
        out["moe_router_scaling"] = None if scale == 1.0 else scale
    if "moe_router_enable_expert_bias" in cfg:
        out["moe_router_expert_bias"] = as_bool(
            cfg, "moe_router_enable_expert_bias", False, where=where
        )
    if "moe_router_pre_softmax" in cfg:
        out["moe_router_pre_softmax"] = as_bool(cfg, "moe_router_pre_softmax", False, where=where)
    return out


def _dense_layers(
    freq: Any, *, num_layers: int, where: str, prefix: str, out: list[Violation]
) -> int | tuple[int, ...]:
    """Leading dense (non-MoE) layers from moe_layer_freq (an integer k: every k-th layer is
    MoE, or a 0/1 list), or the 0/1 pattern itself when the dense layers are not all first."""
    if isinstance(freq, Unresolved):
        freq.fail()
    if freq is None:
        return 0
    if isinstance(freq, bool) or not isinstance(freq, (int, list)):
        raise SpecError(
            f"{where}.moe_layer_freq = {freq!r} must be an integer or a list of 0/1 "
            "per layer; write it as a YAML list",
            field=f"{where}.moe_layer_freq",
            value=freq,
        )
    if isinstance(freq, int):
        if not 1 <= freq <= num_layers:
            raise SpecError(
                f"{where}.moe_layer_freq = {freq} must be between 1 and num_layers "
                f"({num_layers}); fix the value",
                field=f"{where}.moe_layer_freq",
                value=freq,
            )
        pattern = [1 if i % freq == 0 else 0 for i in range(num_layers)]
    else:
        if len(freq) != num_layers or any(v not in (0, 1) or isinstance(v, bool) for v in freq):
            raise SpecError(
                f"{where}.moe_layer_freq must list 0 or 1 for each of the "
                f"{num_layers} layers; fix the list",
                field=f"{where}.moe_layer_freq",
            )
        pattern = list(freq)
    dense = pattern.count(0)
    if dense and pattern != [0] * dense + [1] * (num_layers - dense):
        return tuple(pattern)  # interleaved: ModelSpec.moe_layer_freq
    return dense


_MLA = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")


def window_fields(cfg: dict, *, where: str, num_layers: int) -> dict[str, Any]:
    """TransformerConfig window_size (left, right) and window_attn_skip_freq (an int N: one
    full layer after N-1 window layers; a 0/1 list: 1 a window layer, 0 a full one) as
    layer_types, and softmax_type learnable as attention sinks."""
    out: dict[str, Any] = {}
    if str(cfg.get("softmax_type", "vanilla")).lower() == "learnable":
        out["attention_sinks"] = True
    win = cfg.get("window_size")
    if isinstance(win, Unresolved):
        win.fail()
    if win is None:
        return out
    if isinstance(win, str):
        win = [int(x) for x in re.findall(r"-?\d+", win)]
    if (
        not isinstance(win, (list, tuple))
        or not win
        or any(type(x) is not int for x in win)
        or win[0] == 0
        or (len(win) > 1 and win[1] not in (0, -1))
    ):
        raise SpecError(
            f"{where}.window_size = {win!r} must be [left, 0] with left > 0 (or -1 "
            "for no window); fix the value",
            field=f"{where}.window_size",
            value=win,
        )
    if win[0] < 0:
        return out
    full = [False] * num_layers
    if cfg.get("window_attn_skip_freq") is not None:
        full = _full_layers(
            cfg, "window_attn_skip_freq", where=where, num_layers=num_layers, one="window layer"
        )
    out.update(window_size=win[0], layer_types=tuple("full" if f else "sliding" for f in full))
    return out


def _full_layers(cfg: dict, key: str, *, where: str, num_layers: int, one: str) -> list[bool]:
    """The full-attention layers of a Megatron-Core layer-pattern key (window_attn_skip_freq,
    linear_attention_freq): an int N makes every Nth layer full ((i + 1) % N == 0), a 0/1 list
    its 0 entries; anything else is one line naming the key (with `one`: what a 1 is)."""
    value = cfg.get(key)
    if isinstance(value, Unresolved):
        value.fail()
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return [(i + 1) % value == 0 for i in range(num_layers)]
    if (
        isinstance(value, list)
        and len(value) == num_layers
        and all(v in (0, 1) and not isinstance(v, bool) for v in value)
    ):
        return [v == 0 for v in value]
    raise SpecError(
        f"{where}.{key} = {value!r} must be an integer or a 0/1 list of {num_layers} entries "
        f"(1 = {one}); fix it",
        field=f"{where}.{key}",
    )


def unpriced(cfg: dict, *, where: str, source: str, out: list, fmt: str) -> None:
    """Refuse a model of layers planner cannot price (common.UNPRICED_KEYS set to a true value,
    or a Mamba / Nemotron-H provider class); warn of common.NOT_WRITTEN_KEYS (true values)."""
    target = str(cfg.get("_target_", "")).rsplit(".", 1)[-1]
    for key, what in UNPRICED_KEYS.items():
        value = cfg.get(key)
        if value not in (None, False, "", 0, [], {}):
            raise SpecError(
                f"{source}: {where}.{key} builds {what}, {UNPRICED_MESSAGE}",
                field=f"{where}.{key}",
            )
    if "mamba" in target.lower() or "nemotronh" in target.lower():
        raise SpecError(
            f"{source}: {where}._target_ {target} builds Mamba layers, {UNPRICED_MESSAGE}",
            field=f"{where}._target_",
        )
    found = [
        f"{key} ({what})"
        for key, what in NOT_WRITTEN_KEYS.items()
        if cfg.get(key) not in (None, False, "", 0)
    ]
    if found:
        rule = "bridge-not-written" if fmt == "Megatron-Bridge" else "nemo-not-written"
        out.append(
            Violation(
                rule,
                f"{where}: {', '.join(found)}: {NOT_WRITTEN_MESSAGE}",
                "warning",
            )
        )


_LINEAR_DEFAULTS = {
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
}
"""TransformerConfig's defaults of the Gated DeltaNet dims (megatron/core/transformer/
transformer_config.py)."""
_DSA_KEYS = {
    "dsa_indexer_n_heads": "dsa_index_heads",
    "dsa_indexer_head_dim": "dsa_index_head_dim",
    "dsa_indexer_topk": "dsa_index_topk",
}


def variant_fields(cfg: dict, *, where: str, num_layers: int) -> dict[str, Any]:
    """TransformerConfig `experimental_attention_variant` (Megatron-Core's
    experimental_attention_variant_module_specs): gated_delta_net / gdn with
    `linear_attention_freq` (an int N: every Nth layer full, the rest linear; a 0/1 list, 1
    linear) and the `linear_*` dims (their defaults where silent), or dsa on every layer
    with its indexer's `dsa_indexer_n_heads / _head_dim / _topk`; another is one line."""
    variant = cfg.get("experimental_attention_variant")
    if isinstance(variant, Unresolved):
        variant.fail()
    if variant is None:
        return {}
    if variant in ("gated_delta_net", "gdn"):
        full = _full_layers(
            cfg, "linear_attention_freq", where=where, num_layers=num_layers, one="linear"
        )
        out: dict[str, Any] = {"layer_types": tuple("full" if x else "linear" for x in full)}
        for key, default in _LINEAR_DEFAULTS.items():
            out[key] = as_int(cfg, key, default, where=where)
        return out
    if variant == "dsa":
        out = {"layer_types": ("dsa",) * num_layers}
        for key, field_name in _DSA_KEYS.items():
            value = as_int(cfg, key, None, where=where)
            if value is None:
                raise SpecError(
                    f"{where}.{key} is missing: experimental_attention_variant dsa needs the "
                    "indexer's shape; add it",
                    field=f"{where}.{key}",
                )
            out[field_name] = value
        return out
    raise SpecError(
        f"{where}.experimental_attention_variant = {variant!r}: planner prices gated_delta_net "
        "(gdn) and dsa only; plan the model from a model YAML",
        field=f"{where}.experimental_attention_variant",
        value=variant,
    )


_BLOCK_SPEC = "get_transformer_block_with_experimental_attention_variant_spec"


def check_variant_spec(cfg: dict, *, where: str, out: list) -> None:
    """A Megatron-Bridge model with an experimental attention variant and a plain
    GPTModelProvider (no `_target_`, or GPTModelProvider) builds the variant's layers only with
    `transformer_layer_spec` set to Megatron-Core's variant block spec (its default_layer_spec
    builds standard attention on every layer): a warning when it is not."""
    target = str(cfg.get("_target_", "")).rsplit(".", 1)[-1]
    spec = cfg.get("transformer_layer_spec")
    spec_target = str(spec.get("_target_", "")) if isinstance(spec, dict) else str(spec or "")
    if target in ("", "GPTModelProvider") and not spec_target.endswith(_BLOCK_SPEC):
        out.append(
            Violation(
                "bridge-variant-spec",
                f"{where}.experimental_attention_variant with a GPTModelProvider and no "
                f"transformer_layer_spec {_BLOCK_SPEC}: Bridge would build standard attention "
                "on every layer (default_layer_spec); planner prices the variant; set it (the "
                "megatron-bridge export writes it)",
                "warning",
            )
        )


GEMMA3_DEFAULTS: dict[str, Any] = {
    "window_size": 512,
    "interleaved_attn_pattern": (5, 1),
    "rotary_base": (10_000, 1_000_000),
    "softmax_scale": 1.0 / 16,
}
"""Megatron-Bridge Gemma3ModelProvider's own values of the keys a file may leave out
(megatron/bridge/models/gemma/gemma3_provider.py: window 512, pattern (5, 1), RoPE bases
(local, global) (10,000, 1,000,000), softmax_scale 1/sqrt(256))."""


def _pair(cfg: dict, key: str, *, where: str, want: str) -> tuple[float, float]:
    value = cfg.get(key, GEMMA3_DEFAULTS[key])
    if isinstance(value, Unresolved):
        value.fail()
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)
    ):
        raise SpecError(
            f"{where}.{key} = {value!r} must be {want} (Gemma3ModelProvider unpacks two "
            "numbers); fix the value",
            field=f"{where}.{key}",
            value=value,
        )
    return float(value[0]), float(value[1])


def gemma3_fields(cfg: dict, *, where: str, num_layers: int, head_dim: int) -> dict[str, Any]:
    """A Megatron-Bridge Gemma3ModelProvider's model (its `_target_`): the sandwich layer,
    `window_size` (an int, the window layers'), `interleaved_attn_pattern` (n, g) (layer l,
    from 1, global when l % (n + g) == 0: gemma3_provider._is_local_attn_layer), `rotary_base`
    (local, global) and `softmax_scale`, the class's defaults (GEMMA3_DEFAULTS) where silent."""
    win = cfg.get("window_size", GEMMA3_DEFAULTS["window_size"])
    if isinstance(win, Unresolved):
        win.fail()
    if isinstance(win, bool) or not isinstance(win, int) or win < 1:
        raise SpecError(
            f"{where}.window_size = {win!r} must be a whole number of tokens (Gemma3ModelProvider "
            "makes it (window, 0) on the window layers); fix the value",
            field=f"{where}.window_size",
            value=win,
        )
    n, g = _pair(cfg, "interleaved_attn_pattern", where=where, want="[window layers, global]")
    period = int(n + g)
    if n < 0 or g < 1 or n != int(n) or g != int(g):
        raise SpecError(
            f"{where}.interleaved_attn_pattern = [{n:g}, {g:g}] must be two whole numbers, the "
            "second at least 1; fix the value",
            field=f"{where}.interleaved_attn_pattern",
        )
    local, glob = _pair(cfg, "rotary_base", where=where, want="[local, global] RoPE bases")
    if local <= 0 or glob <= 0:
        raise SpecError(
            f"{where}.rotary_base = [{local:g}, {glob:g}] must be positive; fix the value",
            field=f"{where}.rotary_base",
        )
    scale = as_number(cfg, "softmax_scale", where=where)
    scale = GEMMA3_DEFAULTS["softmax_scale"] if scale is None else scale
    kinds = tuple("full" if (i + 1) % period == 0 else "sliding" for i in range(num_layers))
    out: dict[str, Any] = {
        "norm_placement": "sandwich",
        # the class sets layernorm_zero_centered_gamma (Gemma's x * (1 + w)) itself
        "norm_zero_centered": as_bool(cfg, "layernorm_zero_centered_gamma", True, where=where),
        "rotary_base": glob,
        "softmax_scale": None if math.isclose(scale, head_dim**-0.5) else scale,
        "layer_types": kinds,
    }
    if "sliding" in kinds:
        out.update(window_size=win, rotary_base_local=local)
    return out


def mla_fields(cfg: dict, *, where: str) -> dict[str, Any]:
    """ModelSpec MLA fields where the config uses multi-latent attention."""
    if not (
        as_bool(cfg, "multi_latent_attention", False, where=where)
        or cfg.get("kv_lora_rank") is not None
    ):
        return {}
    return {
        k: as_int(cfg, k, None, where=where, minimum=0 if k == "qk_pos_emb_head_dim" else 1)
        for k in _MLA
        if cfg.get(k) is not None
    }
