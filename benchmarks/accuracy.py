"""Accuracy report: predicted vs measured step time on the published runs of calibration.yaml.

    python benchmarks/accuracy.py [--calibration PATH] [--json]

Reads ../shared/reference/calibration.yaml (or the copy beside this file), builds each case's
config exactly as written (planner defaults for what the source left out), predicts the step
time, and prints per case predicted vs measured and the error, then the median and max
|error| per class and overall. Measured step time (the file's own rule, first that applies):
iteration_time_s; GBS*seq/(tokens_per_s_per_gpu*GPUs); F/(tflops_per_gpu*1e12*GPUs) with F
the source's own FLOP count (narayanan-eq3, megatron-2024, megatron).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.config import Job, config_from_data  # noqa: E402
from planner.cost import estimate, shape_of  # noqa: E402
from planner.cost.compute import megatron_flops_2024, model_flops_per_step, narayanan_flops  # noqa: E402
from planner.cost.params import padded_vocab  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.tune import fill_auto  # noqa: E402

SHARED = ROOT.parent / "shared" / "reference" / "calibration.yaml"
LOCAL = Path(__file__).resolve().parent / "calibration.yaml"


def default_path() -> Path:
    return SHARED if SHARED.exists() else LOCAL


@dataclass(frozen=True)
class Case:
    id: str
    cls: str
    job: Job
    layout: Layout
    measured_s: float
    measured_from: str


def load_cases(path: Path | None = None) -> list[Case]:
    import yaml

    data = yaml.safe_load(Path(path or default_path()).read_text())
    cases = []
    for c in data["cases"]:
        cfg = {"model": c["model"], "hardware": c["hardware"], "num_gpus": c["num_gpus"],
               "training": c["training"], "parallel": c.get("parallel", {})}
        job, layout = config_from_data(cfg)
        layout = fill_auto(job, layout)       # micro-batch/vpp the source left out
        t_meas, how = measured_step_time(c, job, layout)
        cases.append(Case(c["id"], c["class"], job, layout, t_meas, how))
    return cases


def measured_step_time(c: dict, job: Job, layout: Layout) -> tuple[float, str]:
    meas, tr, m = c["measured"], job.training, job.model
    B, s, n = tr.global_batch_size, tr.seq_length, job.num_gpus
    if "iteration_time_s" in meas:
        return float(meas["iteration_time_s"]), "iteration_time_s"
    if "tokens_per_s_per_gpu" in meas:
        return B * s / (meas["tokens_per_s_per_gpu"] * n), "tokens_per_s_per_gpu"
    kind = meas["tflops_kind"]
    V = padded_vocab(m.vocab_size, layout.tp)
    if kind == "narayanan-eq3":
        F = narayanan_flops(B=B, s=s, L=m.num_layers, h=m.hidden_size, V=V)
    elif kind == "megatron-2024":
        F = megatron_flops_2024(B=B, s=s, L=m.num_layers, h=m.hidden_size,
                                a=m.num_attention_heads, g=m.kv_heads,
                                q=m.num_attention_heads * m.head_dim, f=m.ffn, V=V,
                                gated=m.gated)
    elif kind == "megatron":
        F = model_flops_per_step(shape_of(m), seq=s, global_batch_size=B, vocab=V)
    else:
        raise ValueError(f"{c['id']}: unknown tflops_kind {kind!r}")
    return F / (meas["tflops_per_gpu"] * 1e12 * n), f"tflops_per_gpu ({kind})"


def evaluate(cases: list[Case], hardware_override=None) -> list[dict]:
    """Predict every case; with `hardware_override` ({name: HardwareSpec}) the knobs the source
    left out are chosen again under the overriding profile, as loading the config would."""
    from dataclasses import replace

    rows = []
    for c in cases:
        job, layout = c.job, c.layout
        if hardware_override is not None and job.hardware.name in hardware_override:
            job = replace(job, hardware=hardware_override[job.hardware.name])
            if layout.auto:
                layout = fill_auto(job, layout.with_(micro_batch_size=1, vpp=1))
        est = estimate(job, layout)
        pred = est.time.step_time_s
        rows.append({"id": c.id, "class": c.cls, "hardware": job.hardware.name,
                     "layout": layout.name, "micro_batch_size": layout.micro_batch_size,
                     "chosen": list(layout.auto), "predicted_s": pred, "measured_s": c.measured_s,
                     "error": pred / c.measured_s - 1, "mfu": est.time.mfu,
                     "memory_fraction": est.memory.fraction})
    return rows


def summarize(rows: list[dict]) -> dict:
    groups: dict[str, list[float]] = {}
    for r in rows:
        for key in (r["class"], r["hardware"], "all"):
            groups.setdefault(key, []).append(abs(r["error"]))
    return {k: {"n": len(v), "median_abs_error": statistics.median(v), "max_abs_error": max(v)}
            for k, v in groups.items()}


def memory_check(rows: list[dict]) -> dict:
    """Every case is a run that fitted in memory: how many does the memory model put over
    the GPU's capacity (a conservative estimate), and by how much at most."""
    over = [r for r in rows if r["memory_fraction"] > 1.0]
    return {"n": len(rows), "over_capacity": len(over),
            "max_fraction": max(r["memory_fraction"] for r in rows),
            "cases_over": [r["id"] for r in over]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = evaluate(load_cases(args.calibration))
    summary = summarize(rows)
    mem = memory_check(rows)
    if args.json:
        print(json.dumps({"cases": rows, "summary": summary, "memory": mem}, indent=2))
        return 0
    print(f"{'case':44s} {'layout':26s} {'pred s':>8s} {'meas s':>8s} {'error':>7s} {'MFU':>6s} {'mem':>5s}")
    for r in rows:
        print(f"{r['id']:44s} {r['layout']:26s} {r['predicted_s']:8.3f} {r['measured_s']:8.3f} "
              f"{r['error']:+7.1%} {r['mfu']:6.1%} {r['memory_fraction']:5.0%}")
    print()
    print(f"memory: {mem['over_capacity']} of {mem['n']} runs that fitted are estimated over "
          f"capacity (at most {mem['max_fraction']:.0%}): {', '.join(mem['cases_over']) or '-'}")
    for k, v in summary.items():
        print(f"{k:14s} n={v['n']:3d}  median |error| {v['median_abs_error']:6.1%}  "
              f"max |error| {v['max_abs_error']:6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
