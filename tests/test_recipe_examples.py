"""Production recipes, the config side: NVIDIA's Megatron-LM FP8 example fits on 8 H100 as
our YAML and as its launch script, and every published run of the calibration files loads as a
config through `planner validate`.

examples/llama3-8b-fp8-8xh100.yaml is examples/llama/train_llama3_8b_h100_fp8.sh (Megatron-LM)
written as a planner config; tests/data/import/megatron_llama3_8b_fp8_1node.sh reconstructs the
script's launch (its shape and every flag that changes memory or time, not a copy). Before the
recipe keys, planner read that script as 100.3 GiB, 127% of the GPU: --grad-reduce-in-bf16 and
--fp8-param-gather were ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.cli import app
from planner.config import load_config
from planner.frameworks import load_any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama3-8b-fp8-8xh100.yaml"
SCRIPT = ROOT / "tests" / "data" / "import" / "megatron_llama3_8b_fp8_1node.sh"
# what validating these may warn about; anything else (or any error) is a regression
NEAR_CAPACITY = {"memory-near-capacity"}
SCRIPT_WARNINGS = NEAR_CAPACITY | {
    "megatron-undecided-condition",  # `[ ! -f "$PRETRAIN_SCRIPT_PATH" ]`: taken as present
    "megatron-sp-needs-tp",  # --sequence-parallel at TP 1 (Megatron turns it off)
    "megatron-not-modelled",  # --empty-unused-memory-level (the published script)
}
FP8_SETTINGS = (
    "tp",
    "pp",
    "cp",
    "dp",
    "vpp",
    "micro_batch_size",
    "zero_stage",
    "recompute",
    "sequence_parallel",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "grad_reduce_in_fp32",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "recompute_modules",
    "cpu_offloading_num_layers",
)


def _validate(runner, *args) -> tuple[int, dict]:
    result = runner.invoke(app, ["validate", *map(str, args), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout)


def _rules(report: dict, severity: str) -> set[str]:
    return {v["rule"] for v in report[severity]}


# ------------------------------------------------------------------ NVIDIA's FP8 example


def test_the_fp8_example_fits_on_8_h100(runner):
    code, report = _validate(runner, EXAMPLE)
    assert code == 0 and report["valid"], report["errors"]
    assert _rules(report, "warnings") <= NEAR_CAPACITY
    assert report["memory"]["total_bytes"] <= report["memory"]["capacity_bytes"] * 1.02


def test_the_example_needs_the_scripts_recipe_settings(runner, tmp_path):
    # the former bug: the same job with fp32 gradients and bf16 weight copies (the two
    # flags ignored) does not fit -- so the example fitting is the settings' doing
    data = yaml.safe_load(EXAMPLE.read_text())
    data["training"]["fp8_param_gather"] = False
    data["parallel"]["grad_reduce_in_fp32"] = True
    path = tmp_path / "without-recipe-settings.yaml"
    path.write_text(yaml.safe_dump(data))
    code, report = _validate(runner, path)
    assert code == 1 and "fits-in-memory" in _rules(report, "errors")


@pytest.mark.parametrize("script", [SCRIPT], ids=["reconstructed"])
def test_the_fp8_script_validates_as_the_example_does(runner, script):
    code, report = _validate(runner, script)
    assert report["format"] == "megatron"
    assert code == 0 and report["valid"], report["errors"]
    assert _rules(report, "warnings") <= SCRIPT_WARNINGS
    _, example = _validate(runner, EXAMPLE)
    assert report["job"]["num_gpus"] == example["job"]["num_gpus"] == 8
    for key in FP8_SETTINGS:
        assert report["layout"].get(key) == example["layout"].get(key), key
    # the training settings, from the importer's Job (the JSON leaves the FP8 recipe out)
    imported, (job, _) = load_any(script), load_config(EXAMPLE)
    # (--fp8-format hybrid with an amax history is delayed scaling, Megatron's default recipe:
    # the importer leaves fp8_recipe unset, which means the same)
    assert imported.job.training.model_copy(update={"fp8_recipe": "delayed"}) == job.training
    assert imported.job.training.recipe == job.training.recipe == "delayed"
    assert imported.job.training.fp8_param_gather and job.training.fp8_param_gather
    # the script's NullTokenizer has 128,257 tokens (the preset 128,256): 128 more padded rows
    # in the embedding and the output layer, a few MiB of the ~80 GiB
    assert report["memory"]["total_bytes"] == pytest.approx(
        example["memory"]["total_bytes"], rel=1e-3
    )


def test_the_example_is_the_export_fixture_of_the_same_name():
    # tests/regen_golden.py config_path() reads examples/<name>.yaml before
    # tests/data/export/<name>.yaml, so the golden llama3-8b-fp8-8xh100.nemo.yaml is now made
    # from the example: the two must describe one job and one layout
    job, layout = load_config(EXAMPLE)
    job2, layout2 = load_config(ROOT / "tests" / "data" / "export" / "llama3-8b-fp8-8xh100.yaml")
    assert job == job2
    assert layout == layout2


# ------------------------------------------------------------------ the calibration runs

CALIBRATION = ("calibration-modern.yaml", "calibration.yaml")
CONFIG_KEYS = ("model", "hardware", "num_gpus", "training", "parallel")


def _calibration_cases():
    out = []
    for name in CALIBRATION:
        data = yaml.safe_load((ROOT / "benchmarks" / "data" / name).read_text())
        out += [pytest.param(c, id=f"{name.split('.')[0]}:{c['id']}") for c in data["cases"]]
    return out


@pytest.mark.parametrize("case", _calibration_cases())
def test_every_calibration_run_loads_as_a_config(runner, tmp_path, case):
    # each published run as a config file (its id/class/source/measured/notes dropped): it may
    # break a rule or not fit (exit 1), but it must be readable input (never exit 2 or 3)
    config = {k: case[k] for k in CONFIG_KEYS if k in case}
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = runner.invoke(app, ["validate", str(path)])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in (0, 1), result.output
