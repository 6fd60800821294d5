"""Megatron-Bridge partial override YAMLs (ConfigContainer-shaped: some of model/train/ddp/
optimizer/mixed_precision/comm_overlap) read as the overrides of the --model they change
(planner/frameworks/nemo/bridge.py). Fixtures: tests/data/import/bridge/ (written for these
tests); numbers derived inline."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.frameworks import detect_format, load_any

DATA = Path(__file__).resolve().parent / "data" / "import" / "bridge"


def _rules(imported) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in imported.violations:
        out.setdefault(v.rule, []).append(v.message)
    return out


def test_a_performance_override_is_read_over_the_model():
    path = DATA / "perf_overrides_tp4_pp2.yaml"
    assert detect_format(path) == "nemo"
    imported = load_any(path, model="llama3-70b", gpus=64)
    assert imported.format == "megatron-bridge"
    lay = imported.layout
    # 64 GPUs / (tp 4 x pp 2 x cp 1) = dp 8
    assert (lay.tp, lay.pp, lay.cp, lay.dp) == (4, 2, 1, 8)
    assert lay.sp and lay.zero == 1 and lay.tp_comm_overlap
    assert lay.overlap_grad_reduce and lay.overlap_param_gather
    assert imported.job.training.global_batch_size == 128
    assert imported.job.training.seq_length == 8192
    assert imported.job.model.name == "Llama 3 70B"
    (note,) = _rules(imported)["bridge-overrides"]
    assert "overrides of --model llama3-70b" in note and "not a recipe's" in note


def test_a_partial_override_warns_unknown_sections_with_did_you_mean():
    imported = load_any(DATA / "ddp_only_typo.yaml", model="llama3-8b", gpus=8)
    assert imported.format == "megatron-bridge"
    unknown = _rules(imported)["bridge-unknown-key"]
    assert any("did you mean 'optimizer'" in m for m in unknown)
    note = _rules(imported)["bridge-overrides"][0]
    assert "no train, optimizer, mixed_precision sections" in note
    assert imported.layout.grad_reduce_in_fp32 is False  # ddp.grad_reduce_in_fp32


def test_an_override_without_model_asks_for_it():
    with pytest.raises(SpecError, match="override file without a model shape; give --model"):
        load_any(DATA / "ddp_only_typo.yaml", gpus=8)


@pytest.mark.parametrize(
    "text,fmt",
    [
        ("model: llama3-8b\nnum_gpus: 8\n", "planner"),  # ours
        ("train:\n  micro_batch_size: 2\n", "nemo"),  # a Bridge section alone
        ("mixed_precision: bf16_mixed\nmodel:\n  tensor_model_parallel_size: 2\n", "nemo"),
    ],
    ids=["planner", "train-only", "mixed-precision"],
)
def test_detection(tmp_path, text, fmt):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert detect_format(path) == fmt


RECIPE = DATA / "recipe_small_gpt_container.yaml"


def test_an_override_over_a_whole_container_keeps_what_it_does_not_set(tmp_path):
    path = tmp_path / "override.yaml"
    path.write_text(
        "model:\n  tensor_model_parallel_size: 4\n  context_parallel_size: 1\n"
        "train:\n  global_batch_size: 512\n"
    )
    imported = load_any(path, model=str(RECIPE), gpus=64)
    lay, job = imported.layout, imported.job
    # tp 4 and cp 1 from the override, pp 1 from the recipe: dp = 64 / 4 = 16
    assert (lay.tp, lay.pp, lay.cp, lay.dp) == (4, 1, 1, 16)
    assert lay.micro_batch_size == 2 and lay.zero == 1 and lay.sp  # the recipe's
    assert job.training.global_batch_size == 512 and job.training.seq_length == 4096
    assert job.model.num_layers == 16 and job.model.vocab_size == 32000
    (note,) = _rules(imported)["bridge-overrides"]
    assert "overrides of the recipe" in note


def test_an_override_can_break_its_recipe_as_bridge_would_say():
    # the performance override sets model.seq_length 8192; the recipe's dataset keeps 4096
    imported = load_any(DATA / "perf_overrides_tp4_pp2.yaml", model=str(RECIPE), gpus=64)
    (msg,) = _rules(imported)["bridge-seq-length-mismatch"]
    assert "(8192) must equal dataset.seq_length (4096)" in msg
