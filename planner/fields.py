"""The layout vocabulary: one row per layout field, declared once in `planner.layout.Layout`.

Each field of `Layout` is declared with `row(...)`: its default, its docstring, its name in the
config file (`parallel:`) and the JSON, its Megatron-LM flag, NeMo / Megatron-Bridge key and
torchtitan key, the config's type and bounds, and which parts of the cost model read it.
Everything else is derived from those rows, never written again by hand:

- `planner.specs.ParallelSpec` (the `parallel:` section of a config, with its help text);
- `Layout.as_dict` (the JSON `layout` object) and `layout_from_spec`;
- the names the exports and the docs print (`framework_names`);
- every cache key of `planner.cost.model.CostModel` (`layout_key(part)`): a part's key holds
  every field whose row says that part reads it. A new row reads every part unless it says
  otherwise, so a new field is in every key by default; tests/test_fields.py changes each
  field a key leaves out and checks that the part it keys does not change.

This module imports nothing of planner's: the vocabularies (`Recompute`, `Dispatcher`, ...)
live here so that both the specs and the layout can use them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

__all__ = [
    "Recompute",
    "RecomputeModule",
    "Dispatcher",
    "RouterScore",
    "ROUTER_SCORES",
    "PipelineSchedule",
    "CudaGraphs",
    "StateDtype",
    "ActivationCache",
    "CpCommType",
    "PARTS",
    "ALL_PARTS",
    "FieldInfo",
    "row",
    "info",
    "layout_fields",
    "layout_key",
    "key_fields",
    "config_name",
    "framework_names",
    "SAME",
    "MAX_DIM",
    "MAX_BATCH",
]

MAX_DIM = 10_000_000
"""No real model or cluster is larger; anything above is a typo (degrees, GPUs)."""
MAX_BATCH = 100_000_000
"""Sequences in a (micro-)batch; more is a typo."""

Recompute = Literal["none", "selective", "full"]
RecomputeModule = Literal[
    "core_attn",
    "mlp",
    "moe",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "shared_experts",
    "torchtitan_op",
]
Dispatcher = Literal["alltoall", "allgather", "deepep", "hybridep"]
PipelineSchedule = Literal["1f1b", "interleaved", "dualpipe", "dualpipev"]
CudaGraphs = Literal["none", "partial", "full"]
StateDtype = Literal["fp32", "bf16"]
ActivationCache = Literal["te", "deepseek"]
CpCommType = Literal["p2p", "a2a", "allgather", "a2a+p2p"]
RouterScore = Literal["softmax", "sigmoid"]
ROUTER_SCORES: tuple[str, ...] = ("softmax", "sigmoid")
"""RouterScore's values, for the readers that check a file's router against them."""

PARTS = {
    "dtypes": "bytes per parameter of the model states (CostModel.dtypes)",
    "acts": "activation bytes per layer and micro-batch (CostModel.act_costs)",
    "layer_base": "a layer's costs that do not depend on ep or the dispatcher "
    "(CostModel._layer_base)",
    "moe_layer": "the MoE layer's times (CostModel._moe_layer)",
    "layer": "a layer's costs with EP traffic (CostModel.layer_costs)",
    "stages": "the pipeline ranks as groups (CostModel.stages)",
    "states": "weights, gradients and optimizer bytes per stage (CostModel.stage_states)",
    "act_vector": "activation bytes of each stage's most loaded rank (CostModel.act_vector)",
    "first_params": "the first stage's parameters (CostModel._first_rank_params)",
    "pipeline": "the step time's pipeline part (CostModel._pipeline)",
    "dp": "the step time's DP and optimizer part, given the compute windows "
    "(CostModel._dp_and_optimizer)",
}
"""The cached parts of the cost model, each keyed on the fields that read it."""
ALL_PARTS = frozenset(PARTS)


class _Same:
    """`spec_default` when the config's default is the layout's."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()


@dataclass(frozen=True)
class FieldInfo:
    """What a row says of its field (the field's `metadata["planner"]`)."""

    doc: str
    reads: frozenset[str] = ALL_PARTS
    """The cost parts that read the field (PARTS); default all of them."""
    config: str | None = None
    """Key under `parallel:` in a config and in the JSON layout (None: the field name; "" for
    a field that is not a config key)."""
    spec_type: Any = None
    """Type in the config, where it differs from the layout's (e.g. Optional: "derived")."""
    spec_default: Any = SAME
    """Default in the config, where it differs from the layout's."""
    bounds: dict[str, Any] = dataclasses.field(default_factory=dict)
    """pydantic Field constraints in the config (ge, le, max_length)."""
    megatron: str | None = None
    """Megatron-LM flag (megatron/training/arguments.py)."""
    nemo: str | None = None
    """NeMo / Megatron-Bridge key (model.* in NeMo 1; the TransformerConfig / DDP config name)."""
    torchtitan: str | None = None
    """torchtitan job-config key, as section.key."""
    short: tuple[str, ...] = ()
    """Short names `--fix` also takes."""
    json_from: str | None = None
    """The Layout attribute the JSON prints instead of the raw field (a resolved value)."""


def row(
    default: Any,
    doc: str,
    *,
    reads: frozenset[str] | set[str] = ALL_PARTS,
    compare: bool = True,
    **names: Any,
) -> Any:
    """A Layout field with its row of the table (`FieldInfo`)."""
    bad = set(reads) - ALL_PARTS
    if bad:
        raise ValueError(f"unknown cost parts {sorted(bad)}; valid: {sorted(PARTS)}")
    meta = {"planner": FieldInfo(doc=doc, reads=frozenset(reads), **names)}
    if isinstance(default, tuple) or default is None or isinstance(default, (int, float, str)):
        return dataclasses.field(default=default, compare=compare, metadata=meta)
    return dataclasses.field(default_factory=default, compare=compare, metadata=meta)


def info(f: dataclasses.Field[Any]) -> FieldInfo:
    """The row of a Layout field."""
    row_info: FieldInfo = f.metadata["planner"]
    return row_info


def layout_fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """The rows of the table (the Layout class), in order."""
    return tuple(f for f in dataclasses.fields(cls) if "planner" in f.metadata)


def config_name(f: dataclasses.Field[Any]) -> str:
    """The field's key in a config and in the JSON."""
    name = info(f).config
    return f.name if name is None else name


def layout_key(cls: type, part: str) -> Callable[[Any], tuple[Any, ...]]:
    """The cache key of a cost part: a function giving the tuple of every compared field
    whose row says the part reads it."""
    if part not in PARTS:
        raise ValueError(f"unknown cost part {part!r}; valid: {sorted(PARTS)}")
    names = [f.name for f in layout_fields(cls) if f.compare and part in info(f).reads]
    getter = attrgetter(*names)
    if len(names) == 1:
        return lambda lay: (getter(lay),)
    return getter


def key_fields(cls: type, part: str) -> tuple[str, ...]:
    """The names `layout_key(cls, part)` reads."""
    return tuple(f.name for f in layout_fields(cls) if f.compare and part in info(f).reads)


def framework_names(cls: type, framework: str) -> dict[str, str]:
    """{field: its name in `framework`} (megatron | nemo | torchtitan) for the fields that
    have one."""
    out = {}
    for f in layout_fields(cls):
        name = getattr(info(f), framework)
        if name:
            out[f.name] = name
    return out
