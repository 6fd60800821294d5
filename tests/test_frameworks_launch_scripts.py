"""Reading launch scripts the way bash and the frameworks do (the script side): control flow,
the training launch, ds_configs a script writes, arrays, DeepSpeed's own rules, --set and
--vocab-size, the production-recipe flags, and bounded time and memory.

Every fixture is written here for the pattern it tests (none is a copy of a framework file);
the expected values are derived in the test from the fixture's own numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner
from work_budget import HANG_GUARD_S

from planner.cli import app
from planner.errors import SpecError
from planner.frameworks import load_any
from planner.readers import bash as shell
from planner.validate import validate

ROOT = Path(__file__).resolve().parent.parent


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _rules(imported) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in imported.violations:
        out.setdefault(v.rule, []).append(v.message)
    return out


# A Llama-3-8B-shaped model: 32 layers, h 4096, f 14336, 32 heads, 8 KV groups.
MODEL = """\
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
    --group-query-attention --num-query-groups 8 --seq-length 4096 \\
    --max-position-embeddings 8192 --swiglu --normalization RMSNorm \\
    --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights \\
    --micro-batch-size 1 --global-batch-size 64 --bf16"""


def _megatron(tmp_path, body: str, flags: str = "", name: str = "train.sh") -> Path:
    """A script whose launch is `torchrun ... pretrain_gpt.py MODEL $EXTRA "${ARGS[@]}" flags`."""
    text = (
        textwrap.dedent(body) + "\ntorchrun --nproc-per-node 8 --nnodes ${NNODES:-1} "
        "pretrain_gpt.py \\\n" + MODEL + " \\\n    --tokenizer-type NullTokenizer "
        '--vocab-size 32000 \\\n    ${EXTRA} "${ARGS[@]}" ' + flags + "\n"
    )
    return _write(tmp_path, name, text)


# ---------------------------------------------------------------------------- bash control flow

CONDITIONS = [
    # (assignments, condition, branch taken)
    ("A=fp8", '[[ "$A" == "fp8" ]]', "then"),
    ("A=bf16", '[[ "$A" == fp* ]]', "else"),  # [[ == ]] matches a glob: bf16 != fp*
    ("A=fp8", '[[ "$A" == fp* ]]', "then"),
    ("A=x", '[ "$A" = "x" ]', "then"),
    ("A=x", '[ "$A" != "x" ]', "else"),
    ("A=", '[ -z "$A" ]', "then"),
    ("A=1", '[ -n "$A" ]', "then"),
    ("N=4", '[ "$N" -gt 1 ]', "then"),
    ("N=4", "[[ $N -le 1 ]]", "else"),
    ("A=1; B=", '[[ -n "$A" && -z "$B" ]]', "then"),
    ("A=1; B=", '[ -n "$A" ] && [ -n "$B" ]', "else"),
    ("A=1", '! [ "$A" = 1 ]', "else"),
    ("N=3", "(( N > 2 ))", "then"),
    ("A=${1:-MOCK}", '[[ "$A" == "MOCK" ]] || [[ -z "$A" ]]', "then"),
]


@pytest.mark.parametrize("assign,cond,branch", CONDITIONS, ids=[c[1] for c in CONDITIONS])
def test_conditions_are_decided_on_the_scripts_values(assign, cond, branch):
    script = shell.run(f"{assign}\nif {cond}; then\n  R=then\nelse\n  R=else\nfi\n")
    assert script.var("R") == branch
    assert script.notes == []  # decided from the script: nothing guessed


def test_elif_chains_and_case_take_one_branch():
    text = (
        'S=${1:-70B}\nif [ "$S" = 8B ]; then L=32\nelif [ "$S" = 70B ]; then L=80\n'
        'else L=0\nfi\ncase "$S" in\n  8B) H=4096 ;;\n  70B|405B) H=8192 ;;\n  *) H=0 ;;\n'
        "esac\n"
    )
    assert (shell.run(text).var("L"), shell.run(text).var("H")) == ("80", "8192")
    given = shell.run(text, env={"1": "8B"})
    assert (given.var("L"), given.var("H")) == ("32", "4096")


def test_a_tokenizer_branch_is_read_once_no_repeated_flags(tmp_path):
    # The pattern of Megatron-LM's train_llama3_8b_h100_fp8.sh: the tokenizer flags live in an
    # if/else on ${3:-MOCK}; reading both branches said "--tokenizer-type is given 2 times".
    body = """\
        TOK=${1:-MOCK}
        if [[ "$TOK" == "MOCK" ]]; then
            ARGS=(--mock-data --tokenizer-type NullTokenizer --vocab-size 32000)
        else
            ARGS=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOK")
        fi
    """
    path = _write(
        tmp_path,
        "train.sh",
        textwrap.dedent(body)
        + ("torchrun --nproc-per-node 8 pretrain_gpt.py \\\n" + MODEL + ' "${ARGS[@]}"\n'),
    )
    imported = load_any(path)
    assert "megatron-repeated-flag" not in _rules(imported)
    assert imported.job.model.vocab_size == 32001  # NullTokenizer adds an EOD token
    real = load_any(path, sets=(("1", "meta-llama/Meta-Llama-3-8B"),))
    assert real.job.model.vocab_size == 128256  # the Llama 3 tokenizer
    assert "megatron-repeated-flag" not in _rules(real)


@pytest.mark.parametrize("value,recompute", [("false", "none"), ("true", "full")])
def test_flags_added_only_inside_a_taken_branch(tmp_path, value, recompute):
    # Megatron-DeepSpeed's pattern: activation_checkpoint="false" and the checkpointing flags
    # added only inside if [ "${activation_checkpoint}" = "true" ].
    body = f"""\
        activation_checkpoint="{value}"
        EXTRA=""
        if [ "${{activation_checkpoint}}" = "true" ]; then
          EXTRA="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
        fi
    """
    imported = load_any(_megatron(tmp_path, body))
    assert imported.layout.recompute == recompute


def test_undecided_conditions_take_the_plain_run_and_say_so_once(tmp_path):
    body = """\
        if [ -n "$SLURM_JOB_ID" ]; then NNODES=$SLURM_JOB_NUM_NODES; else NNODES=2; fi
        if [[ "$(hostname)" == login* ]]; then echo "run me with sbatch"; exit 1; fi
        if [ -z "$DATA_PATH" ]; then echo "usage: DATA_PATH=... $0"; exit 1; fi
    """
    imported = load_any(_megatron(tmp_path, body))
    # plain run: SLURM_JOB_ID unset -> the else branch (2 nodes); the two error exits are not
    # taken on a guess, so the launch after them is read
    assert imported.job.num_gpus == 16
    notes = _rules(imported)["megatron-undecided-condition"]
    assert len(notes) == 1 and notes[0].startswith("3 condition(s)")
    assert "$SLURM_JOB_ID is not set" in notes[0] and "--set NAME=VALUE" in notes[0]
    given = load_any(
        _megatron(tmp_path, body),
        sets=(("SLURM_JOB_ID", "7"), ("SLURM_JOB_NUM_NODES", "4"), ("DATA_PATH", "/data")),
    )
    assert given.job.num_gpus == 32
    assert _rules(given)["megatron-undecided-condition"][0].startswith("1 condition(s)")


def test_a_decided_error_exit_stops_the_reading(tmp_path):
    body = 'TP=16\nif [ "$TP" -gt 8 ]; then echo "TP must be <= 8"; exit 1; fi\n'
    with pytest.raises(SpecError, match="no Megatron-LM command"):
        load_any(_megatron(tmp_path, body))


# ---------------------------------- the launcher (torchrun, deepspeed, srun) and the world size


def test_the_training_launch_not_a_data_preparation_step_or_an_echo(tmp_path):
    # BLOOM-style: a preprocess_data.py step with dash-dash options first, `echo $CMD`, then
    # srun bash -c "$LAUNCHER ... $CMD" with the model flags in CMD and the nodes from #SBATCH.
    text = """\
        #!/bin/bash
        #SBATCH --nodes=6
        #SBATCH --ntasks-per-node=1
        python tools/preprocess_data.py --input raw.jsonl --output-prefix data \\
            --tokenizer-type GPT2BPETokenizer --vocab-file vocab.json --workers 8
        LAUNCHER="python -u -m torch.distributed.run --nproc_per_node 8 --nnodes $SLURM_NNODES"
        CMD=" pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \\
            --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 \\
            --global-batch-size 96 --tokenizer-type GPT2BPETokenizer --bf16 "
        echo $CMD
        srun --jobid $SLURM_JOBID bash -c "$LAUNCHER --node_rank \\$SLURM_PROCID $CMD"
    """
    imported = load_any(_write(tmp_path, "tr.slurm", text))
    assert imported.job.num_gpus == 48  # 6 nodes (#SBATCH) x 8 per node
    assert imported.job.model.num_layers == 24 and imported.job.model.vocab_size == 50257
    assert "megatron-multiple-commands" not in _rules(imported)


def test_flags_in_arrays_across_an_sbatch_here_document(tmp_path):
    # The Megatron-FSDP sbatch pattern: ARGS=( ... ), ARGS=( "${ARGS[@]}" ... ) in an if,
    # a command string with ${ARGS[@]}, and sbatch <<EOF ... srun bash -c "$CMD" ... EOF.
    text = """\
        FSDP=${FSDP:-1}
        ARGS=(
            --num-layers 32 --hidden-size 4096 --num-attention-heads 32
            --seq-length 4096 --max-position-embeddings 4096 --swiglu
            --micro-batch-size 2 --global-batch-size 256 --bf16
            --tokenizer-type NullTokenizer --vocab-size 65535
        )
        ARGS+=(--use-distributed-optimizer)
        if [ "${FSDP}" = 1 ]; then
            ARGS=("${ARGS[@]}" --use-megatron-fsdp --data-parallel-sharding-strategy
                  optim_grads_params --ckpt-format fsdp_dtensor)
        fi
        CMD="cd /workspace; python pretrain_gpt.py ${ARGS[@]}"
        sbatch <<EOF
        #!/bin/bash
        #SBATCH --nodes=4
        #SBATCH --ntasks-per-node=8
        srun --mpi=pmix bash -x -c "${CMD}"
        EOF
    """
    imported = load_any(_write(tmp_path, "fsdp.sbatch", text))
    assert imported.job.num_gpus == 32  # 4 nodes x 8 tasks (srun, no torchrun)
    assert imported.layout.zero == 3 and imported.layout.micro_batch_size == 2
    assert imported.job.model.vocab_size == 65536
    assert not [v for v in imported.violations if v.severity == "error"]


# ------------------------------------------------------- the ds_config a script names or writes

_DS_FLAGS = (
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers 24 "
    "--hidden-size 2048 --ffn-hidden-size 5504 --num-attention-heads 16 "
    "--num-key-value-heads 4 --seq-length 2048 --max-position-embeddings 2048 "
    "--micro-batch-size $MBS --global-batch-size $GBS --swiglu --normalization rmsnorm "
    "--use-rotary-position-embeddings --untie-embeddings-and-output-weights "
    "--disable-bias-linear --tokenizer-type GPTSentencePieceTokenizer --bf16 "
    "--deepspeed --deepspeed_config $DS_CONFIG --zero-stage $ZERO"
)

WRITERS = {
    "heredoc": 'cat <<EOT > $DS_CONFIG\n{\n  "train_batch_size": $GBS,\n'
    '  "train_micro_batch_size_per_gpu": $MBS,\n'
    '  "zero_optimization": {"stage": $ZERO},\n  "bf16": {"enabled": true}\n}\nEOT\n',
    "echo": "echo '{\"train_batch_size\": '$GBS', \"train_micro_batch_size_per_gpu\": '$MBS', "
    '"zero_optimization": {"stage": \'$ZERO\'}, "bf16": {"enabled": true}}\' '
    "> $DS_CONFIG\n",
    "sed": 'sed "s/CONFIG_BATCH_SIZE/${GBS}/" ds_config_TEMPLATE.json \\\n'
    '    | sed "s/CONFIG_MBSIZE/${MBS}/" | sed "s/ZERO_STAGE/${ZERO}/g" > ${DS_CONFIG}\n',
}


@pytest.mark.parametrize("writer", WRITERS)
def test_a_ds_config_the_script_writes_is_the_config(tmp_path, writer):
    (tmp_path / "ds_config_TEMPLATE.json").write_text(
        '{"train_batch_size": CONFIG_BATCH_SIZE, "train_micro_batch_size_per_gpu": '
        'CONFIG_MBSIZE, "zero_optimization": {"stage": ZERO_STAGE}, "bf16": {"enabled": true}}'
    )
    text = (
        "GBS=32\nMBS=4\nZERO=1\nDS_CONFIG=./out/ds_config.${GBS}.json\n"
        + WRITERS[writer]
        + "torchrun --nproc_per_node 8 pretrain_gpt.py "
        + _DS_FLAGS
        + "\n"
    )
    imported = load_any(_write(tmp_path, "run.sh", text), vocab_size=32000)
    assert imported.format == "deepspeed"
    assert imported.layout.micro_batch_size == 4 and imported.layout.zero == 1
    assert imported.job.training.global_batch_size == 32 and imported.job.num_gpus == 8
    assert not (tmp_path / "out").exists()  # read, not run


def test_a_ds_config_written_by_a_program_is_named(tmp_path):
    text = (
        "GBS=32\nMBS=4\nZERO=1\nDS_CONFIG=ds.json\npython make_config.py > $DS_CONFIG\n"
        "torchrun --nproc_per_node 8 pretrain_gpt.py " + _DS_FLAGS + "\n"
    )
    with pytest.raises(
        SpecError, match="writes its ds_config ds.json with a command planner does not run"
    ):
        load_any(_write(tmp_path, "run.sh", text), vocab_size=32000)


# ----------------- DeepSpeed's rules (docs/reference/framework-rules.md#d1-batch-sizes-agree ...)


def _bloomish(tmp_path, stage: int, layers: int = 70, method: str | None = None) -> Path:
    """70 layers on pp 12 with DeepSpeed's pipeline engine (tied embeddings, as BLOOM)."""
    part = f"--pp-partition-method '{method}' " if method else ""
    text = (
        f'cat <<EOT > ds.json\n{{"train_micro_batch_size_per_gpu": 1, "train_batch_size": '
        f'96, "zero_optimization": {{"stage": {stage}}}, "bf16": {{"enabled": true}}}}\nEOT\n'
        f"torchrun --nproc_per_node 8 --nnodes 36 pretrain_gpt.py --tensor-model-parallel-size 4 "
        f"--pipeline-model-parallel-size 12 --num-layers {layers} --hidden-size 1024 "
        "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
        "--micro-batch-size 1 --global-batch-size 96 --tokenizer-type GPT2BPETokenizer "
        f"--bf16 {part}--deepspeed --deepspeed_config ds.json --zero-stage {stage}\n"
    )
    return _write(tmp_path, "bloom.sh", text)


@pytest.mark.parametrize(
    "method,first,last",
    [
        # type:transformer|embedding with tied embeddings: 70 + 2 items = 6 per stage, the
        # embeddings on the first and last stages: 5 layers there, 6 on each of the 10 others
        ("type:transformer|embedding", 5, 5),
        # type:transformer (Megatron-DeepSpeed's GPTModelPipe): bottleneck ceil(70/12) = 6 on the
        # first 11 stages, 70 - 66 = 4 on the last
        (None, 6, 4),
    ],
)
def test_deepspeed_balances_70_layers_on_pp_12_itself(tmp_path, method, first, last):
    imported = load_any(_bloomish(tmp_path, 1, method=method))
    assert (imported.layout.first_stage_layers, imported.layout.last_stage_layers) == (first, last)
    result = validate(imported.job, imported.layout, extra=imported.violations)
    assert "layers-divisible" not in {v.rule for v in result.errors}


def test_bf16_with_zero_0_is_deepspeeds_bf16_optimizer_sharded_like_zero_1(tmp_path):
    imported = load_any(_bloomish(tmp_path, 0))
    assert imported.layout.zero == 1
    assert "BF16 optimizer" in _rules(imported)["deepspeed-bf16-optimizer"][0]


# --------------------------------------------------------------------------- --set and --vocab-size


def test_set_supplies_environment_and_positional_values(tmp_path):
    body = (
        'GPUS=${GPUS_PER_NODE:-8}\nDATA=$1\nTP=${TP:-1}\nEXTRA="--tensor-model-parallel-size $TP"\n'
    )
    imported = load_any(_megatron(tmp_path, body), sets=(("TP", "4"), ("NNODES", "2")))
    assert imported.layout.tp == 4 and imported.job.num_gpus == 16
    assert "megatron-set-unused" not in _rules(imported)


def test_set_values_the_script_ignores_are_named(tmp_path):
    body = 'TP=2\nEXTRA="--tensor-model-parallel-size $TP"\n'
    imported = load_any(_megatron(tmp_path, body), sets=(("TP", "8"), ("TYPO", "1")))
    assert imported.layout.tp == 2  # the script sets TP itself
    unused = " | ".join(_rules(imported)["megatron-set-unused"])
    assert "TP: the script sets it itself (line 1)" in unused
    assert "TYPO: the script never reads $TYPO" in unused


def test_vocab_size_replaces_an_unknown_tokenizer(tmp_path):
    text = (
        "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n"
        + MODEL
        + " --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/my-tok\n"
    )
    path = _write(tmp_path, "run.sh", text)
    with pytest.raises(SpecError, match="--vocab-size V"):
        load_any(path)
    assert load_any(path, vocab_size=50000).job.model.vocab_size == 50000


def test_cli_set_and_vocab_size(tmp_path):
    runner = CliRunner()
    path = _write(
        tmp_path,
        "run.sh",
        "torchrun --nproc-per-node ${G} pretrain_gpt.py \\\n"
        + MODEL
        + " --tokenizer-type HuggingFaceTokenizer --tokenizer-model x\n",
    )
    ok = runner.invoke(
        app, ["validate", str(path), "--set", "G=8", "--vocab-size", "32000", "--json"]
    )
    assert ok.exit_code in (0, 1), ok.output
    data = json.loads(ok.stdout)
    assert data["job"]["num_gpus"] == 8 and data["format"] == "megatron"
    bad = runner.invoke(app, ["validate", str(path), "--set", "G"])
    assert bad.exit_code == 2 and "expected NAME=VALUE" in bad.stderr
    yaml = runner.invoke(
        app, ["validate", str(ROOT / "examples" / "llama3-70b-2048xh100.yaml"), "--set", "A=1"]
    )
    assert yaml.exit_code == 2 and "remove --set" in yaml.stderr


# ------------------------------------------------------------------ the production recipe flags

RECIPE = [
    # (extra flags, layout fields, training fields)
    (
        "--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
        "--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather",
        {},
        {"precision": "fp8", "fp8_recipe": "tensorwise", "fp8_param_gather": True},
    ),
    (
        "--recompute-granularity selective --recompute-modules mlp moe_act layernorm",
        {"recompute": "selective", "recompute_modules": ("mlp", "moe_act", "layernorm")},
        {},
    ),
    (
        "--recompute-granularity full --recompute-method block --recompute-num-layers 3",
        {"recompute": "full", "recompute_num_layers": 3},
        {},
    ),
    ("--cpu-offloading-num-layers 4", {"cpu_offloading_num_layers": 4}, {}),
    ("--grad-reduce-in-bf16", {"grad_reduce_in_fp32": False}, {}),
    (
        "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
        {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
        {},
    ),
    ("--cuda-graph-impl transformer_engine", {"cuda_graphs": "partial"}, {}),
    (
        "--cuda-graph-impl local --cuda-graph-scope full_iteration "
        "--no-check-for-nan-in-loss-and-grad",
        {"cuda_graphs": "full"},
        {},
    ),
    ("--external-cuda-graph", {"cuda_graphs": "partial"}, {}),
    (
        "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et*16|t*16L'",
        {"pipeline_model_parallel_layout": "Et*16|t*16L", "vpp": 1},
        {},
    ),
    ("--attention-backend unfused", {}, {"flash_attention": False}),
]


@pytest.mark.parametrize("flags,layout,training", RECIPE, ids=[r[0][:40] for r in RECIPE])
def test_recipe_flags_are_read_into_the_fields_of_the_same_name(tmp_path, flags, layout, training):
    imported = load_any(_megatron(tmp_path, "", flags))
    for key, value in layout.items():
        got = getattr(imported.layout, key)
        assert (tuple(got) if isinstance(got, (list, tuple)) else got) == value, key
    for key, value in training.items():
        assert getattr(imported.job.training, key) == value, key
    assert not [v.message for v in imported.violations if v.severity == "error"]


MOE = (
    "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 8 "
    "--sequence-parallel --tensor-model-parallel-size 1 "
)


@pytest.mark.parametrize(
    "flags,dispatcher,overlap",
    [
        (
            "--moe-token-dispatcher-type alltoall --overlap-moe-expert-parallel-comm",
            "alltoall",
            True,
        ),
        (
            "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep",
            "hybridep",
            False,
        ),
        ("--moe-token-dispatcher-type flex --moe-enable-deepep", "deepep", False),
        ("", "allgather", False),  # Megatron's default
    ],
)
def test_moe_dispatcher_flags(tmp_path, flags, dispatcher, overlap):
    imported = load_any(_megatron(tmp_path, "", MOE + flags))
    assert imported.layout.moe_token_dispatcher == dispatcher
    assert imported.layout.overlap_moe_expert_parallel_comm is overlap


@pytest.mark.parametrize(
    "flags,padded",
    [
        (
            "--moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 1.0 "
            "--moe-pad-expert-input-to-capacity",
            True,
        ),
        ("--moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 1.0", False),
    ],
    ids=["drop-and-pad", "drop-no-pad"],
)
def test_moe_padding_to_the_capacity_is_read(tmp_path, flags, padded):
    imported = load_any(_megatron(tmp_path, "", MOE + flags))
    assert imported.layout.moe_pad_expert_input_to_capacity is padded
    assert imported.job.model.moe_capacity_factor == 1.0
    assert not [v.message for v in imported.violations if v.severity == "error"]


def test_mtp_rotary_base_and_capacity_factor_are_the_models(tmp_path):
    flags = MOE + "--mtp-num-layers 1 --rotary-base 1000000 --moe-expert-capacity-factor 1.25"
    model = load_any(_megatron(tmp_path, "", flags)).job.model
    assert (model.mtp_num_layers, model.rotary_base, model.moe_capacity_factor) == (1, 1e6, 1.25)


MEGATRON_RECIPE_RULES = [
    # Megatron's own checks (validate_args, TransformerConfig, OptimizerConfig)
    ("--exp-avg-dtype bf16", "megatron-precision-aware-optimizer", "error"),
    (
        "--pipeline-model-parallel-size 2 --cpu-offloading-num-layers 2",
        "megatron-cpu-offloading",
        "error",
    ),
    (
        "--cpu-offloading-num-layers 2 --recompute-granularity selective",
        "megatron-cpu-offloading",
        "error",
    ),
    (
        "--cuda-graph-impl transformer_engine --recompute-granularity full --recompute-method "
        "uniform --recompute-num-layers 1",
        "megatron-cuda-graph-recompute",
        "error",
    ),
    ("--enable-cuda-graph --cuda-graph-impl local", "megatron-cuda-graph-flags", "error"),
    ("--fp8-format hybrid --fp8-param-gather", "megatron-fp8-param-gather", "error"),
    ("--fp8-recipe mxfp8", "megatron-fp8-flags", "warning"),
    (
        "--recompute-granularity selective --recompute-modules attention",
        "megatron-recompute-modules",
        "error",
    ),
    ("--recompute-modules mlp", "megatron-recompute-modules", "warning"),
    # Megatron-Core OptimizerConfig.store_param_remainders, on by default (no Megatron-LM
    # flag): 2 bytes of master weight a parameter where planner counts 4
    ("--use-precision-aware-optimizer", "megatron-param-remainders", "warning"),
    (MOE + "--overlap-moe-expert-parallel-comm", "megatron-moe-ep-overlap", "error"),
    (
        MOE + "--moe-token-dispatcher-type alltoall --moe-pad-expert-input-to-capacity",
        "megatron-moe-pad-capacity",
        "error",
    ),
    (
        MOE + "--moe-token-dispatcher-type flex --moe-enable-deepep --moe-expert-capacity-factor "
        "1.0 --moe-pad-expert-input-to-capacity",
        "megatron-moe-pad-capacity",
        "error",
    ),
    ("--use-distributed-optimizer --use-megatron-fsdp", "megatron-fsdp-ckpt-format", "error"),
    (
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 4",
        "megatron-uniform-recompute-chunks",
        "warning",
    ),
    (
        "--mtp-num-layers 1 --position-embedding-type learned_absolute",
        "megatron-mtp-position-embedding",
        "error",
    ),
]


@pytest.mark.parametrize(
    "flags,rule,severity",
    MEGATRON_RECIPE_RULES,
    ids=[r[1] + "-" + r[0][:20] for r in MEGATRON_RECIPE_RULES],
)
def test_recipe_rules_with_megatrons_severities(tmp_path, flags, rule, severity):
    imported = load_any(_megatron(tmp_path, "", flags))
    assert rule in {v.rule for v in imported.violations if v.severity == severity}, [
        (v.rule, v.severity) for v in imported.violations
    ]


@pytest.mark.parametrize(
    "flag",
    [
        "--optimizer-cpu-offload",
        "--use-nccl-ub",
        "--empty-unused-memory-level 1",
        "--fsdp-double-buffer",
        "--cross-entropy-fusion-impl te",
    ],
)
def test_known_flags_that_change_memory_or_time_and_are_not_modelled_are_named(tmp_path, flag):
    extra = "--use-precision-aware-optimizer " if "cpu-offload" in flag else ""
    imported = load_any(_megatron(tmp_path, "", extra + flag))
    messages = _rules(imported)["megatron-not-modelled"]
    assert any(m.startswith(flag.split()[0] + " ") for m in messages)


def test_modelled_flags_carry_no_not_modelled_warning(tmp_path):
    flags = " ".join(r[0] for r in RECIPE[4:7])
    imported = load_any(_megatron(tmp_path, "", flags))
    assert "megatron-not-modelled" not in _rules(imported)
    assert "megatron-pipeline-layout" not in _rules(imported)
    assert "megatron-partial-recompute" not in _rules(imported)


def test_cuda_device_max_connections_rule_follows_the_architecture(tmp_path):
    path = _megatron(tmp_path, "", "--tensor-model-parallel-size 2 --sequence-parallel")
    assert "megatron-cuda-device-max-connections" in _rules(load_any(path))  # hopper
    assert "megatron-cuda-device-max-connections" not in _rules(load_any(path, hardware="b200"))


# ----------------------------------------------------------------- bounded input (input limits)


def _run_limited(args: list[str], *, budget: float | None = None):
    """planner in a child process under a 1 GiB address-space limit: (exit code, stderr,
    CPU seconds of the command's work). The CPU seconds are the child's own (process_time
    plus any child it forked and reaped) from after its imports to its exit: what the work
    costs, which machine load barely changes, where the wall-clock time the tests used to
    assert took 3.3 s for 0.8 s of work on a loaded 2-core machine (tests/work_budget.py).
    RLIMIT_CPU kills a child that runs away (SIGXCPU) long before the hang guard's timeout."""
    with tempfile.TemporaryDirectory() as d:
        cpu_file = Path(d) / "cpu"
        code = (
            "import resource, sys, time\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            f"resource.setrlimit(resource.RLIMIT_CPU, ({CHILD_CPU_LIMIT_S}, "
            f"{CHILD_CPU_LIMIT_S}))\n"
            + (f"import planner.readers.bash as s; s.BUDGET_S = {budget}\n" if budget else "")
            + "from planner.cli import main\n"
            "def cpu():\n"
            "    c = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "    return time.process_time() + c.ru_utime + c.ru_stime\n"
            "c0 = cpu()\n"
            "try:\n"
            "    main(sys.argv[1:])\n"
            "finally:\n"
            f"    open({str(cpu_file)!r}, 'w').write(repr(cpu() - c0))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
        )
        assert cpu_file.exists(), f"the child died (exit {proc.returncode}): {proc.stderr[-2000:]}"
        return proc.returncode, proc.stderr, float(cpu_file.read_text())


# CPU seconds of one hostile script's work (idle: 0.18-0.31 s each on the 2-core test machine,
# mostly the modules validate imports lazily); blowing up (2**30 array elements, 9**9**9,
# 1000 nested parentheses expanded without a depth limit) would cost minutes
HOSTILE_CPU_S = 2.0
CHILD_CPU_LIMIT_S = 60  # RLIMIT_CPU of the child: a runaway is killed, not waited for


HOSTILE = [
    # (script text, what the one-line error names)
    ("X=$((9**9**9))\n", "overflows the 64-bit integers"),
    ("X=$((" + "(" * 1000 + "1" + ")" * 1000 + "))\n", "nests deeper than"),
    ("A=xxxxxxxxxxxxxxxx\n" + "A=$A$A\n" * 30, "grows past 1,000,000 characters"),
    ("A=(x)\n" + 'A=("${A[@]}" "${A[@]}")\n' * 30, "grows past 100,000 elements"),
    ("X=${A:-" * 200 + "x" + "}" * 200 + "\n", "deeper than"),
    ("if true; then\n" * 300 + "fi\n" * 300, "nest deeper than"),
]


@pytest.mark.parametrize(
    "text,needle",
    HOSTILE,
    ids=[
        "arith-power",
        "arith-nesting",
        "string-doubling",
        "array-doubling",
        "default-nesting",
        "if-nesting",
    ],
)
def test_hostile_shell_ends_fast_with_one_line_naming_the_limit(tmp_path, text, needle):
    path = _write(tmp_path, "bad.sh", text + "torchrun pretrain_gpt.py --num-layers 2\n")
    code, err, cpu = _run_limited(["validate", str(path)])
    assert code == 2, err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert cpu < HOSTILE_CPU_S, cpu  # the limit stops the work early, not a timeout


@pytest.mark.parametrize(
    "pattern,needle",
    [
        ("'[0]*1e9'", "is not a pattern Megatron accepts"),
        ("'[1]*x'", "is not a pattern Megatron accepts"),
        ("'[0]*999999999999'", "Megatron requires one per layer (32)"),
        ("'([0]*2+[1]*30)*2'", "has 64 entries"),
    ],
)
def test_moe_layer_freq_patterns_are_bounded_and_named(tmp_path, pattern, needle):
    path = _megatron(tmp_path, "", MOE + "--moe-layer-freq " + pattern)
    code, err, cpu = _run_limited(["validate", str(path)])
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert cpu < HOSTILE_CPU_S, cpu  # '[0]*1e9' is refused, never expanded


def test_a_reading_past_the_wall_clock_budget_stops(tmp_path):
    # 10,000 loop turns of a few expansions each: bounded by every other limit, so the budget
    # (set to 0.01 s here) is what stops it
    text = (
        "for i in $(seq 1 10000); do :; done\nfor i in "
        + " ".join(["x"] * 9000)
        + "; do A=${A:-$i}; B=$A$i; done\n"
    )
    path = _write(tmp_path, "slow.sh", text + "torchrun pretrain_gpt.py --num-layers 2\n")
    code, err, _ = _run_limited(["validate", str(path)], budget=0.01)
    assert code == 2 and "budget for one file" in err, err


def test_twenty_thousand_unknown_flags_are_fast_and_counted(tmp_path):
    unknown = " ".join(f"--no-such-flag-{i} {i}" for i in range(20_000))
    path = _megatron(tmp_path, "", unknown)
    code, err, cpu = _run_limited(["validate", str(path), "--json"])
    assert code == 1, err
    # 0.65 CPU s idle; one did-you-mean per flag took 35 s, so 6 s still catches that
    assert cpu < 6.0, cpu
    imported = load_any(path)
    unknown_rules = _rules(imported)["megatron-unknown-flag"]
    assert len(unknown_rules) == 21 and unknown_rules[-1].startswith("19,980 more unknown flags")


@pytest.mark.parametrize(
    "launcher,needle",
    [
        ("torchrun --nnodes 150000000000000000000 --nproc-per-node 1", "between 1 and 10,000,000"),
        ("torchrun --nnodes 20000 --nproc-per-node 1000", "cap of 10,000,000"),
    ],
)
def test_absurd_world_sizes_are_refused_with_the_configs_cap(tmp_path, launcher, needle):
    path = _write(
        tmp_path,
        "big.sh",
        launcher
        + " pretrain_gpt.py \\\n"
        + MODEL
        + " --tokenizer-type NullTokenizer --vocab-size 100\n",
    )
    with pytest.raises(SpecError, match=needle):
        load_any(path)


def test_a_preset_shape_with_a_nulltokenizer_vocabulary_is_named_after_the_preset(tmp_path):
    # MODEL is Llama 3 8B's shape; NullTokenizer --vocab-size 128256 builds 128257 entries
    path = _write(
        tmp_path,
        "run.sh",
        "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n"
        + MODEL
        + " --tokenizer-type NullTokenizer --vocab-size 128256 --seq-length 8192 "
        "--max-position-embeddings 8192\n",
    )
    assert load_any(path).job.model.name == "Llama 3 8B shape, vocabulary 128257"


def test_model_replaces_the_scripts_shape_and_says_where_it_differs(tmp_path):
    imported = load_any(_megatron(tmp_path, "", "--mtp-num-layers 1"), model="llama3-8b")
    assert imported.job.model.mtp_num_layers == 0
    assert "planner uses --model's" in _rules(imported)["megatron-model-replaced"][0]


def test_a_bloom_style_megatron_deepspeed_slurm_script(tmp_path):
    # The pattern of BigScience's BLOOM-176B script, on its own numbers: 48 nodes of 8 from
    # #SBATCH, TP 4 x PP 12, 70 layers balanced by 'type:transformer|embedding' (5 | 6 x 10 |
    # 5), ZeRO 0 with bf16, ALiBi, the padded vocabulary given by --pad-vocab-size-to, and the
    # launch in srun bash -c "$LAUNCHER --node_rank \$SLURM_PROCID $CMD".
    text = r"""
        #SBATCH --nodes=48
        #SBATCH --ntasks-per-node=1
        #SBATCH --gres=gpu:8
        GPUS_PER_NODE=8
        NNODES=$SLURM_NNODES
        python $PREP --dataset-ratios-path x.json --split train --output-file train.txt
        GPT_ARGS=" --pp-partition-method 'type:transformer|embedding' --num-layers 70 \
            --hidden-size 14336 --num-attention-heads 112 --seq-length 2048 \
            --max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 2048 \
            --tokenizer-type PretrainedFromHF --bf16 --position-embedding-type alibi \
            --checkpoint-activations --pad-vocab-size-to 250880 "
        ZERO_STAGE=0
        config_json="./ds_config.$SLURM_JOB_ID.json"
        cat <<EOT > $config_json
        {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 2048,
         "zero_optimization": {"stage": $ZERO_STAGE}, "bf16": {"enabled": true}}
        EOT
        DEEPSPEED_ARGS=" --deepspeed --deepspeed_config ${config_json} --zero-stage ${ZERO_STAGE} \
            --deepspeed-activation-checkpointing "
        export LAUNCHER="python -u -m torch.distributed.run --nproc_per_node $GPUS_PER_NODE \
            --nnodes $NNODES --rdzv_backend c10d"
        export CMD=" `pwd`/pretrain_gpt.py --tensor-model-parallel-size 4 \
            --pipeline-model-parallel-size 12 $GPT_ARGS $DEEPSPEED_ARGS "
        echo $CMD
        srun --jobid $SLURM_JOB_ID bash -c "$LAUNCHER --node_rank \$SLURM_PROCID $CMD" 2>&1 | tee log
    """
    imported = load_any(_write(tmp_path, "tr.slurm", text))
    lay, job = imported.layout, imported.job
    assert imported.format == "deepspeed" and job.num_gpus == 384  # 48 x 8
    assert (lay.tp, lay.pp, lay.dp) == (4, 12, 8)
    assert (lay.first_stage_layers, lay.last_stage_layers) == (5, 5)
    assert lay.zero == 1 and lay.recompute == "full"
    assert job.model.vocab_size == 250880 and job.model.position_embedding == "none"
    result = validate(job, lay, extra=imported.violations)
    assert not {"layers-divisible", "world-size"} & {v.rule for v in result.errors}


def test_an_mla_shape_is_named_after_its_preset_whatever_kv_channels_says(tmp_path):
    # DeepSeek-V3's flags as NVIDIA's recipe writes them: --kv-channels 128 (h/a would be 56)
    # names no tensor with multi-latent attention, so the preset still matches
    flags = (
        "--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 "
        "--num-attention-heads 128 --kv-channels 128 --seq-length 4096 "
        "--max-position-embeddings 4096 --swiglu --normalization RMSNorm "
        "--position-embedding-type rope --untie-embeddings-and-output-weights "
        "--disable-bias-linear --multi-latent-attention --q-lora-rank 1536 "
        "--kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 "
        "--num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 "
        "--moe-shared-expert-intermediate-size 2048 --moe-layer-freq [0]*3+[1]*58 "
        "--tokenizer-type HuggingFaceTokenizer --tokenizer-model deepseek-ai/DeepSeek-V3 "
        "--micro-batch-size 1 --global-batch-size 64 --bf16"
    )
    path = _write(tmp_path, "dsv3.sh", "torchrun --nproc-per-node 8 pretrain_gpt.py " + flags)
    assert load_any(path).job.model.name == "DeepSeek-V3"


def test_cpu_offloading_without_a_count_is_megatrons_unknown_flag_with_the_fix(tmp_path):
    # megatron_flags.txt has --cpu-offloading-num-layers only: argparse rejects --cpu-offloading
    imported = load_any(_megatron(tmp_path, "", "--cpu-offloading"))
    message = _rules(imported)["megatron-unknown-flag"][0]
    assert "--cpu-offloading-num-layers N" in message


@pytest.mark.parametrize("layout", ["[1]*x", "Et*3|(tt|", "Ett|tL"])
def test_a_layout_string_megatron_would_reject_is_a_rule_not_a_crash(tmp_path, layout):
    # found by the long fuzz profile: a --pipeline-model-parallel-layout that does not parse
    # (or does not match the model / pp) went on to the estimate and ended in exit 3; it is
    # the pipeline-layout rule's error (exit 1), and no estimate is made
    runner = CliRunner()
    path = _write(
        tmp_path,
        "run.sh",
        "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n"
        + MODEL
        + " --tokenizer-type HuggingFaceTokenizer --tokenizer-model x"
        " --vocab-size 32000 --pipeline-model-parallel-size 2"
        f" --pipeline-model-parallel-layout '{layout}'\n",
    )
    got = runner.invoke(app, ["validate", str(path), "--json"])
    assert got.exit_code == 1, got.output
    data = json.loads(got.stdout)
    assert any(v["rule"] == "pipeline-layout" for v in data["errors"])
    assert data.get("memory") is None
