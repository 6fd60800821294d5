"""What every importer shares: the `Imported` result, the command-line `Overrides`, reading a
file, and turning what a framework file says into our `Job` (world size, model, training).

Overrides fill or replace what a file says: `--model` replaces the file's model shape,
`--hardware` names the GPU system (framework files never do; default h100-sxm), `--gpus`
replaces the world size and `--nodes` gives it as nodes x GPUs per node (the file's per-node
count when it has one, else the hardware profile's). `--set NAME=VALUE` gives a launch script
the environment variable (or, for NAME 1, 2, ..., the positional parameter) a run would have;
`--vocab-size V` gives the model's vocabulary size where the tokenizer is unknown (and
replaces the one the file implies).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.config import Job, default_training, resolve_hardware
from planner.errors import SpecError, Violation, short
from planner.io import read_text as _read_text
from planner.layout import Layout
from planner.presets import PRESETS, resolve_model
from planner.readers import bash as shell
from planner.specs import MAX_GPUS, HardwareSpec, ModelSpec, parse_spec

__all__ = [
    "Imported",
    "Overrides",
    "read_text",
    "resolve_world",
    "hardware_of",
    "model_of",
    "inline_model",
    "vocab_from_tokenizer",
    "make_job",
    "unknown_key",
    "accounted_split",
    "naming",
    "suggestion_budget",
    "MAX_SUGGESTIONS",
    "parse_set",
    "check_world",
    "DEFAULT_HARDWARE",
    "MAX_GPUS",
    "shell_notes",
    "script_reader",
    "UNPRICED_KEYS",
    "NOT_WRITTEN_KEYS",
    "UNPRICED_MESSAGE",
    "NOT_WRITTEN_MESSAGE",
]

UNPRICED_KEYS = {
    "is_hybrid_model": "Mamba layers (a hybrid Mamba / attention stack)",
    "hybrid_override_pattern": "Mamba layers (a hybrid Mamba / attention stack)",
    "hybrid_layer_pattern": "Mamba layers (a hybrid Mamba / attention stack)",
    "heterogeneous_layers_config_path": "per-layer shapes (a heterogeneous, NAS-pruned stack)",
    "heterogeneous_layers_config_encoded_json": (
        "per-layer shapes (a heterogeneous, NAS-pruned stack)"
    ),
    "enable_mhc_connections": "hyper-connections (several residual streams a layer)",
}
"""Megatron-Core settings (TransformerConfig / argument names; Megatron-LM's flags are them
with dashes) that build layers planner has no price for: read as a GPT they would be costed as
another model, so each is one line naming it (exit 2)."""
NOT_WRITTEN_KEYS = {
    "apply_residual_connection_post_layernorm": "the residual taken after the norm",
    "no_rope_freq": "layers without RoPE (NoPE)",
    "rotary_interleaved": "interleaved RoPE pairs",
}
"""Megatron-Core settings that change the model but not its cost: a warning each, since
planner's exports do not write them back (docs/frameworks.md)."""
UNPRICED_MESSAGE = (
    "which planner has no price for (it plans attention + MLP layers: GPT, MoE, MLA, sliding "
    "windows, Gated DeltaNet, DSA); give --model NAME to plan this file's layout with such a "
    "model instead"
)
NOT_WRITTEN_MESSAGE = (
    "read, cost the same, and not written back by planner's exports (an export trains without them)"
)

DEFAULT_HARDWARE = "h100-sxm"  # as in a planner config that names no hardware
_SET_NAME = re.compile(r"[A-Za-z_]\w*|[1-9][0-9]*")


def parse_set(text: str) -> tuple[str, str]:
    """`NAME=VALUE` from --set (NAME a shell variable, or 1, 2, ... for $1, $2, ...)."""
    name, eq, value = str(text).partition("=")
    if not eq or not _SET_NAME.fullmatch(name):
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise SpecError(
            f"--set {shown!r}: expected NAME=VALUE with NAME a shell variable or a "
            "positional parameter number (e.g. --set NNODES=16 or --set 1=/data)",
            field="--set",
            value=shown,
        )
    return name, value


def check_world(n: int, *, source: str, what: str = "world size") -> int:
    """A world size within planner's cap (the one a config's num_gpus has)."""
    if n > MAX_GPUS:
        raise SpecError(
            f"{source}: {what} {short(n)} GPUs is beyond planner's cap of "
            f"{MAX_GPUS:,} (the same as a config's num_gpus); fix the node or GPU count",
            field="num_gpus",
            value=n,
        )
    return n


@dataclass(frozen=True)
class Overrides:
    """`validate`'s --model/--hardware/--gpus/--nodes/--set/--vocab-size and
    --global-batch-size/--micro-batch-size (None/() = not given). `sets` are (NAME, VALUE)
    pairs in the order given. `workload`: a serving launch command's --isl/--osl/--concurrency
    ((flag, value) pairs given; the command line does not say them)."""

    model: str | None = None
    hardware: str | None = None
    gpus: int | None = None
    nodes: int | None = None
    sets: tuple[tuple[str, str], ...] = ()
    vocab_size: int | None = None
    workload: tuple[tuple[str, str], ...] = ()
    planned: tuple[str, int] | None = None  # an export's `planner: hardware= num_gpus=` line
    global_batch_size: int | None = None  # fill a ds_config's "auto" batch keys
    micro_batch_size: int | None = None

    def __post_init__(self) -> None:
        for name, value, what in (
            ("--gpus", self.gpus, "GPUs, as for num_gpus"),
            ("--nodes", self.nodes, "GPUs, as for num_gpus"),
            ("--vocab-size", self.vocab_size, "as for vocab_size"),
            ("--global-batch-size", self.global_batch_size, "as for global_batch_size"),
            ("--micro-batch-size", self.micro_batch_size, "as for micro_batch_size"),
        ):
            if value is not None and not 1 <= value <= MAX_GPUS:
                raise SpecError(
                    f"{name} = {short(value)}: must be a whole number from 1 to "
                    f"{MAX_GPUS:,} (limit: {what})",
                    field=name,
                    value=value,
                )

    @property
    def env(self) -> dict[str, str]:
        """The --set values as a script's environment (the last of a repeated NAME wins)."""
        return dict(self.sets)


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
        raise exc.prefixed(short(source, 200)) from None


def read_text(path: str | Path, *, what: str) -> str:
    """A file's text; every failure is one SpecError line (path, problem, fix)."""
    return _read_text(path, what=what, empty_hint="give a complete file")


def hardware_of(ov: Overrides) -> HardwareSpec:
    """--hardware, else the hardware a planner export's header names, else the default."""
    if ov.hardware is None and ov.planned is not None:
        try:
            return resolve_hardware(ov.planned[0])
        except SpecError:
            raise SpecError(
                f"the export's header names hardware {ov.planned[0]!r}, which is "
                "not a profile planner has; give --hardware NAME_OR_FILE",
                field="--hardware",
                value=ov.planned[0],
            ) from None
    return resolve_hardware(ov.hardware or DEFAULT_HARDWARE)


def resolve_world(
    ov: Overrides,
    *,
    hardware: HardwareSpec,
    source: str,
    gpus_per_node: int | None = None,
    nodes: int | None = None,
    world: int | None = None,
    missing: str = "it does not give the world size",
) -> int:
    """--gpus, else --nodes x per-node, else what the file says, else a SpecError naming
    the options that supply it."""
    if ov.nodes is not None:
        n = ov.nodes * (gpus_per_node or hardware.gpus_per_node)
        if ov.gpus is not None and ov.gpus != n:
            raise SpecError(
                f"--gpus ({ov.gpus}) and --nodes ({ov.nodes}) x "
                f"{gpus_per_node or hardware.gpus_per_node} GPUs per node ({n}) "
                "disagree; give one of them",
                field="--gpus",
                value=ov.gpus,
            )
        return check_world(n, source=source)
    if ov.gpus is not None:
        return ov.gpus
    if world is not None:
        return check_world(world, source=source)
    if gpus_per_node is not None and nodes is not None:
        return check_world(gpus_per_node * nodes, source=source)
    if ov.planned is not None:  # the export's header: what the plan was for
        return check_world(ov.planned[1], source=source)
    raise SpecError(
        f"{source}: {missing}; give --gpus N (total GPUs) or --nodes N "
        f"(x {gpus_per_node or hardware.gpus_per_node} GPUs per node)",
        field="num_gpus",
    )


def apply_overrides(data: dict, ov: Overrides, *, base: Path | None, source: str) -> dict:
    """A config's data (ours or a serving YAML) with --model, --hardware and --gpus/--nodes
    put in place of the file's own keys."""
    data = dict(data)
    if ov.model is not None:
        data["model"] = ov.model
    if ov.hardware is not None:
        data["hardware"] = ov.hardware
    if ov.gpus is not None or ov.nodes is not None:
        hw = resolve_hardware(data.get("hardware", DEFAULT_HARDWARE), base=base)
        data["num_gpus"] = resolve_world(ov, hardware=hw, source=source)
    return data


def model_of(ov: Overrides, *, source: str, what: str) -> ModelSpec:
    """The --model the file needs because it has no model shape (`what` says which keys)."""
    if ov.model is None:
        raise SpecError(
            f"{source}: no model shape ({what}); give --model NAME "
            "(a preset such as llama3-70b, a model YAML or a HF config.json)",
            field="model",
        )
    return resolve_model(ov.model)


def _shape_key(m: ModelSpec) -> tuple:
    # MLA uses qk/v head dims, not kv_channels: a head_dim there names no tensor
    return (
        m.num_layers,
        m.hidden_size,
        m.ffn,
        m.num_attention_heads,
        m.kv_heads,
        None if m.is_mla else m.head_dim,
        m.vocab_size,
        m.gated,
        m.tied_embeddings,
        m.num_experts or 0,
        m.expert_ffn,
        m.moe_top_k if m.is_moe else 0,
        m.kv_lora_rank,
    )


def inline_model(fields: dict[str, Any], *, source: str, fmt: str) -> ModelSpec:
    """A ModelSpec from a file's shape keys, named after the preset it matches if any."""
    fields = {k: v for k, v in fields.items() if v is not None}
    named = "name" in fields
    fields.setdefault("name", f"custom ({fmt})")
    try:
        spec = parse_spec(ModelSpec, fields, where="model")
    except SpecError as exc:
        raise exc.prefixed(source, f" (the {fmt} model shape)") from None
    key = _shape_key(spec)
    shapes = [(p["name"], _shape_key(ModelSpec(**p))) for p in PRESETS.values()]
    for name, other in shapes:
        if other == key:
            return spec.model_copy(update={"name": name})
    for name, other in shapes:
        if other[:6] + other[7:] == key[:6] + key[7:] and not named:
            # the preset's shape with another vocabulary (a NullTokenizer's V + 1, say)
            return spec.model_copy(update={"name": f"{name} shape, vocabulary {spec.vocab_size}"})
    return spec


# Tokenizers whose vocabulary size is public (the frameworks read it from the tokenizer).
_TOKENIZERS: list[tuple[str, int]] = [
    (r"llama-?3|llama3", 128256),  # meta-llama/Meta-Llama-3*, Llama-3.1*
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


def make_job(
    *,
    model: ModelSpec,
    hardware: HardwareSpec,
    num_gpus: int,
    seq_length: int | None,
    global_batch_size: int | None,
    precision: str = "bf16",
    accounting: str = "megatron",
    source: str = "",
    **training_keys: Any,
) -> Job:
    """`training_keys`: more TrainingSpec fields the file sets (fp8_recipe, flash_attention...)."""
    if not 1 <= num_gpus <= MAX_GPUS:
        raise SpecError(
            f"{source}: world size {short(num_gpus)} must be from 1 to {MAX_GPUS:,} "
            "GPUs (limit: GPUs, as for num_gpus); give --gpus N",
            field="num_gpus",
            value=num_gpus,
        )
    training = default_training(
        model,
        seq_length=seq_length,
        global_batch_size=global_batch_size,
        precision=precision,
        accounting=accounting,
        **training_keys,
    )
    return Job(model=model, hardware=hardware, num_gpus=num_gpus, training=training)


MAX_SUGGESTIONS = 100
"""Unknown keys of one file that get a "did you mean" (each is a search of the valid names;
a file of 20,000 unknown flags would take half a minute): the rest are named without one."""
_suggestions_left: ContextVar[list[int] | None] = ContextVar("suggestions_left", default=None)


@contextmanager
def suggestion_budget(n: int = MAX_SUGGESTIONS):
    """Within: at most `n` unknown keys get a "did you mean" (load_any reads each file so)."""
    token = _suggestions_left.set([n])
    try:
        yield
    finally:
        _suggestions_left.reset(token)


def _closest(leaf: str, valid: Iterable[str]) -> list[str]:
    left = _suggestions_left.get()
    if left is not None:
        if left[0] <= 0:
            return []
        left[0] -= 1
    return difflib.get_close_matches(leaf[:100], list(valid), n=1, cutoff=0.75)


def unknown_key(
    rule: str, key: str, valid: Iterable[str], *, severity: str, consequence: str
) -> Violation:
    """`key` is not one the framework knows: name it, suggest the closest (for the first
    MAX_SUGGESTIONS of a file), say what happens."""
    leaf = key.rsplit(".", 1)[-1]
    close = _closest(leaf, valid)
    prefix = key[: len(key) - len(leaf)]
    hint = f" (did you mean {prefix + close[0]!r}?)" if close else ""
    return Violation(
        rule,
        f"unknown {'flag' if key.startswith('-') else 'key'} {short(key, 120)}{hint}: "
        f"{consequence}",
        severity,
    )


def accounted_split(
    num_layers: int, *, pp: int, vpp: int, embedding: bool, loss: bool
) -> tuple[int | None, int | None, str | None]:
    """Megatron's --account-for-embedding/loss-in-pipeline-split as first/last stage layers:
    the embedding and the loss each take a layer's place, (L + e + l) / pp per rank.
    Returns (first, last, problem); problem names the values when it does not divide."""
    total = num_layers + embedding + loss
    if total % (pp * vpp):
        return (
            None,
            None,
            (
                f"num_layers + embedding + loss ({total}) must be divisible by pp*vpp "
                f"({pp}*{vpp}) when the embedding/loss count in the pipeline split"
            ),
        )
    if pp == 1:
        return None, None, None
    per = total // pp
    return (per - 1 if embedding else None), (per - 1 if loss else None), None


def shell_notes(script: shell.Script, prefix: str) -> list[Violation]:
    """What reading a launch script left to say: conditions decided as a plain run would,
    bash syntax errors read past, and --set values the script never reads (warnings)."""
    out = []
    if script.notes:
        shown = "; ".join(script.notes[:5])
        more = f"; and {len(script.notes) - 5} more" if len(script.notes) > 5 else ""
        out.append(
            Violation(
                f"{prefix}-undecided-condition",
                f"{len(script.notes)} condition(s) depend on what the script does "
                "not set, so planner took the branch a plain run takes (no "
                "arguments or environment, named files present, commands "
                f"succeeding): {shown}{more}; give --set NAME=VALUE to decide "
                "them",
                "warning",
            )
        )
    for problem in script.problems[:5]:
        out.append(
            Violation(f"{prefix}-shell-syntax", f"{problem}; planner read on past it", "warning")
        )
    for unused in script.unused_env:
        out.append(
            Violation(
                f"{prefix}-set-unused", f"--set {unused}, so the value has no effect", "warning"
            )
        )
    return out


_MAX_READ = 4 * 1024 * 1024


def script_reader(source: str):
    """read_file for shell.run: a file the script reads (a ds_config template), beside the
    script or from the working directory; None if it is not a readable regular file."""

    def read(name: str) -> str | None:
        for path in (Path(source).parent / name, Path(name)):
            try:
                if path.is_file() and path.stat().st_size <= _MAX_READ:
                    return path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return None
        return None

    return read


def model_replaced(
    stated: Iterable[tuple[str, object, str]],
    model: ModelSpec,
    rule: str,
    whose: str = "the script's",
) -> Violation | None:
    """A warning naming the model settings a file states that --model, which replaces the
    file's whole model, does not share: `stated` is (the file's name for it, its value, the
    ModelSpec field). Where the model leaves a field unset, the value it implies is compared
    (kv heads = attention heads, kv_channels = head_dim, an expert's width = the FFN's); a
    value that is not a number is left to the reader that reads it. None when all agree."""
    implied = {
        "num_kv_heads": model.num_attention_heads,
        "kv_channels": model.head_dim,
        "moe_ffn_hidden_size": model.ffn_hidden_size if model.is_moe else None,
    }
    differs = []
    for key, value, name in stated:
        try:
            said = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        theirs = getattr(model, name)
        if theirs is None:
            theirs = implied.get(name)
        if theirs is None or float(theirs) != said:
            differs.append(
                (f"{key} {value}", f"{name} {'none' if theirs is None else f'{theirs:g}'}")
            )
    if not differs:
        return None
    return Violation(
        rule,
        f"{whose} "
        + ", ".join(d[0] for d in differs)
        + (" differ" if len(differs) > 1 else " differs")
        + " from --model's "
        + ", ".join(d[1] for d in differs)
        + "; planner uses --model's",
        "warning",
    )
