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

__all__ = ["Job", "load_config", "config_from_data", "resolve_hardware", "profile_dir",
           "profile_names", "default_training"]

TOKENS_PER_STEP = 4 * 2**20   # "about 4M tokens" per step (Llama 3 paper: 4M tokens at 8k)


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
    close = ([n for n in names if text and n.startswith(text.lower())]
             or difflib.get_close_matches(text[:100], names, n=1))
    hint = (f"did you mean {' or '.join(repr(n) for n in close[:4])}? " if close else "")
    raise SpecError(f"hardware {short(text)} is not a profile or a file; {hint}"
                    f"profiles: {', '.join(names) or '(none found in ' + str(profile_dir()) + ')'}",
                    field="hardware", value=text)


def default_training(model: ModelSpec, *, seq_length: int | None = None,
                     global_batch_size: int | None = None, precision: str = "bf16",
                     **extra) -> TrainingSpec:
    """Fill the plan defaults: seq = the model's training length (else 4096), batch = about
    4M tokens rounded to a whole number of sequences."""
    seq = seq_length if seq_length is not None else (model.seq_length or 4096)
    gbs = (global_batch_size if global_batch_size is not None
           else max(1, round(TOKENS_PER_STEP / seq)))
    return parse_spec(TrainingSpec, dict(seq_length=seq, global_batch_size=gbs,
                                         precision=precision, **extra), where="training")


def config_from_data(data, *, base: Path | None = None, source: str = "config") -> tuple[Job, Layout]:
    if not isinstance(data, dict):   # parse_spec would name the class (ConfigSpec), not the file
        got = "nothing (only comments?)" if data is None else type(data).__name__
        raise SpecError(f"config {short(source, 200)} must be a mapping of keys to values at the top level, "
                        f"got {got}; see examples/")
    spec: ConfigSpec = parse_spec(ConfigSpec, data, where="")
    model = resolve_model(spec.model, base=base)
    hardware = resolve_hardware(spec.hardware, base=base)
    t = spec.training
    training = default_training(model, seq_length=t.seq_length,
                                global_batch_size=t.global_batch_size, precision=t.precision,
                                flash_attention=t.flash_attention, accounting=t.accounting,
                                fp8_recipe=t.fp8_recipe, fp8_param_gather=t.fp8_param_gather,
                                cross_entropy=t.cross_entropy, loss_parallel=t.loss_parallel)
    job = Job(model=model, hardware=hardware, num_gpus=spec.num_gpus, training=training)
    return job, layout_from_spec(spec.parallel, num_gpus=spec.num_gpus)


def load_config(path: str | Path) -> tuple[Job, Layout]:
    """Read a planner config YAML into a Job and a Layout."""
    p = Path(path)
    data = read_yaml(p, what="config")
    return config_from_data(data, base=p.parent, source=str(p))
