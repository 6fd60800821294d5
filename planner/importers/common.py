"""What every importer shares: the `Imported` result, the command-line `Overrides`, reading a
file, and turning what a framework file says into our `Job` (world size, model, training).

Overrides fill or replace what a file says: `--model` replaces the file's model shape,
`--hardware` names the GPU system (framework files never do; default h100-sxm), `--gpus`
replaces the world size and `--nodes` gives it as nodes x GPUs per node (the file's per-node
count when it has one, else the hardware profile's).
"""

from __future__ import annotations

import difflib
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from planner.config import Job, default_training, resolve_hardware
from planner.errors import SpecError, Violation
from planner.layout import Layout
from planner.specs import read_text as _read_text
from planner.presets import PRESETS, resolve_model
from planner.specs import HardwareSpec, ModelSpec, parse_spec

__all__ = ["Imported", "Overrides", "read_text", "resolve_world", "hardware_of", "model_of",
           "inline_model", "vocab_from_tokenizer", "make_job", "unknown_key", "accounted_split",
           "naming", "DEFAULT_HARDWARE"]

DEFAULT_HARDWARE = "h100-sxm"   # as in a planner config that names no hardware


@dataclass(frozen=True)
class Overrides:
    """`validate`'s --model/--hardware/--gpus/--nodes (None = not given)."""

    model: str | None = None
    hardware: str | None = None
    gpus: int | None = None
    nodes: int | None = None

    def __post_init__(self) -> None:
        for name, value in (("--gpus", self.gpus), ("--nodes", self.nodes)):
            if value is not None and value < 1:
                raise SpecError(f"{name} = {value}: must be a positive whole number")


@dataclass(frozen=True)
class Imported:
    """A file read into our terms: the job, the layout, the framework's own verdicts."""

    job: Job
    layout: Layout
    violations: list[Violation] = field(default_factory=list)
    format: str = "planner"
    source: str = ""


@contextmanager
def naming(source: str):
    """Prefix the file to a SpecError that does not name it yet (one line: path, problem, fix)."""
    try:
        yield
    except SpecError as exc:
        if source in exc.message:
            raise
        raise SpecError(f"{source}: {exc.message}") from None


def read_text(path: str | Path, *, what: str) -> str:
    """A file's text; every failure is one SpecError line (path, problem, fix)."""
    return _read_text(path, what=what, empty_hint="give a complete file")


def hardware_of(ov: Overrides) -> HardwareSpec:
    return resolve_hardware(ov.hardware or DEFAULT_HARDWARE)


def resolve_world(ov: Overrides, *, hardware: HardwareSpec, source: str,
                  gpus_per_node: int | None = None, nodes: int | None = None,
                  world: int | None = None,
                  missing: str = "it does not give the world size") -> int:
    """--gpus, else --nodes x per-node, else what the file says, else a SpecError naming
    the options that supply it."""
    if ov.nodes is not None:
        n = ov.nodes * (gpus_per_node or hardware.gpus_per_node)
        if ov.gpus is not None and ov.gpus != n:
            raise SpecError(f"--gpus ({ov.gpus}) and --nodes ({ov.nodes}) x "
                            f"{gpus_per_node or hardware.gpus_per_node} GPUs per node ({n}) "
                            "disagree; give one of them")
        return n
    if ov.gpus is not None:
        return ov.gpus
    if world is not None:
        return world
    if gpus_per_node is not None and nodes is not None:
        return gpus_per_node * nodes
    raise SpecError(f"{source}: {missing}; give --gpus N (total GPUs) or --nodes N "
                    f"(x {gpus_per_node or hardware.gpus_per_node} GPUs per node)")


def model_of(ov: Overrides, *, source: str, what: str) -> ModelSpec:
    """The --model the file needs because it has no model shape (`what` says which keys)."""
    if ov.model is None:
        raise SpecError(f"{source}: no model shape ({what}); give --model NAME "
                        "(a preset such as llama3-70b, a model YAML or a HF config.json)")
    return resolve_model(ov.model)


def _shape_key(m: ModelSpec) -> tuple:
    return (m.num_layers, m.hidden_size, m.ffn, m.num_attention_heads, m.kv_heads, m.head_dim,
            m.vocab_size, m.gated, m.tied_embeddings, m.num_experts or 0, m.expert_ffn,
            m.moe_top_k if m.is_moe else 0, m.kv_lora_rank)


def inline_model(fields: dict[str, Any], *, source: str, fmt: str) -> ModelSpec:
    """A ModelSpec from a file's shape keys, named after the preset it matches if any."""
    fields = {k: v for k, v in fields.items() if v is not None}
    fields.setdefault("name", f"custom ({fmt})")
    try:
        spec = parse_spec(ModelSpec, fields, where="model")
    except SpecError as exc:
        raise SpecError(f"{source}: {exc.message} (the {fmt} model shape)") from None
    key = _shape_key(spec)
    for preset in PRESETS.values():
        if _shape_key(ModelSpec(**preset)) == key:
            return spec.model_copy(update={"name": preset["name"]})
    return spec


# Tokenizers whose vocabulary size is public (the frameworks read it from the tokenizer).
_TOKENIZERS: list[tuple[str, int]] = [
    (r"llama-?3|llama3", 128256),          # meta-llama/Meta-Llama-3*, Llama-3.1*
    (r"mixtral-8x22b", 32768),
    (r"llama-?2|llama2|mistral|mixtral", 32000),
    (r"qwen3", 151936),
    (r"deepseek-?v3", 129280),
    (r"gpt2|gpt-2", 50257),
]


def vocab_from_tokenizer(*names: str | None) -> int | None:
    """Vocabulary size of a known tokenizer (type, name or path), else None."""
    for name in names:
        if not name:
            continue
        text = str(name).lower()
        if "gpt2bpetokenizer" in text:
            return 50257
        for pattern, vocab in _TOKENIZERS:
            if re.search(pattern, text):
                return vocab
    return None


def make_job(*, model: ModelSpec, hardware: HardwareSpec, num_gpus: int,
             seq_length: int | None, global_batch_size: int | None, precision: str = "bf16",
             accounting: str = "megatron", source: str = "", **training_fields) -> Job:
    """The Job a framework file describes; `training_fields` are further TrainingSpec fields
    the file sets (fp8_recipe, fp8_param_gather)."""
    training = default_training(model, seq_length=seq_length, global_batch_size=global_batch_size,
                                precision=precision, accounting=accounting, **training_fields)
    if num_gpus < 1:
        raise SpecError(f"{source}: world size {num_gpus} must be at least 1; give --gpus N")
    return Job(model=model, hardware=hardware, num_gpus=num_gpus, training=training)


def unknown_key(rule: str, key: str, valid: Iterable[str], *, severity: str,
                consequence: str) -> Violation:
    """`key` is not one the framework knows: name it, suggest the closest, say what happens."""
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, list(valid), n=1, cutoff=0.75)
    prefix = key[: len(key) - len(leaf)]
    hint = f" (did you mean {prefix + close[0]!r}?)" if close else ""
    return Violation(rule, f"unknown {'flag' if key.startswith('-') else 'key'} {key!r}{hint}: "
                           f"{consequence}", severity)


def accounted_split(num_layers: int, *, pp: int, vpp: int, embedding: bool,
                    loss: bool) -> tuple[int | None, int | None, str | None]:
    """Megatron's --account-for-embedding/loss-in-pipeline-split as first/last stage layers:
    the embedding and the loss each take a layer's place, (L + e + l) / pp per rank.
    Returns (first, last, problem); problem names the values when it does not divide."""
    total = num_layers + embedding + loss
    if total % (pp * vpp):
        return None, None, (f"num_layers + embedding + loss ({total}) must be divisible by pp*vpp "
                            f"({pp}*{vpp}) when the embedding/loss count in the pipeline split")
    if pp == 1:
        return None, None, None
    per = total // pp
    return (per - 1 if embedding else None), (per - 1 if loss else None), None
