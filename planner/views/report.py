"""Rich renderables for every command, and (re-exported from planner.views.shapes, which
does not import rich) the JSON shapes. Never prints.

The JSON shapes are the stable interface documented in README ("JSON output"). Every
string shown goes in as a `Text` (never rich markup): a model called `Llama [v2]` or a flag
`[/x]` prints as it is written.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.units import GiB, fmt_count
from planner.views.shapes import (
    _caveats,
    compare_json,
    compare_rows,
    estimate_json,
    job_json,
    plan_json,
    validation_json,
)

MAX_RULE_ROWS = 50
"""Rows per severity in validate's rule table (a file of 20,000 unknown flags is a wall of
text; the JSON keeps every one)."""


def _row(table: Table, *cells: Any) -> None:
    """add_row with every plain string as literal text (rich would read `[...]` as markup)."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


__all__ = [
    "estimate_json",
    "validation_json",
    "job_json",
    "plan_json",
    "compare_json",
    "compare_rows",
    "validation_view",
    "models_view",
    "hardware_view",
    "memory_table",
    "time_table",
]


# ------------------------------------------------------------------------------ rich views


def _gib(x: float) -> str:
    return f"{x / GiB:.2f}"


def memory_table(mem) -> Table:
    t = Table(
        title=Text(f"Memory per GPU (most loaded: {mem.stage} pipeline rank)"), title_justify="left"
    )
    t.add_column("component")
    t.add_column("GiB", justify="right")
    t.add_column("share", justify="right")
    total = mem.total
    for name, val in (
        ("weights", mem.weights),
        ("gradients", mem.gradients),
        ("optimizer states", mem.optimizer),
        ("activations", mem.activations),
        ("other (context, NCCL, fragmentation, buffers)", mem.other),
    ):
        _row(t, name, _gib(val), f"{val / total:.0%}" if total else "-")
    _row(
        t,
        Text("total", style="bold"),
        Text(_gib(total), style="bold"),
        f"{mem.fraction:.0%} of {mem.capacity / GiB:.1f}",
    )
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
    line = (
        f"{tm.tokens_per_s:,.0f} tokens/s, {tm.tokens_per_s_per_gpu:,.0f} per GPU; "
        f"{tm.model_tflops_per_gpu:.0f} model TFLOP/s per GPU; MFU {tm.mfu:.1%}, HFU {tm.hfu:.1%}"
    )
    if getattr(tm, "train", None):
        tt = tm.train
        line += (
            f"\n{fmt_count(tt['tokens'])} tokens: {tt['days']:.1f} days, "
            f"{tt['gpu_hours']:,.0f} GPU-hours"
        )
    return Text(line)


def _layout_line(layout, gbs: int) -> Text:
    d = layout.as_dict(gbs)
    parts = [
        f"tp {d['tp']}",
        f"pp {d['pp']}",
        f"dp {d['dp']}",
        f"cp {d['cp']}",
        f"ep {d['ep']}",
        f"etp {d['etp']}",
        f"vpp {d['vpp']}",
        f"micro-batch {d['micro_batch_size']}",
        f"micro-batches {d['num_microbatches']}",
        f"sp {'on' if d['sequence_parallel'] else 'off'}",
        f"zero {d['zero_stage']}",
        f"recompute {d['recompute']}",
    ]
    if layout.uneven:
        parts.append(
            f"first/last stage layers {layout.first_stage_layers}/{layout.last_stage_layers}"
        )
    line = "Layout: " + ", ".join(parts)
    if layout.auto:
        line += (
            f"\n  ({' and '.join(layout.auto)} not set in the config: chosen by planner as the "
            "fastest that fits; set them to pin)"
        )
    return Text(line)


def no_estimate_reason(result) -> str:
    """Why a validated layout has no estimate (and so no pictures)."""
    from planner.validate import why_no_estimate

    return why_no_estimate(result.layout, result.job) or "the layout cannot be estimated"


def validation_view(result, *, source: str = "") -> Group:
    job = result.job
    head = (
        f"{job.model.name} on {job.num_gpus} x {job.hardware.name}, seq {job.training.seq_length}, "
        f"global batch {job.training.global_batch_size}, {job.training.precision}"
    )
    verdict = Text(
        "VALID" if result.valid else "INVALID", style="bold green" if result.valid else "bold red"
    )
    parts: list[Any] = [
        Text.assemble(verdict, "  ", head + (f"  ({source})" if source else "")),
        _layout_line(result.layout, job.training.global_batch_size),
    ]
    if result.errors or result.warnings:
        t = Table(title=Text("Rules"), title_justify="left", show_lines=False)
        t.add_column("")
        t.add_column("rule")
        t.add_column("message", overflow="fold")
        for kind, style, found in (
            ("error", "red", result.errors),
            ("warning", "yellow", result.warnings),
        ):
            for v in found[:MAX_RULE_ROWS]:
                _row(t, Text(kind, style=style), v.rule, v.message)
            if len(found) > MAX_RULE_ROWS:
                _row(
                    t,
                    Text(kind, style=style),
                    "...",
                    f"and {len(found) - MAX_RULE_ROWS:,} more {kind}s (--json lists every one)",
                )
        parts.append(t)
    else:
        parts.append(Text("Rules: all pass"))
    for c in _caveats(job, result.layout):
        parts.append(_hanging("Caveat: ", c, style="yellow"))
    est = result.estimate
    if est is None:
        parts.append(Text(f"No estimate: {no_estimate_reason(result)} (fix the errors above)."))
    else:
        parts.append(memory_table(est.memory))
        if est.time is not None:
            parts.append(time_table(est.time))
            parts.append(throughput_line(est.time))
        parts.append(interval_line(job, result.layout, est))
    return Group(*parts)


def _listing(title: str) -> Table:
    """A borderless table for the listings: two spaces between columns, so 80 columns hold
    them without cutting a name."""
    from rich import box

    return Table(
        title=Text(title),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        collapse_padding=True,
    )


class _Folding:
    """A table that drops optional columns, in a fixed order, until it fits the console;
    the dropped ones are named below it. `build(dropped) -> Table`."""

    def __init__(self, build, order: list[str], after: list | None = None):
        self.build, self.order, self.after = build, order, after or []

    def __rich_console__(self, console, options):
        dropped: list[str] = []
        table = self.build(set())
        for col in self.order:
            if _natural_width(console, table) <= options.max_width:
                break
            dropped.append(col)
            table = self.build(set(dropped))
        yield table
        if dropped:
            yield Text(f"{', '.join(dropped)} left out at this width (see --json)", style="dim")
        yield from self.after


def models_view(rows: list[dict]):
    cols = [
        ("params", "params"),
        ("published", "published"),
        ("active", "active"),
        ("layers", "layers"),
        ("hidden", "hidden"),
        ("heads", "heads\n/kv"),
        ("experts", "experts\n(top-k)"),
        ("seq", "seq"),
    ]

    def build(dropped: set) -> Table:
        t = _listing("Preset models (parameters: ours, published, active per token)")
        t.add_column("name", no_wrap=True)
        for key, head in cols:
            if key not in dropped:
                t.add_column(head, justify="right", no_wrap=True)
        for r in rows:
            pub = r.get("published_parameters")
            vals = {
                "params": fmt_count(r["parameters"]),
                "published": fmt_count(pub) if pub else "-",
                "active": fmt_count(r["active_parameters"]),
                "layers": str(r["num_layers"]),
                "hidden": str(r["hidden_size"]),
                "heads": f"{r['num_attention_heads']}/{r['num_kv_heads']}",
                "experts": f"{r['num_experts']} ({r['moe_top_k']})" if r["num_experts"] else "-",
                "seq": str(r["seq_length"]),
            }
            _row(t, r["name"], *[vals[k] for k, _ in cols if k not in dropped])
        return t

    aliases = [f"{a}={r['name']}" for r in rows for a in r["aliases"]]
    after = [_hanging("aliases: ", ", ".join(aliases), style="dim")] if aliases else []
    return _Folding(build, ["published", "hidden", "active"], after)


def hardware_view(rows: list[dict]) -> Group:
    """The profiles, one row each; fits 80 columns without truncating a value (h100-96g and
    h100-sxm must stay apart): headers wrap, each column at least as wide as its values."""
    from rich import box

    def peak(r, p):
        return f"{r['peak_tflops'][p]:.0f}" if r["peak_tflops"].get(p) else "-"

    cells = [
        [
            r["name"],
            f"{r['memory_gib']:.1f}",
            peak(r, "bf16"),
            peak(r, "fp8"),
            peak(r, "fp4"),
            f"{r['hbm_bandwidth_gb_per_s']:.0f}",
            str(r["gpus_per_node"]),
            str(r["nvlink_domain_size"]),
            f"{r['nvlink_bandwidth_gb_per_s']:.0f}",
            f"{r['network_bandwidth_gb_per_s']:.0f}",
        ]
        for r in rows
    ]
    t = Table(
        title="Hardware profiles",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    heads = (
        "name",
        "memory GiB",
        "bf16",
        "fp8",
        "fp4",
        "HBM",
        "GPUs/ node",
        "NVLink GPUs",
        "NVLink",
        "network",
    )
    for i, head in enumerate(heads):
        widest = max([len(c[i]) for c in cells] + [len(w) for w in head.split()])
        t.add_column(
            head, justify="left" if i == 0 else "right", min_width=widest, max_width=widest
        )
    for c in cells:
        _row(t, *c)
    return Group(
        t,
        Text(
            "bf16/fp8/fp4: dense peak TFLOP/s; HBM, NVLink, network: GB/s per GPU "
            "(links one direction); NVLink GPUs: the NVLink domain",
            style="dim",
        ),
    )


# ------------------------------------------------------------------------------ plan

# The plan table at any width. Columns fold in a fixed order until the table fits; a
# degree is never cut: the last resort folds the layout name onto more lines.
_COLUMNS = [  # key, header, compact header
    ("#", "#", "#"),
    ("tp", "tp", "tp"),
    ("pp", "pp", "pp"),
    ("dp", "dp", "dp"),
    ("cp", "cp", "cp"),
    ("ep", "ep", "ep"),
    ("vpp", "vpp", "vpp"),
    ("mbs", "mbs", "mbs"),
    ("m", "m", "m"),
    ("zero", "zero", "z"),
    ("recompute", "savers", "sv"),
    ("memory", "GiB/GPU", "GiB"),
    ("bubble", "bubble", "bub"),
    ("comm", "comm", "com"),
    ("step", "step s", "s"),
    ("tokens", "tok/s/GPU", "tok/s"),
    ("mfu", "MFU", "MFU"),
    ("fw", "fw", "fw"),
    ("warn", "warn", "w"),
]
_FOLDS = ["constant", "compact", "tokens", "memory-share", "comm", "bubble", "cards"]
"""What goes, in order, while the table is wider than the terminal: degree columns that are
1 in every row (named in a note), then short headers, then tok/s/GPU (it ranks as the step
time does), the memory share of capacity, the exposed-communication share and the bubble
(--json has them all); narrower still, each plan becomes a paragraph of its own that wraps
under its rank. No degree is ever cut."""


def _plan_rows(result) -> list[dict]:
    from planner.calibration.intervals import label, time_interval
    from planner.caveats import caveats
    from planner.frameworks.runnable import SHORT
    from planner.savers import in_use
    from planner.views.shapes import plan_ties

    gbs = result.job.training.global_batch_size
    rows = []
    for p, tie in zip(result.plans, plan_ties(result)):
        lay, mem, tm = p.layout, p.memory, p.time
        iv = label(time_interval(result.job, lay))
        rows.append(
            {
                "#": f"{p.rank}{'*' if result.pick_rank == p.rank else ''}"
                f"{'=' if tie else ''}{'!' if caveats(result.job, lay) else ''}",
                "tp": str(lay.tp),
                "pp": str(lay.pp) + ("u" if lay.uneven else ""),
                "dp": str(lay.dp),
                "cp": str(lay.cp),
                "ep": str(lay.ep),
                "vpp": str(lay.vpp),
                "mbs": str(lay.micro_batch_size),
                "m": str(lay.num_microbatches(gbs)),
                "zero": str(lay.zero),
                "recompute": " ".join(in_use(lay, result.job.training)) or "-",
                "fw": "".join(SHORT[f] for f in p.frameworks) or "none"
                if p.frameworks is not None
                else "",
                "memory": f"{mem.total / GiB:.1f} {mem.fraction:.0%}",
                "memory-short": f"{mem.total / GiB:.1f}",
                "bubble": f"{tm.bubble_fraction:.0%}",
                "comm": f"{tm.exposed_comm_s / tm.step_time_s:.0%}",
                "step": f"{tm.step_time_s:.2f} {iv}",
                "step_s": f"{tm.step_time_s:.2f}",
                "interval": iv,
                "tokens": f"{tm.tokens_per_s_per_gpu:,.0f}",
                "mfu": f"{tm.mfu:.1%}",
                "warn": "",
                "name": lay.name + ("u" if lay.uneven else ""),
                "_warnings": p.warnings,
            }
        )
    legend: dict[str, str] = {}
    for r in rows:
        keys = []
        for v in r.pop("_warnings"):
            if v.rule not in legend:
                legend[v.rule] = chr(ord("a") + len(legend))
            keys.append(legend[v.rule])
        r["warn"] = "".join(keys) or "-"
    return rows, legend


def _table_for(rows: list[dict], folds: set[str], title: str):
    from rich import box

    constant = [
        k for k in ("cp", "ep", "vpp") if "constant" in folds and all(r[k] == "1" for r in rows)
    ]
    if all(r["fw"] == rows[0]["fw"] for r in rows) and ("constant" in folds or not rows[0]["fw"]):
        constant.append("fw")  # the same frameworks in every row: said in a note
    cols = [c for c in _COLUMNS if c[0] not in constant and c[0] not in folds]
    t = Table(
        title=Text(title),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )
    for key, head, short in cols:
        t.add_column(
            short if "compact" in folds else head,
            justify="left" if key in ("recompute", "fw", "warn") else "right",
            no_wrap=True,
        )
    for r in rows:
        _row(
            t,
            *[
                r["memory-short" if key == "memory" and "memory-share" in folds else key]
                for key, _, _ in cols
            ],
        )
    return t, constant


def _cards(rows: list[dict], title: str) -> list[Any]:
    """The narrowest form: one wrapped paragraph per plan, indented under its rank."""
    out: list[Any] = [Text(title)]
    width = max(len(r["#"]) for r in rows) + 2
    for r in rows:
        text = (
            f"{r['name']}, micro-batch {r['mbs']} x {r['m']}, zero {r['zero']}, savers "
            f"{r['recompute']}"
            + (f", frameworks {r['fw']}" if r["fw"] else "")
            + f": {r['memory']} GiB, {r['step_s']} s/step {r['interval']}, MFU {r['mfu']}, "
            f"bubble {r['bubble']}, warnings {r['warn']}"
        )
        out.append(_hanging(r["#"].rjust(width - 1) + " ", text))
    return out


def _natural_width(console, table: Table) -> int:
    """The width `table` takes with no limit (what `rich.measure.Measurement.get` gives as its
    maximum), without measuring it: for a table of one-line plain cells (our tables: `_row`
    makes every cell a Text) each column is its longest cell, header included, plus its
    padding (rich's `Table._get_cells`: with collapse_padding a column's left padding gives
    way to the one before's right; without pad_edge the outer ones go), and the box adds one
    divider between columns and two edges when shown (`Table._extra_width`). Measuring costs
    about as much as rendering the table (~40 ms of a plan's output); anything else (styled
    markup, wrapped lines, fixed widths, footers) is measured by rich.
    `tests/test_report_width.py` checks the two agree."""
    from rich.cells import cell_len

    cols = table.columns
    plain = (
        table.width is None
        and table.min_width is None
        and not table.show_footer
        and all(c.width is None and c.min_width is None and c.max_width is None for c in cols)
    )
    widths = []
    for c in cols if plain else ():
        longest = 0
        for cell in (c.header, *c.cells) if table.show_header else c.cells:
            if isinstance(cell, Text):
                text = cell.plain
            elif isinstance(cell, str) and not any(ch in cell for ch in "[:"):
                text = cell  # no markup or emoji code: rendered as written
            else:
                plain = False
                break
            if "\n" in text:
                plain = False
                break
            longest = max(longest, cell_len(text))
        if not plain:
            break
        widths.append(longest)
    if not plain or not cols:
        from rich.measure import Measurement

        return Measurement.get(console, console.options.update(width=10_000), table).maximum
    _, right, _, left = table.padding
    n = len(cols)
    total = 0
    for i, w in enumerate(widths):
        pad_left = max(0, left - right) if table.collapse_padding and i else left
        pad_right = right
        if not table.pad_edge:
            pad_left = 0 if i == 0 else pad_left
            pad_right = 0 if i == n - 1 else pad_right
        total += w + pad_left + pad_right
    if table.box:
        total += n - 1 + (2 if table.show_edge else 0)
    return total


_FW_LETTERS = {
    "M": "Megatron-LM",
    "B": "Megatron-Bridge",
    "N": "NeMo 1",
    "D": "Megatron-DeepSpeed",
    "T": "torchtitan",
}


def _fw_names(letters: str) -> str:
    if letters == "none":
        return "none of the exporters' frameworks"
    return ", ".join(_FW_LETTERS[c] for c in letters)


def _saver_keys(rows: list[dict], modules: str) -> list[str]:
    """The keys of the savers the rows use (planner.savers.in_use names them)."""
    words = {w for r in rows for w in r["recompute"].split()}
    used = [
        ("sel+" in words, f"sel+ = selective recompute of {modules}"),
        (
            any(w.startswith("full") and w != "full" for w in words),
            "fullN = full recompute of N layers per stage",
        ),
        (
            any(w.startswith("off") for w in words),
            "offN = N layers' activations offloaded to the host",
        ),
        (
            any(w.startswith("bf16") for w in words),
            "bf16g/bf16m = bf16 gradient reduction/Adam moments",
        ),
        ("fp8pg" in words, "fp8pg = FP8 parameter all-gather"),
    ]
    return [text for on, text in used if on]


class _FittedTable:
    """The plan table folded to the console's width (see _FOLDS)."""

    def __init__(self, rows, title, modules: str = ""):
        self.rows, self.title, self.modules = rows, title, modules

    def __rich_console__(self, console, options):
        width = options.max_width
        folds: set[str] = set()
        table, constant = _table_for(self.rows, folds, self.title)
        for step in _FOLDS:
            if _natural_width(console, table) <= width:
                break
            folds.add(step)
            if step == "cards":
                break
            table, constant = _table_for(self.rows, folds, self.title)
        if "cards" in folds:
            yield from _cards(self.rows, self.title)
            folds, constant = {"cards"}, []
        else:
            yield table
        notes = []
        degrees = [k for k in constant if k != "fw"]
        if degrees:
            notes.append(" and ".join(f"{k} 1" for k in degrees) + " in every row")
        fws = self.rows[0]["fw"] if self.rows else ""
        if "fw" in constant and fws:
            notes.append(f"every row runs on {_fw_names(fws)}")
        dropped = [
            label
            for key, label in (
                ("tokens", "tok/s/GPU"),
                ("memory-share", "memory share"),
                ("comm", "comm"),
                ("bubble", "bubble"),
            )
            if key in folds
        ]
        if dropped:
            notes.append(
                f"{', '.join(dropped)} left out at this width (see --json or a wider terminal)"
            )
        keys = ["m = micro-batches per step"] if "cards" not in folds else []
        if "compact" in folds:
            keys.append("z = ZeRO stage, sv = savers")
        keys += _saver_keys(self.rows, self.modules)
        if (
            "fw" not in constant
            and "cards" not in folds
            and fws is not None
            and any(r["fw"] for r in self.rows)
        ):
            keys.append(
                "fw = frameworks that run it: "
                + ", ".join(f"{k} {v}" for k, v in _FW_LETTERS.items())
            )
        if "comm" not in folds and "cards" not in folds:
            keys.append("comm = exposed communication share of the step")
        if any(r["pp"].endswith("u") or r["name"].endswith("u") for r in self.rows):
            keys.append("u = uneven first/last stages")
        if any("*" in r["#"] for r in self.rows):
            keys.append("* = the seven-step pick")
        if any("!" in r["#"] for r in self.rows):
            keys.append("! = outside calibrated ground (below)")
        if keys:
            notes.append("; ".join(keys))
        for n in notes:
            yield Text(n, style="dim")

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement(20, options.max_width)


def plan_table(result) -> Group:
    """The top K as a table that fits the terminal; warnings as letters keyed below it,
    caveats as '!' with the sentences below."""
    from planner.caveats import caveats

    job = result.job
    gbs = job.training.global_batch_size
    rows, legend = _plan_rows(result)
    title = (
        f"Top {len(result.plans)} layouts for {job.model.name} on {job.num_gpus} x "
        f"{job.hardware.name} (seq {job.training.seq_length}, global batch {gbs}, "
        f"{job.training.precision})"
    )
    sel_plus = next(
        (
            p.layout.selective_modules
            for p in result.plans
            if p.layout.recompute == "selective" and p.layout.selective_modules != ("core_attn",)
        ),
        (),
    )
    notes: list[Any] = [_FittedTable(rows, title, ", ".join(sel_plus))]
    notes.append(Text(_interval_note(result, rows), style="dim"))
    for rule, key in legend.items():
        notes.append(Text(f"  {key}: {rule}", style="dim"))
    seen: list[str] = []
    for p in result.plans:
        for c in caveats(job, p.layout):
            if c not in seen:
                seen.append(c)
    for c in seen:
        notes.append(_hanging("  ! ", c, style="yellow"))
    return Group(*notes)


def _interval_note(result, rows) -> str:
    from planner.calibration.intervals import time_interval

    bases = []
    for p in result.plans:
        b = _basis_words(time_interval(result.job, p.layout))
        if b not in bases:
            bases.append(b)
    text = f"  step s: estimate and its 80% interval (calibration residuals of {'; '.join(bases)})"
    if any("=" in r["#"] for r in rows):
        text += (
            "\n  =: a tie with the fastest: their 80% intervals overlap, so the measured "
            "order is open"
        )
    return text


def interval_line(job, layout, est) -> Text:
    """The step time and peak memory with their 80% intervals and what they stand on."""
    from planner.calibration.intervals import label, memory_interval, time_interval

    mv = memory_interval(job, layout)
    lo, hi = mv.of(est.memory.total / GiB)
    parts = []
    if est.time is not None:
        iv = time_interval(job, layout)
        parts.append(f"step {est.time.step_time_s:.3g} s {label(iv)} ({_basis_words(iv)})")
    parts.append(f"memory {est.memory.total / GiB:.1f} GiB, {lo:.1f}-{hi:.1f} ({_basis_words(mv)})")
    return Text("80% intervals: " + "; ".join(parts), style="dim")


def _basis_words(iv) -> str:
    where = (
        f"{iv.cls if iv.cls != '*' else 'all'} runs on {iv.gpu if iv.gpu != '*' else 'every GPU'}"
    )
    return f"{where}, {iv.runs}" + (", widened off calibrated ground" if iv.widened else "")


def _hanging(label: str, text: str, style: str = "") -> Table:
    """`label` then `text`, its wrapped lines indented under the text's first character."""
    g = Table.grid()
    g.add_column(no_wrap=True)
    g.add_column(overflow="fold")
    g.add_row(Text(label, style=style), Text(text, style=style))
    return g


def steps_view(result) -> Group:
    lines: list[Any] = [Text("Seven-step procedure", style="bold")]
    for s in result.steps:
        lines.append(_hanging(f"  ({s['step']}) ", f"{s['title']}: {s['decision']}"))
    if result.pick_note:
        lines.append(
            _hanging("  => ", result.pick_note + (" (marked * above)" if result.pick_rank else ""))
        )
    return Group(*lines)


def plan_summary(result) -> Text:
    best = result.best
    head = (
        f"searched {result.searched:,} layouts, {result.feasible:,} fit "
        f"({result.evaluated:,} memory estimates, {result.timed:,} timed, "
        f"{result.elapsed_s:.2f} s)"
    )
    if best is None:
        return Text(head + "; no layout fits", style="bold red")
    tm = best.time
    from planner.savers import in_use

    extra = [
        w for w in in_use(best.layout, result.job.training) if not w.startswith(("sel", "full"))
    ]
    text = (
        f"{head}; best is {best.layout.name} zero {best.layout.zero} recompute "
        f"{best.layout.recompute}{' (' + ' '.join(extra) + ')' if extra else ''} "
        f"micro-batch {best.layout.micro_batch_size}: "
        f"{tm.step_time_s:.2f} s/step, {tm.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
        f"MFU {tm.mfu:.1%}, {best.memory.total / GiB:.1f} GiB/GPU"
    )
    if tm.train:
        text += (
            f"; {fmt_count(tm.train['tokens'])} tokens in {tm.train['days']:.1f} days, "
            f"{tm.train['gpu_hours']:,.0f} GPU-hours"
        )
    return Text(text, style="bold")


def plan_view(result) -> Group:
    parts: list[Any] = []
    if result.plans:
        parts.append(plan_table(result))
    else:
        parts.append(Text("No layout fits.", style="bold red"))
        for s in result.suggestions:
            parts.append(_hanging("  - ", s))
    parts.append(steps_view(result))
    if result.pruned:
        ranked = sorted(result.pruned.items(), key=lambda kv: -kv[1])
        parts.append(
            Text(
                "layouts each rule removed: "
                + ", ".join(f"{rule} {count:,}" for rule, count in ranked),
                style="dim",
            )
        )
    parts.append(plan_summary(result))
    if getattr(result, "batch_note", ""):
        parts.append(Text(result.batch_note, style="dim"))
    return Group(*parts)


# ------------------------------------------------------------------------------ pictures


def _style(kind: str) -> str:
    from planner.views.pictures import KINDS

    colour = KINDS.get(kind, ("", ""))[0]
    if kind in ("free", "idle", "headroom", "point"):
        return "dim" if kind != "free" else ""
    if kind in ("top", "pick"):
        return f"bold {colour}"
    return f"black on {colour}" if colour else ""


def _cells_text(cells) -> Text:
    t = Text()
    for ch, kind in cells:
        t.append(ch, style=_style(kind))
    return t


class _Drawn:
    """A renderable drawn at the console's width: `draw(width) -> list[Text]`."""

    def __init__(self, draw):
        self.draw = draw

    def __rich_console__(self, console, options):
        yield from self.draw(max(20, options.max_width))

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement(20, options.max_width)


def _legend(kinds: list[tuple[str, str]]) -> Text:
    from planner.views.pictures import KINDS

    t = Text()
    for kind, label in kinds:
        t.append(KINDS[kind][1], style=_style(kind))
        t.append(f" {label}  ")
    return t


def schedule_view(pic) -> Group:
    """One row per pipeline rank, time left to right, the bubble as '·'."""
    head = Text(f"Pipeline schedule: {pic.caption()}", style="bold")
    label_w = len(f"rank {pic.p - 1} ")
    total = pic.schedule.makespan

    def draw(width: int):
        inner = width - label_w
        lines = []
        for r, row in enumerate(_schedule_rows(pic, inner)):
            lines.append(Text(f"rank {r}".ljust(label_w)) + _cells_text(row))
        axis = "0 s".ljust(inner - len(f"{total:.2f} s")) + f"{total:.2f} s"
        lines.append(Text(" " * label_w + axis, style="dim"))
        return lines

    key = _legend(pic.legend)
    if pic.odd_note:
        key.append(pic.odd_note)
    return Group(
        head,
        _Drawn(draw),
        key,
        Text("digits, where the picture is wide enough: the micro-batch, from 1", style="dim"),
    )


def _schedule_rows(pic, width):
    from planner.views.pictures import schedule_cells

    return schedule_cells(pic, width)


def memory_bars_view(pic) -> Group:
    """Stacked bars per pipeline rank against capacity; '|' marks the usable line."""
    from planner.views.pictures import bar_cells

    head = Text(f"Memory per pipeline rank: {pic.caption()}", style="bold")
    n = len(pic.ranks)
    label_w = len(f"rank {n - 1} middle ")

    def draw(width: int):
        value_w = 12
        inner = max(10, width - label_w - value_w)
        lines = []
        for i, mem in enumerate(pic.ranks):
            val = f" {mem.total / GiB:5.1f} {mem.fraction:4.0%}"
            lines.append(
                Text(f"rank {i} {mem.stage}".ljust(label_w))
                + _cells_text(bar_cells(pic, i, inner))
                + Text(val, style="bold" if i == pic.worst else "")
            )
        return lines

    legend = _legend(
        [
            ("weights", "weights"),
            ("gradients", "gradients"),
            ("optimizer", "optimizer"),
            ("activations", "activations"),
            ("other", "other"),
            ("headroom", "headroom"),
            ("over", "over capacity"),
        ]
    )
    return Group(
        head,
        _Drawn(draw),
        legend,
        Text(
            f"GiB per GPU, share of {pic.capacity / GiB:.0f} GiB; | = usable "
            f"{pic.usable / GiB:.1f} GiB",
            style="dim",
        ),
    )


def waterfall_view(pic) -> Group:
    """The step's parts one after another, each starting where the previous ended."""
    from planner.views.pictures import waterfall_cells

    head = Text(f"Step time: {pic.total:.3f} s, part by part", style="bold")
    label_w = max(len(label) for _, label, _, _ in pic.steps) + 1

    def draw(width: int):
        value_w = 14
        inner = max(10, width - label_w - value_w)
        lines = []
        for i, (_kind, label, _start, sec) in enumerate(pic.steps):
            share = sec / pic.total if pic.total else 0.0
            lines.append(
                Text(label.ljust(label_w))
                + _cells_text(waterfall_cells(pic, i, inner))
                + Text(f" {sec:6.3f} s {share:3.0%}")
            )
        lines.append(
            Text("step".ljust(label_w) + "─" * inner + f" {pic.total:6.3f} s", style="bold")
        )
        return lines

    return Group(head, _Drawn(draw))


def grid_view(pic) -> Group:
    """Each axis's group of rank 0, its stride and the link it runs on; the first nodes."""
    from planner.views.pictures import node_text

    t = Table(
        title=f"GPU grid: {pic.world} GPUs, {pic.gpus_per_node} per node, NVLink domain "
        f"{pic.domain} (rank order tp, cp, ep, dp, pp)",
        title_justify="left",
    )
    t.add_column("axis")
    t.add_column("size", justify="right")
    t.add_column("stride", justify="right")
    t.add_column("ranks with rank 0", overflow="fold")
    t.add_column("link", overflow="fold")
    for g in pic.groups:
        link = (
            f"network {g.bandwidth_gb_per_s:.0f} GB/s"
            if g.crosses_network
            else f"NVLink {g.bandwidth_gb_per_s:.0f} GB/s"
        )
        _row(t, g.axis, str(g.degree), str(g.stride), g.describe(pic.gpus_per_node), link)
    if not pic.groups:
        t.add_row("-", "1", "-", "0 (one GPU)", "-")
    lines: list[Any] = [t]
    nodes: dict[int, list[dict]] = {}
    for c in pic.coords:
        nodes.setdefault(c["node"], []).append(c)
    for node in sorted(nodes)[:4]:
        lines.append(Text(f"  node {node}, " + node_text(nodes[node])))
    n_nodes = -(-pic.world // pic.gpus_per_node)
    if n_nodes > 4:
        lines.append(Text(f"  ... {n_nodes - 4} more nodes in the same pattern", style="dim"))
    return Group(*lines)


def scatter_view(pic) -> Group:
    """Step time vs memory per GPU, fastest at the bottom."""
    from planner.views.pictures import scatter_cells

    x0, x1, y0, y1 = pic.bounds
    head = Text(f"Step time vs memory: {pic.sample}", style="bold")
    height = 12

    def draw(width: int):
        label_w = 8
        inner = max(10, width - label_w)
        grid = scatter_cells(pic, inner, height)
        lines = []
        for i, row in enumerate(grid):
            y = y1 - (y1 - y0) * i / (height - 1) if height > 1 else y0
            lab = f"{y:6.2f}s " if i in (0, height - 1, height // 2) else " " * label_w
            lines.append(Text(lab.rjust(label_w)) + _cells_text(row))
        axis = f"{x0:.1f} GiB".ljust(inner - len(f"{x1:.1f} GiB")) + f"{x1:.1f} GiB"
        lines.append(Text(" " * label_w + axis, style="dim"))
        return lines

    return Group(
        head,
        _Drawn(draw),
        Text(
            "digits: rank in the table; * the seven-step pick; · other feasible layouts",
            style="dim",
        ),
    )


def pictures_view(pics: dict) -> Group:
    """The pictures `layout_pictures` made, each under its own heading."""
    views = {
        "schedule": schedule_view,
        "memory": memory_bars_view,
        "time": waterfall_view,
        "grid": grid_view,
        "scatter": scatter_view,
    }
    parts: list[Any] = []
    for name, pic in pics.items():
        parts.append(Text(""))
        parts.append(views[name](pic))
    return Group(*parts)


def plan_pictures_view(result, pics: dict) -> Group:
    """The pictures of the best plan (and the scatter of the search)."""
    if not result.plans:
        return Group(Text(""), Text("No pictures: no layout fits.", style="dim"))
    best = result.best
    head = Text(
        f"Pictures of #1 ({best.layout.name}, zero {best.layout.zero}, recompute "
        f"{best.layout.recompute}, micro-batch {best.layout.micro_batch_size})",
        style="bold",
    )
    return Group(Text(""), head, pictures_view(pics))


# ------------------------------------------------------------------------------ compare


def compare_view(results: list, names: list[str]) -> Group:
    """Configs side by side; rows that differ marked '*' and highlighted."""
    t = Table(
        title=f"Comparing {len(results)} configs (* = differs; (+x%) against the first)",
        title_justify="left",
        show_lines=False,
    )
    t.add_column("", no_wrap=True)
    for n in names:
        t.add_column(n, justify="right", overflow="fold")
    for _key, label, vals, differs in compare_rows(results):
        style = "bold yellow" if differs else ""
        t.add_row(
            Text(("* " if differs else "  ") + label, style=style),
            *[Text(v, style=style) for v in vals],
        )
    notes: list[Any] = [t]
    for name, r in zip(names, results):
        for c in _caveats(r.job, r.layout):
            notes.append(_hanging(f"  {name}: ", c, style="yellow"))
    return Group(*notes)
