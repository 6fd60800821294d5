"""The script exporters (Megatron-LM, Megatron-DeepSpeed) and the production-recipe keys:
each key in the framework's terms or a refusal naming why, goldens of tests/data/recipes/,
round trips through the script importers, the RoPE base, DeepSpeed's own pipeline split and
vpp, and the architecture field for CUDA_DEVICE_MAX_CONNECTIONS.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.config import config_from_data, load_config
from planner.errors import InfeasibleError
from planner.frameworks import load_any
from planner.frameworks.deepspeed.writer import partition_split, split_output, stage_layers
from planner.frameworks.export import export, prepare

HERE = Path(__file__).resolve().parent
FLAGS = {
    line.strip()
    for line in (HERE / "data" / "megatron_flags.txt").read_text().splitlines()
    if line.startswith("--")
}
_spec = importlib.util.spec_from_file_location("regen_golden", HERE / "regen_golden.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)


def command(text: str) -> dict[str, list[str]]:
    """{flag: its values} of the pretrain_gpt.py command in a launch snippet."""
    start = text.index("pretrain_gpt.py \\\n")
    words = shlex.split(text[start:].replace("\\\n", " "), comments=True)
    flags: dict[str, list[str]] = {}
    current = None
    for w in words[1:]:
        if w.startswith("--"):
            current = w
            assert w not in flags, f"{w} appears twice"
            flags[w] = []
        else:
            flags[current].append(w)
    return flags


def job_layout(model="llama3-8b", num_gpus=8, training=None, hardware="h100-sxm", **parallel):
    parallel.setdefault("micro_batch_size", 1)
    parallel.setdefault("vpp", 1)
    return config_from_data(
        {
            "model": model,
            "hardware": hardware,
            "num_gpus": num_gpus,
            "training": training or {"seq_length": 8192, "global_batch_size": 64},
            "parallel": parallel,
        }
    )


# ------------------------------------------------------------------ goldens and round trips

RECIPE = [(c, f) for c, formats in regen.SCRIPT_RECIPE_CASES for f in formats]


@pytest.mark.parametrize("config, fmt", RECIPE, ids=[f"{c}-{f}" for c, f in RECIPE])
def test_recipe_golden(config, fmt):
    path = regen.golden_path(config, fmt)
    assert path.exists(), f"missing {path.name}: run PYTHONPATH=. python tests/regen_golden.py"
    assert regen.golden_text(config, fmt) == path.read_text(encoding="utf-8"), (
        f"{path.name} differs: review the change, then regenerate"
    )


@pytest.mark.parametrize("config", [c for c, _ in regen.SCRIPT_RECIPE_CASES])
def test_recipe_exports_use_real_megatron_flags(config):
    job, layout = load_config(regen.config_path(config))
    assert set(command(export(job, layout, "megatron"))) <= FLAGS


RECIPE_KEYS = (
    "recompute",
    "recompute_modules",
    "recompute_num_layers",
    "cpu_offloading_num_layers",
    "grad_reduce_in_fp32",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "moe_token_dispatcher",
    "overlap_moe_expert_parallel_comm",
    "cuda_graphs",
    "pipeline_model_parallel_layout",
    "first_stage_layers",
    "last_stage_layers",
    "tp",
    "pp",
    "dp",
    "ep",
    "etp",
    "vpp",
    "zero_stage",
)


@pytest.mark.parametrize("config, fmt", RECIPE, ids=[f"{c}-{f}" for c, f in RECIPE])
def test_recipe_exports_read_back_to_the_same_keys(tmp_path, config, fmt):
    job, layout = load_config(regen.config_path(config))
    path = tmp_path / ("run.sh" if fmt == "megatron" else "ds.json")
    path.write_text(export(job, layout, fmt))
    model = None
    if fmt == "deepspeed":  # the vocabulary is the user's tokenizer there
        model = tmp_path / "model.yaml"
        model.write_text(json.dumps(job.model.model_dump(exclude_none=True)))
    back = load_any(path, hardware=job.hardware.name, model=str(model) if model else None)
    before, after = layout.as_dict(), back.layout.as_dict()
    for key in RECIPE_KEYS:
        assert after[key] == before[key], key
    t0, t1 = job.training, back.job.training
    assert (t1.precision, t1.recipe, t1.fp8_param_gather) == (
        t0.precision,
        t0.recipe,
        t0.fp8_param_gather,
    )
    if fmt == "megatron":
        assert back.job.model.rotary_base == job.model.rotary_base
    assert not [v.message for v in back.violations if v.severity == "error"]


# ------------------------------------------------------------------------------ the RoPE base


@pytest.mark.parametrize(
    "preset,hf",
    [
        ("llama3-70b", "Meta-Llama-3-70B"),
        ("mixtral-8x7b", "Mixtral-8x7B-v0.1"),
        ("qwen3-235b-a22b", "Qwen3-235B-A22B"),
    ],
)
def test_megatron_exports_write_the_models_rope_base_as_an_integer(preset, hf):
    # the published rope_theta of each model's Hugging Face config.json (tests/data/hf/):
    # 500000 for Llama 3, 1000000 for Mixtral and Qwen3
    theta = json.loads((HERE / "data" / "hf" / hf / "config.json").read_text())["rope_theta"]
    job, layout = job_layout(
        model=preset,
        num_gpus=64,
        tp=8,
        ep=8 if preset != "llama3-70b" else 1,
        etp=1 if preset != "llama3-70b" else None,
    )
    flags = command(export(job, layout, "megatron"))
    assert flags["--rotary-base"] == [str(int(theta))]  # Megatron's argparse type is int


def test_a_rope_base_megatron_cannot_take_is_refused():
    job, layout = job_layout(
        model={
            "name": "odd",
            "num_layers": 4,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "vocab_size": 1000,
            "activation": "swiglu",
            "rotary_base": 10000.5,
        }
    )
    with pytest.raises(InfeasibleError, match="rotary_base 10000.5"):
        export(job, layout, "megatron")


# ------------------------------------------------------------------ each key, or a refusal


def test_multi_token_prediction_exports_to_megatron_only():
    model = {
        "name": "tiny-mtp",
        "num_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "activation": "swiglu",
        "mtp_num_layers": 1,
    }
    job, layout = job_layout(model=model)
    assert command(export(job, layout, "megatron"))["--mtp-num-layers"] == ["1"]
    with pytest.raises(InfeasibleError, match="mtp_num_layers 1"):
        export(job, layout, "deepspeed")


@pytest.mark.parametrize(
    "parallel,flags",
    [
        (
            {"recompute": "full", "recompute_num_layers": 0},
            {"--recompute-method": ["block"], "--recompute-num-layers": ["0"]},
        ),
        (
            {"recompute": "full"},
            {"--recompute-method": ["uniform"], "--recompute-num-layers": ["1"]},
        ),
        (
            {"cuda_graphs": "full"},
            {
                "--cuda-graph-impl": ["local"],
                "--cuda-graph-scope": ["full_iteration"],
                "--no-check-for-nan-in-loss-and-grad": [],
            },
        ),
        (
            {"zero_stage": 3, "recompute": "full"},
            {"--use-megatron-fsdp": [], "--ckpt-format": ["fsdp_dtensor"]},
        ),
    ],
)
def test_megatron_writes_each_key_in_megatrons_terms(parallel, flags):
    job, layout = job_layout(**parallel)
    got = command(export(job, layout, "megatron"))
    for flag, values in flags.items():
        assert got[flag] == values, flag


def test_fp16_keeps_fp32_gradients_with_megatrons_flag():
    job, layout = job_layout(
        training={"seq_length": 4096, "global_batch_size": 64, "precision": "fp16"}
    )
    assert "--accumulate-allreduce-grads-in-fp32" in command(export(job, layout, "megatron"))


MEGATRON_REFUSALS = [
    ({"pp": 2, "cpu_offloading_num_layers": 2}, "with pp > 1"),
    ({"cpu_offloading_num_layers": 2, "recompute": "selective"}, "does not work with recompute"),
    ({"cuda_graphs": "partial", "recompute": "full"}, "cuda_graphs partial with recompute full"),
    ({"zero_stage": 0, "_fp8": True}, "fp8_param_gather with zero_stage 0"),
    (
        {"recompute": "selective", "recompute_modules": ["torchtitan_op"]},
        r"recompute_modules \[torchtitan_op\]: torchtitan's op-level",
    ),
]


@pytest.mark.parametrize(
    "parallel,needle", MEGATRON_REFUSALS, ids=[n for _, n in MEGATRON_REFUSALS]
)
def test_megatron_refuses_what_megatron_rejects(parallel, needle):
    parallel = dict(parallel)
    training = {"seq_length": 8192, "global_batch_size": 64}
    if parallel.pop("_fp8", False):
        training.update(precision="fp8", fp8_param_gather=True)
    job, layout = job_layout(training=training, **parallel)
    with pytest.raises(InfeasibleError, match=needle):
        export(job, layout, "megatron")


def test_megatron_refuses_ep_overlap_with_the_allgather_dispatcher():
    job, layout = job_layout(
        model="mixtral-8x7b", num_gpus=64, tp=2, ep=8, etp=1, overlap_moe_expert_parallel_comm=True
    )
    with pytest.raises(InfeasibleError, match="allgather"):
        export(job, layout, "megatron")


DEEPSPEED_REFUSALS = [
    (
        {"recompute": "selective", "recompute_modules": ["core_attn", "mlp"]},
        "recompute_modules mlp",
    ),
    ({"recompute": "full", "recompute_num_layers": 2}, "recompute_num_layers 2"),
    ({"cpu_offloading_num_layers": 4}, "cpu_offloading_num_layers 4"),
    ({"grad_reduce_in_fp32": False}, "grad_reduce_in_fp32 false"),
    ({"exp_avg_dtype": "bf16"}, "bf16 Adam moments"),
    ({"cuda_graphs": "partial"}, "cuda_graphs partial"),
    ({"pp": 2, "pipeline_model_parallel_layout": "Et*16|t*16L"}, "pipeline_model_parallel_layout"),
    ({"pp": 4, "first_stage_layers": 7, "last_stage_layers": 7}, "8, 8, 8, 8 layers per stage"),
]


@pytest.mark.parametrize(
    "parallel,needle", DEEPSPEED_REFUSALS, ids=[n for _, n in DEEPSPEED_REFUSALS]
)
def test_deepspeed_refuses_what_megatron_deepspeed_has_no_flag_for(parallel, needle):
    job, layout = job_layout(**parallel)
    with pytest.raises(InfeasibleError, match=needle):
        export(job, layout, "deepspeed")


@pytest.mark.parametrize(
    "parallel,needle",
    [
        ({"moe_token_dispatcher": "deepep"}, "moe_token_dispatcher deepep"),
        (
            {"moe_token_dispatcher": "alltoall", "overlap_moe_expert_parallel_comm": True},
            "overlap_moe_expert_parallel_comm",
        ),
    ],
)
def test_deepspeed_refuses_moe_recipe_keys(parallel, needle):
    job, layout = job_layout(model="mixtral-8x7b", num_gpus=64, tp=2, ep=8, etp=1, **parallel)
    with pytest.raises(InfeasibleError, match=needle):
        export(job, layout, "deepspeed")


def test_deepspeed_refuses_fp8_recipes():
    job, layout = job_layout(
        training={
            "seq_length": 8192,
            "global_batch_size": 64,
            "precision": "fp8",
            "fp8_recipe": "blockwise",
        }
    )
    with pytest.raises(InfeasibleError, match="no FP8 recipe"):
        export(job, layout, "deepspeed")


def test_deepspeed_zero_0_bf16_says_it_runs_the_bf16_optimizer():
    job, layout = job_layout(zero_stage=0)
    script = split_output(export(job, layout, "deepspeed"))[1]
    assert "BF16 optimizer" in script


# ------------------------------------------------------------------ DeepSpeed's pipeline


@pytest.mark.parametrize(
    "layers,pp,method,tied,counts",
    [
        # bottleneck ceil(70/12) = 6: 11 stages of 6, the last 70 - 66 = 4
        (70, 12, "type:transformer", True, (6,) * 11 + (4,)),
        # 72 items (the tied embedding on both ends) at 6 per stage: 5 + 10 x 6 + 5 layers
        (70, 12, "type:transformer|embedding", True, (5,) + (6,) * 10 + (5,)),
        # 13 layers on 12 stages: 2 on the first, one on every other (no stage left empty)
        (13, 12, "type:transformer", False, (2,) + (1,) * 11),
        (80, 4, "type:transformer", False, (20,) * 4),
    ],
)
def test_deepspeed_stage_layers(layers, pp, method, tied, counts):
    assert stage_layers(layers, pp, method=method, tied=tied) == counts
    split = partition_split(layers, pp, method=method, tied=tied)
    assert split.note is None
    if len(set(counts)) > 1:
        assert (split.first, split.last) == (counts[0], counts[-1])


def test_an_uneven_split_deepspeed_makes_itself_exports_as_it_is():
    job, layout = load_config(regen.config_path("recipe-70layers-pp12-96xh100"))
    cfg, script = split_output(export(job, layout, "deepspeed"))
    assert "--pipeline-model-parallel-size 12" in script
    assert "decoder-first" not in script  # DeepSpeed places them itself


def test_deepspeed_export_of_vpp_left_to_the_planner_is_vpp_1(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "model: llama3-70b\nnum_gpus: 512\ntraining: {seq_length: 8192, "
        "global_batch_size: 512}\nparallel: {tp: 8, pp: 4, micro_batch_size: 1}\n"
    )
    job, layout = load_config(cfg)
    assert "vpp" in layout.auto
    pinned = prepare(layout, "deepspeed")
    assert pinned.vpp == 1 and "vpp" not in pinned.auto
    assert prepare(layout, "megatron") is layout  # Megatron runs any vpp
    result = CliRunner().invoke(app, ["export", str(cfg), "--format", "deepspeed"])
    assert result.exit_code == 0, result.output
    assert "--num-virtual-stages-per-pipeline-rank" not in result.stdout


# ------------------------------------------------------------------ the architecture field


def test_cuda_device_max_connections_follows_the_profiles_architecture():
    from planner.config import resolve_hardware

    h100 = resolve_hardware("h100-sxm").model_dump()
    mystery = dict(h100, name="mystery-gpu", architecture="blackwell")
    unknown = dict(h100, name="b200-lookalike", architecture=None)
    for hw, exported in ((h100, True), (mystery, False), (unknown, True)):
        job, layout = job_layout(hardware=hw, tp=2)
        assert (
            "export CUDA_DEVICE_MAX_CONNECTIONS=1" in export(job, layout, "megatron")
        ) is exported, hw["name"]
