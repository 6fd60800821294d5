"""Rich renderables and JSON shaping for every command. Never prints.

The JSON shapes here are the stable interface documented in README ("JSON output"). Every
string shown goes in as a `Text` (never rich markup): a model called `Llama [v2]` or a flag
`[/x]` prints as it is written.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.units import GiB, fmt_count


MAX_RULE_ROWS = 50
"""Rows per severity in validate's rule table (a file of 20,000 unknown flags is a wall of
text; the JSON keeps every one)."""


def _row(table: Table, *cells: Any) -> None:
    """add_row with every plain string as literal text (rich would read `[...]` as markup)."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))

__all__ = ["estimate_json", "validation_json", "validation_view", "models_view", "hardware_view",
           "memory_table", "time_table"]


# --------------------------------------------------------------------------------- JSON

def estimate_json(est, layout, global_batch_size: int) -> dict[str, Any]:
    """layout / memory / time / throughput keys of the contract (time keys when computed)."""
    out: dict[str, Any] = {"layout": layout.as_dict(global_batch_size)}
    if est is None:
        return out
    out["memory"] = est.memory.as_dict()
    if est.time is not None:
        out["time"] = est.time.as_dict()
        out["throughput"] = est.time.throughput_dict()
        if getattr(est.time, "train", None):
            out["time_to_train"] = est.time.train
    return out


def validation_json(result) -> dict[str, Any]:
    gbs = result.job.training.global_batch_size
    out = {
        "valid": result.valid,
        "errors": [v.as_dict() for v in result.errors],
        "warnings": [v.as_dict() for v in result.warnings],
    }
    out.update(estimate_json(result.estimate, result.layout, gbs))
    out["chosen_by_planner"] = list(result.layout.auto)
    out["job"] = job_json(result.job)
    return out


def job_json(job) -> dict[str, Any]:
    from planner.cost.params import total_params
    return {
        "model": job.model.name, "parameters": total_params(job.model),
        "hardware": job.hardware.name, "num_gpus": job.num_gpus,
        "seq_length": job.training.seq_length,
        "global_batch_size": job.training.global_batch_size,
        "precision": job.training.precision,
    }


# ------------------------------------------------------------------------------ rich views

def _gib(x: float) -> str:
    return f"{x / GiB:.2f}"


def memory_table(mem) -> Table:
    t = Table(title=Text(f"Memory per GPU (most loaded: {mem.stage} pipeline rank)"),
              title_justify="left")
    t.add_column("component")
    t.add_column("GiB", justify="right")
    t.add_column("share", justify="right")
    total = mem.total
    for name, val in (("weights", mem.weights), ("gradients", mem.gradients),
                      ("optimizer states", mem.optimizer), ("activations", mem.activations),
                      ("other (context, NCCL, fragmentation, buffers)", mem.other)):
        _row(t, name, _gib(val), f"{val / total:.0%}" if total else "-")
    _row(t, Text("total", style="bold"), Text(_gib(total), style="bold"),
              f"{mem.fraction:.0%} of {mem.capacity / GiB:.1f}")
    return t


def time_table(tm) -> Table:
    t = Table(title=Text("Step time"), title_justify="left")
    t.add_column("part")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    step = tm.step_time_s
    for name, val in tm.parts():
        _row(t, name, f"{val:.3f}", f"{val / step:.0%}" if step else "-")
    _row(t, Text("step", style="bold"), Text(f"{step:.3f}", style="bold"), "")
    return t


def throughput_line(tm) -> Text:
    line = (f"{tm.tokens_per_s:,.0f} tokens/s, {tm.tokens_per_s_per_gpu:,.0f} per GPU; "
            f"{tm.model_tflops_per_gpu:.0f} model TFLOP/s per GPU; MFU {tm.mfu:.1%}, HFU {tm.hfu:.1%}")
    if getattr(tm, "train", None):
        tt = tm.train
        line += (f"\n{fmt_count(tt['tokens'])} tokens: {tt['days']:.1f} days, "
                 f"{tt['gpu_hours']:,.0f} GPU-hours")
    return Text(line)


def _layout_line(layout, gbs: int) -> Text:
    d = layout.as_dict(gbs)
    parts = [f"tp {d['tp']}", f"pp {d['pp']}", f"dp {d['dp']}", f"cp {d['cp']}", f"ep {d['ep']}",
             f"etp {d['etp']}", f"vpp {d['vpp']}", f"micro-batch {d['micro_batch_size']}",
             f"micro-batches {d['num_microbatches']}", f"sp {'on' if d['sequence_parallel'] else 'off'}",
             f"zero {d['zero_stage']}", f"recompute {d['recompute']}"]
    if layout.uneven:
        parts.append(f"first/last stage layers {layout.first_stage_layers}/{layout.last_stage_layers}")
    line = "Layout: " + ", ".join(parts)
    if layout.auto:
        line += (f"\n  ({' and '.join(layout.auto)} not set in the config: chosen by planner as the "
                 "fastest that fits; set them to pin)")
    return Text(line)


def validation_view(result, *, source: str = "") -> Group:
    job = result.job
    head = (f"{job.model.name} on {job.num_gpus} x {job.hardware.name}, seq {job.training.seq_length}, "
            f"global batch {job.training.global_batch_size}, {job.training.precision}")
    verdict = Text("VALID" if result.valid else "INVALID",
                   style="bold green" if result.valid else "bold red")
    parts: list[Any] = [Text.assemble(verdict, "  ", head + (f"  ({source})" if source else "")),
                        _layout_line(result.layout, job.training.global_batch_size)]
    if result.errors or result.warnings:
        t = Table(title=Text("Rules"), title_justify="left", show_lines=False)
        t.add_column("")
        t.add_column("rule")
        t.add_column("message", overflow="fold")
        for kind, style, found in (("error", "red", result.errors),
                                   ("warning", "yellow", result.warnings)):
            for v in found[:MAX_RULE_ROWS]:
                _row(t, Text(kind, style=style), v.rule, v.message)
            if len(found) > MAX_RULE_ROWS:
                _row(t, Text(kind, style=style), "...",
                     f"and {len(found) - MAX_RULE_ROWS:,} more {kind}s (--json lists every one)")
        parts.append(t)
    else:
        parts.append(Text("Rules: all pass"))
    est = result.estimate
    if est is None:
        parts.append(Text("No estimate: the layout does not tile the GPUs (fix the errors above)."))
    else:
        parts.append(memory_table(est.memory))
        if est.time is not None:
            parts.append(time_table(est.time))
            parts.append(throughput_line(est.time))
    return Group(*parts)


def models_view(rows: list[dict]) -> Table:
    t = Table(title=Text("Preset models"))
    for col in ("name", "aliases", "params", "published", "active", "layers", "hidden",
                "heads/kv", "experts", "seq"):
        t.add_column(col, justify="right" if col not in ("name", "aliases") else "left")
    for r in rows:
        pub = r.get("published_parameters")
        _row(t, r["name"], ", ".join(r["aliases"]), fmt_count(r["parameters"]),
                  fmt_count(pub) if pub else "-",
                  fmt_count(r["active_parameters"]), str(r["num_layers"]), str(r["hidden_size"]),
                  f"{r['num_attention_heads']}/{r['num_kv_heads']}",
                  f"{r['num_experts']} top-{r['moe_top_k']}" if r["num_experts"] else "-",
                  str(r["seq_length"]))
    return t


def hardware_view(rows: list[dict]) -> Group:
    """The profiles, one row each; fits 80 columns without truncating a value (h100-96g and
    h100-sxm must stay apart): headers wrap, each column at least as wide as its values."""
    from rich import box

    peak = lambda r, p: f"{r['peak_tflops'][p]:.0f}" if r["peak_tflops"].get(p) else "-"
    cells = [[r["name"], f"{r['memory_gib']:.1f}", peak(r, "bf16"), peak(r, "fp8"), peak(r, "fp4"),
              f"{r['hbm_bandwidth_gb_per_s']:.0f}", str(r["gpus_per_node"]),
              str(r["nvlink_domain_size"]), f"{r['nvlink_bandwidth_gb_per_s']:.0f}",
              f"{r['network_bandwidth_gb_per_s']:.0f}"] for r in rows]
    t = Table(title="Hardware profiles", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
              padding=(0, 1, 0, 0))
    heads = ("name", "memory GiB", "bf16", "fp8", "fp4", "HBM", "GPUs/ node", "NVLink GPUs",
             "NVLink", "network")
    for i, head in enumerate(heads):
        widest = max([len(c[i]) for c in cells] + [len(w) for w in head.split()])
        t.add_column(head, justify="left" if i == 0 else "right", min_width=widest,
                     max_width=widest)
    for c in cells:
        _row(t, *c)
    return Group(t, Text("bf16/fp8/fp4: dense peak TFLOP/s; HBM, NVLink, network: GB/s per GPU "
                         "(links one direction); NVLink GPUs: the NVLink domain", style="dim"))


# ------------------------------------------------------------------------------ plan

def plan_json(result) -> dict[str, Any]:
    """{"plans": [...], "searched", "feasible", "steps", ...} (README, 'JSON output')."""
    job = result.job
    gbs = job.training.global_batch_size
    plans = []
    for p in result.plans:
        d = {"rank": p.rank, "valid": True, "errors": [],
             "warnings": [v.as_dict() for v in p.warnings]}
        d.update(estimate_json(_Est(p.memory, p.time), p.layout, gbs))
        plans.append(d)
    out: dict[str, Any] = {
        "plans": plans, "searched": result.searched, "feasible": result.feasible,
        "steps": result.steps, "evaluated": result.evaluated, "timed": result.timed,
        "pruned": result.pruned, "elapsed_s": result.elapsed_s, "job": job_json(job),
    }
    if result.pick is not None:
        pick = {"rank": result.pick_rank, "note": result.pick_note}
        pick.update(estimate_json(_Est(result.pick.memory, result.pick.time), result.pick.layout, gbs))
        out["seven_step_pick"] = pick
    else:   # same keys, null, and why
        why = next((s["decision"] for s in result.steps if s.get("step") == 3), "")
        out["seven_step_pick"] = dict(_NO_PICK, reason="the seven-step procedure finds no layout "
                                      f"that fits ({why})" if why else
                                      "the seven-step procedure finds no layout that fits")
    if result.closest is not None:
        lay, mem = result.closest
        out["closest"] = {"layout": lay.as_dict(gbs), "memory": mem.as_dict(),
                          "shortfall_bytes": round(mem.total - mem.capacity * (1 - result.headroom))}
        out["suggestions"] = result.suggestions
    elif not result.plans:
        out["closest"] = dict(_NO_CLOSEST, reason="no layout passes the structural rules (heads, "
                              "layers, batch, sequence and expert divisibility, and --fix), so "
                              "none has a memory estimate to compare")
        out["suggestions"] = result.suggestions
    return out


_NO_PICK = {"rank": None, "note": "", "layout": None, "memory": None, "time": None,
            "throughput": None}
_NO_CLOSEST = {"layout": None, "memory": None, "shortfall_bytes": None}


class _Est:
    def __init__(self, memory, time):
        self.memory, self.time = memory, time


def plan_table(result) -> Group:
    """The top K as a compact table; warnings as letters keyed below it."""
    from rich import box

    job = result.job
    gbs = job.training.global_batch_size
    t = Table(title=Text(f"Top {len(result.plans)} layouts for {job.model.name} on "
                         f"{job.num_gpus} x {job.hardware.name} (seq {job.training.seq_length}, "
                         f"global batch {gbs}, {job.training.precision})"),
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    cols = ["#", "tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "m", "zero", "recomp",
            "GiB/GPU", "bubble", "comm", "step s", "tok/s/GPU", "MFU", "warn"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("recomp", "warn") else "right", no_wrap=True)
    legend: dict[str, str] = {}
    for p in result.plans:
        lay, mem, tm = p.layout, p.memory, p.time
        keys = []
        for v in p.warnings:
            if v.rule not in legend:
                legend[v.rule] = chr(ord("a") + len(legend))
            keys.append(legend[v.rule])
        mark = "*" if result.pick_rank == p.rank else ""
        _row(t, f"{p.rank}{mark}", str(lay.tp), str(lay.pp) + ("u" if lay.uneven else ""),
                  str(lay.dp), str(lay.cp), str(lay.ep), str(lay.vpp), str(lay.micro_batch_size),
                  str(lay.num_microbatches(gbs)), str(lay.zero),
                  {"none": "none", "selective": "sel", "full": "full"}[lay.recompute],
                  f"{mem.total / GiB:.1f} {mem.fraction:.0%}", f"{tm.bubble_fraction:.0%}",
                  f"{tm.exposed_comm_s / tm.step_time_s:.0%}", f"{tm.step_time_s:.2f}",
                  f"{tm.tokens_per_s_per_gpu:,.0f}", f"{tm.mfu:.1%}", "".join(keys) or "-")
    notes = [t, Text("m = micro-batches per step; comm = exposed communication share of the step; "
                     "u = uneven first/last stages; * = the seven-step pick", style="dim")]
    for rule, key in legend.items():
        notes.append(Text(f"  {key}: {rule}", style="dim"))
    return Group(*notes)


def steps_view(result) -> Group:
    lines = [Text("Seven-step procedure", style="bold")]
    for s in result.steps:
        lines.append(Text(f"  ({s['step']}) {s['title']}: {s['decision']}"))
    if result.pick_note:
        lines.append(Text(f"  => {result.pick_note}" + (" (marked * above)" if result.pick_rank else "")))
    return Group(*lines)


def plan_summary(result) -> Text:
    best = result.best
    head = (f"searched {result.searched:,} layouts, {result.feasible:,} fit "
            f"({result.evaluated:,} memory estimates, {result.timed:,} timed, "
            f"{result.elapsed_s:.2f} s)")
    if best is None:
        return Text(head + "; no layout fits", style="bold red")
    tm = best.time
    text = (f"{head}; best is {best.layout.name} zero {best.layout.zero} recompute "
            f"{best.layout.recompute} micro-batch {best.layout.micro_batch_size}: "
            f"{tm.step_time_s:.2f} s/step, {tm.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
            f"MFU {tm.mfu:.1%}, {best.memory.total / GiB:.1f} GiB/GPU")
    if tm.train:
        text += (f"; {fmt_count(tm.train['tokens'])} tokens in {tm.train['days']:.1f} days, "
                 f"{tm.train['gpu_hours']:,.0f} GPU-hours")
    return Text(text, style="bold")


def plan_view(result) -> Group:
    parts: list[Any] = []
    if result.plans:
        parts.append(plan_table(result))
    else:
        parts.append(Text("No layout fits.", style="bold red"))
        for s in result.suggestions:
            parts.append(Text(f"  - {s}"))
    parts.append(steps_view(result))
    if result.pruned:
        ranked = sorted(result.pruned.items(), key=lambda kv: -kv[1])
        parts.append(Text("layouts each rule removed: "
                          + ", ".join(f"{rule} {count:,}" for rule, count in ranked), style="dim"))
    parts.append(plan_summary(result))
    return Group(*parts)
