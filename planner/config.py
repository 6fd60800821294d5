"""From files and names to a resolved `Job` (model, hardware, GPUs, training) and a `Layout`.

`load_config(path)` reads our YAML config; `resolve_hardware` finds a profile by name or path;
`default_training` fills the `plan` defaults (the model's sequence length, ~4M tokens a step).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from planner.errors import SpecError, short
from planner.io import MAX_NAME_CHARS, read_yaml, ref_path, safe_is_file
from planner.layout import Layout, layout_from_spec
from planner.presets import resolve_model
from planner.specs import ConfigSpec, HardwareSpec, ModelSpec, TrainingSpec, parse_spec

__all__ = [
    "Job",
    "load_config",
    "config_from_data",
    "resolve_hardware",
    "profile_dir",
    "profile_names",
    "default_training",
    "default_batch",
]

TOKENS_PER_STEP = 4 * 2**20  # "about 4M tokens" per step (Llama 3 paper: 4M tokens at 8k)

# The default global batch grows with the cluster as published recipes do (default_batch):
# at least TOKENS_PER_STEP (Llama 3's first batch, 4M tokens, arXiv 2407.21783 sec. 3.4.1;
# Megatron-Bridge's Llama 3.1 405B recipe, 512 x 8192 = 4M: recipes/llama/llama31_405b.py),
# and per GPU what the largest published runs used:
DENSE_TOKENS_PER_GPU = 16 * 2**20 // 16384
"""1,024: Llama 3 405B's final batch, 16M tokens per step on 16,384 H100s (arXiv 2407.21783
sec. 3.4.1 and 3.3.2)."""
MOE_TOKENS_PER_GPU = 15360 * 4096 // 2048
"""30,720: DeepSeek-V3's batch, 15,360 sequences of 4,096 tokens on 2,048 H800s (arXiv
2412.19437 sec. 4.2 and 3.1)."""


@dataclass(frozen=True)
class Job:
    """What to train (model, training) on what (hardware, num_gpus)."""

    model: ModelSpec
    hardware: HardwareSpec
    num_gpus: int
    training: TrainingSpec


def profile_dir() -> Path:
    """hardware_profiles/: beside the package in a checkout or an editable install, else the
    installed data package planner.hardware_profiles."""
    here = Path(__file__).resolve().parent
    checkout = here.parent / "hardware_profiles"
    if checkout.is_dir():
        return checkout
    return here / "hardware_profiles"


def profile_names() -> list[str]:
    d = profile_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


@lru_cache(maxsize=64)
def _load_profile(path: str) -> HardwareSpec:
    return parse_spec(HardwareSpec, read_yaml(path, what="hardware profile"), where="hardware")


def resolve_hardware(ref: str | dict | HardwareSpec, *, base: Path | None = None) -> HardwareSpec:
    """A profile name (hardware_profiles/NAME.yaml), a path to a profile YAML, or a mapping."""
    if isinstance(ref, HardwareSpec):
        return ref
    if isinstance(ref, dict):
        return parse_spec(HardwareSpec, ref, where="hardware")
    text = str(ref)
    path = ref_path(text, base)
    if text.endswith((".yaml", ".yml")) or "/" in text:
        return _load_profile(str(path))
    named = profile_dir() / f"{text}.yaml"
    if len(text) <= MAX_NAME_CHARS and safe_is_file(named):
        return _load_profile(str(named))
    names = profile_names()
    # prefixes first: difflib alone would answer "h100" with "h200" rather than "h100-sxm"; every
    # profile the prefix names, since one would be a guess ("h100": h100-96g or h100-sxm)
    close = [n for n in names if text and n.startswith(text.lower())] or difflib.get_close_matches(
        text[:100], names, n=1
    )
    hint = f"did you mean {' or '.join(repr(n) for n in close[:4])}? " if close else ""
    raise SpecError(
        f"hardware {short(text)} is not a profile or a file; {hint}"
        f"profiles: {', '.join(names) or '(none found in ' + str(profile_dir()) + ')'}",
        field="hardware",
        value=text,
    )


def default_batch(model: ModelSpec, seq: int, num_gpus: int | None) -> tuple[int, str]:
    """(sequences per step, where that comes from): the tokens per step published recipes use
    at this scale, rounded to a whole number of sequences. At least 4M tokens
    (TOKENS_PER_STEP); with `num_gpus`, up to DENSE_TOKENS_PER_GPU (Llama 3 405B) or, for a
    mixture of experts, MOE_TOKENS_PER_GPU (DeepSeek-V3) per GPU."""
    floor = max(1, round(TOKENS_PER_STEP / seq))
    where = "about 4M tokens (Llama 3's first batch; Megatron-Bridge's recipes, 512 x 8192)"
    if num_gpus is None:
        return floor, where
    per_gpu, source = (
        (MOE_TOKENS_PER_GPU, "DeepSeek-V3's 15,360 x 4,096 on 2,048 GPUs, arXiv 2412.19437")
        if model.is_moe
        else (DENSE_TOKENS_PER_GPU, "Llama 3 405B's 16M tokens on 16,384 GPUs, arXiv 2407.21783")
    )
    scaled = round(per_gpu * num_gpus / seq)
    if scaled <= floor:
        return floor, where
    return scaled, (f"{per_gpu:,} tokens per GPU x {num_gpus:,} GPUs ({source})")


def default_training(
    model: ModelSpec,
    *,
    seq_length: int | None = None,
    global_batch_size: int | None = None,
    precision: str = "bf16",
    num_gpus: int | None = None,
    **extra,
) -> TrainingSpec:
    """Fill the plan defaults: seq = the model's training length (else 4096), batch =
    `default_batch` (about 4M tokens; with `num_gpus`, what published recipes use at that
    scale)."""
    seq = seq_length if seq_length is not None else (model.seq_length or 4096)
    gbs = (
        global_batch_size
        if global_batch_size is not None
        else default_batch(model, seq, num_gpus)[0]
    )
    return parse_spec(
        TrainingSpec,
        dict(seq_length=seq, global_batch_size=gbs, precision=precision, **extra),
        where="training",
    )


def config_from_data(
    data, *, base: Path | None = None, source: str = "config"
) -> tuple[Job, Layout]:
    if not isinstance(data, dict):  # parse_spec would name the class (ConfigSpec), not the file
        got = "nothing (only comments?)" if data is None else type(data).__name__
        raise SpecError(
            f"config {short(source, 200)} must be a mapping of keys to values at the top level, "
            f"got {got}; see examples/"
        )
    spec: ConfigSpec = parse_spec(ConfigSpec, data, where="")
    model = resolve_model(spec.model, base=base)
    hardware = resolve_hardware(spec.hardware, base=base)
    t = spec.training
    training = default_training(
        model,
        seq_length=t.seq_length,
        global_batch_size=t.global_batch_size,
        precision=t.precision,
        flash_attention=t.flash_attention,
        accounting=t.accounting,
        fp8_recipe=t.fp8_recipe,
        fp8_param_gather=t.fp8_param_gather,
        cross_entropy=t.cross_entropy,
        loss_parallel=t.loss_parallel,
        attention_kernel=t.attention_kernel,
        num_gpus=spec.num_gpus,
    )
    job = Job(model=model, hardware=hardware, num_gpus=spec.num_gpus, training=training)
    return job, layout_from_spec(spec.parallel, num_gpus=spec.num_gpus)


def load_config(path: str | Path) -> tuple[Job, Layout]:
    """Read a planner config YAML into a Job and a Layout."""
    p = Path(path)
    data = read_yaml(p, what="config")
    return config_from_data(data, base=p.parent, source=str(p))
