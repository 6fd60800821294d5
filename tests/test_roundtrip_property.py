"""One memory and time model for search and validate (issue 19): any plan or deployment the
search prints, exported by every exporter that takes it and read back by that framework's
reader, gets the same verdict, memory and time from `validate` -- for training (the layout
as the framework runs it, `runnable.runs_as`, on the job as it runs it, `runnable.job_for`:
the search's `--framework` ranking) and for serving (each engine's launch commands).

Random jobs (hypothesis): a model, a cluster size, a sequence length and a global batch; a
few examples each so the suite stays fast (each example is one search).
"""

from __future__ import annotations

from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from planner.config import Job, default_training, resolve_hardware  # noqa: E402
from planner.cost import cost_model  # noqa: E402
from planner.errors import InfeasibleError  # noqa: E402
from planner.frameworks import load_any, runnable  # noqa: E402
from planner.frameworks.export import export  # noqa: E402
from planner.presets import resolve_model  # noqa: E402
from planner.search import SearchOptions, search  # noqa: E402
from planner.validate import validate  # noqa: E402

EXT = {
    "megatron": ".sh",
    "deepspeed": ".json",
    "torchtitan": ".toml",
    "nemo": ".yaml",
    "megatron-bridge": ".yaml",
}
TRAIN_MODELS = ["llama3-8b", "llama3-70b", "mixtral-8x7b", "deepseek-v3"]
SLOW = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _preset(model) -> str:
    from planner.frameworks.engines.writer import preset_key

    return preset_key(model)


@st.composite
def train_jobs(draw):
    model = draw(st.sampled_from(TRAIN_MODELS))
    m = resolve_model(model)
    smallest = {"llama3-8b": 8, "llama3-70b": 64, "mixtral-8x7b": 32, "deepseek-v3": 512}[model]
    gpus = smallest * draw(st.sampled_from([1, 2, 4]))
    seq = draw(st.sampled_from([4096, 8192]))
    gbs = draw(st.sampled_from([None, 256, 1024]))
    return Job(
        model=m,
        hardware=resolve_hardware("h100-sxm"),
        num_gpus=gpus,
        training=default_training(m, seq_length=seq, global_batch_size=gbs, num_gpus=gpus),
    )


@SLOW
@given(job=train_jobs())
def test_training_plans_read_back_with_the_same_verdict_memory_and_time(tmp_path_factory, job):
    result = search(job, SearchOptions(top=3))
    tmp = Path(tmp_path_factory.mktemp("train"))
    for plan in result.plans:
        for fw in runnable.TRAIN_FRAMEWORKS:
            run_job = runnable.job_for(job, fw)
            lay = runnable.runs_as(run_job, plan.layout, fw)
            if lay is None:
                assert fw not in runnable.runnable(job, plan.layout)
                continue
            try:
                text = export(run_job, lay, fw)
            except InfeasibleError as exc:  # refusals() must have said so
                pytest.fail(f"{fw} refused what refusals() passed: {exc.message}")
            path = tmp / f"{plan.rank}-{fw}{EXT[fw]}"
            path.write_text(text)
            imported = load_any(
                path, hardware=job.hardware.name, gpus=job.num_gpus, model=_preset(job.model)
            )
            back = validate(imported.job, imported.layout, extra=imported.violations)
            cm = cost_model(run_job)
            mem, step = cm.memory(lay).total, cm.step_seconds(lay)
            fits = mem <= cm.capacity * (1 - result.headroom)
            assert back.valid == fits, (fw, [v.message for v in back.errors])
            if back.estimate is not None:
                assert back.estimate.memory.total == pytest.approx(mem, rel=1e-6), fw
                assert back.estimate.time.step_time_s == pytest.approx(step, rel=1e-6), fw
    assert result.plans or result.suggestions


SERVE_CASES = [
    ("llama3-70b", 8, "h100-sxm"),
    ("llama3-8b", 8, "h100-sxm"),
    ("qwen3-235b-a22b", 8, "b200"),
    ("deepseek-v3", 16, "h200"),
    ("mixtral-8x7b", 8, "h100-sxm"),
]


@st.composite
def serve_jobs(draw):
    from planner.serve.specs import ServeJob, ServingSpec

    model, gpus, hw = draw(st.sampled_from(SERVE_CASES))
    engine = draw(st.sampled_from(["vllm", "sglang", "trtllm"]))
    isl = draw(st.sampled_from([1024, 2048, 8192]))
    osl = draw(st.sampled_from([256, 1024]))
    return ServeJob(
        model=resolve_model(model),
        hardware=resolve_hardware(hw),
        num_gpus=gpus,
        serving=ServingSpec(precision="fp8", input_length=isl, output_length=osl, engine=engine),
    )


def _serve_round_trip(tmp: Path, job, slo: bool):
    """(plan, validation of its export read back) for each of the top 3 the engine starts."""
    from planner.frameworks.engines.writer import accepts
    from planner.frameworks.engines.writer import export as serve_export
    from planner.serve.search import ServeOptions
    from planner.serve.search import search as serve_search
    from planner.serve.validate import validate as serve_validate

    opts = ServeOptions(
        top=3, tpot_s=0.05 if slo else None, ttft_s=3.0 if slo else None, accepts=accepts
    )
    engine = job.serving.engine
    out = []
    for p in serve_search(job, opts).plans:
        text = serve_export(job, p.layout, engine, estimate=p.estimate)  # accepted: it starts
        path = tmp / f"{p.rank}-{engine}.sh"
        path.write_text(text)
        imported = load_any(path, hardware=job.hardware.name, model=_preset(job.model))
        out.append((p, serve_validate(imported.job, imported.layout, extra=imported.violations)))
    return out


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(job=serve_jobs(), slo=st.booleans())
def test_serving_plans_export_and_read_back_the_same_instances(tmp_path_factory, job, slo):
    """Every deployment ranked exports (the ranking keeps only what the engine starts) and
    reads back as the same instances with the same weights."""
    tmp = Path(tmp_path_factory.mktemp("serve"))
    for p, back in _serve_round_trip(tmp, job, slo):
        assert back.layout.name == p.layout.name
        if back.estimate is not None:
            a, b = p.estimate.memory, back.estimate.memory
            if a.stage == b.stage:
                assert b.weights == pytest.approx(a.weights, rel=1e-6)
            else:
                # the export writes --max-num-seqs = the plan's concurrency where the plan used
                # the engine's default cap, so the batch workspace differs by a few MB and the
                # binding pipeline stage can flip between two stages within that (Llama 3 70B
                # fp8, tp2-pp4 on 8 H100: stage 3 vs stage 0, 1.085 vs 1.079 GB of workspace);
                # the GPU's total then agrees to 0.1%
                total = a.weights + a.kv_cache + a.activations
                assert b.weights + b.kv_cache + b.activations == pytest.approx(total, rel=1e-3)


def test_the_default_engines_first_plan_always_exports():
    """The issue's case: DeepSeek-V3 on 16 H200 ranked first a layout vLLM refuses."""
    from planner.frameworks.engines.writer import accepts
    from planner.frameworks.engines.writer import export as serve_export
    from planner.serve.search import ServeOptions
    from planner.serve.search import search as serve_search
    from planner.serve.specs import ServeJob, ServingSpec

    job = ServeJob(
        model=resolve_model("deepseek-v3"),
        hardware=resolve_hardware("h200"),
        num_gpus=16,
        serving=ServingSpec(precision="fp8", input_length=2048, output_length=512),
    )
    # without the engine's filter the ranking holds layouts vLLM refuses (ep 2 or 4 over 8
    # GPUs: which comes first follows the serving profile's fit)
    plain = serve_search(job, ServeOptions(top=50))
    refused = [p for p in plain.plans if not accepts(job, p.layout)]
    assert refused
    with pytest.raises(InfeasibleError, match=r"ep [24] over 8"):
        serve_export(job, refused[0].layout, "vllm")
    # with it, every ranked deployment exports, the first above all
    kept = serve_search(job, ServeOptions(top=10, accepts=accepts)).plans
    assert kept and all(accepts(job, p.layout) for p in kept)
    assert "vllm serve" in serve_export(job, kept[0].layout, "vllm")


# The serving round trip's verdict, concurrency and time; the known disagreement of the
# search and `validate` on an engine's launch commands.
KNOWN = [
    # SGLang P/D: each worker keeps SGLang's own --mem-fraction-static default (its tp's); the
    # export writes none for them, so the reader's one fraction does not starve the tp1 prefill
    pytest.param("llama3-70b", 8, "h100-sxm", "sglang", id="sglang-prefill-tp1"),
    # attention-DP instances: the export writes a per-rank limit (--max-num-seqs conc // dp),
    # so the search's concurrencies are whole shares (search.unit_concurrencies)
    pytest.param("qwen3-235b-a22b", 8, "b200", "vllm", id="attention-dp-concurrency-vllm"),
    pytest.param("deepseek-v3", 16, "h200", "trtllm", id="attention-dp-concurrency-trtllm"),
    pytest.param("llama3-70b", 8, "h100-sxm", "vllm", id="llama-70b-vllm"),
    # SGLang with attention DP: --chunked-prefill-size is the instance's, each rank's share is
    # it / dp (as the export writes it), so the prefill chunk and its TTFT read back
    pytest.param("deepseek-v3", 16, "h200", "sglang", id="attention-dp-chunk-sglang-dsv3"),
    pytest.param("qwen3-235b-a22b", 8, "b200", "sglang", id="attention-dp-chunk-sglang-qwen3"),
]


@pytest.mark.parametrize("model,gpus,hw,engine", KNOWN)
def test_serving_round_trip_gives_the_same_verdict_and_time(tmp_path, model, gpus, hw, engine):
    from planner.serve.specs import ServeJob, ServingSpec

    job = ServeJob(
        model=resolve_model(model),
        hardware=resolve_hardware(hw),
        num_gpus=gpus,
        serving=ServingSpec(precision="fp8", input_length=2048, output_length=512, engine=engine),
    )
    for p, back in _serve_round_trip(tmp_path, job, True):
        assert back.valid
        assert back.estimate.concurrency == p.estimate.concurrency
        assert back.estimate.tpot_s == pytest.approx(p.estimate.tpot_s, rel=1e-3)
        assert back.estimate.ttft_s == pytest.approx(p.estimate.ttft_s, rel=1e-3)
