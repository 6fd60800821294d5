"""Rich renderables of `planner serve` and of `planner validate SERVE.yaml`, and (re-exported
from planner.views.serve_shapes, which does not import rich) their JSON shapes. Never prints.
The JSON shapes are the stable interface documented in README ("Inference")."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.units import GiB
from planner.views.serve_shapes import (  # noqa: F401
    candidate_json,
    estimate_json,
    job_json,
    plan_json,
    validation_json,
)

__all__ = [
    "validation_json",
    "validation_view",
    "plan_json",
    "plan_view",
    "job_json",
    "candidate_json",
]


def _ms(s: float) -> str:
    return f"{s * 1e3:,.0f}" if s >= 0.1 else f"{s * 1e3:.1f}"


# ------------------------------------------------------------------------------ rich views


def _slo_text(o) -> str:
    parts = []
    if o.ttft_s is not None:
        parts.append(f"TTFT <= {_ms(o.ttft_s)} ms")
    if o.tpot_s is not None:
        parts.append(f"TPOT <= {_ms(o.tpot_s)} ms")
    return "; SLO " + ", ".join(parts) if parts else "; no SLO"


def _head(job) -> str:
    sv = job.serving
    return (
        f"{job.model.name} on {job.num_gpus} x {job.hardware.name}, ISL {sv.input_length:,} / "
        f"OSL {sv.output_length:,}, {sv.precision} (KV {sv.kv_dtype}), {sv.engine}"
    )


def plan_table(result) -> Group:
    job = result.job
    t = Table(
        title=f"Top {len(result.plans)}: {_head(job)}{_slo_text(result.options)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    heads = ("#", "layout", "conc", "max", "TTFT", "TPOT", "tok/s/u", "tok/s/GPU", "warn")
    rows = []
    legend: dict[str, str] = {}
    for p in result.plans:
        keys = []
        for v in p.warnings:
            if v.rule not in legend:
                legend[v.rule] = chr(ord("a") + len(legend))
            if legend[v.rule] not in keys:
                keys.append(legend[v.rule])
        mark = "*" if result.pick_rank == p.rank else ""
        e = p.estimate
        rows.append(
            (
                f"{p.rank}{mark}",
                p.layout.name,
                str(e.concurrency),
                str(e.memory.max_concurrency),
                _ms(e.ttft_s),
                _ms(e.tpot_s),
                f"{p.per_user:,.0f}",
                f"{p.per_gpu:,.0f}",
                "".join(keys) or "-",
            )
        )
    _columns(t, heads, rows, fold=("layout",), left=("layout", "warn"))
    notes = [
        t,
        Text(
            "conc = requests in flight per instance (decode worker), max = what its KV "
            "cache holds; TTFT and TPOT in ms; tok/s/u = per user; xN = replicas; P/D = "
            "prefill/decode workers; * = the procedure's pick",
            style="dim",
        ),
    ]
    for rule, key in legend.items():
        notes.append(Text(f"  {key}: {rule}", style="dim"))
    return Group(*notes)


def pareto_view(result, *, rows: int = 10) -> Group:
    front = result.pareto
    if len(front) > rows:  # keep both ends and an even spread between
        idx = sorted({round(i * (len(front) - 1) / (rows - 1)) for i in range(rows)})
        front = [front[i] for i in idx]
    t = Table(
        title="Pareto front: tokens/s per user vs tokens/s per GPU",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    slo = result.options.ttft_s is not None or result.options.tpot_s is not None
    heads = ("tok/s/u", "tok/s/GPU", "layout", "conc", "TTFT", "TPOT") + (("SLO",) if slo else ())
    rows = []
    for p in front:
        e = p.estimate
        row = (
            f"{p.per_user:,.1f}",
            f"{p.per_gpu:,.0f}",
            p.layout.name,
            str(e.concurrency),
            _ms(e.ttft_s),
            _ms(e.tpot_s),
        )
        rows.append(row + (("meets" if p.meets else "misses",) if slo else ()))
    _columns(t, heads, rows, fold=("layout",), left=("layout", "SLO"))
    return Group(t)


def _columns(t: Table, heads: tuple, rows: list, *, fold: tuple, left: tuple) -> None:
    """The columns and rows of a serve table that reads at any width from 80 columns up: no
    number is ever cut (each column at least as wide as its widest cell), the long layout
    names fold onto more lines instead."""
    for i, c in enumerate(heads):
        widest = max([len(c)] + [len(r[i]) for r in rows])
        if c in fold:
            t.add_column(c, justify="left", overflow="fold", min_width=min(widest, 12))
        else:
            t.add_column(
                c, justify="left" if c in left else "right", no_wrap=True, min_width=widest
            )
    for r in rows:
        t.add_row(*r)


def steps_view(result) -> Group:
    lines = [
        Text("Inference procedure (reference chapter, inference-side parallelism)", style="bold")
    ]
    for s in result.steps:
        lines.append(_hanging(f"  ({s['step']}) ", f"{s['title']}: {s['decision']}"))
    if result.pick_note:
        lines.append(_hanging("  => ", result.pick_note + _pick_where(result)))
    return Group(*lines)


def _pick_where(result) -> str:
    """Where the procedure's pick sits in the ranking: marked in the table, or below it."""
    rank = result.pick_rank
    if not rank:
        return ""
    if rank <= len(result.plans):
        return " (marked * above)"
    return f" (ranked {rank}, below the table's {len(result.plans)}: --top {rank} shows it)"


def _hanging(label: str, text: str) -> Table:
    """`label` then `text`, its wrapped lines indented under the text's first character."""
    g = Table.grid()
    g.add_column(no_wrap=True)
    g.add_column(overflow="fold")
    g.add_row(Text(label), Text(text))
    return g


def summary_line(result) -> Text:
    o = result.options
    slo = (
        f"{result.meeting:,} meet the SLOs"
        if o.ttft_s is not None or o.tpot_s is not None
        else "no SLO"
    )
    head = (
        f"searched {result.searched:,} deployments ({result.shapes} instance shapes, "
        f"{result.fitting} fit; {slo}; {result.elapsed_s:.2f} s)"
    )
    best = result.best
    if best is None:
        return Text(head + "; none meets the SLOs", style="bold red")
    e = best.estimate
    return Text(
        f"{head}; best is {best.layout.name} at {e.concurrency} requests: "
        f"{best.per_gpu:,.0f} tokens/s per GPU, {e.output_tokens_per_s:,.0f} in all, "
        f"TTFT {_ms(e.ttft_s)} ms, TPOT {_ms(e.tpot_s)} ms",
        style="bold",
    )


def plan_view(result) -> Group:
    parts: list[Any] = []
    if result.plans:
        parts.append(plan_table(result))
    else:
        parts.append(Text("No deployment meets the SLOs.", style="bold red"))
        c = result.closest
        if c is not None:
            e = c.estimate
            parts.append(
                Text(
                    f"  closest: {c.layout.name} at {e.concurrency} requests: TTFT "
                    f"{_ms(e.ttft_s)} ms, TPOT {_ms(e.tpot_s)} ms, "
                    f"{c.per_gpu:,.0f} tokens/s per GPU"
                )
            )
    if result.pareto:
        parts.append(pareto_view(result))
    parts.append(steps_view(result))
    if result.pruned:
        ranked = sorted(result.pruned.items(), key=lambda kv: -kv[1])
        parts.append(
            Text(
                "instance shapes each rule removed: " + ", ".join(f"{r} {n:,}" for r, n in ranked),
                style="dim",
            )
        )
    parts.append(summary_line(result))
    for c in result.caveats:
        parts.append(Text(f"caveat: {c}", style="yellow"))
    return Group(*parts)


def _layout_text(layout) -> str:
    if layout.disaggregated:
        p, d = layout.prefill, layout.decode
        return (
            f"Layout: disaggregated, prefill {layout.prefill_workers} x {p.name} "
            f"({p.gpus} GPUs each), decode {layout.decode_workers} x {d.name} "
            f"({d.gpus} GPUs each)"
        )
    i = layout.instance
    return (
        f"Layout: tp {i.tp}, pp {i.pp}, ep {i.ep}, dp {i.dp}"
        + (" (attention DP)" if i.dp_attention else "")
        + f", {layout.replicas} replica(s) of {i.gpus} GPUs"
    )


def memory_table(mem, *, title: str) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("component")
    t.add_column("GiB", justify="right")
    t.add_column("share", justify="right")
    for name, val in (
        ("weights", mem.weights),
        ("KV cache", mem.kv_cache),
        ("activations (workspace, logits)", mem.activations),
        ("other (context, NCCL, CUDA graphs)", mem.other),
    ):
        t.add_row(name, f"{val / GiB:.2f}", f"{val / mem.capacity:.0%}")
    t.add_row(
        Text("total", style="bold"),
        Text(f"{mem.total / GiB:.2f}", style="bold"),
        f"{mem.total / mem.capacity:.0%} of {mem.capacity / GiB:.1f}",
    )
    return t


def step_table(step) -> Table:
    t = Table(title="Decode step (one token interval)", title_justify="left")
    t.add_column("part")
    t.add_column("ms", justify="right")
    t.add_column("share", justify="right")
    total = step.total
    for name, val in (
        ("weights streamed", step.weights_s),
        ("GEMM compute", step.compute_s),
        ("attention (KV read, prefill)", step.attention_s),
        ("TP all-reduce", step.tp_comm_s),
        ("EP all-to-all", step.ep_comm_s),
        ("PP sends", step.pp_comm_s),
        ("CP ring and combine", step.cp_comm_s),
        ("fixed overheads", step.overhead_s),
    ):
        if val > 0:
            t.add_row(name, f"{val * 1e3:.2f}", f"{val / total:.0%}" if total else "-")
    t.add_row(Text("step", style="bold"), Text(f"{total * 1e3:.2f}", style="bold"), "")
    return t


def validation_view(result, *, source: str = "", caveats: list[str] | None = None) -> Group:
    verdict = Text(
        "VALID" if result.valid else "INVALID", style="bold green" if result.valid else "bold red"
    )
    parts: list[Any] = [
        Text.assemble(verdict, "  ", _head(result.job) + (f"  ({source})" if source else "")),
        Text(_layout_text(result.layout)),
    ]
    if result.errors or result.warnings:
        t = Table(title="Rules", title_justify="left")
        t.add_column("")
        t.add_column("rule")
        t.add_column("message", overflow="fold")
        for v in result.errors:
            t.add_row(Text("error", style="red"), v.rule, v.message)
        for v in result.warnings:
            t.add_row(Text("warning", style="yellow"), v.rule, v.message)
        parts.append(t)
    else:
        parts.append(Text("Rules: all pass"))
    est = result.estimate
    if est is None:
        parts.append(Text("No estimate: fix the errors above."))
        return Group(*parts)
    what = "decode worker" if result.layout.disaggregated else "instance"
    mem = est.memory
    parts.append(memory_table(mem, title=f"Memory per GPU ({what}, most loaded stage)"))
    parts.append(
        Text(
            f"KV cache holds {mem.kv_tokens_capacity:,} tokens per {what}: "
            f"{mem.max_concurrency:,} requests of "
            f"{result.job.serving.input_length + result.job.serving.output_length:,} "
            f"tokens"
            + (
                " (the engine's max_batch_size caps it)"
                if mem.limited_by == "max_batch_size"
                else ""
            )
        )
    )
    parts.append(step_table(est.decode_step))
    line = (
        f"at {est.concurrency} requests per {what}: TTFT {_ms(est.ttft_s)} ms, TPOT "
        f"{_ms(est.tpot_s)} ms, end-to-end {est.e2e_s:.2f} s; {est.output_tokens_per_s:,.0f} "
        f"output tokens/s in all, {est.output_tokens_per_s_per_gpu:,.0f} per GPU, "
        f"{est.output_tokens_per_s_per_user:,.1f} per user"
    )
    if result.layout.disaggregated:
        line += (
            f"; KV transfer {_ms(est.kv_transfer_s)} ms per request; the {est.bottleneck} "
            "pool sets the rate"
        )
    if est.queue_s > 0:
        line += (
            f"; {est.clients} clients: TTFT includes {_ms(est.queue_s)} ms waiting for one "
            f"of the {est.concurrency} slots"
        )
    parts.append(Text(line))
    parts.append(_interval_line(result.job, est))
    for c in caveats or []:
        parts.append(Text(f"caveat: {c}", style="yellow"))
    return Group(*parts)


def _interval_line(job, est) -> Text:
    """TTFT, TPOT and throughput with their 80% intervals (docs/calibration.md)."""
    from planner.calibration.intervals import serve_intervals

    ivs = serve_intervals(job)
    parts = []
    for metric, name, fmt in (
        ("ttft_s", "TTFT", lambda v: f"{_ms(v)} ms"),
        ("tpot_s", "TPOT", lambda v: f"{_ms(v)} ms"),
        ("output_tokens_per_s", "output tokens/s", lambda v: f"{v:,.0f}"),
    ):
        if metric in ivs:
            iv = ivs[metric]
            lo, hi = iv.of(getattr(est, metric))
            parts.append(
                f"{name} {fmt(lo)} to {fmt(hi)} ({iv.runs} {iv.cls if iv.cls != '*' else 'all'} "
                f"runs on {iv.gpu if iv.gpu != '*' else 'every GPU'}"
                + (", widened" if iv.widened else "")
                + ")"
            )
    return Text("80% intervals: " + "; ".join(parts), style="dim")
