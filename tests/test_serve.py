"""Inference planning (planner/serve): KV-cache sizes derived by hand, the engines' memory
rules, the time model's contrasts (TP against the all-reduce latency, PP against TTFT,
speculative decoding), the search, the exports against each engine's own flag list, reading
the exports back, bad serving configs, and the accuracy bar on inference-calibration.yaml."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from planner.cli import app
from planner.config import resolve_hardware
from planner.cost.comm import p2p_time
from planner.cost.shape import model_shape
from planner.frameworks.engines.writer import export
from planner.presets import get_preset
from planner.serve.engines import engine_settings, kv_budget
from planner.serve.estimate import estimate
from planner.serve.layout import Instance, ServeLayout
from planner.serve.memory import (
    bytes_per_param,
    instance_memory,
    kv_bytes_per_token_layer,
    kv_bytes_per_token_model,
)
from planner.serve.search import ServeOptions, pareto_front, search
from planner.serve.specs import ServeJob, ServingSpec
from planner.serve.time import ServeCost, accepted_tokens
from planner.specs import ServingCalibration

FLAGS = Path(__file__).resolve().parent / "data" / "serve_flags"
H100 = resolve_hardware("h100-sxm")


def _model(name: str):
    m = get_preset(name)
    if name == "deepseek-v3":  # DeepSeek-V3 config.json: num_nextn_predict_layers 1 (MTP)
        m = m.model_copy(update={"mtp_num_layers": 1})
    return m


def job_of(model="llama3-70b", hw="h100-sxm", gpus=8, **serving) -> ServeJob:
    sv = dict(precision="fp8", input_length=2048, output_length=512)
    sv.update(serving)
    hardware = hw if not isinstance(hw, str) else resolve_hardware(hw)
    return ServeJob(_model(model), hardware, gpus, ServingSpec(**sv))


def agg(tp=1, pp=1, ep=1, dp=1, adp=False, replicas=1) -> ServeLayout:
    return ServeLayout(instance=Instance(tp, pp, ep, dp, adp), replicas=replicas)


# ------------------------------------------------------------------------------ KV cache


def test_kv_bytes_per_token_llama3_70b_gqa():
    # Llama 3 70B (Meta-Llama-3-70B config.json): 80 layers, 8 KV heads (GQA), head dim
    # 8192 / 64 = 128. K and V per token: 2 x 80 x 8 x 128 = 163,840 values; bf16 = 2 bytes.
    m = get_preset("llama3-70b")
    assert kv_bytes_per_token_model(m, "bf16") == 2 * 80 * 8 * 128 * 2 == 327_680  # 320 KiB
    assert kv_bytes_per_token_model(m, "fp8") == 163_840
    # per GPU and layer: tp 2 holds 4 heads; tp 8 one head; tp 16 > 8 heads replicates each
    # head on two GPUs, so still one head (2 x 1 x 128 x 2 bytes) per GPU
    assert kv_bytes_per_token_layer(m, 2, "bf16") == 2 * 4 * 128 * 2
    assert kv_bytes_per_token_layer(m, 8, "bf16") == 2 * 1 * 128 * 2 == 512
    assert kv_bytes_per_token_layer(m, 16, "bf16") == 512


def test_kv_bytes_per_token_deepseek_v3_mla():
    # DeepSeek-V3 (config.json): 61 layers of multi-latent attention caching the compressed
    # KV latent (kv_lora_rank 512) plus the decoupled rope key (qk_rope_head_dim 64), one
    # vector per token per layer whatever the head count: 61 x (512 + 64) x 2 bytes (bf16).
    m = get_preset("deepseek-v3")
    assert kv_bytes_per_token_model(m, "bf16") == 61 * (512 + 64) * 2 == 70_272
    # the latent is not split by TP: every TP rank holds all of it (attention DP splits the
    # requests instead)
    for tp in (1, 8, 16):
        assert kv_bytes_per_token_layer(m, tp, "bf16") == (512 + 64) * 2
    # a GQA model of the same layer count caches 2 x heads x head dim: MLA is ~14x smaller
    # than Llama 3 70B's 320 KiB per token even with 61 layers against 80
    assert kv_bytes_per_token_model(get_preset("llama3-70b"), "bf16") / 70_272 > 4


def test_weight_bytes_per_precision():
    # NVFP4: 4-bit values with one FP8 (E4M3) scale per block of 16 (NVIDIA ModelOpt)
    assert bytes_per_param("fp4") == pytest.approx(0.5 + 1 / 16)
    assert bytes_per_param("fp8") == 1.0 and bytes_per_param("bf16") == 2.0


def test_max_concurrency_is_the_kv_capacity_over_the_request_length():
    # vLLM on one H100 of a tp8 instance: KV = 0.9 x capacity - weights - activations - other
    # (engines.kv_budget), tokens = KV / (80 layers x 1 head x 2 x 128 x 1 byte fp8 = 20,480 B),
    # requests = tokens / (2,048 + 512 rounded up to 16-token blocks = 2,560)
    job = job_of(engine="vllm")
    mem = instance_memory(job, Instance(tp=8))
    assert mem.kv_bytes_per_token == 80 * 2 * 128 * 1
    expected_kv = 0.9 * mem.capacity - mem.weights - mem.activations - mem.other
    assert mem.kv_cache == pytest.approx(expected_kv)
    tokens = int(expected_kv // 20_480)
    assert mem.kv_tokens_capacity == tokens
    # vLLM's max_num_seqs (1024 on >= 70 GiB GPUs, vllm/engine/arg_utils.py) caps it here
    assert mem.max_concurrency == min(tokens // 2_560, 1024) == 1024
    # with bf16 weights on tp 2 the KV cache is the limit
    mem2 = instance_memory(job_of(precision="bf16", kv_cache_dtype="bf16"), Instance(tp=4))
    assert mem2.max_concurrency == mem2.kv_tokens_capacity // 2_560 < 1024


def test_the_engines_size_the_kv_cache_differently():
    # the same instance, weights W, activations A, other O, capacity M (engines.py):
    # vLLM f*M - W - A - O; SGLang f*M - W; TRT-LLM f*(M - W - A - O)
    inst = Instance(tp=4)
    for engine in ("vllm", "sglang", "trtllm"):
        job = job_of(engine=engine, memory_fraction=0.9)
        st = engine_settings(job, inst)
        W, A, Ot, M = 30e9, 2e9, 3e9, 80e9
        kv = kv_budget(st, capacity=M, weights=W, activations=A, other=Ot)
        expected = {
            "vllm": 0.9 * M - W - A - Ot,
            "sglang": 0.9 * M - W,
            "trtllm": 0.9 * (M - W - A - Ot),
        }[engine]
        assert kv == pytest.approx(expected)
    # SGLang's default fraction: (M - reserved) / M, reserved 9.5 + tp*pp/2 GiB under 90 GiB
    st = engine_settings(job_of(engine="sglang"), inst)
    assert st.memory_fraction == round((79.11 - (9.5 + 4 / 2)) / 79.11, 3)


# ------------------------------------------------------------------------------ time model


def _simple_hw(alpha_us: float):
    """An H100 whose serving parameters make the decode step a hand sum: every efficiency 1,
    no fixed costs but the all-reduce latency alpha per ring step."""
    cal = ServingCalibration(
        hbm_efficiency=1,
        gemm_efficiency=1,
        gemm_half_tokens=0,
        moe_efficiency=1,
        attention_efficiency=1,
        layer_overhead_us=0,
        step_overhead_us=0,
        sequence_overhead_us=0,
        request_overhead_us=0,
        link_efficiency=1,
        allreduce_latency_us=alpha_us,
        graph_layer_overhead_us=0,
    )
    return H100.model_copy(update={"serving_calibration": cal})


def test_decode_time_falls_with_tp_until_the_all_reduce_latency_wins():
    # Llama 3 8B in bf16, one sequence of context c. The decode step on one GPU of tp t is
    #   weights:    (32 layers x P_layer / t + V h / t) x 2 bytes / B_hbm
    #   KV read:    32 x max(1, 8/t) x 2 x 128 x 2 bytes x c / B_hbm
    #   all-reduce: 32 layers x 2 x [2(t-1)/t x h x 2 bytes / B_link + 2(t-1) alpha]
    # (time.py; the GEMMs of one token are bound by the weight stream). With alpha = 2 us the
    # weights halve faster than the latency grows up to tp 4, not to tp 8: the minimum.
    hw = _simple_hw(2.0)
    job = job_of("llama3-8b", hw, precision="bf16", kv_cache_dtype="bf16")
    m, sh = job.model, model_shape(job.model)
    B, Bl, h, c = 3350e9, 450e9, 4096, 2048 + 256
    times = {}
    for t in (1, 2, 4, 8):
        step = ServeCost(job, Instance(tp=t)).interval(seqs=1, ctx=c)
        w = (32 * sh.dense_tp / t * 2 + 32 * sh.dense_rep * 2 + m.vocab_size * h / t * 2) / B
        kv = 32 * 2 * max(1, 8 // t) * 128 * 2 * c / B
        ar = 32 * 2 * (2 * (t - 1) / t * h * 2 / Bl + 2 * (t - 1) * 2e-6) if t > 1 else 0.0
        assert step.total == pytest.approx(w + kv + ar, rel=0.01), t
        times[t] = step.total
    assert times[1] > times[2] > times[4] < times[8]


def test_pp_raises_ttft():
    # A prompt crosses every pipeline stage in turn: tp 4 x pp 2 does the same prefill work per
    # layer as tp 4 alone, plus the stage hop (T h 2 bytes point-to-point) and a second
    # step's fixed cost (step_overhead_us); tp 8 splits each layer's work instead, so it
    # prefills faster.
    job = job_of(batching="static", concurrency=1)
    ttft = {
        name: estimate(job, lay).ttft_s
        for name, lay in (
            ("tp4", agg(tp=4, replicas=2)),
            ("tp4-pp2", agg(tp=4, pp=2)),
            ("tp8", agg(tp=8)),
        )
    }
    cost = ServeCost(job, Instance(tp=4, pp=2))
    hop = p2p_time(2048 * 8192 * 2, cost.pp_link)
    step = H100.serving_calibration.step_overhead_us * 1e-6
    assert hop > 0
    assert ttft["tp4-pp2"] - ttft["tp4"] == pytest.approx(hop + step, rel=1e-6)
    assert ttft["tp8"] < ttft["tp4"] < ttft["tp4-pp2"]


def test_speculative_decoding_tokens_per_step():
    # Leviathan et al. 2023, eq. 1: E[tokens] = (1 - a^(k+1)) / (1 - a)
    assert accepted_tokens(1, 0.5) == pytest.approx(1.5)
    assert accepted_tokens(3, 0.8) == pytest.approx((1 - 0.8**4) / 0.2)
    base = job_of("deepseek-v3", "h200", 8, concurrency=4)
    spec = job_of(
        "deepseek-v3",
        "h200",
        8,
        concurrency=4,
        speculative={"method": "mtp", "num_tokens": 1, "acceptance_rate": 0.8},
    )
    lay = agg(tp=8)
    # at small batches decode is bound by the weight stream: verifying 2 tokens costs about
    # one step, and 1.8 tokens come out of it
    assert estimate(spec, lay).tpot_s < estimate(base, lay).tpot_s


def test_a_static_batch_is_its_prefill_then_osl_minus_one_steps():
    job = job_of(batching="static", concurrency=16)
    est = estimate(job, agg(tp=8))
    assert est.e2e_s == pytest.approx(est.ttft_s + 511 * est.tpot_s)
    assert est.output_tokens_per_s == pytest.approx(16 * 512 / est.e2e_s)


def test_continuous_batching_throughput_is_littles_law_over_a_groups_cycle():
    # 64 clients of 2048/512 per instance (vLLM, 8192-token steps): the burst goes in n =
    # chunk_groups(...) chunk steps; a group's cycle is its own chunk step and its 511 later
    # tokens, so each replica serves 64 x 512 tokens per (511 x TPOT + that chunk step)
    from planner.serve.estimate import chunk_groups

    job = job_of(concurrency=64)
    est = estimate(job, agg(tp=4, replicas=2))
    cost = ServeCost(job, Instance(tp=4))
    n, g = chunk_groups(64, 2048, 8192)
    own = cost.interval(
        seqs=64 - g, ctx=2048 + 256, prefill=g * 2048, span=1024, requests=g, eager=1.0
    ).total
    assert est.output_tokens_per_s == pytest.approx(2 * 64 * 512 / (511 * est.tpot_s + own))
    assert est.output_tokens_per_s_per_user == pytest.approx(1 / est.tpot_s)


def test_disaggregated_throughput_is_the_slower_pool():
    job = job_of(concurrency=64)
    lay = ServeLayout(
        prefill=Instance(tp=2), decode=Instance(tp=4), prefill_workers=2, decode_workers=1
    )
    est = estimate(job, lay)
    from planner.serve.estimate import prefill_pool

    one, per_worker, chunk_s = prefill_pool(job, ServeCost(job, Instance(tp=2)))
    # the 64 clients of a closed loop are in prefill for TTFT and decoding for D = 511 TPOT
    # of each cycle: the decode worker holds b = 64 D / (TTFT + D) of them (Little's law)
    d = 511 * est.tpot_s
    b = 64 * d / (est.ttft_s + d)
    assert est.concurrency == 64 and b < 64
    decode_rate = b / est.tpot_s / 512  # requests/s of the one decode worker
    prefill_rate = 2 * per_worker  # of the two prefill workers
    assert est.output_tokens_per_s == pytest.approx(min(decode_rate, prefill_rate) * 512)
    # TTFT: the prefill worker at load u = decode rate / prefill capacity takes between one
    # prompt alone and a full chunk, then the KV cache moves to the decode worker, which
    # streams the first token (decode_first_token: its step boundary, the transfer and, for
    # vLLM, the step that recomputes the last prompt token)
    from planner.serve.estimate import decode_first_token

    load = min(1.0, decode_rate / prefill_rate)
    assert est.kv_transfer_s > 0 and est.prefill_s == pytest.approx(one)
    first = decode_first_token(job.serving.engine, est.decode_step.total, est.kv_transfer_s)
    assert first > est.kv_transfer_s
    assert est.ttft_s == pytest.approx(one + load * (chunk_s - one) + first)


# ---------------------------------------------------------------------------------- search


def test_search_ranks_what_meets_the_slos_by_tokens_per_gpu():
    job = job_of()
    res = search(job, ServeOptions(ttft_s=0.5, tpot_s=0.03))
    assert res.plans and all(p.meets for p in res.plans)
    per_gpu = [p.per_gpu for p in res.plans]
    assert per_gpu == sorted(per_gpu, reverse=True)
    for p in res.plans:
        assert p.estimate.ttft_s <= 0.5 and p.estimate.tpot_s <= 0.03
        assert p.layout.num_gpus == 8
    assert [s["step"] for s in res.steps] == [1, 2, 3, 4, 5, 6, 7]
    assert res.pick is not None and res.pick_rank is not None


def test_pareto_front_is_not_dominated():
    res = search(job_of(), ServeOptions())
    front = res.pareto
    assert len(front) > 2
    for a in front:
        for b in front:
            if a is not b:
                assert not (
                    b.per_user >= a.per_user
                    and b.per_gpu > a.per_gpu * (1 + 1e-9)
                    and b.per_user > a.per_user * (1 + 1e-9)
                )
    again = pareto_front(front)
    assert [c.layout for c in again] == [c.layout for c in front]


def test_nothing_meets_the_slo_gives_the_closest():
    res = search(job_of(), ServeOptions(tpot_s=0.001))
    assert res.plans == [] and res.closest is not None
    assert res.closest.estimate.tpot_s > 0.001


def test_moe_search_places_experts_and_attention_dp():
    res = search(job_of("qwen3-235b-a22b", "h200", 8), ServeOptions(disaggregated=False))
    best = res.best.layout.instance
    assert 128 % best.ep == 0 and best.moe_group % best.ep == 0
    assert "experts over ep" in res.steps[4]["decision"]


# --------------------------------------------------------------------------------- exports


def _engine_flags(name: str) -> set[str]:
    lines = (FLAGS / name).read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


ENGINE_LISTS = {
    "vllm": "vllm-0.11.txt",
    "sglang": "sglang-0.5.8.txt",
    "trtllm": "trtllm-serve-1.x.txt",
}


def _command_flags(text: str) -> set[str]:
    """The --flags of the launch commands (comments and here-documents left out)."""
    text = re.sub(r"<<'EOF'\n.*?\nEOF", "", text, flags=re.S)
    out = set()
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        out |= set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", line.split("'")[0]))
    return out


EXPORT_CASES = [
    pytest.param("llama3-70b", "h100-sxm", 8, agg(tp=2, replicas=4), {}, id="dense-replicas"),
    pytest.param("llama3-70b", "h100-sxm", 8, agg(tp=4, pp=2), {}, id="dense-pp"),
    pytest.param("llama3-405b", "h100-sxm", 16, agg(tp=8, pp=2), {}, id="two-nodes"),
    pytest.param(
        "qwen3-235b-a22b", "h200", 8, agg(tp=1, dp=8, adp=True, ep=8), {}, id="moe-adp-ep"
    ),
    pytest.param("mixtral-8x7b", "h100-sxm", 8, agg(tp=4, ep=4, replicas=2), {}, id="moe-ep-tp"),
    pytest.param("llama3-70b", "b200", 8, agg(tp=1, replicas=8), {"precision": "fp4"}, id="fp4"),
    pytest.param(
        "llama3-70b",
        "h100-sxm",
        8,
        ServeLayout(
            prefill=Instance(tp=2), decode=Instance(tp=4), prefill_workers=2, decode_workers=1
        ),
        {},
        id="disaggregated",
    ),
    pytest.param(
        "deepseek-v3",
        "b200",
        8,
        agg(tp=8),
        {"speculative": {"method": "mtp", "num_tokens": 2, "acceptance_rate": 0.7}},
        id="mtp",
    ),
]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("model, hw, gpus, layout, serving", EXPORT_CASES)
def test_every_exported_flag_exists_in_the_engines_list(engine, model, hw, gpus, layout, serving):
    job = job_of(model, hw, gpus, engine=engine, **serving)
    if (
        engine == "trtllm"
        and layout.instance is not None
        and layout.instance.dp_attention
        and layout.instance.tp > 1
    ):
        pytest.skip("TRT-LLM attention DP runs attention with TP 1")
    text = export(job, layout, engine, estimate=estimate(job, layout))
    flags = _command_flags(text)
    assert flags, text
    unknown = flags - _engine_flags(ENGINE_LISTS[engine])
    assert not unknown, f"{engine} has no {sorted(unknown)}:\n{text}"
    assert text.count("# planner serve:") == 1


def test_vllm_export_of_partial_expert_parallelism_is_refused():
    from planner.errors import InfeasibleError

    job = job_of("qwen3-235b-a22b", "h200", 8, engine="vllm")
    with pytest.raises(InfeasibleError, match="vLLM's expert parallelism spans all"):
        export(job, agg(tp=1, dp=8, adp=True, ep=4), "vllm")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize(
    "layout",
    [
        agg(tp=2, replicas=4),
        agg(tp=4, pp=2),
        ServeLayout(
            prefill=Instance(tp=2), decode=Instance(tp=4), prefill_workers=2, decode_workers=1
        ),
    ],
    ids=["replicas", "pp", "disaggregated"],
)
def test_validate_reads_the_export_back(runner, tmp_path, engine, layout):
    job = job_of(engine=engine, concurrency=64)
    est = estimate(job, layout)
    path = tmp_path / f"launch-{engine}.sh"
    path.write_text(export(job, layout, engine, estimate=est))
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["format"] == engine and out["valid"] is True
    assert out["layout"] == layout.as_dict()
    assert out["latency"]["tpot_s"] == pytest.approx(est.tpot_s, rel=0.02)
    assert out["concurrency"] == est.concurrency


def test_a_command_line_without_the_request_shape_is_one_error(runner, tmp_path):
    path = tmp_path / "serve.sh"
    path.write_text("vllm serve meta-llama/Meta-Llama-3-70B-Instruct --tensor-parallel-size 8\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1
    assert "isl=2048 osl=512" in result.stderr and "Traceback" not in result.output
    path.write_text(
        "# planner serve: isl=2048 osl=512\n"
        "vllm serve meta-llama/Meta-Llama-3-70B-Instruct --tensor-parallel-size 8 "
        "--enable-prefix-caching --quantization fp8\n"
    )
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["layout"]["tp"] == 8 and out["job"]["model"] == "Llama 3 70B"
    assert out["job"]["kv_cache_dtype"] == "bf16"  # vLLM's auto: the model's dtype
    assert [w["rule"] for w in out["warnings"]] == ["vllm-flag-not-modelled"]
    assert "--enable-prefix-caching" in out["warnings"][0]["message"]


# ------------------------------------------------------------------------------------- CLI

SERVE_YAML = (
    "model: llama3-70b\nhardware: h100-sxm\nnum_gpus: 8\n"
    "serving:\n  precision: fp8\n  input_length: 2048\n  output_length: 512\n"
    "  concurrency: 64\n  engine: vllm\n{extra}"
    "parallel:\n  tp: 8\n{parallel}"
)


def test_validate_serving_yaml_json_contract(runner, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(SERVE_YAML.format(extra="", parallel=""))
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {"valid", "errors", "warnings", "layout", "memory", "latency", "throughput"} <= set(out)
    assert set(out["memory"]) == {
        "weights_bytes",
        "kv_cache_bytes",
        "activations_bytes",
        "other_bytes",
        "total_bytes",
        "capacity_bytes",
        "kv_tokens_capacity",
        "max_concurrency",
    }
    # the 80% intervals (issue 23; docs/calibration.md): e2e only for static batching
    assert set(out["latency"]) == {
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "ttft_s_interval",
        "tpot_s_interval",
    }
    assert set(out["throughput"]) == {
        "output_tokens_per_s",
        "output_tokens_per_s_per_gpu",
        "output_tokens_per_s_per_user",
        "output_tokens_per_s_interval",
    }
    assert out["format"] == "serve" and out["layout"]["tp"] == 8
    t = out["throughput"]
    assert t["output_tokens_per_s_per_gpu"] == pytest.approx(t["output_tokens_per_s"] / 8)
    lat = out["latency"]
    assert lat["e2e_s"] == pytest.approx(lat["ttft_s"] + 511 * lat["tpot_s"])
    view = runner.invoke(app, ["validate", str(path)])
    assert view.exit_code == 0 and "VALID" in view.stdout and "KV cache" in view.stdout


BAD_SERVE = [
    pytest.param(
        "  concurrency: 0\n", "", ["serving.concurrency", "at least 1"], id="concurrency-0"
    ),
    pytest.param(
        "  concurrency: lots\n",
        "",
        ["serving.concurrency", "'lots'", '"max"'],
        id="concurrency-word",
    ),
    pytest.param("  engine: tgi\n", "", ["serving.engine = 'tgi'", "'vllm'"], id="engine-unknown"),
    pytest.param(
        "  precison: fp8\n",
        "",
        ["unknown key 'serving.precison'", "did you mean 'precision'"],
        id="unknown-serving-key",
    ),
    pytest.param("  kv_cache_dtype: fp4\n", "", ["serving.kv_cache_dtype = 'fp4'"], id="kv-fp4"),
    pytest.param(
        "  speculative: {method: draft, acceptance_rate: 0.7}\n",
        "",
        ["method draft needs draft_model"],
        id="draft-without-model",
    ),
    pytest.param(
        "", "  prefill: {tp: 2}\n", ["needs both prefill: and decode:"], id="prefill-only"
    ),
    pytest.param("", "  replicas: 0\n", ["parallel.replicas = 0"], id="replicas-0"),
]


@pytest.mark.parametrize("extra, parallel, expected", BAD_SERVE)
def test_bad_serving_configs_are_one_error_line_and_exit_2(
    runner, tmp_path, extra, parallel, expected
):
    path = tmp_path / "serve.yaml"
    text = SERVE_YAML.format(extra=extra, parallel=parallel)
    if "concurrency" in extra:
        text = text.replace("  concurrency: 64\n", "")
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for part in expected:
        assert part in lines[0]


RULE_BREAKS = [  # (engine, parallel: block, the rule)
    pytest.param("vllm", "  tp: 3\n", "heads-divisible-by-tp", id="tp-3"),
    pytest.param("vllm", "  tp: 8\n  ep: 2\n", "ep-needs-moe", id="ep-dense"),
    pytest.param("vllm", "  tp: 8\n  replicas: 2\n", "serve-world-size", id="world"),
    pytest.param("trtllm", "  tp: 4\n  dp: 2\n", "trtllm-dp", id="trtllm-dp"),
]


@pytest.mark.parametrize("engine, parallel, rule", RULE_BREAKS)
def test_a_serving_config_breaking_a_rule_exits_1(runner, tmp_path, engine, parallel, rule):
    path = tmp_path / "serve.yaml"
    text = SERVE_YAML.format(extra="", parallel="").replace("  tp: 8\n", parallel)
    path.write_text(text.replace("engine: vllm", f"engine: {engine}"))
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert rule in [e["rule"] for e in out["errors"]]


def test_fp4_on_hopper_is_a_rule_error(runner, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(
        SERVE_YAML.format(extra="", parallel="").replace("precision: fp8", "precision: fp4")
    )
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 1
    err = json.loads(result.stdout)["errors"][0]
    assert err["rule"] == "precision-supported" and "Blackwell" in err["message"]


def test_serve_command_table_trace_and_pareto(runner):
    result = runner.invoke(app, ["serve", "--model", "70b", "--gpus", "8"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Top 10" in out and "Pareto front" in out and "Inference procedure" in out
    for title in (
        "memory floor",
        "TP first",
        "PP only when memory forces it",
        "replicas for the rest",
        "EP for MoE",
        "CP for long prompts",
        "P/D disaggregation",
    ):
        assert title in out
    assert "precision fp8 (chosen by planner" in out


def test_serve_json_and_export(runner):
    result = runner.invoke(
        app,
        [
            "serve",
            "--model",
            "70b",
            "--gpus",
            "8",
            "--ttft-ms",
            "500",
            "--tpot-ms",
            "30",
            "--json",
            "--export",
            "vllm",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {"plans", "pareto", "steps", "slo", "searched", "job", "procedure_pick"} <= set(out)
    assert out["slo"] == {"ttft_s": 0.5, "tpot_s": 0.03}
    assert all(p["latency"]["tpot_s"] <= 0.03 for p in out["plans"])
    assert out["export"]["format"] == "vllm" and "vllm serve" in out["export"]["text"]


def test_serve_exits_1_with_the_closest_when_nothing_meets_the_slo(runner):
    result = runner.invoke(app, ["serve", "--model", "70b", "--gpus", "8", "--tpot-ms", "1"])
    assert result.exit_code == 1, result.output
    assert "No deployment meets the SLOs" in result.stdout and "closest" in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "closest" in lines[0]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--isl", "0"], "--isl = 0"),
        (["--precision", "int4"], "--precision = 'int4'"),
        (["--engine", "tgi"], "--engine = 'tgi'"),
        (["--export", "ollama"], "--export = 'ollama'"),
        (["--ttft-ms", "-5"], "--ttft-ms = -5"),
        (["--hardware", "h100-sxm", "--precision", "fp4"], "precision fp4"),
    ],
)
def test_serve_bad_options_exit_2(runner, args, expected):
    result = runner.invoke(app, ["serve", "--model", "70b", "--gpus", "8", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]


# -------------------------------------------------------------------------------- accuracy


def test_accuracy_on_the_measured_serving_runs():
    # inference-calibration.yaml: TensorRT-LLM perf-overview offline throughput (H100, H200,
    # B200, GB200, RTX PRO 6000) and the ROCm blog's Llama 3.1 70B runs (H100, MI300X),
    # predicted with each profile's fitted serving_calibration (benchmarks/serve_calibrate.py).
    # The bar of the issue: per class median |error| <= 15 %, max <= 40 %.
    from benchmarks.serve_accuracy import evaluate, load_cases, summary

    rows = evaluate(load_cases())
    for s in summary(rows):
        if s["hardware"] == "all":
            assert s["median_abs_error"] <= 0.15, s
            assert s["max_abs_error"] <= 0.40, s
    assert {r["class"] for r in rows} == {"offline-throughput", "static-latency"}
    assert len(rows) == 281
    assert not any(math.isnan(r["error"]) for r in rows)


def test_the_rocm_blogs_offline_vllm_runs_admit_every_prompt_of_the_dev_docker_command():
    # ROCm/vllm docs/dev-docker/README.md (vLLM 0.7.3 edition) runs benchmark_throughput.py
    # with --max-num-seqs = --num-prompts (3,200 at 128/2048, 1,500 at 128/4096, 2,000 at
    # 500/2000, 1,500 at 2048/2048), chunked prefill off and 131,072 tokens a step.
    # Whether all 3,200 fit at 128/2048 on 8 MI300X, by hand: FP8 KV per token per GPU is
    # 80 layers x 2 (K, V) x 1 KV head (8 heads / tp 8) x 128 x 1 B = 20,480 B; a request
    # holds 128 + 2,048 = 2,176 tokens (136 blocks of 16), 44.6 MB; 3,200 of them 142.6 GB
    # (132.8 GiB), where vLLM leaves 0.9 x 191.69 = 172.5 GiB less 8.5 GiB of weights (FP8
    # linear layers, bf16 embedding and output layer, over 8 GPUs), 6.3 GiB of activations
    # (a 131,072-token step) and 2.5 GiB of context, RCCL buffers and graphs: 155.3 GiB,
    # 8.14 M tokens, 3,742 requests >= 3,200. So the batch is the command's.
    from benchmarks.serve_accuracy import load_cases, predict, rocm_throughput_command

    assert rocm_throughput_command({"input_length": 128, "output_length": 2048}) == {
        "max_batch_size": 3200,
        "chunked_prefill": False,
        "max_num_tokens": 131072,
    }
    assert rocm_throughput_command({"input_length": 1000, "output_length": 1000}) == {
        "max_batch_size": 256
    }  # a pair the README's table does not have: V0's default
    rocm = [c for c in load_cases() if c.id.startswith("rocm-tput") and c.hardware == "mi300x"]
    conc = {c.id.rsplit("-", 1)[1]: predict(c)["concurrency"] for c in rocm}
    assert conc == {"128x2048": 3200, "128x4096": 1500, "500x2000": 2000, "2048x2048": 1500}


def test_validate_a_disaggregated_yaml(runner, tmp_path):
    path = tmp_path / "pd.yaml"
    path.write_text(
        SERVE_YAML.format(extra="", parallel="").replace(
            "parallel:\n  tp: 8\n",
            "parallel:\n  prefill: {tp: 2, workers: 2}\n  decode: {tp: 4, workers: 1}\n",
        )
    )
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["layout"]["disaggregated"] is True
    assert out["layout"]["decode"] == {
        "tp": 4,
        "pp": 1,
        "ep": 1,
        "dp": 1,
        "dp_attention": False,
        "cp": 1,
        "workers": 1,
    }
    assert out["kv_transfer_s"] > 0 and out["bottleneck"] in ("prefill", "decode")
    assert {"prefill_memory", "memory"} <= set(out)


def test_validate_of_a_serving_config_refuses_training_options(runner, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(SERVE_YAML.format(extra="", parallel=""))
    for args, part in ((["--tokens", "15T"], "--tokens"), (["--headroom", "0.2"], "--headroom")):
        result = runner.invoke(app, ["validate", str(path), *args])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("error: ") and part in result.stderr


def test_an_sglang_command_with_dp_attention_reads_back(runner, tmp_path):
    # SGLang's --tp counts every GPU of the server; with --enable-dp-attention the attention
    # runs tp/dp-way per DP rank (server_args.py: tp_size % dp_size == 0)
    path = tmp_path / "sglang.sh"
    path.write_text(
        "# planner serve: isl=1000 osl=1000 hardware=h200\n"
        "python -m sglang.launch_server --model-path Qwen/Qwen3-235B-A22B \\\n"
        "  --tp 8 --dp 8 --enable-dp-attention --ep 8 --quantization fp8 \\\n"
        "  --kv-cache-dtype fp8_e4m3 --port 30000\n"
    )
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["format"] == "sglang"
    assert {k: out["layout"][k] for k in ("tp", "dp", "ep", "dp_attention")} == {
        "tp": 1,
        "dp": 8,
        "ep": 8,
        "dp_attention": True,
    }
    assert out["job"]["model"] == "Qwen3-235B-A22B" and out["job"]["hardware"] == "h200"


@pytest.mark.parametrize("slo", [dict(), dict(ttft_s=0.5, tpot_s=0.03)], ids=["no-slo", "slo"])
def test_disaggregated_search_matches_a_brute_force_oracle(slo):
    # The search pairs only the fronts of the prefill and decode sides and the worker counts
    # next to the pools' balance; the oracle estimates every prefill shape x decode shape x
    # P x D that uses all 8 GPUs at the same concurrencies, with no pruning.
    from planner.serve.search import (
        _decode_concurrencies,
        _disaggregated_points,
        _Shape,
        concurrencies,
        instance_shapes,
    )

    job = job_of()
    opts = ServeOptions(**slo)

    def shapes():
        out = {}
        for inst in instance_shapes(job, max_gpus=8, max_tp=8)[0]:
            mem = instance_memory(job, inst)
            if mem.max_concurrency >= 1:
                out[inst] = _Shape(
                    inst, mem, ServeCost(job, inst), concurrencies(mem.max_concurrency)
                )
        return out

    found = max(c.per_gpu for c in _disaggregated_points(job, shapes(), opts) if c.meets)
    live = [s for s in shapes().values() if s.inst.gpus < 8]
    best = 0.0
    for p in live:
        for d in live:
            if max(p.inst.tp, d.inst.tp) % min(p.inst.tp, d.inst.tp):
                continue
            for P in range(1, 8):
                rest = 8 - P * p.inst.gpus
                if rest < d.inst.gpus or rest % d.inst.gpus:
                    continue
                lay = ServeLayout(
                    prefill=p.inst,
                    decode=d.inst,
                    prefill_workers=P,
                    decode_workers=rest // d.inst.gpus,
                )
                for c in _decode_concurrencies(job, d, opts):
                    e = estimate(job, lay, concurrency=c)
                    if (opts.ttft_s is None or e.ttft_s <= opts.ttft_s) and (
                        opts.tpot_s is None or e.tpot_s <= opts.tpot_s
                    ):
                        best = max(best, e.output_tokens_per_s_per_gpu)
    assert best > 0
    assert found == pytest.approx(best, rel=1e-6)


@pytest.mark.parametrize("name", ["llama3-70b-8xh100.yaml", "llama3-70b-8xh100-disagg.yaml"])
def test_the_serving_examples_are_valid(runner, examples_dir, name):
    result = runner.invoke(app, ["validate", str(examples_dir / "serve" / name), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (
        out["valid"] is True
        and out["warnings"] == []
        and out["layout"]["disaggregated"] == name.endswith("disagg.yaml")
    )
