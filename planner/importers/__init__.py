"""Read a training config in any format `validate` knows into a Job and a Layout.

Formats: our own YAML (`planner`), a Megatron-LM launch script or argument file (`megatron`),
a NeMo YAML (`nemo`; NeMo 2 recipes come back as format `nemo2`), a DeepSpeed ds_config.json
or Megatron-DeepSpeed launch script (`deepspeed`) and a torchtitan TOML (`torchtitan`).
Serving deployments (planner/serve/importer.py): a serving YAML with a `serving:` section
(`serve`) and the launch commands of vLLM, SGLang and TensorRT-LLM (`vllm`, `sglang`,
`trtllm`); `load_any` returns a `ServeImported` for those.
`detect_format` looks at the extension, then the content; `load_any` reads the file, applies
the --model/--hardware/--gpus/--nodes overrides and returns an `Imported` (job, layout, the
framework's own violations, format).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from planner.config import config_from_data, load_config, resolve_hardware
from planner.errors import SpecError
from planner.importers import deepspeed, megatron, nemo, torchtitan
from planner.importers.common import (DEFAULT_HARDWARE, Imported, Overrides, naming,
                                      read_text, resolve_world)
from planner.specs import read_yaml

__all__ = ["Imported", "Overrides", "FORMATS", "detect_format", "load_any"]

FORMATS = ("planner", "megatron", "nemo", "deepspeed", "torchtitan", "serve", "vllm", "sglang",
           "trtllm")

_SCRIPT_EXT = (".sh", ".bash", ".slurm", ".sbatch", ".txt", ".args", ".cmd")


def detect_format(path: str | Path) -> str:
    """One of FORMATS, from the extension and (where that is not enough) the content."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".toml":
        return "torchtitan"
    text = read_text(p, what="config")
    serving = _serving_format(text, suffix)
    if serving:
        return serving
    if suffix in _SCRIPT_EXT:
        return "deepspeed" if deepspeed.looks_like_megatron_deepspeed(text) else "megatron"
    if suffix == ".json" or text.lstrip().startswith("{"):
        data = deepspeed.parse_json(p, text, what="config", trailing=True)[0] \
            if suffix == ".json" else _yaml(text)
        return "deepspeed" if deepspeed.looks_like_deepspeed(data) else "planner"
    if suffix in (".yaml", ".yml"):
        return "nemo" if nemo.looks_like_nemo(_yaml(text)) else "planner"
    if text.lstrip().startswith(("#!", "--")) or megatron.looks_like_megatron(text):
        return "deepspeed" if deepspeed.looks_like_megatron_deepspeed(text) else "megatron"
    headers = ("[training]", "[parallelism]", "[model]")
    if any(line.strip() in headers for line in text.splitlines()):
        return "torchtitan"
    return "nemo" if nemo.looks_like_nemo(_yaml(text)) else "planner"


def _serving_format(text: str, suffix: str) -> str | None:
    """serve (a YAML with a `serving:` section), or the engine a launch script starts."""
    from planner.serve.importer import command_engine, looks_like_serve_yaml
    if suffix in (".yaml", ".yml", ".json") or not suffix:
        if looks_like_serve_yaml(_yaml(text)):
            return "serve"
    if suffix in _SCRIPT_EXT or not suffix:
        return command_engine(text)
    return None


def _yaml(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None          # read_yaml reports the syntax error with its position


def load_any(path: str | Path, *, model: str | None = None, hardware: str | None = None,
             gpus: int | None = None, nodes: int | None = None) -> Imported:
    """Read `path` in whatever format it is; options fill or override what it lacks."""
    ov = Overrides(model=model, hardware=hardware, gpus=gpus, nodes=nodes)
    p = Path(path)
    fmt = detect_format(p)
    if fmt in ("serve", "vllm", "sglang", "trtllm"):
        return _serve(p, fmt, ov)
    if fmt == "planner":
        return _planner(p, ov)
    with naming(str(p)):
        return _framework(p, fmt, ov)


def _serve(p: Path, fmt: str, ov: Overrides):
    """A serving deployment (planner/serve/importer.py): a ServeImported."""
    from planner.serve.importer import load_serve_command, load_serve_yaml
    with naming(str(p)):
        if fmt == "serve":
            return load_serve_yaml(p, read_yaml(p, what="config"), ov)
        return load_serve_command(p, read_text(p, what=f"{fmt} launch script"), fmt, ov)


def _framework(p: Path, fmt: str, ov: Overrides) -> Imported:
    if fmt == "megatron":
        return megatron.load(p, read_text(p, what="Megatron-LM script"), ov)
    if fmt == "torchtitan":
        return torchtitan.load(p, torchtitan.parse_toml(p, read_text(p, what="torchtitan config")),
                               ov)
    if fmt == "deepspeed":
        text = read_text(p, what="DeepSpeed config")
        if text.lstrip().startswith("{"):
            return deepspeed.load_text(p, text, ov)
        if p.suffix.lower() in (".yaml", ".yml"):
            return deepspeed.load(p, read_yaml(p, what="ds_config"), ov)
        return deepspeed.load_script(p, text, ov)
    return nemo.load(p, read_yaml(p, what="NeMo config"), ov)


def _planner(p: Path, ov: Overrides) -> Imported:
    """Our own YAML: load_config, or the same data with the overrides applied."""
    if ov == Overrides():
        job, layout = load_config(p)
        return Imported(job, layout, [], "planner", str(p))
    data = read_yaml(p, what="config")
    if not isinstance(data, dict):
        raise SpecError(f"config {str(p)!r} must be a mapping of keys to values; see examples/")
    data = dict(data)
    if ov.model is not None:
        data["model"] = ov.model
    if ov.hardware is not None:
        data["hardware"] = ov.hardware
    if ov.gpus is not None or ov.nodes is not None:
        hw = resolve_hardware(data.get("hardware", DEFAULT_HARDWARE), base=p.parent)
        data["num_gpus"] = resolve_world(ov, hardware=hw, source=str(p))
    if "num_gpus" not in data:
        raise SpecError(f"config {str(p)!r} has no num_gpus; add num_gpus: N or give --gpus N "
                        "or --nodes N")
    job, layout = config_from_data(data, base=p.parent, source=str(p))
    return Imported(job, layout, [], "planner", str(p))
