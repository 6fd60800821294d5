"""DeepSpeed files (planner/frameworks/deepspeed/reader.py), second round: Ulysses and FPDT,
a script's own total GPU count, GPT-2 BPE files without --tokenizer-type, a Hugging Face
Trainer ds_config with "auto" values, a sed template that is missing, and planner's own
`--format deepspeed` export read back through validate. Fixtures: tests/data/import/deepspeed/
(written for these tests); every expected number is derived in the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.config import load_config
from planner.errors import SpecError
from planner.frameworks import load_any
from planner.frameworks.export import export
from planner.validate import validate

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "import" / "deepspeed"


def _rules(imported) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in imported.violations:
        out.setdefault(v.rule, []).append(v.message)
    return out


# ------------------------------------------------------------- Ulysses, NUM_GPUS, GPT-2 BPE


def test_ulysses_is_cp_over_all_to_all_taken_out_of_the_data_parallel_ranks():
    imported = load_any(DATA / "ulysses_gpt2_64gpus.sh")
    lay = imported.layout
    # Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed megatron/core/parallel_state.py):
    # DP = world / (tp * pp * sp) = 64 / (1 * 1 * 4) = 16; DeepSpeed-Ulysses (arXiv 2309.14509)
    # exchanges heads with all-to-all
    assert (lay.tp, lay.pp, lay.cp, lay.dp) == (1, 1, 4, 16)
    assert lay.cp_comm_type == "a2a"
    # train_batch_size 64 = micro 1 x GAS 4 x DP 16
    assert imported.job.training.global_batch_size == 64 and lay.micro_batch_size == 1
    fpdt = _rules(imported)["deepspeed-fpdt-not-modelled"]
    assert "--ds-sequence-parallel-fpdt and --ds-sequence-parallel-fpdt-offloading" in fpdt[0]
    assert not [v for v in imported.violations if v.severity == "error"]


def test_the_scripts_own_num_gpus_is_the_world_size_with_a_note():
    imported = load_any(DATA / "ulysses_gpt2_64gpus.sh")
    assert imported.job.num_gpus == 64  # NUM_GPUS=64 in the script
    (note,) = _rules(imported)["megatron-world-from-variable"]
    assert "NUM_GPUS=64" in note
    # --gpus replaces it, and then there is nothing to say
    again = load_any(DATA / "ulysses_gpt2_64gpus.sh", gpus=32)
    assert again.job.num_gpus == 32 and "megatron-world-from-variable" not in _rules(again)


@pytest.mark.parametrize(
    "text,world",
    [
        ("NUM_GPUS=16\n", 16),
        ("TOTAL_GPUS=24\n", 24),
        ("GPUS_PER_NODE=8\nNUM_NODES=3\n", 24),  # per node x nodes, as before
        ("WORLD_SIZE=40\n", 40),
    ],
    ids=["NUM_GPUS", "TOTAL_GPUS", "per-node-x-nodes", "WORLD_SIZE"],
)
def test_world_size_variables(tmp_path, text, world, launcher="deepspeed"):
    (tmp_path / "ds.json").write_text(
        '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}}'
    )
    script = tmp_path / "run.sh"
    script.write_text(
        text + f"{launcher} pretrain_gpt.py --num-layers 2 --hidden-size 256 "
        "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
        "--micro-batch-size 1 --vocab-size 1000 --deepspeed --deepspeed_config "
        "ds.json\n"
    )
    assert load_any(script).job.num_gpus == world


def test_torchruns_own_count_wins_over_a_total_variable(tmp_path):
    # torchrun --nproc-per-node 8 without --nnodes runs one node: 8 GPUs, whatever NUM_GPUS says
    test_world_size_variables(tmp_path, "NUM_GPUS=64\n", 8, launcher="torchrun --nproc-per-node 8")


def test_gpt2_vocab_and_merge_files_without_a_tokenizer_type_are_gpt2s_50257():
    imported = load_any(DATA / "ulysses_gpt2_64gpus.sh")
    # GPT-2's byte-level BPE has 50,257 tokens (Radford et al. 2019, section 2.3)
    assert imported.job.model.vocab_size == 50257
    (note,) = _rules(imported)["deepspeed-gpt2-vocabulary"]
    assert "50,257" in note and "gpt2-vocab.json" in note
    # --vocab-size still wins, without the note
    given = load_any(DATA / "ulysses_gpt2_64gpus.sh", vocab_size=50304)
    assert given.job.model.vocab_size == 50304
    assert "deepspeed-gpt2-vocabulary" not in _rules(given)


# ------------------------------------------------------------- "auto" (Hugging Face Trainer)

AUTO = [
    # no options: the Trainer's defaults, micro 8 x GAS 1 x DP 8 = 64
    (None, None, 8, 64, 1),
    # --micro-batch-size 2: GAS 1 (default), 2 x 1 x 8 = 16
    (None, 2, 2, 16, 1),
    # --global-batch-size 128 alone: GAS "auto" is 1, micro = 128 / 8 = 16
    (128, None, 16, 128, 1),
    # both: GAS = 128 / (2 x 8) = 8
    (128, 2, 2, 128, 8),
]


@pytest.mark.parametrize("gbs,mbs,micro,batch,gas", AUTO, ids=["defaults", "mbs", "gbs", "gbs+mbs"])
def test_auto_batch_keys_come_from_the_options_or_the_trainers_defaults(
    gbs, mbs, micro, batch, gas
):
    imported = load_any(
        DATA / "hf_trainer_auto_zero3.json",
        model="llama3-8b",
        gpus=8,
        global_batch_size=gbs,
        micro_batch_size=mbs,
    )
    assert imported.layout.micro_batch_size == micro and imported.layout.dp == 8
    assert imported.job.training.global_batch_size == batch
    notes = _rules(imported)["deepspeed-auto-value"]
    said = " ".join(notes)
    assert f"train_micro_batch_size_per_gpu {micro}" in said
    assert f"train_batch_size {batch}" in said
    assert f"gradient_accumulation_steps {gas}" in said
    for option, value in (("--micro-batch-size", mbs), ("--global-batch-size", gbs)):
        # each value says where it came from: the option when given, else the option to give
        assert (f"from {option}" in said) == (value is not None)
        assert option in said
    assert imported.layout.zero == 3
    assert not [v for v in imported.violations if v.severity == "error"]


def test_a_batch_option_replacing_a_number_in_the_file_says_so(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(
        '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}}'
    )
    imported = load_any(path, model="llama3-8b", gpus=8, global_batch_size=16, micro_batch_size=2)
    # 16 = micro 2 x GAS 1 x DP 8
    assert imported.job.training.global_batch_size == 16 and imported.layout.micro_batch_size == 2
    replaced = " ".join(_rules(imported)["deepspeed-batch-replaced"])
    assert "--global-batch-size 16 replaces the ds_config's train_batch_size 32" in replaced
    assert "--micro-batch-size 2 replaces" in replaced


def test_batch_options_are_refused_for_files_that_set_their_own_batch():
    with pytest.raises(SpecError, match='--global-batch-size fills the "auto" batch keys'):
        load_any(
            ROOT / "tests" / "data" / "import" / "megatron_llama3_70b_1node.sh",
            global_batch_size=64,
        )


def test_cli_validate_takes_the_batch_options():
    result = CliRunner().invoke(
        app,
        [
            "validate",
            str(DATA / "hf_trainer_auto_zero3.json"),
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--json",
            "--global-batch-size",
            "64",
            "--micro-batch-size",
            "1",
        ],
    )
    out = json.loads(result.output)
    assert out["job"]["global_batch_size"] == 64 and out["layout"]["micro_batch_size"] == 1
    assert out["layout"]["num_microbatches"] == 8  # 64 / (1 x DP 8)
    bad = CliRunner().invoke(
        app,
        [
            "validate",
            str(DATA / "hf_trainer_auto_zero3.json"),
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--micro-batch-size",
            "0",
        ],
    )
    assert bad.exit_code == 2 and "--micro-batch-size" in bad.output


# ------------------------------------------------------------- a missing sed template


def test_a_missing_sed_template_is_named_as_a_file_not_beside_the_script():
    with pytest.raises(SpecError) as exc:
        load_any(DATA / "sed_template_missing.sh")
    message = exc.value.message
    assert "template file ds_config_gpt_TEMPLATE.json, which is not beside the script" in message
    assert "command planner does not run" not in message


def test_the_same_script_reads_once_the_template_is_there(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text((DATA / "sed_template_missing.sh").read_text())
    (tmp_path / "ds_config_gpt_TEMPLATE.json").write_text(
        '{"train_batch_size": CONFIG_BATCH_SIZE, "train_micro_batch_size_per_gpu": '
        'CONFIG_MBSIZE, "bf16": {"enabled": true}}'
    )
    imported = load_any(script)
    # GBS 64 = MBS 2 x GAS 4 x DP 8
    assert imported.job.training.global_batch_size == 64 and imported.layout.micro_batch_size == 2


# ------------------------------------------------------------- planner's own export, read back

EXAMPLES = ["llama3-8b-128k-64xh100", "llama3-70b-2048xh100", "mixtral-8x7b-64xh100"]


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("suffix", [".json", ".sh"])
def test_planners_deepspeed_export_validates_without_model_or_gpus(tmp_path, name, suffix):
    job, layout = load_config(ROOT / "examples" / f"{name}.yaml")
    path = tmp_path / f"{name}{suffix}"
    path.write_text(export(job, layout, "deepspeed"))
    result = CliRunner().invoke(
        app, ["validate", str(path), "--hardware", job.hardware.name, "--json"]
    )
    assert result.exit_code in (0, 1), result.output
    out = json.loads(result.output)
    assert out["format"] == "deepspeed"
    assert out["job"]["num_gpus"] == job.num_gpus
    assert out["job"]["global_batch_size"] == job.training.global_batch_size
    imported = load_any(path, hardware=job.hardware.name)
    assert imported.job.model.vocab_size == job.model.vocab_size
    assert imported.job.model.num_layers == job.model.num_layers
    for key in ("tp", "pp", "cp", "ep", "micro_batch_size"):
        assert getattr(imported.layout, key) == getattr(layout, key), key
    assert "deepspeed-export-vocabulary" in _rules(imported)
    original = validate(job, layout)
    again = validate(imported.job, imported.layout, extra=imported.violations)
    assert again.valid == original.valid
