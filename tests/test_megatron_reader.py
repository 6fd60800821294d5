"""Megatron-LM's functional-test model_config.yaml (ENV_VARS + MODEL_ARGS, as in Megatron-LM's
tests/functional_tests/test_cases/*/*/model_config.yaml) read as the launch it configures.
Fixture: tests/data/import/megatron/ (written for these tests); numbers derived inline."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.errors import SpecError
from planner.frameworks import detect_format, load_any

DATA = Path(__file__).resolve().parent / "data" / "import" / "megatron"
CONFIG = DATA / "functional_gpt_tp2_pp2_model_config.yaml"


def _rules(imported) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in imported.violations:
        out.setdefault(v.rule, []).append(v.message)
    return out


def test_a_functional_test_config_is_a_megatron_launch():
    assert detect_format(CONFIG) == "megatron"
    imported = load_any(CONFIG, gpus=8)
    assert imported.format == "megatron"
    lay, job = imported.layout, imported.job
    # 8 GPUs / (tp 2 x pp 2) = dp 2; 32 = micro 4 x 4 micro-batches x dp 2
    assert (lay.tp, lay.pp, lay.dp, lay.micro_batch_size) == (2, 2, 2, 4)
    assert lay.sp and lay.zero == 1  # --sequence-parallel, distributed opt
    assert job.training.global_batch_size == 32 and job.training.seq_length == 1024
    m = job.model
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (12, 512, 8)
    assert m.tied_embeddings  # --untie...: false leaves the flag out
    assert m.vocab_size == 50257  # GPT2BPETokenizer
    (note,) = _rules(imported)["megatron-test-config-keys"]
    assert "TEST_TYPE, METRICS" in note
    assert not [v for v in imported.violations if v.severity == "error"]


def test_the_world_size_comes_from_the_options():
    with pytest.raises(SpecError, match="give --gpus N"):
        load_any(CONFIG)
    # --nodes 2 x 8 GPUs per node (h100-sxm) = 16: dp = 16 / 4 = 4
    assert load_any(CONFIG, nodes=2).layout.dp == 4


def _config(tmp_path, env: dict, args: dict | None = None) -> Path:
    data = {
        "ENV_VARS": env,
        "MODEL_ARGS": {
            "--num-layers": 4,
            "--hidden-size": 256,
            "--num-attention-heads": 4,
            "--seq-length": 512,
            "--max-position-embeddings": 512,
            "--micro-batch-size": 1,
            "--vocab-size": 1000,
            "--tokenizer-type": "NullTokenizer",
            "--bf16": True,
            **(args or {}),
        },
    }
    path = tmp_path / "model_config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_num_gpus_env_var_is_the_world_size(tmp_path):
    imported = load_any(_config(tmp_path, {"NUM_GPUS": 4}))
    assert imported.job.num_gpus == 4
    assert "NUM_GPUS=4" in _rules(imported)["megatron-world-from-variable"][0]
    # NullTokenizer adds an EOD token: 1000 + 1
    assert imported.job.model.vocab_size == 1001


def test_unknown_flags_in_model_args_get_a_did_you_mean(tmp_path):
    imported = load_any(_config(tmp_path, {"NUM_GPUS": 1}, {"--tensor-model-paralel-size": 1}))
    (msg,) = _rules(imported)["megatron-unknown-flag"]
    assert "did you mean '--tensor-model-parallel-size'" in msg


def test_a_list_value_is_the_flags_values(tmp_path):
    imported = load_any(
        _config(
            tmp_path,
            {"NUM_GPUS": 2},
            {"--recompute-granularity": "selective", "--recompute-modules": ["mlp", "core_attn"]},
        )
    )
    assert imported.layout.recompute == "selective"
    assert set(imported.layout.recompute_modules) == {"mlp", "core_attn"}


def test_a_model_args_key_that_is_not_a_flag_is_named(tmp_path):
    imported = load_any(_config(tmp_path, {"NUM_GPUS": 1}, {"num-layers": 4}))
    msgs = [v.message for v in imported.violations if v.rule == "megatron-test-config-keys"]
    assert any("'num-layers' is not a flag" in m for m in msgs)
