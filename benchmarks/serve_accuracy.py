"""Serving accuracy: predicted vs measured on the runs of inference-calibration.yaml and
inference-latency.yaml.

    python benchmarks/serve_accuracy.py [--data PATH] [--json] [--hardware NAME]

Reads benchmarks/data/inference-calibration.yaml and benchmarks/data/inference-latency.yaml
(or the one --data file). Each case
is a serving config in planner's terms (model, hardware, num_gpus, serving, parallel), read
exactly as written, plus what the benchmark harness the source names does and the case leaves
out (below); planner predicts it and the report gives the error per case, then per class
(offline-throughput: output tokens/s of the deployment at max concurrency; static-latency:
end-to-end seconds of one static batch; serving-latency and disagg: TPOT and TTFT at the
run's concurrency, aggregated or disaggregated), per GPU and per engine: n, median |error|,
max |error|, bias (the median signed error).

Harness settings (not per case; each from the tool's own source or docs):
- trtllm-bench (TensorRT-LLM perf-overview; the rocm blog's H100 runs "with the same method"):
  --kv_cache_free_gpu_mem_fraction 0.95 ("in many cases ... 0.95", perf-overview.md), and the
  max batch size / max num tokens of its tuning heuristic (tensorrt_llm/bench/build/tuning.py:
  KV requests from its own engine-size estimate, batch capped at 4096 / pp, tokens at
  min(batch * (1 + ISL/OSL), 32768), rounded as it rounds).
- vLLM in rocm/vllm-dev:20250112 (vLLM 0.6.7, the V0 engine), the ROCm blog's offline runs:
  the throughput command of ROCm/vllm docs/dev-docker/README.md, whose table has the blog's
  four ISL/OSL pairs (rocm_throughput_command: --max-num-seqs = --num-prompts, 1,500-3,200,
  chunked prefill off, 131,072 tokens a step); elsewhere V0's default of 256 sequences
  (vllm/engine/arg_utils.py of that series). Its latency command (benchmark_latency) sets
  --kv-cache-dtype fp8 as the case's precision implies, nothing to add.
- TensorRT-LLM MoE runs whose notes say attention DP was enabled (`enable_attention_dp` in
  the perf-overview's MoE options): TRT-LLM's tp_size then counts the attention-DP ranks
  (attention TP 1, experts over EP), i.e. planner's tp 1, dp = tp_size, dp_attention, same ep.
- Static-latency runs (vLLM benchmark_latency, TRT-LLM static batching): batching static.
- inference-latency.yaml (AIConfigurator's silicon runs under Dynamo): `concurrency` is the
  requests in flight of the whole deployment (its header; "replicas = concurrency /
  batch_size"), a closed loop of that many clients; planner's concurrency is per instance,
  so it is divided by the replicas (aggregated) or the decode workers (disaggregated).
  Its runs' request count is not in the file (header and notes name none): the requests per
  client, whose first wave arrives as one burst (serving.requests_per_client), is the one
  harness parameter fitted to the runs (AIC_REQUESTS_PER_CLIENT, `python
  benchmarks/serve_arrivals.py --fit`), not a published setting.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.serve.calibrate import infeasible  # noqa: E402  (runs planner cannot hold)
from planner.serve.estimate import estimate  # noqa: E402
from planner.serve.specs import serve_config_from_data  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "inference-calibration.yaml"
LATENCY = Path(__file__).resolve().parent / "data" / "inference-latency.yaml"
CLASSES = ("offline-throughput", "static-latency")
LATENCY_CLASSES = ("serving-latency", "disagg")
METRICS = {
    "offline-throughput": ("output_tokens_per_s",),
    "static-latency": ("e2e_s",),
    "serving-latency": ("tpot_s", "ttft_s"),
    "disagg": ("tpot_s", "ttft_s"),
}


AIC_REQUESTS_PER_CLIENT = 6.5
"""Requests per client of an AIConfigurator silicon run (R / N: its first wave is 1/6.5 of the
TTFTs): fitted to the aggregated runs of inference-latency.yaml (serve_arrivals.py --fit:
the TTFT loss over W = 1..20 in steps of 0.5, minimum at 6.5, loss 0.1420 against 0.1424 at
6.0 and 0.1433 at 7.0 (with TensorRT-LLM's whole prompts; 0.1362, 0.1378 and 0.1365 before
them); it was at 6.5 already before turnaround_wait, 0.1434 against 0.1440
at 6.0, the value fitted before lockstep_ttft and the refits moved the steady states); bound
W >= 1 (a run has at least its first wave); not a published setting (AIConfigurator's
bench_run.sh.j2 sends 50 per client after a warm-up of 2 per client; with the steady states
as modelled, W = 50 gives a TTFT median of 31 %, the wave left out 32 %, docs/serving.md)."""


def default_path() -> Path:
    return DATA


@dataclass(frozen=True)
class Case:
    id: str
    cls: str
    hardware: str
    data: dict  # the serving config, harness settings applied
    measured: float
    metric: str  # output_tokens_per_s | e2e_s | tpot_s | ttft_s
    engine: str = ""


def _trtllm_bench(case: dict) -> dict:
    """max_batch_size and max_num_tokens as trtllm-bench's tuning heuristic picks them
    (tensorrt_llm/bench/build/tuning.py calc_engine_setting / finetune_setting)."""
    from planner.config import resolve_hardware
    from planner.cost.params import total_params
    from planner.presets import resolve_model

    m = resolve_model(case["model"])
    hw = resolve_hardware(case["hardware"])
    sv, par = case["serving"], case.get("parallel", {})
    tp, pp = par.get("tp", 1), par.get("pp", 1)
    elem = {"fp4": 0.5, "fp8": 1.0}.get(sv["precision"], 2.0)
    kv_elem = (
        1.0
        if sv.get("kv_cache_dtype", "fp8" if sv["precision"] != "bf16" else "bf16") == "fp8"
        else 2.0
    )
    gib = 1024**3
    per_token = 2 * m.num_layers * max(tp, m.kv_heads) * m.head_dim * kv_elem / gib
    engine = total_params(m) * elem / gib
    total = hw.memory_gib * tp * pp  # get_device_memory() x GPUs
    isl, osl = sv["input_length"], sv["output_length"]
    requests = (total - engine) * 0.95 / (per_token * (isl + osl))
    raw_bs = min(requests, 4096) / pp
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tok < 4096:
        tok = max(2048, 256 * math.ceil(raw_tok / 256))
    elif raw_tok < 8192:
        tok = 512 * math.ceil(raw_tok / 512)
    else:
        tok = 1024 * math.ceil(raw_tok / 1024)
    return {"max_batch_size": bs * pp, "max_num_tokens": tok}


AIC_PROMPT_SLACK = 1500
"""Tokens the AIConfigurator generator adds to ISL in an engine's step budget (its benchmark
rules: `agg max_num_tokens = max_batch_size + SlaConfig.isl + 1500`, `prefill max_num_tokens
= SlaConfig.isl + 1500`; ai-dynamo/aiconfigurator src/aiconfigurator/generator/rule_plugin/
benchmark/{trtllm,vllm}.rule; SGLang's `agg_prefill_decode max_prefill_tokens = SlaConfig.isl
+ 1500`, benchmark/sglang.rule)."""


AIC_TRTLLM_CHUNKED_PREFILL = False
"""TensorRT-LLM's enable_chunked_prefill in the engine configs AIConfigurator writes: its
extra_engine_args templates (generator/config/backend_templates/trtllm/
extra_engine_args.*.yaml.j2, 1.0.0rc3 to 1.2.0rc6.post1) write `enable_chunked_prefill: {{
enable_chunked_prefill | default(false) }}` and its benchmark rules never set it, the
LLM API's own default (llm_args.py: `enable_chunked_prefill: bool = Field(default=False)`):
an aggregated worker's prompts go whole into a step (serving.chunked_prefill false,
estimate.whole_prompt_groups). trtllm-bench's perf-overview runs of inference-calibration.yaml
keep planner's split prompts: their commands are not in the data."""


def aic_engine_limits(sv: dict, *, disaggregated: bool) -> dict:
    """The batch and step limits the AIConfigurator generator writes into the engine configs of
    its silicon runs (benchmark rules, AIC_PROMPT_SLACK): an aggregated worker's (and a decode
    worker's) max_batch_size is the run's batch per instance, the clients it carries (the
    runs' concurrency is `workers x max_batch_size`: BenchConfig.estimated_concurrency), its
    max_num_tokens that batch + ISL + 1,500, room for every running request's decode token
    and one whole prompt; a disaggregated deployment's budget is its prefill workers' ISL +
    1,500 (one prompt a step; the decode workers' max_num_tokens = max_batch_size holds
    only decode tokens, which planner's decode pool never chunks). SGLang's is its prefill
    batch, max_prefill_tokens = ISL + 1,500, without the decode tokens (its prefill batches
    run apart from the decode batches: estimate.PREFILL_FIRST)."""
    b, isl = int(sv["concurrency"]), int(sv["input_length"])
    if disaggregated or sv.get("engine") == "sglang":
        return {"max_batch_size": b, "max_num_tokens": isl + AIC_PROMPT_SLACK}
    out = {"max_batch_size": b, "max_num_tokens": b + isl + AIC_PROMPT_SLACK}
    if sv.get("engine") == "trtllm":
        out["chunked_prefill"] = False  # AIC_TRTLLM_CHUNKED_PREFILL
    return out


ROCM_PROMPTS = {(128, 2048): 3200, (128, 4096): 1500, (500, 2000): 2000, (2048, 2048): 1500}
"""--num-prompts (= --max-num-seqs) of the throughput command of ROCm/vllm docs/dev-docker/
README.md for Llama 3.1 70B FP8 at each of the blog's four ISL/OSL pairs."""


def rocm_throughput_command(sv: dict) -> dict:
    """The engine limits of the ROCm dev-docker throughput command for the ROCm blog's offline
    vLLM runs (ROCm/vllm docs/dev-docker/README.md, its vLLM 0.7.3 / ROCm 6.3.1 edition:
    benchmark_throughput.py --num-prompts P --max-num-seqs P --enable-chunked-prefill False
    --max-num-batched-tokens 131072 --num-scheduler-steps 10 --kv-cache-dtype fp8). Its table
    is the blog's four ISL/OSL pairs of Llama 3.1 70B FP8 at TP 8 (15,919 / 12,053 / 13,089 /
    8,352 tokens/s against the blog's 15,105 / 10,505 / 12,664 / 8,239 a container later):

        max_batch_size = P = ROCM_PROMPTS[(ISL, OSL)]   (every prompt admitted at once, as
                                                          far as the KV cache holds them)
        chunked_prefill = False, max_num_tokens = 131,072   (whole prompts)

    and V0's default of 256 sequences for a pair the table does not have. Not modelled:
    --num-scheduler-steps 10 (V0's multi-step scheduling runs the scheduler and its
    per-sequence host work once every 10 forward passes) and V0's prefill-only steps when
    chunked prefill is off (planner's vLLM steps mix the prompts into the decode steps)."""
    n = ROCM_PROMPTS.get((int(sv["input_length"]), int(sv["output_length"])))
    if n is None:
        return {"max_batch_size": 256}
    return {"max_batch_size": n, "chunked_prefill": False, "max_num_tokens": 131072}


def harness(case: dict) -> dict:
    """The serving config of a case with its benchmark harness's settings (module docstring)."""
    sv = dict(case["serving"])
    notes, src = case.get("notes", ""), case.get("source", "")
    if case["class"] == "static-latency":
        sv["batching"] = "static"
    elif sv["engine"] == "trtllm" and ("trtllm-bench" in notes or "perf-overview" in src):
        sv.setdefault("memory_fraction", 0.95)
        for k, v in _trtllm_bench(case).items():
            sv.setdefault(k, v)
    elif sv["engine"] == "vllm" and "vllm-dev:2025" in notes:
        for k, v in rocm_throughput_command(sv).items():
            sv.setdefault(k, v)
    par = dict(case.get("parallel", {}))
    if "attention DP enabled" in notes and par.get("tp", 1) > 1:
        par.update(dp=par["tp"], tp=1, dp_attention=True)
    if case["class"] in LATENCY_CLASSES:  # deployment-wide clients -> per instance
        sv.setdefault("requests_per_client", AIC_REQUESTS_PER_CLIENT)
        par = {k: (dict(v) if isinstance(v, dict) else v) for k, v in par.items()}
        share = par["decode"].get("workers", 1) if "decode" in par else par.get("replicas", 1)
        sv["concurrency"] = max(1, round(sv["concurrency"] / share))
        for k, v in aic_engine_limits(sv, disaggregated="decode" in par).items():
            sv.setdefault(k, v)
    return {
        "model": case["model"],
        "hardware": case["hardware"],
        "num_gpus": case["num_gpus"],
        "serving": sv,
        "parallel": par,
    }


def load_cases(path: Path | None = None, classes=CLASSES) -> list[Case]:
    """The cases of one data file in `classes`, one Case per measured metric, with the
    corrections.yaml `transcriptions` that name them applied (a value the collection copied
    wrong, each with its evidence; the file stays as collected)."""
    import yaml

    from benchmarks.accuracy import corrected, transcriptions

    data = yaml.safe_load(Path(path or default_path()).read_text())
    fixes = transcriptions()  # benchmarks/data/corrections.yaml `transcriptions`
    out = []
    for c in data["cases"]:
        if c["class"] not in classes:
            continue
        c = corrected(c, fixes.get(c["id"]))
        for metric in METRICS[c["class"]]:
            if metric in c["measured"]:
                out.append(
                    Case(
                        c["id"],
                        c["class"],
                        c["hardware"],
                        harness(c),
                        float(c["measured"][metric]),
                        metric,
                        c["serving"]["engine"],
                    )
                )
    return out


def load_latency_cases(path: Path | None = None) -> list[Case]:
    """inference-latency.yaml: TPOT and TTFT at a concurrency (serving-latency, disagg)."""
    return load_cases(path or LATENCY, LATENCY_CLASSES)


def load_all() -> list[Case]:
    """Both data files: what the calibration fits and the report shows by default."""
    return load_cases() + load_latency_cases()


def predict(case: Case, hardware=None) -> dict:
    """One case's prediction; `hardware` replaces the profile (calibration fits)."""
    data = case.data if hardware is None else {**case.data, "hardware": hardware.model_dump()}
    job, layout = serve_config_from_data(data, source=case.id)
    est = estimate(job, layout)
    pred = getattr(est, case.metric)
    return {
        "id": case.id,
        "class": case.cls,
        "hardware": case.hardware,
        "layout": layout.name,
        "metric": case.metric,
        "engine": case.engine,
        "predicted": pred,
        "measured": case.measured,
        "error": pred / case.measured - 1,
        "concurrency": est.concurrency,
        "max_concurrency": est.memory.max_concurrency,
        "requested": job.serving.concurrency,
    }


def evaluate(cases, hardware: dict | None = None) -> list[dict]:
    return [predict(c, (hardware or {}).get(c.hardware)) for c in cases]


def summary(rows: list[dict], by: str = "hardware") -> list[dict]:
    """Per class, metric and GPU (`by` "engine": per engine): n, median |error|, max |error|,
    bias (median signed error); the key `by` is "all" on the class's overall row. Runs that
    cannot have run as written (infeasible: not one request fits) are listed, not scored."""
    groups: dict[tuple, list[float]] = {}
    bad = {r["id"] for r in infeasible(rows)}
    for r in rows:
        if r["id"] in bad:
            continue
        metric = r.get("metric", "")
        groups.setdefault((r["class"], metric, "all"), []).append(r["error"])
        groups.setdefault((r["class"], metric, r.get(by, "")), []).append(r["error"])
    out = []
    for (cls, metric, key), errs in sorted(groups.items()):
        out.append(
            {
                "class": cls,
                "metric": metric,
                by: key,
                "n": len(errs),
                "median_abs_error": statistics.median(abs(e) for e in errs),
                "max_abs_error": max(abs(e) for e in errs),
                "bias": statistics.median(errs),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--hardware", default=None, help="only the cases on this profile")
    args = ap.parse_args(argv)
    cases = load_all() if args.data is None else (load_cases(args.data, CLASSES + LATENCY_CLASSES))
    if args.hardware:
        cases = [c for c in cases if c.hardware == args.hardware]
    rows = evaluate(cases)
    summ = summary(rows) + summary(rows, by="engine")
    if args.json:
        print(
            json.dumps({"cases": rows, "summary": summ, "infeasible": infeasible(rows)}, indent=2)
        )
        return 0
    print(
        f"{'case':62s} {'metric':7s} {'layout':12s} {'conc':>5s} {'pred':>9s} {'meas':>9s} "
        f"{'error':>7s}"
    )
    for r in rows:
        scale = 1e3 if r["metric"] in ("tpot_s", "ttft_s") else 1.0
        print(
            f"{r['id'][-62:]:62s} {r['metric'][:7]:7s} {r['layout'][:12]:12s} "
            f"{r['concurrency']:5d} {r['predicted'] * scale:9.1f} {r['measured'] * scale:9.1f} "
            f"{r['error']:+7.1%}"
        )
    print()
    for s in summ:
        key = s.get("hardware", s.get("engine"))
        print(
            f"{s['class']:19s} {s['metric'][:7]:7s} {key:13s} n={s['n']:3d}  median |error| "
            f"{s['median_abs_error']:6.1%}  max |error| {s['max_abs_error']:6.1%}  "
            f"bias {s['bias']:+6.1%}"
        )
    for r in {r["id"]: r for r in infeasible(rows)}.values():  # one line a case, not a metric
        print(
            f"cannot have run as written (not one request fits; a data error, not scored): "
            f"{r['id']} holds {r['max_concurrency']} of {r['requested']} requests"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
