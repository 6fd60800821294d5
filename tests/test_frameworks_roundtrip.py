"""Export, then import: `planner.frameworks.export` writes a framework's file, `planner.frameworks` reads
it back, and the layout and the verdict are the ones we started from.

For every example config (examples/*.yaml) and a few layouts that exercise what the examples
do not (interleaving, context parallelism, uneven splits, recompute, each ZeRO stage, experts),
in every export format. What an exporter refuses (it says why) is skipped. The files carry
their hardware in a header line (read back; --hardware is passed anyway) and some no model
(NeMo's export leaves the tokenizer to megatron_gpt_config.yaml, Megatron-DeepSpeed's to the
user), so that comes as --model, as a user would pass.

Three mappings are lossy by design, all documented by the exporters: torchtitan has no ZeRO-1
(zero 1 is exported as FSDP without resharding after forward, which reads back as ZeRO-2), and
NeMo 1 has one distributed optimizer for zero 1 and 2 (distributed_fused_adam, read back as
zero 1: the memory of the two is within ZeRO-1's, so the plan stays an upper bound), and
DeepSpeed runs ZeRO stage 0 with bf16 on its BF16 optimizer, which shards the fp32 states like
ZeRO-1 (read back as zero 1; less memory than planned).
DeepSpeed and torchtitan imports count model states their way (16 B/param, not Megatron's 18),
so a layout on the edge of memory could change verdict; the cases here are not on the edge.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.config import config_from_data, load_config
from planner.errors import InfeasibleError
from planner.frameworks import load_any
from planner.frameworks.export import FORMATS, export
from planner.validate import validate

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))
EXTENSIONS = {
    "megatron": ".sh",
    "deepspeed": ".json",
    "torchtitan": ".toml",
    "nemo": ".yaml",
    "megatron-bridge": ".yaml",
}
COMPARED = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "micro_batch_size",
    "sequence_parallel",
    "zero_stage",
    "recompute",
    "first_stage_layers",
    "last_stage_layers",
)
LOSSY = {
    ("torchtitan", "zero_stage"): {1: 2},
    ("nemo", "zero_stage"): {2: 1},
    ("deepspeed", "zero_stage"): {0: 1},
}
TORCHTITAN_MODELS = {"Llama 3 8B", "Llama 3 70B", "Llama 3.1 405B", "DeepSeek-V3"}


def _config(model: str, num_gpus: int, seq: int, gbs: int, **parallel) -> dict:
    return dict(
        model=model,
        num_gpus=num_gpus,
        training=dict(seq_length=seq, global_batch_size=gbs),
        parallel=dict(dict(vpp=1, micro_batch_size=1), **parallel),
    )


EXTRA = {
    "70b-tp4-pp4-vpp5-cp2": _config("llama3-70b", 1024, 8192, 2048, tp=4, pp=4, vpp=5, cp=2),
    "405b-accounted-full": _config(
        "llama3-405b",
        2048,
        8192,
        1024,
        tp=8,
        pp=8,
        first_stage_layers=15,
        last_stage_layers=15,
        recompute="full",
    ),
    "70b-explicit-selective": _config(
        "llama3-70b",
        512,
        8192,
        512,
        tp=8,
        pp=4,
        first_stage_layers=18,
        last_stage_layers=18,
        recompute="selective",
    ),
    "8b-zero3-mbs2": _config(
        "llama3-8b", 64, 8192, 512, micro_batch_size=2, zero_stage=3, recompute="full"
    ),
    "8b-zero0-tp4": _config("llama3-8b", 64, 8192, 512, tp=4, zero_stage=0, recompute="full"),
    "8b-zero2-tp2": _config("llama3-8b", 64, 8192, 512, tp=2, zero_stage=2),
    "mixtral-tp2-pp2-ep4": _config(
        "mixtral-8x7b", 64, 4096, 256, tp=2, pp=2, ep=4, recompute="full"
    ),
}
CASES = [(p.stem, p) for p in EXAMPLES] + list(EXTRA.items())


def _job_layout(source):
    if isinstance(source, Path):
        return load_config(source)
    return config_from_data(source)


def _expected(fmt: str, key: str, value):
    return LOSSY.get((fmt, key), {}).get(value, value)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name,source", CASES, ids=[c[0] for c in CASES])
def test_export_then_import_gives_the_same_layout_and_verdict(tmp_path, name, source, fmt):
    job, layout = _job_layout(source)
    try:
        text = export(job, layout, fmt)
    except InfeasibleError as exc:
        pytest.skip(f"{fmt} refuses {name}: {exc.message}")
    path = tmp_path / f"{name}{EXTENSIONS[fmt]}"
    path.write_text(text)
    needs_model = fmt in ("nemo", "deepspeed") or (
        fmt == "torchtitan" and job.model.name not in TORCHTITAN_MODELS
    )
    imported = load_any(
        path,
        hardware=job.hardware.name,
        model=_model_ref(source) if needs_model else None,
        gpus=job.num_gpus if fmt == "megatron-bridge" else None,
    )  # torchrun's
    assert imported.format == fmt
    assert imported.job.num_gpus == job.num_gpus
    assert imported.job.training.global_batch_size == job.training.global_batch_size
    assert imported.job.training.seq_length == job.training.seq_length
    assert imported.job.model.num_layers == job.model.num_layers
    before, after = layout.as_dict(), imported.layout.as_dict()
    for key in COMPARED:
        assert after[key] == _expected(fmt, key, before[key]), key
    original = validate(job, layout)
    result = validate(imported.job, imported.layout, extra=imported.violations)
    assert result.valid == original.valid
    assert {v.rule for v in result.errors} == {v.rule for v in original.errors}
    assert not [v for v in imported.violations if v.severity == "error"]


def _model_ref(source) -> str:
    """The config's `model:` (what --model must name for formats without the model)."""
    from planner.io import read_yaml

    return source["model"] if isinstance(source, dict) else read_yaml(source)["model"]


GOLDEN = sorted((Path(__file__).resolve().parent / "golden").glob("*.*"))


def _regen():
    """tests/regen_golden.py, which knows where each golden's config lives (examples/, else the
    recipe configs under tests/data/)."""
    import importlib.util

    path = Path(__file__).resolve().parent / "regen_golden.py"
    spec = importlib.util.spec_from_file_location("regen_golden", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGEN = _regen()


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_exports_import_without_framework_errors(path):
    config = path.name.split(".")[0]
    example = REGEN.config_path(config)  # the config the golden was exported from
    assert example.exists(), f"{path.name}: no config {config}.yaml where regen_golden looks"
    job, _ = load_config(example)
    imported = load_any(
        path,
        hardware=job.hardware.name,
        model=_model_ref(example),
        gpus=job.num_gpus if ".megatron-bridge." in path.name else None,
    )
    assert imported.job.num_gpus == job.num_gpus
    assert not [v.message for v in imported.violations if v.severity == "error"]
