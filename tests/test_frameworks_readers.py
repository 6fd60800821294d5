"""`planner validate` on other frameworks' files: Megatron-LM scripts, NeMo YAML, DeepSpeed
ds_config.json, torchtitan TOML (planner/frameworks/).

The real configurations of docs/reference/framework-rules.md#real-configurations are written
in each framework's own format under tests/data/import/ and must get their published verdicts;
the rest checks each framework's own rules and severities, the shell-variable resolution, and
that every problem with a file is one line naming the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import app
from planner.errors import SpecError
from planner.frameworks import detect_format, load_any
from planner.readers import bash as shell
from planner.validate import validate

DATA = Path(__file__).resolve().parent / "data" / "import"


def _run(path, **opts):
    imported = load_any(path, **opts)
    return imported, validate(imported.job, imported.layout, extra=imported.violations)


def _rules(result, severity=None) -> set[str]:
    return {
        v.rule
        for v in result.errors + result.warnings
        if severity is None or v.severity == severity
    }


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------- the real configurations

# NeMo launcher Llama-3 70B (128 nodes, TP4 PP4 VP5 CP2, DP 32, MBS 1, GBS 2048, seq 8192, SP,
# distributed optimizer) and Llama-3.1 405B (576 nodes, TP8 PP9 VP7 CP2, DP 32, GBS 2016: 126
# layers = 9 ranks x 7 chunks x 2 layers) are valid; the NeMo 2 70B recipe defaults (TP4 PP4 VP5
# CP2) on one node of 8 GPUs are not: 8 % (4*4*2) != 0.
# docs/reference/framework-rules.md#real-configurations.
L70 = dict(tp=4, pp=4, vpp=5, cp=2, dp=32, micro_batch_size=1, sp=True)
L405 = dict(tp=8, pp=9, vpp=7, cp=2, dp=32, micro_batch_size=1, sp=True)
L70_1NODE = dict(tp=4, pp=4, vpp=5, cp=2, dp=1, micro_batch_size=1, sp=True)

REAL = [
    # file, options, format, world, global batch, layout, valid, expected error rules
    ("megatron_llama3_70b_128nodes.sh", {}, "megatron", 1024, 2048, L70, True, set()),
    ("megatron_llama31_405b_576nodes.sh", {}, "megatron", 4608, 2016, L405, True, set()),
    ("megatron_llama3_70b_1node.sh", {}, "megatron", 8, 512, L70_1NODE, False, {"world-size"}),
    ("nemo_llama3_70b_128nodes.yaml", {}, "nemo", 1024, 2048, L70, True, set()),
    ("nemo_llama31_405b_576nodes.yaml", {}, "nemo", 4608, 2016, L405, True, set()),
    ("nemo2_llama3_70b_recipe.yaml", {}, "nemo2", 8, 512, L70_1NODE, False, {"world-size"}),
    (
        "torchtitan_llama3_70b_128nodes.toml",
        {"nodes": 128},
        "torchtitan",
        1024,
        2048,
        L70,
        True,
        set(),
    ),
    (
        "torchtitan_llama31_405b_576nodes.toml",
        {"nodes": 576},
        "torchtitan",
        4608,
        2016,
        L405,
        True,
        set(),
    ),
    (
        "torchtitan_llama3_70b_1node.toml",
        {"nodes": 1},
        "torchtitan",
        8,
        512,
        dict(tp=4, pp=4, vpp=5, cp=2, dp=1, micro_batch_size=1, sp=True),
        False,
        {"torchtitan-world-size", "world-size"},
    ),
    # DeepSpeed expresses TP (AutoTP), PP (pipeline.stages) and Ulysses SP, not interleaving
    (
        "ds_config_llama3_70b.json",
        {"model": "llama3-70b", "nodes": 128},
        "deepspeed",
        1024,
        2048,
        dict(tp=4, pp=4, vpp=1, cp=2, dp=32, micro_batch_size=1, sp=False),
        True,
        set(),
    ),
    (
        "ds_config_llama3_8b_zero3.json",
        {"model": "llama3-8b", "gpus": 64},
        "deepspeed",
        64,
        512,
        dict(tp=1, pp=1, vpp=1, cp=1, dp=64, micro_batch_size=1, sp=False),
        True,
        set(),
    ),
]


@pytest.mark.parametrize(
    "name,opts,fmt,world,gbs,layout,valid,errors", REAL, ids=[r[0].rsplit(".", 1)[0] for r in REAL]
)
def test_real_configurations_get_their_verdicts(name, opts, fmt, world, gbs, layout, valid, errors):
    imported, result = _run(DATA / name, **opts)
    assert imported.format == fmt
    assert imported.job.num_gpus == world
    assert imported.job.training.global_batch_size == gbs
    assert imported.job.training.seq_length == 8192
    for key, value in layout.items():
        assert getattr(imported.layout, key) == value, key
    assert result.valid is valid, [v.message for v in result.errors]
    assert errors <= {v.rule for v in result.errors}


@pytest.mark.parametrize(
    "name",
    [
        "megatron_llama3_70b_128nodes.sh",
        "nemo_llama3_70b_128nodes.yaml",
        "torchtitan_llama3_70b_128nodes.toml",
    ],
)
def test_real_70b_configs_name_the_preset_and_its_distributed_optimizer(name):
    imported, result = _run(DATA / name, nodes=128)
    assert imported.job.model.name == "Llama 3 70B"
    assert imported.layout.recompute == "none"
    assert not _rules(result, "warning") & {
        "megatron-unknown-flag",
        "nemo-unknown-key",
        "torchtitan-unknown-key",
    }


def test_the_nemo_launcher_file_warns_about_nothing_it_deliberately_ignores():
    imported, _ = _run(DATA / "nemo_llama3_70b_128nodes.yaml")
    # ~90 model keys, all known; the one that changes the step time and is not modelled is
    # named (as --defer-embedding-wgrad-compute is for a Megatron-LM script), nothing else
    assert [(v.rule, v.message.split(" =")[0]) for v in imported.violations] == [
        ("nemo-not-modelled", "model.defer_embedding_wgrad_compute")
    ]
    assert imported.layout.zero == 1 and imported.layout.tp_comm_overlap


# ------------------------------------------------------------------- detecting the format


@pytest.mark.parametrize(
    "name,fmt",
    [
        ("megatron_llama3_70b_128nodes.sh", "megatron"),
        ("megatron_llama3_8b_args.txt", "megatron"),
        ("nemo_llama3_70b_128nodes.yaml", "nemo"),
        ("nemo2_llama3_70b_recipe.yaml", "nemo"),
        ("torchtitan_llama3_70b_1node.toml", "torchtitan"),
        ("ds_config_llama3_70b.json", "deepspeed"),
    ],
)
def test_detect_format_by_extension_and_content(name, fmt):
    assert detect_format(DATA / name) == fmt


def test_detect_format_sniffs_files_without_a_telling_extension(tmp_path, examples_dir):
    assert (
        detect_format(_write(tmp_path, "run", "torchrun pretrain_gpt.py --num-layers 2\n"))
        == "megatron"
    )
    assert detect_format(_write(tmp_path, "cfg", '{"train_batch_size": 8}')) == "deepspeed"
    assert detect_format(_write(tmp_path, "job", "[training]\nseq_len = 8\n")) == "torchtitan"
    assert (
        detect_format(
            _write(
                tmp_path,
                "x.sh",
                "deepspeed pretrain_gpt.py --deepspeed --deepspeed_config ds.json\n",
            )
        )
        == "deepspeed"
    )
    for example in examples_dir.glob("*.yaml"):
        assert detect_format(example) == "planner"


# ------------------------------------------------------------------- the shell subset


def test_shell_resolves_defaults_assignments_arrays_and_arithmetic():
    script = shell.run(
        'A=${A:-8}\n: ${B:=4}\nC=$((A * B))\nARGS=(--x "$A" # comment\n  --y ${C})\n'
        'S="--p 1 \\\n  --q 2"\nrun.py "${ARGS[@]}" $S --z="${D-none}" --w ${1:-first}\n'
    )
    assert script.variables["A"] == "8" and script.variables["B"] == "4"
    assert script.variables["C"] == "32"
    assert script.commands[-1].words == (
        "run.py",
        "--x",
        "8",
        "--y",
        "32",
        "--p",
        "1",
        "--q",
        "2",
        "--z=none",
        "--w",
        "first",
    )


def test_shell_marks_what_it_cannot_know_and_names_it():
    script = shell.run(
        "N=$(scontrol show hostnames | wc -l)\nrun.py --a $N --b $UNSET --c ${X:+y}\n"
    )
    words = script.commands[-1].words
    assert shell.unresolved_names(words[2]) == ["$(scontrol show hostnames | wc -l)"]
    assert shell.unresolved_names(words[4]) == ["$UNSET"]
    assert words[5:] == ("--c",)  # an empty unquoted word vanishes
    assert "never sets" in shell.why(["$UNSET"])


# ------------------------------------------------------------------- Megatron-LM

_MEGATRON_BASE = """\
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node ${GPUS_PER_NODE:-8} --nnodes ${NNODES:-2} pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
    --group-query-attention --num-query-groups 8 --seq-length 4096 \\
    --max-position-embeddings 8192 --swiglu --normalization RMSNorm \\
    --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights \\
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B \\
    --micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer \\
    {extra}
"""


def _megatron(tmp_path, extra: str = "", name: str = "run.sh") -> Path:
    return _write(tmp_path, name, _MEGATRON_BASE.replace("{extra}", extra))


def test_megatron_defaults_resolve_and_the_model_is_the_preset(tmp_path):
    imported, result = _run(_megatron(tmp_path, "--tensor-model-parallel-size ${TP:-2}"))
    assert imported.job.num_gpus == 16  # ${GPUS_PER_NODE:-8} x ${NNODES:-2}
    assert imported.layout.tp == 2 and imported.layout.dp == 8
    assert imported.job.model.name == "Llama 3 8B"
    assert imported.job.training.seq_length == 4096
    assert result.valid, [v.message for v in result.errors]


MEGATRON_RULES = [
    # extra flags, rule, severity
    ("--tensor-parallel-size 2", "megatron-unknown-flag", "error"),
    ("--tensor-model-parallel-size 2 stray", "megatron-unrecognized-argument", "error"),
    ("--sequence-parallel", "megatron-sp-needs-tp", "warning"),
    (
        "--tensor-model-parallel-size 2 --tp-comm-overlap",
        "megatron-tp-comm-overlap-needs-sp",
        "error",
    ),
    ("--recompute-granularity full", "megatron-recompute-flags", "error"),
    (
        "--recompute-granularity full --recompute-method uniform",
        "megatron-recompute-flags",
        "error",
    ),
    (
        "--recompute-granularity selective --recompute-num-layers 1",
        "megatron-recompute-flags",
        "error",
    ),
    ("--fp16", "megatron-precision-exclusive", "error"),
    ("--checkpoint-activations", "megatron-deprecated-flag", "error"),
    ("--overlap-param-gather", "megatron-overlap-param-gather", "error"),
    ("--seq-length 16384", "megatron-max-position-embeddings", "error"),
    (
        "--num-layers-per-virtual-pipeline-stage 2 --num-virtual-stages-per-pipeline-rank 2 "
        "--pipeline-model-parallel-size 2",
        "megatron-vpp-flags-exclusive",
        "error",
    ),
    (
        "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3",
        "megatron-vpp-layers",
        "error",
    ),
    ("--micro-batch-size 2", "megatron-repeated-flag", "warning"),
    ("$EXTRA_ARGS", "megatron-unresolved-variable", "warning"),
    ("--tensor-model-parallel-size 2 --context-parallel-size 1", None, None),
]


@pytest.mark.parametrize("extra,rule,severity", MEGATRON_RULES, ids=[r[0] for r in MEGATRON_RULES])
def test_megatron_rules_with_megatrons_severities(tmp_path, extra, rule, severity):
    _, result = _run(_megatron(tmp_path, extra))
    framework = {
        (v.rule, v.severity)
        for v in result.errors + result.warnings
        if v.rule.startswith("megatron-")
    }
    if rule is None:
        assert framework == set()
    else:
        assert (rule, severity) in framework


def test_megatron_unknown_flag_is_named_with_a_suggestion(tmp_path):
    _, result = _run(_megatron(tmp_path, "--tensor-parallel-size 2"))
    message = next(v.message for v in result.errors if v.rule == "megatron-unknown-flag")
    assert "'--tensor-parallel-size'" in message and "--tensor-model-parallel-size" in message


def test_megatron_sp_at_tp1_is_switched_off_and_gqa_needs_its_flag(tmp_path):
    text = _MEGATRON_BASE.replace("--group-query-attention ", "").replace(
        "{extra}", "--sequence-parallel"
    )
    imported, result = _run(_write(tmp_path, "run.sh", text))
    assert imported.layout.sp is False  # what Megatron-LM actually runs
    assert "megatron-gqa-flag" in _rules(result, "warning")
    assert imported.job.model.kv_heads == 32  # MHA without --group-query-attention
    assert "sp-needs-tp" not in _rules(result)  # reported once, in Megatron's terms


def test_megatron_account_for_embedding_and_loss_is_an_uneven_split(tmp_path):
    imported, result = _run(
        _megatron(
            tmp_path,
            "--pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split "
            "--account-for-loss-in-pipeline-split",
        )
    )
    assert (imported.layout.first_stage_layers, imported.layout.last_stage_layers) == (16, 16)
    _, bad = _run(
        _megatron(
            tmp_path, "--pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split"
        )
    )
    assert "megatron-pipeline-split" in _rules(bad, "error")


def test_megatron_argument_file_needs_the_world_size(tmp_path):
    with pytest.raises(SpecError) as err:
        load_any(DATA / "megatron_llama3_8b_args.txt")
    assert "give --gpus N" in err.value.message and "--nodes N" in err.value.message
    assert "\n" not in err.value.message
    imported, result = _run(DATA / "megatron_llama3_8b_args.txt", nodes=8)
    assert imported.job.num_gpus == 64 and imported.layout.recompute == "selective"
    assert result.valid


@pytest.mark.parametrize(
    "extra,names",
    [
        ("--num-layers $NUM_LAYERS", ["--num-layers", "$NUM_LAYERS", "--model"]),
        ("--tensor-model-parallel-size $TP", ["--tensor-model-parallel-size", "$TP"]),
        ("--micro-batch-size $(nproc)", ["--micro-batch-size", "$(nproc)", "does not run"]),
    ],
)
def test_megatron_unresolvable_values_are_named(tmp_path, extra, names):
    with pytest.raises(SpecError) as err:
        load_any(_megatron(tmp_path, extra))
    for name in names:
        assert name in err.value.message
    assert "\n" not in err.value.message


def test_megatron_unresolvable_world_size_names_the_variable_and_the_options(tmp_path):
    text = _MEGATRON_BASE.replace("${NNODES:-2}", "$SLURM_NNODES").replace("{extra}", "")
    path = _write(tmp_path, "run.sh", text)
    with pytest.raises(SpecError) as err:
        load_any(path)
    assert (
        "$SLURM_NNODES" in err.value.message and "give --gpus N or --nodes N" in err.value.message
    )
    assert load_any(path, nodes=4).job.num_gpus == 32  # --nodes x the script's 8 per node


def test_megatron_missing_shape_needs_model_and_model_replaces_it(tmp_path):
    path = _write(
        tmp_path,
        "run.sh",
        "torchrun --nproc_per_node 8 pretrain_gpt.py "
        "--tensor-model-parallel-size 8 --micro-batch-size 1 "
        "--global-batch-size 64 --bf16 $MODEL_ARGS\n",
    )
    with pytest.raises(SpecError) as err:
        load_any(path)
    assert "--model" in err.value.message
    imported, result = _run(path, model="llama3-70b", hardware="b200")
    assert imported.job.model.name == "Llama 3 70B" and imported.job.hardware.name == "b200"
    assert "megatron-unresolved-variable" in _rules(result, "warning")


def test_megatron_required_shape_flags(tmp_path):
    text = _MEGATRON_BASE.replace("--max-position-embeddings 8192 ", "").replace("{extra}", "")
    _, result = _run(_write(tmp_path, "run.sh", text))
    message = next(v.message for v in result.errors if v.rule == "megatron-required-flag")
    assert "--max-position-embeddings" in message


# ------------------------------------------------------------------- NeMo


def _nemo(
    tmp_path,
    model_extra: dict | None = None,
    top_extra: dict | None = None,
    strategy: dict | None = None,
) -> Path:
    import yaml

    data = yaml.safe_load((DATA / "nemo_llama3_70b_128nodes.yaml").read_text())
    data["model"].update(model_extra or {})
    data.update(top_extra or {})
    return _write(tmp_path, "nemo.yaml", yaml.safe_dump(data))


NEMO_RULES = [
    (
        {
            "tensor_model_parallel_size": 1,
            "pipeline_model_parallel_size": 8,
            "virtual_pipeline_model_parallel_size": None,
        },
        "nemo-sp-needs-tp",
        "warning",
    ),
    ({"activations_checkpoint_granularity": "full"}, "nemo-recompute-flags", "error"),
    (
        {"activations_checkpoint_granularity": "selective", "activations_checkpoint_num_layers": 1},
        "nemo-recompute-flags",
        "error",
    ),
    ({"tensor_parallel_size": 4}, "nemo-unknown-key", "warning"),
]


@pytest.mark.parametrize(
    "extra,rule,severity", NEMO_RULES, ids=[r[1] + "-" + r[2] for r in NEMO_RULES]
)
def test_nemo1_rules_with_nemos_severities(tmp_path, extra, rule, severity):
    _, result = _run(_nemo(tmp_path, extra))
    assert rule in _rules(result, severity)


def test_nemo_unknown_keys_are_named_trainer_keys_are_errors(tmp_path):
    import yaml

    data = yaml.safe_load((DATA / "nemo_llama3_70b_128nodes.yaml").read_text())
    data["trainer"]["num_node"] = 4
    data["model"]["tensor_parallel_size"] = 4
    _, result = _run(_write(tmp_path, "nemo.yaml", yaml.safe_dump(data)))
    messages = {v.rule: v.message for v in result.errors + result.warnings}
    assert "'trainer.num_node'" in messages["nemo-unknown-trainer-key"]
    assert "'trainer.num_nodes'" in messages["nemo-unknown-trainer-key"]  # the suggestion
    assert "'model.tensor_parallel_size'" in messages["nemo-unknown-key"]
    assert not result.valid


def test_nemo2_rejects_sp_at_tp1_which_nemo1_switches_off(tmp_path):
    import yaml

    data = yaml.safe_load((DATA / "nemo2_llama3_70b_recipe.yaml").read_text())
    data["trainer"]["strategy"].update(
        tensor_model_parallel_size=1,
        context_parallel_size=1,
        virtual_pipeline_model_parallel_size=None,
    )
    data["trainer"]["strategy"]["pipeline_model_parallel_size"] = 8
    imported, result = _run(_write(tmp_path, "nemo2.yaml", yaml.safe_dump(data)))
    assert imported.format == "nemo2"
    assert "nemo-sp-needs-tp" in _rules(result, "error")


def test_nemo_without_a_known_tokenizer_needs_model(tmp_path):
    path = _nemo(tmp_path, {"tokenizer": {"library": "sentencepiece", "model": "/data/tok.model"}})
    with pytest.raises(SpecError) as err:
        load_any(path)
    assert "--model" in err.value.message
    assert load_any(path, model="llama3-70b").job.model.vocab_size == 128256


# ------------------------------------------------------------------- DeepSpeed


def _ds(tmp_path, **changes) -> Path:
    data = json.loads((DATA / "ds_config_llama3_8b_zero3.json").read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return _write(tmp_path, "ds_config.json", json.dumps(data))


DS_RULES = [
    ({"train_batch_size": 500}, "deepspeed-batch-size", "error"),
    ({"pipeline": {"stages": 2}}, "deepspeed-pipeline-zero", "error"),
    (
        {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}},
        "deepspeed-offload",
        "warning",
    ),
    (
        {"zero_optimization": {"stage": 3, "overlap_com": True}},
        "deepspeed-unknown-zero-key",
        "error",
    ),
    ({"trian_batch_size": 512}, "deepspeed-unknown-key", "warning"),
    ({"fp16": {"enabled": True}}, "deepspeed-precision-exclusive", "error"),
    ({"zero_optimization": {"stage": 4}}, "deepspeed-zero-stage", "error"),
]


@pytest.mark.parametrize("changes,rule,severity", DS_RULES, ids=[r[1] for r in DS_RULES])
def test_deepspeed_rules_with_deepspeeds_severities(tmp_path, changes, rule, severity):
    _, result = _run(_ds(tmp_path, **changes), model="llama3-8b", gpus=64)
    assert rule in _rules(result, severity)


def test_deepspeed_batch_keys_resolve_like_deepspeed(tmp_path):
    imported, result = _run(_ds(tmp_path, train_batch_size=None), model="llama3-8b", gpus=64)
    assert imported.job.training.global_batch_size == 1 * 8 * 64  # micro * GAS * DP
    imported, _ = _run(
        _ds(tmp_path, train_micro_batch_size_per_gpu=None), model="llama3-8b", gpus=64
    )
    assert imported.layout.micro_batch_size == 1  # 512 / (8 * 64)
    assert imported.job.training.accounting == "deepspeed"
    assert imported.layout.zero == 3 and imported.layout.recompute == "full"


@pytest.mark.parametrize(
    "key", ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"]
)
def test_deepspeed_batch_keys_past_planners_bound_are_one_line(tmp_path, key):
    """A batch beyond specs.MAX_BATCH (1e8 sequences, as in our own YAML) stops at reading:
    the long fuzz profile found 10**400 sequences reaching a float conversion (exit 3)."""
    with pytest.raises(SpecError) as err:
        load_any(_ds(tmp_path, **{key: 10**400}), model="llama3-8b", gpus=64)
    assert err.value.field == key and "larger than planner takes" in err.value.message
    assert "\n" not in err.value.message and len(err.value.message) < 300


@pytest.mark.parametrize(
    "opts,needle", [({"gpus": 64}, "--model"), ({"model": "llama3-8b"}, "--gpus N")]
)
def test_deepspeed_names_what_the_ds_config_lacks(opts, needle):
    with pytest.raises(SpecError) as err:
        load_any(DATA / "ds_config_llama3_8b_zero3.json", **opts)
    assert needle in err.value.message and "\n" not in err.value.message


def test_megatron_deepspeed_script_reads_its_ds_config(tmp_path):
    (tmp_path / "ds.json").write_text((DATA / "ds_config_llama3_8b_zero3.json").read_text())
    text = (
        _MEGATRON_BASE.replace(
            "--group-query-attention --num-query-groups 8", "--num-key-value-heads 8"
        )
        .replace("--global-batch-size 64", "--global-batch-size 512")
        .replace(
            "{extra}",
            "--no-pipeline-parallel --deepspeed --deepspeed_config ds.json --zero-stage 3",
        )
    )
    imported, result = _run(_write(tmp_path, "ds_run.sh", text), nodes=8)
    assert imported.format == "deepspeed"
    assert imported.job.model.name == "Llama 3 8B" and imported.job.model.kv_heads == 8
    assert imported.layout.zero == 3 and imported.job.num_gpus == 64
    assert result.valid, [v.message for v in result.errors]


# ------------------------------------------------------------------- torchtitan


def _titan(
    tmp_path, training: str = "", parallelism: str = "", model='name = "llama3"\nflavor = "8B"'
) -> Path:
    return _write(
        tmp_path,
        "job.toml",
        f"[model]\n{model}\n\n[training]\nlocal_batch_size = 2\nseq_len = 8192\n"
        f"{training}\n[parallelism]\n{parallelism}\n"
        '[activation_checkpoint]\nmode = "full"\n',
    )


TITAN_RULES = [
    (
        "",
        "data_parallel_shard_degree = 4\ntensor_parallel_degree = 2",
        {"gpus": 16},
        "torchtitan-world-size",
    ),
    ("", "tensor_parallel_degree = 2\nexpert_parallel_degree = 3", {"gpus": 16}, "torchtitan-ep"),
    (
        "",
        "tensor_parallel_degree = 2\nexpert_tensor_parallel_degree = 4",
        {"gpus": 16},
        "torchtitan-etp",
    ),
    ("global_batch_size = 20", "", {"gpus": 8}, "torchtitan-global-batch"),
    (
        "",
        "pipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 8\n"
        'pipeline_parallel_schedule = "1F1B"',
        {"gpus": 8},
        "torchtitan-pp-stages",
    ),
    (
        "",
        "pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 3",
        {"gpus": 8},
        "torchtitan-pp-microbatch",
    ),
    (
        "",
        "tensor_parallel_degree = 2\nenable_async_tensor_parallel = true",
        {"gpus": 8},
        "torchtitan-async-tp-needs-compile",
    ),
]


@pytest.mark.parametrize(
    "training,parallelism,opts,rule", TITAN_RULES, ids=[r[3] for r in TITAN_RULES]
)
def test_torchtitan_rules_are_errors(tmp_path, training, parallelism, opts, rule):
    _, result = _run(_titan(tmp_path, training, parallelism), **opts)
    assert rule in _rules(result, "error")


def test_torchtitan_mapping(tmp_path):
    imported, result = _run(_titan(tmp_path, parallelism="tensor_parallel_degree = 2"), gpus=16)
    lay = imported.layout
    assert (lay.tp, lay.dp, lay.sp, lay.zero, lay.recompute) == (2, 8, True, 3, "full")
    assert imported.job.training.global_batch_size == 16  # local 2 x dp 8
    # the default split counts the embedding and the output as layers: 32 + 2 over 3 stages
    # = 12/11/11, the first and last giving one up: 11/11/10
    imported, _ = _run(_titan(tmp_path, parallelism="pipeline_parallel_degree = 3"), gpus=6)
    assert (imported.layout.first_stage_layers, imported.layout.last_stage_layers) == (11, 10)
    assert imported.layout.zero == 2  # FSDP with PP keeps parameters after forward


TITAN_LOSS = [
    # torchtitan/components/loss.py: cross_entropy(pred.float(), labels), eager unless
    # torch.compile takes the loss ([compile] components default ["model", "loss"])
    ("", "", ("pytorch_fp32", True)),
    ("[compile]\nenable = true\n", "", ("vocab_parallel", True)),
    ('[compile]\nenable = true\ncomponents = ["model"]\n', "", ("pytorch_fp32", True)),
    ('[compile]\nenable = false\ncomponents = ["model", "loss"]\n', "", ("pytorch_fp32", True)),
    ("", "disable_loss_parallel = true", ("pytorch_fp32", False)),
]


@pytest.mark.parametrize(
    "extra,parallelism,expected",
    TITAN_LOSS,
    ids=["eager", "compiled", "compiled-model-only", "compile-off", "gathered"],
)
def test_torchtitan_loss_is_read_as_torchtitan_computes_it(tmp_path, extra, parallelism, expected):
    path = _titan(tmp_path, parallelism="tensor_parallel_degree = 2\n" + parallelism)
    path.write_text(path.read_text() + "\n" + extra)
    imported, result = _run(path, gpus=8)
    tr = imported.job.training
    assert (tr.cross_entropy, tr.loss_parallel) == expected
    assert "loss-settings" not in _rules(result, "error")


@pytest.mark.parametrize(
    "ac,expected",
    [
        ('mode = "selective"\nselective_ac_option = "op"', ("selective", ("torchtitan_op",))),
        ('mode = "selective"\nselective_ac_option = "1"', ("full", ())),
        ('mode = "full"', ("full", ())),
        ('mode = "none"', ("none", ())),
    ],
)
def test_torchtitan_activation_checkpointing(tmp_path, ac, expected):
    path = _titan(tmp_path)
    path.write_text(path.read_text().replace('mode = "full"', ac))
    imported, result = _run(path, gpus=8)
    assert (imported.layout.recompute, imported.layout.recompute_modules) == expected
    assert "recompute-settings" not in _rules(result, "error")


@pytest.mark.parametrize(
    "extra,warned", [("", True), ("[compile]\nenable = true\n", False)], ids=["eager", "compiled"]
)
def test_torchtitan_eager_runs_say_the_step_time_is_likely_low(tmp_path, extra, warned):
    # torchtitan's 2024-12 Llama 3 8B tables: 2.84 s eager against 2.46 s compiled (8 GPUs);
    # planner's kernel costs are fitted to compiled runs
    path = _titan(tmp_path)
    path.write_text(path.read_text() + "\n" + extra)
    _, result = _run(path, gpus=8)
    eager = [
        v
        for v in result.warnings
        if v.rule == "torchtitan-not-modelled" and "torch.compile is off" in v.message
    ]
    assert bool(eager) == warned


def test_torchtitan_unknown_and_renamed_keys_warn(tmp_path):
    _, result = _run(_titan(tmp_path, training="batch_size = 4"), gpus=8)
    message = next(v.message for v in result.warnings if v.rule == "torchtitan-unknown-key")
    assert "'training.batch_size'" in message and "local_batch_size" in message


def test_torchtitan_unknown_flavor_needs_model(tmp_path):
    path = _titan(tmp_path, model='name = "llama3"\nflavor = "1B"')  # torchtitan has no 1B
    with pytest.raises(SpecError) as err:
        load_any(path, gpus=8)
    assert "'1B'" in err.value.message and "--model" in err.value.message
    assert "it knows 8B, 70B, 405B" in err.value.message
    assert load_any(path, gpus=8, model="llama3-8b").job.model.name == "Llama 3 8B"


# ------------------------------------------------------------------- reading files


@pytest.mark.parametrize(
    "name,text,needle",
    [
        ("bad.toml", "[training\n", "not valid TOML"),
        ("bad.json", '{"train_batch_size": 8,', "not valid JSON"),
        ("empty.sh", "   \n", "is empty"),
        ("bad.yaml", "trainer: [\n", "not valid YAML"),
    ],
)
def test_unreadable_files_are_one_line_spec_errors(tmp_path, name, text, needle):
    with pytest.raises(SpecError) as err:
        load_any(_write(tmp_path, name, text))
    assert needle in err.value.message and "\n" not in err.value.message


def test_missing_file_and_directory(tmp_path):
    for path in (tmp_path / "nope.sh", tmp_path):
        with pytest.raises(SpecError) as err:
            load_any(path)
        assert str(path) in err.value.message


def test_planner_yaml_takes_the_overrides(examples_dir):
    example = next(examples_dir.glob("*.yaml"))
    imported = load_any(example, hardware="h200")
    assert imported.format == "planner" and imported.job.hardware.name == "h200"
    assert imported.violations == []
    with pytest.raises(SpecError) as err:
        load_any(example, gpus=1000, nodes=4)
    assert "disagree" in err.value.message


# ------------------------------------------------------------------- the CLI


def test_cli_valid_import_exits_0_and_shows_the_format(runner):
    result = runner.invoke(app, ["validate", str(DATA / "megatron_llama3_70b_128nodes.sh")])
    assert result.exit_code == 0, result.output
    assert "VALID" in result.stdout and "(megatron: " in result.stdout


def test_cli_invalid_import_exits_1_with_json_format(runner):
    result = runner.invoke(app, ["validate", str(DATA / "nemo2_llama3_70b_recipe.yaml"), "--json"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["format"] == "nemo2" and out["valid"] is False
    assert [e["rule"] for e in out["errors"]] == ["world-size"]
    assert {"valid", "errors", "warnings", "layout", "job"} <= set(out)


def test_cli_framework_errors_are_listed_by_rule(runner, tmp_path):
    path = _megatron(tmp_path, "--tensor-parallel-size 2")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert "megatron-unknown-flag" in result.stdout and "--tensor-parallel-size" in result.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["ds_config_llama3_70b.json", "--nodes", "128"], "--model"),
        (["torchtitan_llama3_70b_128nodes.toml"], "--gpus N"),
        (["megatron_llama3_8b_args.txt"], "--gpus N"),
        (["megatron_llama3_8b_args.txt", "--gpus", "16", "--nodes", "1"], "disagree"),
    ],
)
def test_cli_unusable_input_exits_2_with_one_line(runner, args, needle):
    result = runner.invoke(app, ["validate", str(DATA / args[0]), *args[1:]])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_cli_options_fill_what_the_file_lacks(runner):
    result = runner.invoke(
        app,
        [
            "validate",
            str(DATA / "ds_config_llama3_70b.json"),
            "--model",
            "llama3-70b",
            "--nodes",
            "128",
            "--hardware",
            "h100-sxm",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["format"] == "deepspeed" and out["job"]["num_gpus"] == 1024


def test_packaged_flag_list_is_the_reference_list():
    from planner.frameworks.megatron.reader import megatron_flags

    reference = (Path(__file__).resolve().parent / "data" / "megatron_flags.txt").read_text()
    assert megatron_flags() == {
        line.strip() for line in reference.splitlines() if line.startswith("--")
    }
    assert len(megatron_flags()) > 800


def test_torchrun_defaults_to_one_node_of_one_process(tmp_path):
    text = _MEGATRON_BASE.replace(
        "--nproc_per_node ${GPUS_PER_NODE:-8} --nnodes ${NNODES:-2} ", ""
    ).replace("{extra}", "")
    assert load_any(_write(tmp_path, "run.sh", text)).job.num_gpus == 1


def test_bad_values_name_the_file_and_the_key(tmp_path):
    path = _nemo(tmp_path, {"tensor_model_parallel_size": 0})
    with pytest.raises(SpecError) as err:
        load_any(path)
    assert str(path) in err.value.message and "tensor_model_parallel_size = 0" in err.value.message


def test_megatron_zero_virtual_stages_is_one_clear_error(runner, tmp_path):
    # Found by fuzzing: --num-virtual-stages-per-pipeline-rank 0 once divided by zero.
    script = tmp_path / "train.sh"
    script.write_text(
        "torchrun --nproc-per-node 8 --nnodes 1 pretrain_gpt.py "
        "--tensor-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 0\n"
    )
    result = runner.invoke(app, ["validate", str(script), "--model", "70b"])
    assert result.exit_code == 2
    assert "--num-virtual-stages-per-pipeline-rank 0 must be at least 1" in result.stderr
