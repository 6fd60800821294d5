"""Accuracy report: predicted vs measured step time and peak memory on every published run of
calibration.yaml (dense BF16, A100/H100) and calibration-modern.yaml (Megatron-Bridge, NeMo,
torchtitan: MoE, FP8 recipes, Blackwell, FSDP, long context).

    python benchmarks/accuracy.py [--calibration PATH ...] [--json] [--cases]

Reads benchmarks/data/calibration*.yaml, builds each
case's config as written (planner defaults for what the source left out) with
benchmarks/data/corrections.yaml over it: the settings its recipe's code sets, and for the runs
of another framework (torchtitan) that framework's semantics, its job config's recipe sections
mapped by its importer; predicts
the step time and memory, and prints per case predicted vs measured and the error, then per
class, per GPU and per class x GPU: n, median |error|, max |error| and the bias (median
signed error; negative = planner too fast); the runs on other hardware than their profile
(NOT_THIS_HARDWARE) are reported apart, their step time in no such figure. Memory: each
published peak against the part of the estimate it counts (corrections.yaml `peak_kinds`:
reserved, allocated; `counted_gib`), and how many runs (every one of which ran) the memory model puts
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
    other_hardware: str = ""
    """Why the run's hardware is not the profile it is filed under (NOT_THIS_HARDWARE):
    reported apart, its step time never scored or fitted; empty for a run on the profile."""
    framework: str = ""
    """The framework whose semantics the case is read with (corrections.yaml `frameworks`);
    empty: as written, Megatron's."""
    peak_memory_counts: str = ""
    """What the published peak counts (corrections.yaml `peak_kinds`): reserved, allocated or
    device; empty when no peak is published."""


NOT_THIS_HARDWARE = {
    "tt-2508-llama3-8b-b200pl-": "8 power-limited B200s (the source: 'POWER-LIMITED B200 (power "
    "limit not stated)'), not the DGX B200 of the b200 profile",
}
"""Runs the data file files under a profile whose hardware differs from it, by id prefix and
why: accuracy.py reports them apart (their step-time errors are not scored in the class and GPU
figures; their memory is, a power limit changing the clocks, not what is allocated) and
calibrate.py does not fit them."""


def not_this_hardware(case_id: str) -> str:
    """Why `case_id` ran on other hardware than its profile (NOT_THIS_HARDWARE), else ''."""
    return next((why for p, why in NOT_THIS_HARDWARE.items() if case_id.startswith(p)), "")


CORRECTIONS = Path(__file__).resolve().parent / "data" / "corrections.yaml"


def corrections() -> dict[str, dict]:
    """benchmarks/data/corrections.yaml by case id: settings a case's own recipe code sets that
    the collected case leaves out (each with its source). An entry names one case (`id`) or
    several (`ids`); a case in two entries gets both sets (one key set twice is an error)."""
    import yaml

    out: dict[str, dict] = {}
    for e in yaml.safe_load(CORRECTIONS.read_text())["corrections"]:
        for cid in e["ids"] if "ids" in e else [e["id"]]:
            have = out.get(cid)
            if have is None:
                out[cid] = e
                continue
            clash = set(have["set"]) & set(e["set"])
            if clash:
                raise ValueError(f"corrections.yaml: {cid} sets {sorted(clash)} twice")
            out[cid] = {**have, "set": {**have["set"], **e["set"]}}
    return out


def transcriptions() -> dict[str, dict]:
    """benchmarks/data/corrections.yaml `transcriptions` by case id: values the collection of
    a serving case copied wrong, each with the evidence in the case itself (its row id, its
    note), applied by benchmarks/serve_accuracy.py over the file as collected."""
    import yaml

    data = yaml.safe_load(CORRECTIONS.read_text())
    return {e["id"]: e for e in data.get("transcriptions") or []}


def _corrections_data() -> dict:
    import yaml

    return yaml.safe_load(CORRECTIONS.read_text())


def framework_facts() -> dict[str, dict]:
    """corrections.yaml `frameworks` by case id: the framework a run was trained with and its
    job config's recipe sections (each entry with its source)."""
    out: dict[str, dict] = {}
    for entry in _corrections_data().get("frameworks", []):
        for cid in entry["ids"]:
            if cid in out:
                raise ValueError(f"corrections.yaml frameworks: {cid} is listed twice")
            out[cid] = entry
    return out


def peak_kinds() -> dict[str, str]:
    """corrections.yaml `peak_kinds`: each published peak kind (its exact text) -> what it
    counts (reserved, allocated, device)."""
    return {e["kind"]: e["counts"] for e in _corrections_data().get("peak_kinds", [])}


COUNTS = ("reserved", "allocated", "device")


def with_framework(case: dict, fact: dict | None) -> dict:
    """The case read with its framework's semantics: the job config's recipe sections mapped
    by that framework's importer (planner/frameworks/torchtitan/reader.py recipe_semantics),
    filling what the case leaves out; a setting the case writes otherwise is an error (the two
    descriptions of the run contradict). A copy."""
    if fact is None:
        return case
    if fact["framework"] != "torchtitan":
        raise ValueError(f"{case['id']}: no mapping for framework {fact['framework']!r}")
    from planner.frameworks.torchtitan.reader import recipe_semantics

    par = case.get("parallel", {})
    layout_keys, training_keys = recipe_semantics(
        fact["job_config"], num_layers=int(case["model"]["num_layers"]), pp=int(par.get("pp", 1))
    )
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in case.items()}
    for section, keys in (("parallel", layout_keys), ("training", training_keys)):
        out.setdefault(section, {})
        for key, value in keys.items():
            value = list(value) if isinstance(value, tuple) else value
            have = out[section].get(key)
            if have is not None and have != value:
                raise ValueError(
                    f"{case['id']}: {section}.{key} is {have!r} in the case but {value!r} in "
                    f"{fact['framework']}'s reading of its job config (corrections.yaml)"
                )
            out[section][key] = value
    return out


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
    fixes, facts, kinds = corrections(), framework_facts(), peak_kinds()
    cases = []
    for p in paths:
        data = yaml.safe_load(Path(p).read_text())
        for c in data["cases"]:
            if bool(c.get("suspect")) != suspect:
                continue
            c = with_framework(corrected(c, fixes.get(c["id"])), facts.get(c["id"]))
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
            counts = ""
            if meas.get("peak_memory_gib"):
                counts = kinds.get(meas.get("peak_memory_kind", ""), "")
                if counts not in COUNTS:
                    raise ValueError(
                        f"{c['id']}: peak_memory_kind {meas.get('peak_memory_kind')!r} has no "
                        "entry in corrections.yaml peak_kinds (what it counts: "
                        f"{', '.join(COUNTS)})"
                    )
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
                    not_this_hardware(c["id"]),
                    facts[c["id"]]["framework"] if c["id"] in facts else "",
                    counts,
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
        counted = (
            counted_gib(mem, job.hardware, c.peak_memory_counts) if c.peak_memory_gib else None
        )
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
                "peak_memory_counts": c.peak_memory_counts,
                "predicted_peak_gib": counted,
                "memory_error": counted / c.peak_memory_gib - 1 if counted else None,
                "framework": c.framework,
                "other_hardware": c.other_hardware,
            }
        )
    return rows


def counted_gib(mem, hardware, counts: str) -> float:
    """The part of the estimate `mem` (a MemoryBreakdown) a published peak counts, GiB: `device`
    all of it; `reserved` without the CUDA context and NCCL's buffers (the profile's
    cuda_context_gib + nccl_buffer_gib, outside PyTorch's caching allocator); `allocated`
    also without the allocator's fragmentation (fragmentation_fraction of the tensors, the
    estimate's own terms: planner/cost/model.py `memory`)."""
    total = mem.total / GiB
    if counts == "device":
        return total
    fixed = hardware.cuda_context_gib + hardware.nccl_buffer_gib
    if counts == "reserved":
        return total - fixed
    if counts == "allocated":
        tensors = (mem.weights + mem.gradients + mem.optimizer + mem.activations) / GiB
        return total - fixed - hardware.fragmentation_fraction * tensors
    raise ValueError(f"peak counts {counts!r}: one of {', '.join(COUNTS)}")


def scored(rows: list[dict]) -> list[dict]:
    """The rows whose step time is scored: not those on other hardware than their profile."""
    return [r for r in rows if not r.get("other_hardware")]


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
    for r in scored(rows):
        for key in (r["class"], r["hardware"], f"{r['class']} / {r['hardware']}", "all"):
            groups.setdefault(key, []).append(r["error"])
    return {k: _stats(v) for k, v in groups.items()}


def summarize_by(rows: list[dict], key: str) -> dict:
    groups: dict[str, list[float]] = {}
    for r in scored(rows):
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


def memory_lines(rows: list[dict], mem: dict) -> list[str]:
    """The memory report: each published peak against the part of the estimate it counts
    (`counted_gib`), the summary, and the runs estimated over capacity."""
    out = []
    peaks = [r for r in rows if r["peak_memory_gib"]]
    if peaks:
        out.append("peak memory: predicted vs published (the part of the estimate the peak counts)")
        for r in peaks:
            out.append(
                f"  {r['id'][:52]:52s} {r['predicted_peak_gib']:6.1f} vs "
                f"{r['peak_memory_gib']:6.1f} GiB {r['memory_error']:+6.1%}  "
                f"{r['peak_memory_counts']:9s} {r['framework'] or 'megatron'}"
            )
        out.append(
            f"  {mem['within_10pct']} of {mem['published_peaks']} within 10%; median "
            f"|error| {mem['median_abs_error']:.1%}, max {mem['max_abs_error']:.1%}, "
            f"bias {mem['bias']:+.1%}"
        )
    out.append(
        f"memory: {mem['over_capacity']} of {mem['runs']} runs (all of which ran) are estimated "
        f"over capacity (at most {mem['max_fraction']:.0%}): {', '.join(mem['cases_over']) or '-'}"
    )
    out.append(
        f"        {mem['judged_infeasible']} judged infeasible (more than {MEMORY_MARGIN:.0%} "
        f"over, the fits-in-memory rule): {', '.join(mem['cases_judged_infeasible']) or '-'}"
    )
    return out


def other_hardware_lines(rows: list[dict]) -> list[str]:
    """The runs on other hardware than their profile (NOT_THIS_HARDWARE), each with its
    step-time and memory error; their step times are in no class or GPU figure."""
    other = [r for r in rows if r.get("other_hardware")]
    if not other:
        return []
    out = [
        "other hardware than the profile: not scored (step time; not fitted either):",
        *sorted({f"  {r['other_hardware']}" for r in other}),
    ]
    for r in other:
        memory = f"  memory {r['memory_error']:+6.1%}" if r["memory_error"] is not None else ""
        out.append(
            f"  {r['id'][:52]:52s} {r['predicted_s']:8.3f} vs {r['measured_s']:8.3f} s "
            f"{r['error']:+7.1%}{memory}"
        )
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
        _print_stats(f"{f}: all", {"all": _stats([r["error"] for r in scored(sub)])})
    print()
    print("\n".join(memory_lines(rows, mem)))
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
    other = other_hardware_lines(rows)
    if other:
        print("\n".join(other))
    print()
    print_ranking(ranks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
