"""Accuracy report: predicted vs measured step time and peak memory on every published run of
calibration.yaml (dense BF16, A100/H100) and calibration-modern.yaml (Megatron-Bridge, NeMo,
torchtitan: MoE, FP8 recipes, Blackwell, FSDP, long context).

    python benchmarks/accuracy.py [--calibration PATH ...] [--json] [--cases]

Reads benchmarks/data/calibration*.yaml, builds each
case's config exactly as written (planner defaults for what the source left out), predicts
the step time and memory, and prints per case predicted vs measured and the error, then per
class, per GPU and per class x GPU: n, median |error|, max |error| and the bias (median
signed error; negative = planner too fast). Memory: predicted vs published peak for the
cases that publish one, and how many runs (every one of which ran) the memory model puts
over the GPU's capacity. Measured step time (each file's own rule, first that applies):
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
from planner.rules import MEMORY_MARGIN  # noqa: E402
from planner.tune import fill_auto  # noqa: E402
from planner.units import GiB  # noqa: E402

FILES = ("calibration.yaml", "calibration-modern.yaml")
DATA = Path(__file__).resolve().parent / "data"


def default_paths() -> list[Path]:
    """Each calibration file, from benchmarks/data/."""
    return [DATA / f for f in FILES]


def default_path() -> Path:
    return default_paths()[0]


@dataclass(frozen=True)
class Case:
    id: str
    cls: str
    job: Job
    layout: Layout
    measured_s: float
    measured_from: str
    peak_memory_gib: float | None = None
    peak_memory_kind: str = ""
    source_file: str = ""
    suspect: str = ""
    """Why the case contradicts another measurement of the same settings (reported, never
    scored or fitted); empty for a sound case."""


CORRECTIONS = Path(__file__).resolve().parent / "data" / "corrections.yaml"


def corrections() -> dict[str, dict]:
    """benchmarks/data/corrections.yaml by case id: settings a case's own recipe code sets that
    the collected case leaves out (each with its source)."""
    import yaml

    return {e["id"]: e for e in yaml.safe_load(CORRECTIONS.read_text())["corrections"]}


def corrected(case: dict, fix: dict | None) -> dict:
    """The case with its correction's `section.key: value` settings applied (a copy)."""
    if fix is None:
        return case
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in case.items()}
    for dotted, value in fix["set"].items():
        section, key = dotted.split(".", 1)
        out.setdefault(section, {})[key] = value
    return out


def load_cases(path: Path | str | None = None, *, paths=None, suspect: bool = False) -> list[Case]:
    """The cases of one calibration file (`path`, default calibration.yaml) or of several;
    the cases marked `suspect` only with suspect=True (then only those)."""
    import yaml

    if paths is None:
        paths = [Path(path)] if path is not None else [default_path()]
    fixes = corrections()
    cases = []
    for p in paths:
        data = yaml.safe_load(Path(p).read_text())
        for c in data["cases"]:
            if bool(c.get("suspect")) != suspect:
                continue
            c = corrected(c, fixes.get(c["id"]))
            cfg = {
                "model": c["model"],
                "hardware": c["hardware"],
                "num_gpus": c["num_gpus"],
                "training": c["training"],
                "parallel": c.get("parallel", {}),
            }
            job, layout = config_from_data(cfg)
            layout = fill_auto(job, layout)  # micro-batch/vpp the source left out
            t_meas, how = measured_step_time(c, job, layout)
            meas = c["measured"]
            cases.append(
                Case(
                    c["id"],
                    c["class"],
                    job,
                    layout,
                    t_meas,
                    how,
                    meas.get("peak_memory_gib"),
                    meas.get("peak_memory_kind", ""),
                    Path(p).name,
                    str(c.get("suspect", "")),
                )
            )
    return cases


def load_all() -> list[Case]:
    """Every case of both calibration files."""
    return load_cases(paths=default_paths())


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
        F = megatron_flops_2024(
            B=B,
            s=s,
            L=m.num_layers,
            h=m.hidden_size,
            a=m.num_attention_heads,
            g=m.kv_heads,
            q=m.num_attention_heads * m.head_dim,
            f=m.ffn,
            V=V,
            gated=m.gated,
        )
    elif kind == "megatron":
        F = model_flops_per_step(shape_of(m), seq=s, global_batch_size=B, vocab=V)
    else:
        raise ValueError(f"{c['id']}: no step time can be derived from tflops_kind {kind!r}")
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
                layout = fill_auto(job, layout.with_(**dict.fromkeys(layout.auto, 1)))
        est = estimate(job, layout)
        pred = est.time.step_time_s
        mem = est.memory
        rows.append(
            {
                "id": c.id,
                "class": c.cls,
                "hardware": job.hardware.name,
                "file": c.source_file,
                "layout": layout.name,
                "micro_batch_size": layout.micro_batch_size,
                "chosen": list(layout.auto),
                "predicted_s": pred,
                "measured_s": c.measured_s,
                "error": pred / c.measured_s - 1,
                "mfu": est.time.mfu,
                "memory_fraction": mem.fraction,
                "memory_gib": mem.total / GiB,
                "peak_memory_gib": c.peak_memory_gib,
                "peak_memory_kind": c.peak_memory_kind,
                "memory_error": (
                    mem.total / GiB / c.peak_memory_gib - 1 if c.peak_memory_gib else None
                ),
            }
        )
    return rows


def _stats(errors: list[float]) -> dict:
    a = [abs(e) for e in errors]
    return {
        "n": len(errors),
        "median_abs_error": statistics.median(a),
        "max_abs_error": max(a),
        "bias": statistics.median(errors),
    }


def summarize(rows: list[dict]) -> dict:
    """Per class, per GPU, per class x GPU and overall."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        for key in (r["class"], r["hardware"], f"{r['class']} / {r['hardware']}", "all"):
            groups.setdefault(key, []).append(r["error"])
    return {k: _stats(v) for k, v in groups.items()}


def summarize_by(rows: list[dict], key: str) -> dict:
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r["error"])
    return {k: _stats(v) for k, v in sorted(groups.items())}


def memory_check(rows: list[dict]) -> dict:
    """Every case is a run that fitted in memory: how many does the memory model put over
    the GPU's capacity, by how much at most; and the published peaks against the estimate."""
    over = [r for r in rows if r["memory_fraction"] > 1.0]
    judged = [r for r in rows if r["memory_fraction"] > 1.0 + MEMORY_MARGIN]
    peaks = [r for r in rows if r["peak_memory_gib"]]
    out = {
        "runs": len(rows),
        "over_capacity": len(over),
        "judged_infeasible": len(judged),
        "cases_judged_infeasible": [r["id"] for r in judged],
        "max_fraction": max(r["memory_fraction"] for r in rows),
        "cases_over": [r["id"] for r in over],
        "published_peaks": len(peaks),
    }
    if peaks:
        out.update(_stats([r["memory_error"] for r in peaks]))
        out["within_10pct"] = sum(abs(r["memory_error"]) <= 0.10 for r in peaks)
    return out


def _print_stats(title: str, table: dict) -> None:
    print(title)
    for k, v in table.items():
        print(
            f"  {k:34s} n={v['n']:3d}  median |error| {v['median_abs_error']:6.1%}  "
            f"max |error| {v['max_abs_error']:6.1%}  bias {v['bias']:+6.1%}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--calibration",
        type=Path,
        action="append",
        default=None,
        help="a calibration file (repeatable); default both",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cases", action="store_true", help="print every case")
    args = ap.parse_args(argv)
    cases = load_cases(paths=args.calibration or default_paths())
    rows = evaluate(cases)
    mem = memory_check(rows)
    from benchmarks.ranking import print_ranking, ranking

    ranks = ranking(cases, rows)
    if args.json:
        print(
            json.dumps(
                {
                    "cases": rows,
                    "summary": summarize(rows),
                    "ranking": ranks,
                    "by_file": {
                        f: summarize([r for r in rows if r["file"] == f])
                        for f in sorted({r["file"] for r in rows})
                    },
                    "memory": mem,
                },
                indent=2,
            )
        )
        return 0
    if args.cases:
        print(
            f"{'case':52s} {'layout':24s} {'pred s':>8s} {'meas s':>8s} {'error':>7s} "
            f"{'MFU':>6s} {'mem':>5s}"
        )
        for r in rows:
            print(
                f"{r['id'][:52]:52s} {r['layout'][:24]:24s} {r['predicted_s']:8.3f} "
                f"{r['measured_s']:8.3f} {r['error']:+7.1%} {r['mfu']:6.1%} "
                f"{r['memory_fraction']:5.0%}"
            )
        print()
    for f in sorted({r["file"] for r in rows}):
        sub = [r for r in rows if r["file"] == f]
        _print_stats(f"{f}: step time by class", summarize_by(sub, "class"))
        _print_stats(f"{f}: step time by GPU", summarize_by(sub, "hardware"))
        _print_stats(f"{f}: all", {"all": _stats([r["error"] for r in sub])})
    print()
    peaks = [r for r in rows if r["peak_memory_gib"]]
    if peaks:
        print("peak memory: predicted vs published")
        for r in peaks:
            print(
                f"  {r['id'][:52]:52s} {r['memory_gib']:6.1f} vs {r['peak_memory_gib']:6.1f} GiB "
                f"{r['memory_error']:+6.1%}  ({r['peak_memory_kind'][:40]})"
            )
        print(
            f"  {mem['within_10pct']} of {mem['published_peaks']} within 10%; median "
            f"|error| {mem['median_abs_error']:.1%}, max {mem['max_abs_error']:.1%}, "
            f"bias {mem['bias']:+.1%}"
        )
    print(
        f"memory: {mem['over_capacity']} of {mem['runs']} runs (all of which ran) are estimated "
        f"over capacity (at most {mem['max_fraction']:.0%}): {', '.join(mem['cases_over']) or '-'}"
    )
    print(
        f"        {mem['judged_infeasible']} judged infeasible (more than {MEMORY_MARGIN:.0%} over, "
        f"the fits-in-memory rule): {', '.join(mem['cases_judged_infeasible']) or '-'}"
    )
    suspect = evaluate(load_cases(paths=args.calibration or default_paths(), suspect=True))
    if suspect:
        print(
            "suspect runs (contradict another measurement of the same settings; reported, "
            "not scored or fitted):"
        )
        for r in suspect:
            print(
                f"  {r['id'][:60]:60s} {r['predicted_s']:8.3f} vs {r['measured_s']:8.3f} s "
                f"{r['error']:+7.1%}"
            )
    print()
    print_ranking(ranks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
