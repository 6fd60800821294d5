"""Exporters: real flags, the frameworks' own rules read back from the text, goldens, CLI.

Megatron rules are numbered as in docs/reference/framework-rules.md#megatron-lm (R1-R15); the
flag list is tests/data/megatron_flags.txt (a copy of
planner/frameworks/megatron/megatron_flags.txt: Megatron-LM's pretrain_gpt.py parser, built in
megatron/training/arguments.py; see docs/reference/framework-rules.md#megatron-lm-flags).
Goldens: regenerate with `python tests/regen_golden.py`.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner import __version__
from planner.cli import app
from planner.config import config_from_data, load_config
from planner.cost import estimate
from planner.errors import InfeasibleError, SpecError
from planner.frameworks.deepspeed.writer import SEPARATOR, split_output
from planner.frameworks.export import FORMATS, export
from planner.io import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MEGATRON_FLAGS = {
    line.strip()
    for line in (HERE / "data" / "megatron_flags.txt").read_text().splitlines()
    if line.startswith("--")
}

_spec = importlib.util.spec_from_file_location("regen_golden", HERE / "regen_golden.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)


def job_layout(model="llama3-70b", hardware="h100-sxm", num_gpus=2048, training=None, **parallel):
    # pin the knobs a config may leave to the planner, so each case tests exactly its layout
    parallel.setdefault("micro_batch_size", 1)
    parallel.setdefault("vpp", 1)
    data = {
        "model": model,
        "hardware": hardware,
        "num_gpus": num_gpus,
        "training": training or {"seq_length": 8192, "global_batch_size": 1024},
        "parallel": parallel,
    }
    return config_from_data(data)


# Layouts that every Megatron-expressible feature passes through (each valid by rules.py).
CASES = {
    "llama70b-tp8-pp4": dict(tp=8, pp=4),
    "llama70b-vpp5": dict(tp=8, pp=4, vpp=5, recompute="full"),
    "llama70b-zero0-nooverlap": dict(
        tp=8, pp=4, zero_stage=0, overlap_param_gather=False, tp_comm_overlap=False
    ),
    "llama70b-zero2-pp1": dict(
        model="llama3-70b",
        num_gpus=256,
        tp=8,
        pp=1,
        zero_stage=2,
        recompute="full",
        training={"seq_length": 8192, "global_batch_size": 256},
    ),
    "llama70b-fp16-sp-off": dict(
        tp=4,
        pp=8,
        sequence_parallel=False,
        training={"seq_length": 4096, "global_batch_size": 1024, "precision": "fp16"},
    ),
    "llama405b-accounted": dict(
        model="llama3-405b",
        num_gpus=16384,
        tp=8,
        pp=16,
        cp=2,
        first_stage_layers=7,
        last_stage_layers=7,
        recompute="selective",
        training={"seq_length": 8192, "global_batch_size": 2048, "precision": "fp8"},
    ),
    "gpt3-tied-gelu": dict(
        model="gpt3-175b",
        num_gpus=1024,
        tp=8,
        pp=8,
        training={"seq_length": 2048, "global_batch_size": 1536, "flash_attention": False},
    ),
    "llama8b-cp8-zero3": dict(
        model="llama3-8b",
        num_gpus=64,
        cp=8,
        zero_stage=3,
        recompute="full",
        training={"seq_length": 131072, "global_batch_size": 32},
    ),
    "mixtral-ep8-etp2": dict(
        model="mixtral-8x7b",
        num_gpus=64,
        tp=2,
        ep=8,
        etp=2,
        training={"seq_length": 8192, "global_batch_size": 512},
    ),
    "dsv3-explicit-split": dict(
        model="deepseek-v3",
        hardware="b200",
        num_gpus=1024,
        tp=2,
        pp=16,
        ep=32,
        etp=1,
        first_stage_layers=3,
        last_stage_layers=2,
        training={"seq_length": 4096, "global_batch_size": 2048},
    ),
    "qwen3-moe-kv-channels": dict(
        model="qwen3-235b-a22b",
        num_gpus=512,
        tp=4,
        pp=2,
        ep=8,
        etp=1,
        training={"seq_length": 4096, "global_batch_size": 1024},
    ),
}


def case(name):
    kw = dict(CASES[name])
    keys = ("model", "hardware", "num_gpus", "training")
    return job_layout(**{k: kw.pop(k) for k in keys if k in kw}, **kw)


def test_cases_are_valid():
    from planner.validate import validate

    for name in CASES:
        job, layout = case(name)
        errors = [v for v in validate(job, layout).errors if v.rule != "fits-in-memory"]
        assert not errors, (name, errors)


# ------------------------------------------------------------------ parsing an export back


def megatron_command(text: str) -> tuple[dict[str, str], list[str]]:
    """({flag: value or ''}, exported env lines) of the pretrain_gpt.py part of a snippet."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "pretrain_gpt.py \\") + 1
    flags: dict[str, str] = {}
    order = []
    for line in lines[start:]:
        body = line.strip().removesuffix("\\").strip()
        words = shlex.split(body, posix=True)
        assert words[0].startswith("--") and len(words) <= 2, line  # one flag per line
        order.append(words[0])
        flags[words[0]] = words[1] if len(words) == 2 else ""
        if not line.endswith(" \\"):
            break
    assert len(order) == len(set(order)), "a flag appears twice"
    env = [line for line in lines if line.startswith("export ")]
    return flags, env


def _int(flags, name, default=1):
    return int(flags[name]) if name in flags else default


def megatron_rule_errors(flags: dict[str, str], world: int, model) -> list[str]:
    """The Megatron rules of docs/reference/framework-rules.md#megatron-lm, checked on the
    parsed flags alone."""
    bad = []
    tp, pp = (
        _int(flags, "--tensor-model-parallel-size"),
        _int(flags, "--pipeline-model-parallel-size"),
    )
    cp = _int(flags, "--context-parallel-size")
    ep = _int(flags, "--expert-model-parallel-size")
    etp = _int(flags, "--expert-tensor-parallel-size", tp)
    L, h = int(flags["--num-layers"]), int(flags["--hidden-size"])
    heads, seq = int(flags["--num-attention-heads"]), int(flags["--seq-length"])
    if world % (tp * pp * cp):  # 1
        bad.append("world % (tp*pp*cp)")
    dp = world // (tp * pp * cp)
    if world % (etp * ep * pp):  # 2
        bad.append("world % (etp*ep*pp)")
    if ep > 1 and int(flags["--num-experts"]) % ep:  # 3
        bad.append("num_experts % ep")
    if heads % tp:  # 4
        bad.append("heads % tp")
    if "--num-query-groups" in flags:  # 5
        g = int(flags["--num-query-groups"])
        if "--group-query-attention" not in flags or (g % tp and tp % g):
            bad.append("query groups")
    if "--kv-channels" not in flags and "--multi-latent-attention" not in flags and h % heads:  # 6
        bad.append("hidden % heads")
    if int(flags["--max-position-embeddings"]) < seq:  # 7
        bad.append("max_position_embeddings < seq")
    if cp > 1 and seq % (2 * cp):  # 8
        bad.append("seq % 2cp")
    mbs, gbs = int(flags["--micro-batch-size"]), int(flags["--global-batch-size"])
    if gbs % (mbs * dp) or gbs < mbs * dp:  # 9
        bad.append("gbs % (mbs*dp)")
    vpp = _int(flags, "--num-virtual-stages-per-pipeline-rank")
    accounted = "--account-for-embedding-in-pipeline-split" in flags
    if accounted != ("--account-for-loss-in-pipeline-split" in flags):
        bad.append("account flags come in pairs here")
    first = flags.get("--decoder-first-pipeline-num-layers")
    last = flags.get("--decoder-last-pipeline-num-layers")
    if first is not None or last is not None:  # 10 (uneven)
        f = int(first) if first is not None else None
        l_ = int(last) if last is not None else None
        rest = L - (f or 0) - (l_ or 0)
        middle = pp - (f is not None) - (l_ is not None)
        if rest < 0 or (middle and rest % middle) or (not middle and rest):
            bad.append("uneven split")
    elif (L + 2 * accounted) % pp:  # 10
        bad.append("layers % pp")
    if vpp > 1:  # 11
        if pp == 1 or (L // pp) % vpp or gbs // (mbs * dp) < pp:
            bad.append("virtual stages")
    if "--num-layers-per-virtual-pipeline-stage" in flags and vpp > 1:
        bad.append("two virtual-stage flags")
    if "--tp-comm-overlap" in flags and "--sequence-parallel" not in flags:  # 13
        bad.append("tp-comm-overlap needs SP")
    if "--overlap-param-gather" in flags and not (
        "--use-distributed-optimizer" in flags and "--overlap-grad-reduce" in flags
    ):
        bad.append("overlap-param-gather needs dist-opt and overlap-grad-reduce")
    if model.is_moe and ep > 1 and tp > 1 and "--sequence-parallel" not in flags:  # 14
        bad.append("MoE with ep and tp needs SP")
    if ("--bf16" in flags) == ("--fp16" in flags):  # 15
        bad.append("bf16 xor fp16")
    if "--multi-latent-attention" in flags and "--group-query-attention" in flags:
        bad.append("MLA excludes GQA")
    gran = flags.get("--recompute-granularity")  # recompute
    has_method = "--recompute-method" in flags or "--recompute-num-layers" in flags
    if gran == "selective" and has_method:
        bad.append("selective recompute forbids method/num-layers")
    if gran == "full" and not ("--recompute-method" in flags and "--recompute-num-layers" in flags):
        bad.append("full recompute needs method and num-layers")
    if gran is None and has_method:
        bad.append("recompute method without granularity")
    if any("data-parallel-size" in f for f in flags):  # no DP flag
        bad.append("DP flag")
    if "--fp8-format" in flags and flags["--fp8-format"] not in ("e4m3", "hybrid"):
        bad.append("fp8 format")
    return bad


# ------------------------------------------------------------------ Megatron


def test_flag_list_is_megatrons():
    assert len(MEGATRON_FLAGS) > 800
    assert {"--tensor-model-parallel-size", "--use-distributed-optimizer"} <= MEGATRON_FLAGS
    assert "--data-parallel-size" not in MEGATRON_FLAGS


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_megatron_flags_are_real(name):
    job, layout = case(name)
    flags, _ = megatron_command(export(job, layout, "megatron"))
    unknown = sorted(set(flags) - MEGATRON_FLAGS)
    assert not unknown, unknown


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_megatron_flags_satisfy_megatron_rules(name):
    job, layout = case(name)
    flags, _ = megatron_command(export(job, layout, "megatron"))
    assert megatron_rule_errors(flags, job.num_gpus, job.model) == []
    # and they say what the plan says
    assert int(flags["--tensor-model-parallel-size"]) == layout.tp
    assert int(flags["--pipeline-model-parallel-size"]) == layout.pp
    assert _int(flags, "--context-parallel-size") == layout.cp
    assert int(flags["--global-batch-size"]) == job.training.global_batch_size
    assert job.num_gpus // (layout.tp * layout.pp * layout.cp) == layout.dp


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "llama70b-tp8-pp4",
            {
                "--use-distributed-optimizer",
                "--overlap-param-gather",
                "--sequence-parallel",
                "--tp-comm-overlap",
                "--group-query-attention",
                "--swiglu",
            },
        ),
        ("llama70b-vpp5", {"--num-virtual-stages-per-pipeline-rank", "--recompute-method"}),
        (
            "llama405b-accounted",
            {
                "--account-for-embedding-in-pipeline-split",
                "--fp8-format",
                "--bf16",
                "--cp-comm-type",
                "--recompute-granularity",
            },
        ),
        (
            "dsv3-explicit-split",
            {
                "--decoder-first-pipeline-num-layers",
                "--multi-latent-attention",
                "--moe-layer-freq",
                "--moe-shared-expert-intermediate-size",
                "--expert-tensor-parallel-size",
                "--q-lora-rank",
            },
        ),
        ("llama8b-cp8-zero3", {"--use-megatron-fsdp", "--data-parallel-sharding-strategy"}),
        ("gpt3-tied-gelu", {"--attention-backend"}),
        ("qwen3-moe-kv-channels", {"--kv-channels", "--moe-ffn-hidden-size"}),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_megatron_emits(name, expected):
    job, layout = case(name)
    flags, _ = megatron_command(export(job, layout, "megatron"))
    assert expected <= set(flags), expected - set(flags)


@pytest.mark.parametrize(
    "name, absent",
    [
        (
            "llama70b-zero0-nooverlap",
            {"--use-distributed-optimizer", "--overlap-param-gather", "--tp-comm-overlap"},
        ),
        ("llama70b-fp16-sp-off", {"--sequence-parallel", "--bf16", "--tp-comm-overlap"}),
        (
            "gpt3-tied-gelu",
            {
                "--untie-embeddings-and-output-weights",
                "--disable-bias-linear",
                "--swiglu",
                "--normalization",
                "--position-embedding-type",
                "--group-query-attention",
            },
        ),
        (
            "dsv3-explicit-split",
            {"--group-query-attention", "--account-for-embedding-in-pipeline-split"},
        ),
        ("llama405b-accounted", {"--decoder-first-pipeline-num-layers", "--fp16"}),
        ("mixtral-ep8-etp2", {"--moe-layer-freq", "--moe-shared-expert-intermediate-size"}),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_megatron_omits(name, absent):
    job, layout = case(name)
    flags, _ = megatron_command(export(job, layout, "megatron"))
    assert not absent & set(flags), absent & set(flags)


def test_megatron_values():
    job, layout = case("dsv3-explicit-split")
    flags, _ = megatron_command(export(job, layout, "megatron"))
    assert flags["--moe-layer-freq"] == "([0]*3+[1]*58)"
    assert flags["--moe-shared-expert-intermediate-size"] == "2048"
    assert (
        flags["--decoder-first-pipeline-num-layers"],
        flags["--decoder-last-pipeline-num-layers"],
    ) == ("3", "2")
    assert flags["--vocab-size"] == str(job.model.vocab_size - 1)  # NullTokenizer adds EOD
    job, layout = case("llama70b-vpp5")
    flags, _ = megatron_command(export(job, layout, "megatron"))
    assert (
        flags["--recompute-granularity"],
        flags["--recompute-method"],
        flags["--recompute-num-layers"],
    ) == ("full", "uniform", "1")
    job, layout = case("llama8b-cp8-zero3")
    flags, _ = megatron_command(export(job, layout, "megatron"))
    assert flags["--data-parallel-sharding-strategy"] == "optim_grads_params"
    job, layout = case("llama70b-zero2-pp1")
    flags, _ = megatron_command(export(job, layout, "megatron"))
    assert flags["--data-parallel-sharding-strategy"] == "optim_grads"


@pytest.mark.parametrize(
    "name, hardware, expected",
    [
        ("llama70b-tp8-pp4", "h100-sxm", True),  # TP > 1 on Hopper
        ("llama70b-tp8-pp4", "a100-80g", True),
        ("llama70b-tp8-pp4", "h200", True),
        ("llama70b-tp8-pp4", "mi300x", True),
        ("llama70b-tp8-pp4", "b200", False),  # Blackwell: no longer asserted
        ("llama70b-tp8-pp4", "gb200-nvl72", False),
        ("llama8b-cp8-zero3", "h100-sxm", False),  # Megatron-FSDP wants it unset
    ],
    ids=lambda x: x if isinstance(x, str) else str(x),
)
def test_megatron_environment(name, hardware, expected):
    kw = dict(CASES[name], hardware=hardware)
    keys = ("model", "hardware", "num_gpus", "training")
    job, layout = job_layout(**{k: kw.pop(k) for k in keys if k in kw}, **kw)
    _, env = megatron_command(export(job, layout, "megatron"))
    assert (env == ["export CUDA_DEVICE_MAX_CONNECTIONS=1"]) is expected


def test_megatron_environment_not_needed_without_tp_or_cp():
    job, layout = job_layout(
        model="llama3-8b", num_gpus=8, training={"seq_length": 8192, "global_batch_size": 64}
    )
    assert megatron_command(export(job, layout, "megatron"))[1] == []


def test_megatron_snippet_is_one_flag_per_line():
    job, layout = case("llama70b-tp8-pp4")
    text = export(job, layout, "megatron")
    assert text.startswith("#!/usr/bin/env bash\n")
    body = text[text.index("pretrain_gpt.py \\") :].splitlines()
    assert all(line.endswith(" \\") for line in body[:-1]) and not body[-1].endswith("\\")


# ------------------------------------------------------------------ DeepSpeed


def deepspeed_parts(text: str) -> tuple[dict, dict[str, str]]:
    cfg_text, script = split_output(text)
    flags, _ = megatron_command(script)
    return json.loads(cfg_text), flags


@pytest.mark.parametrize(
    "name",
    [
        "llama70b-tp8-pp4",
        "llama70b-zero2-pp1",
        "llama8b-cp8-zero3",
        "mixtral-ep8-etp2",
        "llama70b-fp16-sp-off",
        "gpt3-tied-gelu",
    ],
)
def test_deepspeed_batch_rule(name):
    job, layout = case(name)
    cfg, flags = deepspeed_parts(export(job, layout, "deepspeed"))
    tp, pp = (
        int(flags["--tensor-model-parallel-size"]),
        int(flags["--pipeline-model-parallel-size"]),
    )
    sp = _int(flags, "--ds-sequence-parallel-size")
    dp = job.num_gpus // (tp * pp * sp)
    assert job.num_gpus % (tp * pp * sp) == 0
    assert cfg["train_batch_size"] == (
        cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp
    )
    assert cfg["train_batch_size"] == int(flags["--global-batch-size"])
    assert cfg["train_micro_batch_size_per_gpu"] == int(flags["--micro-batch-size"])
    assert cfg["zero_optimization"]["stage"] == int(flags["--zero-stage"]) == layout.zero
    assert ("bf16" in cfg) != ("fp16" in cfg) and ("--bf16" in flags) != ("--fp16" in flags)
    assert ("fp16" in cfg) == ("--fp16" in flags)
    if layout.zero >= 2:
        assert pp == 1 and "--no-pipeline-parallel" in flags
    assert (
        ("activation_checkpointing" in cfg)
        == (layout.recompute != "none")
        == ("--deepspeed-activation-checkpointing" in flags)
    )
    assert {"--deepspeed", "--deepspeed_config"} <= set(flags)
    assert flags["--deepspeed_config"] == "ds_config.json"


def test_deepspeed_gqa_and_ulysses_flags():
    job, layout = case("llama8b-cp8-zero3")
    cfg, flags = deepspeed_parts(export(job, layout, "deepspeed"))
    assert flags["--num-key-value-heads"] == "8" and flags["--ds-sequence-parallel-size"] == "8"
    job, layout = case("mixtral-ep8-etp2")
    _, flags = deepspeed_parts(export(job, layout, "deepspeed"))
    assert (
        flags["--moe-expert-parallel-size"] == "8" and "--enable-expert-tensor-parallelism" in flags
    )


@pytest.mark.parametrize("zero", [2, 3])
def test_deepspeed_refuses_zero23_with_pipeline(zero):
    job, layout = job_layout(tp=8, pp=4, zero_stage=zero)
    with pytest.raises(InfeasibleError) as exc:
        export(job, layout, "deepspeed")
    msg = exc.value.message
    assert f"zero_stage {zero}" in msg and "pp 4" in msg and "set zero_stage 1" in msg


@pytest.mark.parametrize(
    "name, words",
    [
        ("dsv3-explicit-split", "multi-latent attention"),
        ("llama70b-vpp5", "vpp 5"),
        ("llama405b-accounted", "first_stage_layers"),
    ],
)
def test_deepspeed_refuses_what_it_cannot_express(name, words):
    job, layout = case(name)
    with pytest.raises(InfeasibleError, match=words):
        export(job, layout, "deepspeed")


def test_deepspeed_output_format():
    job, layout = case("llama70b-tp8-pp4")
    text = export(job, layout, "deepspeed")
    assert text.startswith("{\n") and f"\n{SEPARATOR}\n" in text
    cfg_text, script = split_output(text)
    assert json.loads(cfg_text)["_comment"][0].startswith(f"Generated by planner {__version__}")
    assert script.startswith("#!/usr/bin/env bash\n")
    # the documented shell split: JSON up to the first line that is exactly "}"
    assert cfg_text == text[: text.index("\n}\n") + 3]


# ------------------------------------------------------------------ torchtitan


@pytest.mark.parametrize(
    "name",
    [
        "llama70b-tp8-pp4",
        "llama70b-vpp5",
        "llama70b-zero0-nooverlap",
        "llama8b-cp8-zero3",
        "mixtral-ep8-etp2",
        "dsv3-explicit-split",
        "llama405b-accounted",
        "qwen3-moe-kv-channels",
    ],
)
def test_torchtitan_degrees(name):
    job, layout = case(name)
    toml = tomllib.loads(export(job, layout, "torchtitan"))
    par, tr = toml["parallelism"], toml["training"]
    rep, shard = par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]
    cp, tp, pp = (
        par["context_parallel_degree"],
        par["tensor_parallel_degree"],
        par["pipeline_parallel_degree"],
    )
    assert rep * shard * cp * tp * pp == job.num_gpus
    assert (shard * cp * tp) % par["expert_parallel_degree"] == 0
    assert par["expert_tensor_parallel_degree"] in (1, tp)
    assert tr["global_batch_size"] % (tr["local_batch_size"] * rep * shard) == 0
    assert tr["seq_len"] % (tp * (2 * cp if cp > 1 else 1)) == 0
    assert toml["activation_checkpoint"]["mode"] == layout.recompute
    assert (rep, shard) == ((layout.dp, 1) if layout.zero == 0 else (1, layout.dp))
    if pp > 1:
        stages = pp * layout.vpp
        per = par["pipeline_parallel_layers_per_stage"]
        fl, ll = (
            par["pipeline_parallel_first_stage_less_layers"],
            par["pipeline_parallel_last_stage_less_layers"],
        )
        assert job.model.num_layers + fl + ll == stages * per  # torchtitan's stage count
        assert par["pipeline_parallel_schedule"] == (
            "Interleaved1F1B" if layout.vpp > 1 else "1F1B"
        )
        assert tr["local_batch_size"] // par[
            "pipeline_parallel_microbatch_size"
        ] == layout.num_microbatches(job.training.global_batch_size)


def test_torchtitan_header_names_schema_and_zero_mapping():
    job, layout = case("llama70b-tp8-pp4")
    text = export(job, layout, "torchtitan")
    assert "torchtitan <= v0.2.2" in text and "ParallelismConfig" in text and "ZeRO mapping" in text
    assert tomllib.loads(text)["model"] == {"name": "llama3", "flavor": "70B"}


@pytest.mark.parametrize(
    "loss",
    [
        {},
        {"cross_entropy": "pytorch_fp32"},
        {"cross_entropy": "pytorch_fp32", "loss_parallel": False},
    ],
    ids=["fused", "eager", "eager-gathered"],
)
def test_torchtitan_export_keeps_the_loss_the_plan_counted(tmp_path, loss):
    # A plan that counts a fused loss (Megatron's) turns on torch.compile of the loss, which
    # torchtitan's eager fp32 loss (~3x the bytes) would otherwise exceed; a plan that already
    # counts the eager loss leaves compile alone. Both read back as they were written.
    from planner.frameworks import load_any

    job, layout = job_layout(
        num_gpus=64, tp=8, training={"seq_length": 8192, "global_batch_size": 64, **loss}
    )
    text = export(job, layout, "torchtitan")
    toml = tomllib.loads(text)
    assert ("compile" in toml) == (job.training.cross_entropy == "vocab_parallel")
    assert toml["parallelism"].get("disable_loss_parallel", False) == (
        not job.training.loss_parallel
    )
    path = tmp_path / "job.toml"
    path.write_text(text)
    back = load_any(path, gpus=64, hardware="h100-sxm").job.training
    assert (back.cross_entropy, back.loss_parallel) == (
        job.training.cross_entropy,
        job.training.loss_parallel,
    )


def test_torchtitan_refusals():
    job, layout = case("llama70b-fp16-sp-off")
    with pytest.raises(InfeasibleError, match="fp16"):
        export(job, layout, "torchtitan")
    # EP borrows from shard*cp*tp: with zero 0 the shard degree is 1
    job, layout = job_layout(
        model="mixtral-8x7b",
        num_gpus=64,
        tp=2,
        ep=8,
        etp=2,
        zero_stage=0,
        training={"seq_length": 8192, "global_batch_size": 512},
    )
    with pytest.raises(InfeasibleError, match=r"ep \(8\) must divide"):
        export(job, layout, "torchtitan")


# ------------------------------------------------------------------ NeMo


@pytest.mark.parametrize(
    "name",
    [
        "llama70b-tp8-pp4",
        "llama70b-vpp5",
        "llama8b-cp8-zero3",
        "mixtral-ep8-etp2",
        "llama405b-accounted",
        "llama70b-fp16-sp-off",
    ],
)
def test_nemo_yaml(name):
    job, layout = case(name)
    text = export(job, layout, "nemo")
    cfg = yaml.safe_load(text)
    t, m = cfg["trainer"], cfg["model"]
    assert t["num_nodes"] * t["devices"] == job.num_gpus
    assert (
        m["tensor_model_parallel_size"]
        * m["pipeline_model_parallel_size"]
        * m["context_parallel_size"]
        * (job.num_gpus // (layout.tp * layout.pp * layout.cp))
        == job.num_gpus
    )
    assert m["global_batch_size"] % (m["micro_batch_size"] * layout.dp) == 0
    assert m["sequence_parallel"] == (layout.sp and layout.tp > 1)  # NeMo turns SP off at TP 1
    vp = m["virtual_pipeline_model_parallel_size"]
    if vp:
        assert (m["num_layers"] // m["pipeline_model_parallel_size"]) % vp == 0
    assert (
        m["optim"]["name"]
        == {
            0: "fused_adam",
            1: "distributed_fused_adam",
            2: "distributed_fused_adam",
            3: "fused_adam",
        }[layout.zero]
    )
    assert m.get("fsdp", False) == (layout.zero == 3)
    assert "NeMo 2" in text and "Megatron-Bridge" in text
    if layout.recompute == "full":
        assert (m["activations_checkpoint_method"], m["activations_checkpoint_num_layers"]) == (
            "uniform",
            1,
        )


@pytest.mark.parametrize("fmt", ["nemo", "deepspeed"])
def test_module_wise_exports_refuse_torchtitans_op_sac(fmt):
    job, layout = job_layout(
        model="llama3-8b",
        num_gpus=64,
        tp=1,
        recompute="selective",
        recompute_modules=["torchtitan_op"],
        training={"seq_length": 8192, "global_batch_size": 512},
    )
    with pytest.raises(InfeasibleError, match="torchtitan_op"):
        export(job, layout, fmt)
    toml = tomllib.loads(export(job, layout, "torchtitan"))
    assert toml["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}


def test_nemo_refuses_mla():
    job, layout = case("dsv3-explicit-split")
    with pytest.raises(InfeasibleError, match="multi-latent"):
        export(job, layout, "nemo")


# ------------------------------------------------------------------ every format


@pytest.mark.parametrize("fmt", FORMATS)
def test_header_has_version_and_estimate_only_when_given(fmt):
    job, layout = case("llama70b-tp8-pp4")
    plain = export(job, layout, fmt)
    assert f"planner {__version__}" in "\n".join(plain.splitlines()[:3])
    assert "estimate:" not in plain
    est = estimate(job, layout)
    text = export(job, layout, fmt, estimate=est)
    line = next(line for line in text.splitlines() if "estimate:" in line)
    assert "memory per GPU" in line and "GiB" in line
    if getattr(est.time, "step_time_s", None) is not None:
        assert "step time" in line and "MFU" in line


def test_unknown_format_is_a_spec_error():
    job, layout = case("llama70b-tp8-pp4")
    with pytest.raises(SpecError, match="megatron, deepspeed, torchtitan, nemo"):
        export(job, layout, "jax", estimate=None)


@pytest.mark.parametrize("fmt", FORMATS)
def test_broken_layout_is_refused(fmt):
    job, layout = job_layout(tp=8, pp=3)  # 80 layers over 3 stages, 2048 % 24
    with pytest.raises(InfeasibleError, match="world-size|layers-divisible"):
        export(job, layout, fmt)


# ------------------------------------------------------------------ goldens

GOLDEN = [(c, f) for c, formats in regen.CASES for f in formats]


@pytest.mark.parametrize("config, fmt", GOLDEN, ids=[f"{c}-{f}" for c, f in GOLDEN])
def test_golden(config, fmt):
    path = regen.golden_path(config, fmt)
    assert path.exists(), f"missing {path.name}: run python tests/regen_golden.py"
    assert regen.golden_text(config, fmt) == path.read_text(encoding="utf-8"), (
        f"{path.name} differs: review the change, then run python tests/regen_golden.py"
    )


@pytest.mark.parametrize("config", [c for c, _ in regen.CASES])
def test_golden_configs_validate(config):
    from planner.validate import validate

    job, layout = load_config(ROOT / "examples" / f"{config}.yaml")
    # every framework rule holds (whether it fits is the memory model's call: planner validate)
    assert [v for v in validate(job, layout).errors if v.rule != "fits-in-memory"] == []


@pytest.mark.parametrize(
    "config, fmt", [(c, f) for c, formats in regen.CASES for f in FORMATS if f not in formats]
)
def test_golden_configs_refused_formats(config, fmt):
    job, layout = load_config(ROOT / "examples" / f"{config}.yaml")
    with pytest.raises(InfeasibleError):
        export(job, layout, fmt)


# ------------------------------------------------------------------ CLI

runner = CliRunner()
EXAMPLE = str(ROOT / "examples" / "llama3-70b-2048xh100.yaml")


@pytest.mark.parametrize("fmt", FORMATS)
def test_cli_export_stdout(fmt):
    result = runner.invoke(app, ["export", EXAMPLE, "--format", fmt])
    assert result.exit_code == 0, result.output
    assert f"planner {__version__}" in result.stdout
    assert "estimate: memory per GPU" in result.stdout


def test_cli_export_to_file(tmp_path):
    out = tmp_path / "launch.sh"
    result = runner.invoke(app, ["export", EXAMPLE, "--format", "megatron", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    flags, _ = megatron_command(out.read_text())
    assert flags["--tensor-model-parallel-size"] == "8"


def test_cli_unknown_format_exits_2():
    result = runner.invoke(app, ["export", EXAMPLE, "--format", "jax"])
    assert result.exit_code == 2
    assert "megatron, deepspeed, torchtitan, nemo" in result.stderr


def test_cli_missing_config_exits_2(tmp_path):
    result = runner.invoke(app, ["export", str(tmp_path / "nope.yaml"), "--format", "megatron"])
    assert result.exit_code == 2 and "does not exist" in result.stderr


def test_cli_refusal_exits_1():
    result = runner.invoke(
        app,
        ["export", str(ROOT / "examples" / "deepseek-v3-1024xb200.yaml"), "--format", "deepspeed"],
    )
    assert result.exit_code == 1 and "multi-latent attention" in result.stderr


def test_cli_broken_config_exits_1(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("model: llama3-70b\nnum_gpus: 2048\nparallel: {tp: 8, pp: 3}\n")
    result = runner.invoke(app, ["export", str(cfg), "--format", "megatron"])
    assert result.exit_code == 1 and "planner validate" in result.stderr


def test_cli_unwritable_output_exits_2(tmp_path):
    result = runner.invoke(
        app, ["export", EXAMPLE, "--format", "nemo", "-o", str(tmp_path / "missing-dir" / "x.yaml")]
    )
    assert result.exit_code == 2 and "--output" in result.stderr


def test_cli_warns_when_the_estimate_does_not_fit(tmp_path):
    cfg = tmp_path / "big.yaml"
    cfg.write_text(
        "model: llama3-70b\nnum_gpus: 64\ntraining: {seq_length: 8192, global_batch_size: 64}\n"
        "parallel: {tp: 1, pp: 1, zero_stage: 0}\n"
    )
    result = runner.invoke(app, ["export", str(cfg), "--format", "megatron"])
    assert result.exit_code == 0, result.output  # exported; memory is for validate to judge
    assert result.stderr.startswith("warning: memory per GPU")
    assert "--tensor-model-parallel-size 1" in result.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("fmt", ["megatron", "deepspeed"])
def test_launch_scripts_are_valid_bash(fmt, tmp_path):
    job, layout = case("mixtral-ep8-etp2")
    text = export(job, layout, fmt)
    script = split_output(text)[1] if fmt == "deepspeed" else text
    path = tmp_path / "launch.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
