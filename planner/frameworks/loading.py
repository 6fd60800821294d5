"""Read a training config in any format `validate` knows into a Job and a Layout
(`planner.frameworks` re-exports these names: `from planner.frameworks import load_any`).

Formats: our own YAML (`planner`), a Megatron-LM launch script or argument file, or its
functional-test model_config.yaml (ENV_VARS + MODEL_ARGS) (`megatron`),
a NeMo YAML (`nemo`; NeMo 2 recipes come back as format `nemo2`), a DeepSpeed ds_config.json
or Megatron-DeepSpeed launch script (`deepspeed`) and a torchtitan TOML or Python
config_registry.py, read with ast and never run (`torchtitan`).
Serving deployments (planner/frameworks/engines/reader.py): a serving YAML with a `serving:` section
(`serve`) and the launch commands of vLLM, SGLang and TensorRT-LLM (`vllm`, `sglang`,
`trtllm`); `load_any` returns a `ServeImported` for those.
`detect_format` looks at the extension, then the content; `load_any` reads the file, applies
the --model/--hardware/--gpus/--nodes/--set/--vocab-size overrides and returns an `Imported`
(job, layout, the framework's own violations, format).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from planner.config import config_from_data, load_config
from planner.errors import SpecError, short
from planner.frameworks.common import (
    Imported,
    Overrides,
    apply_overrides,
    naming,
    read_text,
    suggestion_budget,
)
from planner.frameworks.deepspeed import reader as deepspeed
from planner.frameworks.megatron import reader as megatron
from planner.frameworks.nemo import reader as nemo
from planner.frameworks.torchtitan import reader as torchtitan
from planner.frameworks.writing import planned_for
from planner.io import check_tree, load_yaml, read_budget, read_yaml

__all__ = ["Imported", "Overrides", "FORMATS", "detect_format", "load_any"]

FORMATS = (
    "planner",
    "megatron",
    "nemo",
    "deepspeed",
    "torchtitan",
    "serve",
    "vllm",
    "sglang",
    "trtllm",
)

_SCRIPT_EXT = (".sh", ".bash", ".slurm", ".sbatch", ".txt", ".args", ".cmd")


def detect_format(path: str | Path) -> str:
    """One of FORMATS, from the extension and (where that is not enough) the content."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".toml", ".py"):
        return "torchtitan"  # .py: a config_registry.py, read with ast (pyconfig.py)
    text = read_text(p, what="config")
    if suffix == ".json" or (text.lstrip().startswith("{") and suffix not in _SCRIPT_EXT):
        data = (
            deepspeed.parse_json(p, text, what="config", trailing=True)[0]
            if suffix == ".json"
            else _yaml(text, p)
        )
        check_tree(data, what="config", source=short(str(p), 200))
        from planner.frameworks.engines.reader import looks_like_serve_yaml

        if looks_like_serve_yaml(data):
            return "serve"
        return "deepspeed" if deepspeed.looks_like_deepspeed(data) else "planner"
    serving = _serving_format(text, suffix, p)
    if serving:
        return serving
    if suffix in _SCRIPT_EXT:
        return "deepspeed" if deepspeed.looks_like_megatron_deepspeed(text) else "megatron"
    if suffix in (".yaml", ".yml"):
        data = _yaml(text, p)
        if megatron.looks_like_model_config(data):
            return "megatron"
        return "nemo" if nemo.looks_like_nemo(data) else "planner"
    if text.lstrip().startswith(("#!", "--")) or megatron.looks_like_megatron(text):
        return "deepspeed" if deepspeed.looks_like_megatron_deepspeed(text) else "megatron"
    headers = ("[training]", "[parallelism]", "[model]")
    if any(line.strip() in headers for line in text.splitlines()):
        return "torchtitan"
    return "nemo" if nemo.looks_like_nemo(_yaml(text, p)) else "planner"


def _yaml(text: str, source: Path):
    """The data, or None on a syntax error (read_yaml reports it with its position); the
    limits (alias bombs, nesting) are errors here already."""
    return load_yaml(text, what="config", source=short(str(source), 200), lenient=True)


def _serving_format(text: str, suffix: str, source: Path) -> str | None:
    """serve (a YAML with a `serving:` section), or the engine a launch script starts."""
    from planner.frameworks.engines.reader import command_engine, looks_like_serve_yaml

    if suffix in (".yaml", ".yml") or not suffix:
        if looks_like_serve_yaml(_yaml(text, source)):
            return "serve"
    if suffix in _SCRIPT_EXT or not suffix:
        return command_engine(text)
    return None


def load_any(
    path: str | Path,
    *,
    model: str | None = None,
    hardware: str | None = None,
    gpus: int | None = None,
    nodes: int | None = None,
    sets: tuple[tuple[str, str], ...] = (),
    vocab_size: int | None = None,
    workload: tuple[tuple[str, str], ...] = (),
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
) -> Imported:
    """Read `path` in whatever format it is; options fill or override what it lacks.
    `sets`: (NAME, VALUE) pairs a launch script takes from its environment or arguments;
    `vocab_size`: the model's vocabulary size; `workload`: (--isl/--osl/--concurrency, value)
    pairs for a serving launch command; `global_batch_size`/`micro_batch_size`: the values a
    ds_config leaves "auto" (the Hugging Face Trainer's)."""
    ov = Overrides(
        model=model,
        hardware=hardware,
        gpus=gpus,
        nodes=nodes,
        sets=tuple(sets),
        vocab_size=vocab_size,
        workload=tuple(workload),
        global_batch_size=global_batch_size,
        micro_batch_size=micro_batch_size,
    )
    p = Path(path)
    with read_budget(str(p)), suggestion_budget():
        fmt = detect_format(p)
        if fmt in ("serve", "vllm", "sglang", "trtllm"):
            if ov.vocab_size is not None:
                raise SpecError(
                    f"--vocab-size is for training configs; {short(str(p))} is a "
                    f"{fmt} serving config: remove it",
                    field="--vocab-size",
                    value=ov.vocab_size,
                )
            if ov.sets and fmt == "serve":
                raise SpecError(
                    f"--set gives a launch script's variables; {short(str(p))} is "
                    "a serving YAML, which has none: remove --set",
                    field="--set",
                )
            return _serve(p, fmt, ov)
        if ov.workload:
            flag = ov.workload[0][0]
            raise SpecError(
                f"{flag} gives a serving workload; {short(str(p))} is a {fmt} "
                f"training config: remove {flag}",
                field=flag,
                value=ov.workload[0][1],
            )
        batch = next(
            (
                f
                for f, v in (
                    ("--global-batch-size", ov.global_batch_size),
                    ("--micro-batch-size", ov.micro_batch_size),
                )
                if v is not None
            ),
            None,
        )
        if batch and fmt != "deepspeed":
            raise SpecError(
                f'{batch} fills the "auto" batch keys of a DeepSpeed ds_config; '
                f"{short(str(p))} is a {fmt} config, which sets its own batch: "
                f"remove {batch} (change the batch in the file)",
                field=batch,
            )
        if ov.sets and not _is_script(p, fmt):
            raise SpecError(
                f"--set gives a launch script's variables; {short(str(p))} is a "
                f"{fmt} config, which has none: remove --set",
                field="--set",
            )
        if fmt == "planner":
            return _vocab(_planner(p, ov), ov)
        with naming(str(p)):
            planned = planned_for(read_text(p, what=f"{fmt} config"))
            if planned is not None:
                ov = replace(ov, planned=planned)
            return _vocab(_framework(p, fmt, ov), ov)


def _is_script(p: Path, fmt: str) -> bool:
    if fmt == "megatron" or (fmt == "torchtitan" and p.suffix.lower() == ".py"):
        return True  # a torchtitan .py takes --set config=NAME
    if fmt != "deepspeed" or p.suffix.lower() in (".json", ".yaml", ".yml"):
        return False
    return not read_text(p, what="DeepSpeed config").lstrip().startswith("{")


def _vocab(imported: Imported, ov: Overrides) -> Imported:
    """--vocab-size replaces the model's vocabulary, whatever the format said."""
    model = imported.job.model
    if ov.vocab_size is None or model.vocab_size == ov.vocab_size:
        return imported
    job = replace(imported.job, model=model.model_copy(update={"vocab_size": ov.vocab_size}))
    return replace(imported, job=job)


def _serve(p: Path, fmt: str, ov: Overrides):
    """A serving deployment (planner/frameworks/engines/reader.py): a ServeImported."""
    from planner.frameworks.engines.reader import load_serve_command, load_serve_yaml

    with naming(str(p)):
        if fmt == "serve":
            return load_serve_yaml(p, read_yaml(p, what="config"), ov)
        return load_serve_command(p, read_text(p, what=f"{fmt} launch script"), fmt, ov)


def _framework(p: Path, fmt: str, ov: Overrides) -> Imported:
    if fmt == "megatron":
        if p.suffix.lower() in (".yaml", ".yml"):
            data = read_yaml(p, what="Megatron-LM test config")
            if megatron.looks_like_model_config(data):
                return megatron.load_model_config(p, data, ov)
        return megatron.load(p, read_text(p, what="Megatron-LM script"), ov)
    if fmt == "torchtitan" and p.suffix.lower() == ".py":
        return _torchtitan_python(p, ov)
    if fmt == "torchtitan":
        data = torchtitan.parse_toml(p, read_text(p, what="torchtitan config"))
        check_tree(data, what="torchtitan config", source=short(str(p), 200))
        return torchtitan.load(p, data, ov)
    if fmt == "deepspeed":
        text = read_text(p, what="DeepSpeed config")
        if text.lstrip().startswith("{"):
            return deepspeed.load_text(p, text, ov)
        if p.suffix.lower() in (".yaml", ".yml"):
            return deepspeed.load(p, read_yaml(p, what="ds_config"), ov)
        return deepspeed.load_script(p, text, ov)
    return nemo.load(p, read_yaml(p, what="NeMo config"), ov)


def _torchtitan_python(p: Path, ov: Overrides) -> Imported:
    """A torchtitan config_registry.py (planner/frameworks/torchtitan/pyconfig.py): the config
    --set config=NAME names, or the only one; read with ast, never run."""
    from planner.frameworks.torchtitan.pyconfig import read_python_config

    other = [name for name, _ in ov.sets if name != "config"]
    if other:
        raise SpecError(
            f"--set {other[0]}=...: a torchtitan Python config takes only --set "
            "config=NAME (the registry function to read); remove it",
            field="--set",
            value=other[0],
        )
    data, _, notes = read_python_config(
        p, read_text(p, what="torchtitan config"), ov.env.get("config")
    )
    check_tree(data, what="torchtitan config", source=short(str(p), 200))
    imported = torchtitan.load(p, data, replace(ov, sets=()))
    imported.violations.extend(notes)
    return imported


def _planner(p: Path, ov: Overrides) -> Imported:
    """Our own YAML: load_config, or the same data with the overrides applied."""
    if ov == Overrides():
        job, layout = load_config(p)
        return Imported(job, layout, [], "planner", str(p))
    data = read_yaml(p, what="config")
    if not isinstance(data, dict):
        raise SpecError(
            f"config {short(str(p), 200)} must be a mapping of keys to values; see examples/",
            field="config",
            value=str(p),
        )
    data = apply_overrides(data, ov, base=p.parent, source=str(p))
    if "num_gpus" not in data:
        raise SpecError(
            f"config {short(str(p), 200)} has no num_gpus; add num_gpus: N or give --gpus N "
            "or --nodes N",
            field="num_gpus",
        )
    job, layout = config_from_data(data, base=p.parent, source=str(p))
    return Imported(job, layout, [], "planner", str(p))
