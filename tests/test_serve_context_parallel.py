"""Context parallelism in the serving planner: KV bytes and prompt workspace per rank derived
by hand, the prefill ring and the decode combine against the comm formulas, TTFT and KV reads
against cp 1, the search (CP only for long prompts), the engine rules, the caveat, and the
TRT-LLM export read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import app
from planner.config import resolve_hardware
from planner.cost.comm import all_reduce_time
from planner.errors import InfeasibleError
from planner.frameworks.engines.writer import export
from planner.presets import get_preset
from planner.serve.estimate import estimate
from planner.serve.layout import Instance, ServeLayout
from planner.serve.memory import activation_bytes, instance_memory, kv_bytes_per_token_layer
from planner.serve.search import search
from planner.serve.specs import ServeJob, ServingSpec
from planner.serve.time import ServeCost

FLAGS = Path(__file__).resolve().parent / "data" / "serve_flags"
LONG = 131072


def job_of(model="llama3-70b", hw="h100-sxm", gpus=8, **serving) -> ServeJob:
    sv = dict(precision="fp8", input_length=LONG, output_length=512)
    sv.update(serving)
    return ServeJob(get_preset(model), resolve_hardware(hw), gpus, ServingSpec(**sv))


def agg(tp=1, cp=1, pp=1, replicas=1) -> ServeLayout:
    return ServeLayout(instance=Instance(tp=tp, pp=pp, cp=cp), replicas=replicas)


# ------------------------------------------------------------------------------ layout


def test_an_instance_with_cp_counts_its_gpus_and_names_it():
    inst = Instance(tp=4, pp=2, cp=2)
    assert inst.gpus == 4 * 2 * 2
    assert inst.name == "tp4-cp2-pp2"
    assert inst.as_dict()["cp"] == 2
    assert Instance(tp=4).name == "tp4" and Instance(tp=4).as_dict()["cp"] == 1
    assert agg(tp=4, cp=2, replicas=2).num_gpus == 16


# ------------------------------------------------------------------------------ memory


def test_kv_bytes_per_gpu_halve_at_cp2_llama3_70b():
    # Llama 3 70B: 80 layers, 8 KV heads of dim 128. At tp 2 a GPU holds 8/2 = 4 heads:
    # K and V per token and layer 2 x 4 x 128 values x 2 bytes (bf16) = 2,048 B; 80 layers
    # 163,840 B. cp 2 keeps half of every sequence's tokens on each GPU: 81,920 B per token.
    m = get_preset("llama3-70b")
    assert kv_bytes_per_token_layer(m, 2, "bf16") == 2 * 4 * 128 * 2 == 2048
    assert kv_bytes_per_token_layer(m, 2, "bf16", cp=2) == 2 * 4 * 128 * 2 / 2
    job = job_of(kv_cache_dtype="bf16")
    one = instance_memory(job, Instance(tp=2))
    two = instance_memory(job, Instance(tp=2, cp=2))
    assert one.kv_bytes_per_token == 80 * 2048
    assert two.kv_bytes_per_token == 80 * 2048 / 2
    assert two.weights == one.weights  # CP does not shard the weights
    # the KV budget is at least cp 1's (the prompt workspace shrinks), the bytes per token
    # half: at least twice the tokens, and twice the requests of ISL+OSL tokens
    assert two.kv_cache >= one.kv_cache
    assert two.kv_tokens_capacity >= 2 * one.kv_tokens_capacity
    assert two.kv_tokens_capacity <= 2 * one.kv_tokens_capacity * two.kv_cache / one.kv_cache + 1
    assert two.max_concurrency >= 2 * one.max_concurrency


def test_the_prompt_workspace_divides_by_cp():
    m = get_preset("llama3-70b")
    full = activation_bytes(m, Instance(tp=4), tokens=8192, batch=0)
    assert activation_bytes(m, Instance(tp=4, cp=2), tokens=8192, batch=0) == pytest.approx(
        activation_bytes(m, Instance(tp=4), tokens=4096, batch=0)
    )
    assert activation_bytes(m, Instance(tp=4, cp=4), tokens=8192, batch=0) == pytest.approx(
        full / 4
    )


# -------------------------------------------------------------------------------- time


def test_a_128k_prompt_prefills_faster_at_cp2_on_the_same_tp():
    job = job_of()
    one = estimate(job, agg(tp=4, replicas=2))
    two = estimate(job, agg(tp=4, cp=2))
    assert two.prefill_s < one.prefill_s
    assert two.prefill_s > one.prefill_s / 2  # no better than a perfect split


def test_the_prefill_ring_is_cp_minus_1_sends_of_the_local_kv_less_what_attention_hides():
    job = job_of(kv_cache_dtype="bf16")
    cost = ServeCost(job, Instance(tp=4, cp=2))
    tokens, span = 8192.0, 65536.0
    parts = cost.stage(0, seqs=0, ctx=0, prefill=tokens, span=span)
    L = 80
    # local K/V block of one layer on one GPU: tokens/2 tokens x 2 (K, V) x 8/4 heads x 128 x 2 B
    block = tokens / 2 * 2 * 2 * 128 * 2
    link = cost.cp_link
    ring = (2 - 1) * (block / link.bandwidth + link.latency)
    attn_layer = parts.attention_s / L
    hide = job.hardware.calibration.overlap_efficiency
    assert parts.cp_comm_s == pytest.approx(L * max(0.0, ring - hide * attn_layer))
    # and the attention of the prompt is half of cp 1's on the same tp (causal, load-balanced)
    solo = ServeCost(job, Instance(tp=4)).stage(0, seqs=0, ctx=0, prefill=tokens, span=span)
    assert parts.attention_s == pytest.approx(solo.attention_s / 2)
    assert parts.compute_s + parts.weights_s < solo.compute_s + solo.weights_s


def test_decode_reads_1_over_cp_of_the_kv_cache_and_all_the_weights():
    job = job_of(kv_cache_dtype="bf16")
    seqs, ctx = 16.0, 100_000.0
    one = ServeCost(job, Instance(tp=4)).stage(0, seqs=seqs, ctx=ctx)
    c2 = ServeCost(job, Instance(tp=4, cp=2))
    two = c2.stage(0, seqs=seqs, ctx=ctx)
    four = ServeCost(job, Instance(tp=4, cp=4)).stage(0, seqs=seqs, ctx=ctx)
    assert two.attention_s == pytest.approx(one.attention_s / 2)
    assert four.attention_s == pytest.approx(one.attention_s / 4)
    assert two.weights_s == one.weights_s  # every cp rank streams its whole weights
    # the combine: per layer one all-reduce of the 64/4 heads' outputs (128 x 2 B) + fp32 LSE
    combine = all_reduce_time(seqs * 64 / 4 * (128 * 2 + 4), 2, c2.cp_link)
    assert two.cp_comm_s == pytest.approx(80 * combine)
    assert one.cp_comm_s == 0.0


# ------------------------------------------------------------------------------ search


def test_the_search_does_not_try_cp_for_short_prompts():
    job = job_of(
        "deepseek-v3",
        "b200",
        16,
        precision="fp4",
        input_length=2048,
        output_length=512,
        engine="trtllm",
    )
    res = search(job)
    assert res.plans and all(
        c.layout.instance is None or c.layout.instance.cp == 1 for c in res.plans
    )
    step = next(s for s in res.steps if s["title"] == "CP for long prompts")
    assert step["decision"].startswith("prompts of 2,048 tokens") and "cp 1" in step["decision"]


def test_the_search_tries_cp_for_long_prompts_where_the_engine_runs_it():
    job = job_of(
        "deepseek-v3",
        "b200",
        16,
        precision="fp4",
        output_length=1024,
        engine="trtllm",
        concurrency=4,
    )
    res = search(job)
    assert "trtllm-cp-needs-mla" not in res.pruned
    step = next(s for s in res.steps if s["title"] == "CP for long prompts")
    assert "cp" in step["decision"] and "prefills one prompt" in step["decision"]
    shapes = [c.layout.instance or c.layout.decode for c in res.plans]
    assert any(i.cp > 1 for i in shapes)  # searched, estimated, ranked
    assert any("no context-parallel runs" in x for x in res.caveats)
    if res.pick.layout.instance is not None and res.pick.layout.instance.cp > 1:
        assert step["decision"].startswith(f"cp {res.pick.layout.instance.cp}:")


def test_the_trace_says_what_cp_would_do_when_the_engine_cannot():
    res = search(job_of())  # vllm: no CP axis; the trace prices cp 2 anyway
    step = next(s for s in res.steps if s["title"] == "CP for long prompts")
    assert "cp2" in step["decision"] and "vLLM v0.11" in step["decision"]
    assert res.pruned.get("vllm-cp", 0) > 0


# ------------------------------------------------------------------------ rules, CLI

CP_YAML = (
    "model: {model}\nhardware: {hw}\nnum_gpus: 8\n"
    "serving:\n  precision: fp8\n  input_length: 131072\n  output_length: 512\n"
    "  concurrency: 2\n  engine: {engine}\n"
    "parallel:\n  tp: 4\n  cp: {cp}\n"
)


def _yaml(tmp_path, model="llama3-70b", hw="h100-sxm", engine="vllm", cp=2):
    path = tmp_path / "serve.yaml"
    path.write_text(CP_YAML.format(model=model, hw=hw, engine=engine, cp=cp))
    return path


def test_cp_0_is_one_error_line_naming_the_field(runner, tmp_path):
    result = runner.invoke(app, ["validate", str(_yaml(tmp_path, cp=0))])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "parallel.cp = 0" in lines[0] and "Traceback" not in result.output


@pytest.mark.parametrize(
    "engine, model, hw, rule",
    [
        ("vllm", "llama3-70b", "h100-sxm", "vllm-cp"),
        ("sglang", "llama3-70b", "h100-sxm", "sglang-cp"),
        ("trtllm", "llama3-70b", "b200", "trtllm-cp-needs-mla"),
        ("trtllm", "deepseek-v3", "h200", "trtllm-cp-needs-blackwell"),
    ],
)
def test_cp_on_an_engine_without_it_is_a_rule_error(runner, tmp_path, engine, model, hw, rule):
    result = runner.invoke(app, ["validate", str(_yaml(tmp_path, model, hw, engine)), "--json"])
    assert result.exit_code == 1, result.output
    errs = json.loads(result.stdout)["errors"]
    assert rule in [e["rule"] for e in errs]
    msg = next(e["message"] for e in errs if e["rule"] == rule)
    assert "cp (2)" in msg and "use " in msg


def test_cp_that_does_not_divide_the_gpus_is_the_world_rule(runner, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(
        CP_YAML.format(model="deepseek-v3", hw="b200", engine="trtllm", cp=3).replace(
            "precision: fp8", "precision: fp4"
        )
    )
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 1, result.output
    errs = json.loads(result.stdout)["errors"]
    world = next(e for e in errs if e["rule"] == "serve-world-size")
    assert "cp (3)" in world["message"] and "num_gpus is 8" in world["message"]


def test_an_estimate_with_cp_carries_the_uncalibrated_caveat(runner, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(
        CP_YAML.format(model="deepseek-v3", hw="b200", engine="trtllm", cp=2).replace(
            "precision: fp8", "precision: fp4"
        )
    )
    out = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    assert out["layout"]["cp"] == 2 and out["valid"] is True
    assert any("no context-parallel runs" in c for c in out["caveats"])
    path.write_text(path.read_text().replace("cp: 2", "cp: 1").replace("tp: 4", "tp: 8"))
    out = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    assert not any("context-parallel" in c for c in out["caveats"])


# ------------------------------------------------------------------------------ export


def _engine_flags(name: str) -> set[str]:
    lines = (FLAGS / name).read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def test_trtllm_export_of_cp_uses_its_flag_and_reads_back(runner, tmp_path):
    job = job_of(
        "deepseek-v3",
        "b200",
        16,
        precision="fp4",
        output_length=1024,
        engine="trtllm",
        concurrency=4,
    )
    layout = ServeLayout(
        prefill=Instance(tp=8), decode=Instance(tp=4, cp=2), prefill_workers=1, decode_workers=1
    )
    est = estimate(job, layout)
    text = export(job, layout, "trtllm", estimate=est)
    assert "--cp_size 2" in text and "--cp_size" in _engine_flags("trtllm-serve-1.x.txt")
    assert "cp_type: HELIX" in text
    path = tmp_path / "launch.sh"
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["layout"] == layout.as_dict() and out["layout"]["decode"]["cp"] == 2
    assert out["latency"]["tpot_s"] == pytest.approx(est.tpot_s, rel=0.02)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_export_of_cp_to_an_engine_without_it_is_refused(engine):
    job = job_of(engine=engine)
    with pytest.raises(InfeasibleError, match=r"cp \(2\)"):
        export(job, agg(tp=4, cp=2), engine)


def test_a_vllm_command_with_dcp_is_read_with_a_warning(runner, tmp_path):
    assert "--decode-context-parallel-size" in _engine_flags("vllm-0.11.txt")
    path = tmp_path / "serve.sh"
    path.write_text(
        "# planner serve: isl=2048 osl=512\n"
        "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 "
        "--decode-context-parallel-size 8\n"
    )
    result = runner.invoke(app, ["validate", str(path), "--hardware", "b200", "--json"])
    out = json.loads(result.stdout)
    assert out["layout"]["tp"] == 8 and out["layout"]["cp"] == 1
    assert "vllm-dcp-not-modelled" in [w["rule"] for w in out["warnings"]]
