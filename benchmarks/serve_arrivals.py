"""TTFT of the aggregated runs of inference-latency.yaml under the two steady states of a
closed loop: lock-step groups (planner's estimate, estimate.closed_loop) and clients out of
step with each other (estimate.independent_ttft), per run, then per engine and GPU.

    python benchmarks/serve_arrivals.py [--json]

The estimate keeps the lock-step loop; this script shows where each assumption stands
against the measurements (docs/serving.md, "Where the bars are missed"). Independent
arrivals: a request arrives during a mean step (the instance's mean decode interval at its
concurrency), the step that started while its client turned around, waits all of it
(turnaround_wait), and shares its chunk step with the other prompts that
arrived in the same step (arrivals_in_step: (N - 1) t / Z), the running requests decoding
beside them by the engine's rule (vLLM, TensorRT-LLM: in the same step; SGLang: a prefill
batch of its own); the first token leaves one step later with an overlap scheduler
(first_token_delay); clients beyond what the engine runs wait for a slot as in the
estimate (queue_s). No parameter is fitted here.

The benchmark's first wave (the N clients start together): its prompts arrive as one burst at
an idle engine and are prefilled in n chunk steps of g prompts (chunk_groups), group i's
first token after i of them: the wave's mean TTFT is (n + 1)/2 chunk steps (+ the overlap
delay). A run of R requests averages the wave's N and the R - N after it; if those were out
of step, measured = independent + (wave - independent) N / R, so the run implies
R / N = (wave - independent) / (measured - independent) waves. The data do not give R
(inference-latency.yaml's header and notes name no request count): the column shows what
each run would need, not a value the estimate uses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.serve_accuracy import load_latency_cases  # noqa: E402
from planner.serve.estimate import (  # noqa: E402
    INDEPENDENT_ARRIVALS,
    OVERLAP_SCHEDULER,
    PREFILL_FIRST,
    _decode,
    chunk_groups,
    estimate,
    first_token_delay,
    independent_ttft,
)
from planner.serve.memory import instance_memory  # noqa: E402
from planner.serve.specs import serve_config_from_data  # noqa: E402
from planner.serve.time import ServeCost  # noqa: E402


def first_wave(job, layout, est) -> float:
    """Mean TTFT of the first wave: N prompts at an idle engine, n chunk steps of g prompts,
    group i served after i steps: (n + 1)/2 chunk steps + the overlap delay (docstring)."""
    cost = ServeCost(job, layout.instance)
    sv = job.serving
    isl = sv.input_length
    seqs = est.concurrency / cost.inst.dp
    n, g = chunk_groups(seqs, isl, max(1, cost.settings.max_num_tokens) * cost.pp)
    group = cost.prefill_time(g * isl, span=isl / 2, seqs=g)
    t = _decode(cost, job, est.concurrency)[0].total
    return (n + 1) / 2 * group + first_token_delay(sv.engine, t)


def independent(job, layout, est) -> tuple[float, float]:
    """(TTFT, k) of the run with its clients out of step (module docstring)."""
    cost = ServeCost(job, layout.instance)
    sv = job.serving
    isl, osl = sv.input_length, sv.output_length
    conc = est.concurrency
    seqs = conc / cost.inst.dp
    ctx = isl + osl / 2
    step, per = _decode(cost, job, conc)
    t = step.total

    def chunk(p: float) -> float:
        p = min(p, seqs)
        if sv.engine in PREFILL_FIRST:
            return cost.prefill_time(p * isl, span=isl / 2, seqs=p)
        return max(
            t,
            cost.prefill_time(
                p * isl,
                span=isl / 2,
                seqs=p,
                decode_seqs=max(0.0, seqs - p) / cost.pp,
                decode_ctx=ctx,
            ),
        )

    ttft, k = independent_ttft(
        t,
        chunk,
        clients=seqs,
        decode_s=(osl - 1) * est.tpot_s,
        delay_s=first_token_delay(sv.engine, t),
        overlap=sv.engine in OVERLAP_SCHEDULER,
    )
    return ttft + est.queue_s, k


def lockstep(job, layout):
    """The estimate with every engine's clients in lock-step groups (closed_loop without
    INDEPENDENT_ARRIVALS) and no first wave."""
    saved = set(INDEPENDENT_ARRIVALS)
    INDEPENDENT_ARRIVALS.clear()
    try:
        return estimate(job, layout)
    finally:
        INDEPENDENT_ARRIVALS.update(saved)


def rows() -> list[dict]:
    """Per aggregated run: the steady states (no first wave) and the first wave."""
    out = []
    for c in load_latency_cases():
        if c.metric != "ttft_s" or c.cls != "serving-latency":
            continue
        data = {**c.data, "serving": {**c.data["serving"], "requests_per_client": None}}
        job, layout = serve_config_from_data(data, source=c.id)
        if instance_memory(job, layout.instance).max_concurrency < 1:
            continue  # cannot have run as written
        est = lockstep(job, layout)
        ind, k = independent(job, layout, est)
        wave = first_wave(job, layout, est) + est.queue_s
        waves = (wave - ind) / (c.measured - ind) if ind < c.measured < wave else None
        out.append(
            {
                "id": c.id,
                "engine": c.engine,
                "hardware": c.hardware,
                "concurrency": est.concurrency,
                "measured": c.measured,
                "lockstep": est.ttft_s,
                "independent": ind,
                "k": k,
                "first_wave": wave,
                "implied_waves": waves,
                "lockstep_error": est.ttft_s / c.measured - 1,
                "independent_error": ind / c.measured - 1,
            }
        )
    return out


def medians(rs: list[dict], key: str) -> list[dict]:
    groups: dict[str, list[dict]] = {}
    for r in rs:
        groups.setdefault("all", []).append(r)
        groups.setdefault(r[key], []).append(r)
    return [
        {
            key: g,
            "n": len(v),
            "lockstep": statistics.median(abs(r["lockstep_error"]) for r in v),
            "independent": statistics.median(abs(r["independent_error"]) for r in v),
        }
        for g, v in sorted(groups.items())
    ]


def fit(grid=None) -> list[tuple[float, float, float]]:
    """(W, loss, TTFT median |error|) over W = requests per client of the aggregated latency
    runs: the loss is serve_calibrate's per-run term (squared log error, capped at 1)."""
    import math

    cases = [c for c in load_latency_cases() if c.metric == "ttft_s" and c.cls == "serving-latency"]
    out = []
    for w in grid or [1 + 0.5 * i for i in range(39)]:
        errs, loss = [], 0.0
        for c in cases:
            data = {**c.data, "serving": {**c.data["serving"], "requests_per_client": w}}
            job, layout = serve_config_from_data(data, source=c.id)
            if instance_memory(job, layout.instance).max_concurrency < 1:
                continue
            p = estimate(job, layout).ttft_s
            errs.append(p / c.measured - 1)
            loss += min(1.0, abs(math.log(p / c.measured))) ** 2
        out.append((w, loss / len(errs), statistics.median(abs(e) for e in errs)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--fit",
        action="store_true",
        help="scan the requests per client W (the first wave's 1/W share)",
    )
    args = ap.parse_args(argv)
    if args.fit:
        res = fit()
        for w, loss, med in res:
            print(f"W {w:5.1f}  loss {loss:.4f}  TTFT median |error| {med:6.1%}")
        best = min(res, key=lambda r: r[1])
        print(f"minimum: W {best[0]:.1f} (loss {best[1]:.4f})")
        return 0
    rs = rows()
    summ = {"engine": medians(rs, "engine"), "hardware": medians(rs, "hardware")}
    if args.json:
        print(json.dumps({"cases": rs, "summary": summ}, indent=2))
        return 0
    print(
        f"{'case':48s} {'engine':7s} {'gpu':11s} {'conc':>4s} {'meas ms':>8s} "
        f"{'lock-step':>15s} {'independent':>15s} {'k':>5s} {'wave ms':>8s} {'R/N':>5s}"
    )
    for r in rs:
        print(
            f"{r['id'][-48:]:48s} {r['engine']:7s} {r['hardware']:11s} {r['concurrency']:4d} "
            f"{r['measured'] * 1e3:8.1f} {r['lockstep'] * 1e3:7.1f} {r['lockstep_error']:+7.0%} "
            f"{r['independent'] * 1e3:7.1f} {r['independent_error']:+7.0%} {r['k']:5.2f} "
            f"{r['first_wave'] * 1e3:8.1f} "
            + (f"{r['implied_waves']:5.1f}" if r["implied_waves"] is not None else "    -")
        )
    print()
    for key, ms in summ.items():
        for m in ms:
            print(
                f"TTFT median |error| {key:8s} {m[key]:11s} n={m['n']:2d}  lock-step "
                f"{m['lockstep']:6.1%}  independent {m['independent']:6.1%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
