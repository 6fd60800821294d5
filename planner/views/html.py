"""The HTML report: one self-contained page (inline CSS and SVG, no script, no network) that
draws the pictures of `pictures.py` and the numbers of the terminal views.

Pure functions from results to text; the CLI writes the file. SVG is written by hand: the
pictures are rectangles, lines and labels, which a charting library would only wrap (and
bundling one would add megabytes of script to every report and a dependency to the install).
Every shape carries a <title>, which browsers show as a tooltip.
"""

from __future__ import annotations

import re
from html import escape

from planner.savers import in_use
from planner.units import GiB
from planner.views import pictures as pics

__all__ = [
    "validation_html",
    "plan_html",
    "compare_html",
    "svg_schedule",
    "svg_memory",
    "svg_waterfall",
    "svg_grid",
    "svg_scatter",
]

W = 960  # drawing width, px
LABEL = 110  # left label column, px
FONT = "font-family:system-ui,-apple-system,'DejaVu Sans',sans-serif"
MAX_BLOCKS = 2500  # beyond this the schedule is drawn as runs of cells


def _c(kind: str) -> str:
    return pics.KINDS[kind][0]


def _svg(width: float, height: float, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{escape(label)}" '
        f'style="{FONT};font-size:12px">' + "".join(body) + "</svg>"
    )


def _rect(x, y, w, h, fill, title="", extra="") -> str:
    t = f"<title>{escape(title)}</title>" if title else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" '
        f'fill="{fill}" {extra}>{t}</rect>'
    )


def _text(x, y, s, anchor="start", extra="") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {extra}>{escape(s)}</text>'


def _legend(items: list[tuple[str, str]], y: float) -> list[str]:
    out, x = [], LABEL
    for kind, label in items:
        out.append(_rect(x, y - 10, 12, 12, _c(kind), extra='stroke="#555" stroke-width="0.5"'))
        out.append(_text(x + 16, y, label))
        x += 24 + 7 * len(label)
    return out


# ------------------------------------------------------------------------------ pictures


def svg_schedule(pic: pics.SchedulePicture) -> str:
    """Rows per pipeline rank; blocks coloured by kind, the bubble left grey."""
    row_h, gap = 20, 4
    inner = W - LABEL - 10
    sched = pic.schedule
    k = inner / sched.makespan if sched.makespan else 0
    body = []
    for r in range(pic.p):
        y = 10 + r * (row_h + gap)
        body.append(_text(LABEL - 8, y + 14, f"rank {r}", "end"))
        body.append(_rect(LABEL, y, inner, row_h, _c("idle"), f"rank {r}: idle (bubble)"))
    if len(sched.blocks) <= MAX_BLOCKS:
        for b in sched.blocks:
            y = 10 + b.rank * (row_h + gap)
            x, w = LABEL + b.start * k, (b.end - b.start) * k
            what = {"F": "forward", "B": "backward", "W": "weight gradient"}[b.kind]
            tip = (
                f"{what} mb {b.micro_batch + 1}"
                + (f" stage {b.chunk * pic.p + b.rank}" if pic.v > 1 else "")
                + f" {b.start * 1e3:.0f}-{b.end * 1e3:.0f} ms"
            )
            odd = ' fill-opacity="0.7"' if b.chunk % 2 else ""  # virtual stages alternate
            body.append(
                _rect(x, y, w, row_h, _c(b.kind), tip, f'class="blk" data-kind="{b.kind}"{odd}')
            )
            if b.recompute > 0:
                body.append(_rect(x, y, b.recompute * k, row_h, _c("R"), tip + " (recompute)"))
            if w >= 14:
                body.append(
                    _text(
                        x + w / 2,
                        y + 14,
                        str(b.micro_batch + 1),
                        "middle",
                        'fill="#fff" font-size="10"',
                    )
                )
    else:  # runs of equal cells: the picture stays small however many blocks there are
        for r, row in enumerate(pics.schedule_cells(pic, int(inner))):
            y = 10 + r * (row_h + gap)
            start = 0
            for c in range(1, len(row) + 1):
                if c == len(row) or row[c][1] != row[start][1]:
                    if row[start][1] != "idle":
                        body.append(
                            _rect(
                                LABEL + start,
                                y,
                                c - start,
                                row_h,
                                _c(row[start][1]),
                                extra=f'class="blk" data-kind="{row[start][1]}"',
                            )
                        )
                    start = c
    y_axis = 10 + pic.p * (row_h + gap) + 12
    body.append(_text(LABEL, y_axis, "0 s"))
    body.append(_text(LABEL + inner, y_axis, f"{sched.makespan:.2f} s", "end"))
    body += _legend(pic.legend, y_axis + 22)
    return _svg(W, y_axis + 32, body, "pipeline schedule")


def svg_memory(pic: pics.MemoryPicture) -> str:
    """Stacked bars per pipeline rank against capacity (solid line) and usable (dashed)."""
    row_h, gap = 18, 6
    inner = W - LABEL - 120
    full = max(pic.capacity, max(r.total for r in pic.ranks))
    k = inner / full
    bottom = 10 + len(pic.ranks) * (row_h + gap)
    body = [
        _rect(
            LABEL + pic.usable * k,
            4,
            (pic.capacity - pic.usable) * k,
            bottom - 4,
            _c("headroom"),
            f"headroom: {pic.headroom:.0%} kept free",
        )
    ]
    for i, mem in enumerate(pic.ranks):
        y = 10 + i * (row_h + gap)
        body.append(_text(LABEL - 8, y + 13, f"rank {i} {mem.stage}", "end"))
        x = LABEL
        for name, val in pic.parts(i):
            body.append(
                _rect(x, y, val * k, row_h, _c(name), f"rank {i}: {name} {val / GiB:.2f} GiB")
            )
            x += val * k
        body.append(
            _text(
                LABEL + inner + 8,
                y + 13,
                f"{mem.total / GiB:.1f} GiB {mem.fraction:.0%}",
                extra='font-weight="bold"' if i == pic.worst else "",
            )
        )
    for val, dash, label in (
        (pic.capacity, "", f"capacity {pic.capacity / GiB:.1f} GiB"),
        (pic.usable, 'stroke-dasharray="4 3"', f"usable {pic.usable / GiB:.1f}"),
    ):
        x = LABEL + val * k
        body.append(
            f'<line x1="{x:.1f}" y1="4" x2="{x:.1f}" y2="{bottom:.1f}" stroke="#b40426" '
            f'stroke-width="1.5" {dash}><title>{escape(label)}</title></line>'
        )
    body.append(
        _text(LABEL + pic.capacity * k, bottom + 14, f"{pic.capacity / GiB:.0f} GiB", "end")
    )
    body += _legend([(n, n) for n in pics.MEMORY_PARTS], bottom + 34)
    return _svg(W, bottom + 44, body, "memory per pipeline rank")


def svg_waterfall(pic: pics.WaterfallPicture) -> str:
    row_h, gap = 18, 5
    label_w = 190
    inner = W - label_w - 110
    k = inner / pic.total if pic.total else 0
    body = []
    for i, (kind, label, start, sec) in enumerate(pic.steps):
        y = 10 + i * (row_h + gap)
        body.append(_text(label_w - 8, y + 13, label, "end"))
        body.append(
            _rect(
                label_w + start * k,
                y,
                max(sec * k, 1 if sec > 0 else 0),
                row_h,
                _c(kind),
                f"{label}: {sec:.4f} s",
            )
        )
        share = sec / pic.total if pic.total else 0
        body.append(_text(label_w + inner + 8, y + 13, f"{sec:.3f} s  {share:.0%}"))
    y = 10 + len(pic.steps) * (row_h + gap)
    body.append(_rect(label_w, y, inner, row_h, "#333", f"step {pic.total:.4f} s"))
    body.append(_text(label_w - 8, y + 13, "step", "end", 'font-weight="bold"'))
    body.append(
        _text(label_w + inner + 8, y + 13, f"{pic.total:.3f} s", extra='font-weight="bold"')
    )
    return _svg(W, y + row_h + 12, body, "step time waterfall")


def svg_grid(pic: pics.GridPicture) -> str:
    """Every drawn GPU as a square, one node per row of squares, coloured by pipeline
    stage; each tensor-parallel group outlined."""
    cell, gap = 9, 2
    gpn = pic.gpus_per_node
    node_w = gpn * (cell + gap) + 8
    per_row = max(1, (W - 20) // node_w)
    palette = [
        "#4c78a8",
        "#f28e2b",
        "#59a14f",
        "#e15759",
        "#76b7b2",
        "#edc948",
        "#b07aa1",
        "#ff9da7",
        "#9c755f",
        "#bab0ac",
    ]
    body = []
    n_nodes = -(-pic.drawn // gpn)
    by_node: dict[int, list[dict]] = {}
    for c in pic.coords:
        by_node.setdefault(c["node"], []).append(c)
    for node, cs in by_node.items():
        x0 = 10 + (node % per_row) * node_w
        y = 10 + (node // per_row) * (cell + 8)
        tip = f"node {node}, " + pics.node_text(cs)
        rects = []
        for c in cs:
            x = x0 + (c["rank"] % gpn) * (cell + gap)
            edge = ' stroke="#000"' if c["tp"] == 0 else ""
            rects.append(
                f'<rect class="gpu" x="{x}" y="{y}" width="{cell}" height="{cell}" '
                f'fill="{palette[c["pp"] % len(palette)]}"{edge}/>'
            )
        body.append(f"<g><title>{escape(tip)}</title>{''.join(rects)}</g>")
    h = 10 + (-(-n_nodes // per_row)) * (cell + 8) + 10
    note = (
        f"{pic.drawn} of {pic.world} GPUs drawn, {gpn} per node (one row of squares per "
        f"node); colour = pipeline stage; outlined = the first GPU of each TP group"
    )
    body.append(_text(10, h + 4, note))
    return _svg(W, h + 14, body, "GPU grid")


def svg_scatter(pic: pics.ScatterPicture) -> str:
    """Step time against memory per GPU; the top plans numbered, the seven-step pick a star."""
    left, top, w, h = 70, 20, W - 110, 320
    x0, x1, y0, y1 = pic.bounds
    pad_x, pad_y = (x1 - x0) * 0.05 or 1.0, (y1 - y0) * 0.08 or 0.1
    x0, x1, y0, y1 = x0 - pad_x, x1 + pad_x, y0 - pad_y, y1 + pad_y

    def X(v):
        return left + (v - x0) / (x1 - x0) * w

    def Y(v):
        return top + h - (v - y0) / (y1 - y0) * h

    body = [f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>']
    for i in range(5):
        gx, gy = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        body.append(_text(X(gx), top + h + 16, f"{gx:.1f}", "middle"))
        body.append(_text(left - 6, Y(gy) + 4, f"{gy:.2f}", "end"))
    body.append(_text(left + w / 2, top + h + 34, "memory per GPU (GiB)", "middle"))
    body.append(
        _text(
            14,
            top + h / 2,
            "step time (s)",
            "middle",
            f'transform="rotate(-90 14 {top + h / 2:.0f})"',
        )
    )
    ux = X(pic.usable_gib)
    if left <= ux <= left + w:
        body.append(
            f'<line x1="{ux:.1f}" y1="{top}" x2="{ux:.1f}" y2="{top + h}" stroke="#b40426" '
            f'stroke-dasharray="4 3"><title>usable memory {pic.usable_gib:.1f} GiB</title></line>'
        )
    order = {"point": 0, "top": 1, "pick": 2}
    for gib, sec, name, kind, label in sorted(pic.points, key=lambda p: order[p[3]]):
        tip = f"{name}: {sec:.3f} s/step, {gib:.1f} GiB" + (
            f" (rank {label})" if kind == "top" else ""
        )
        if kind == "point":
            body.append(
                f'<circle cx="{X(gib):.1f}" cy="{Y(sec):.1f}" r="2.5" fill="#9c9c9c" '
                f'fill-opacity="0.6"><title>{escape(tip)}</title></circle>'
            )
        elif kind == "top":
            body.append(
                f'<circle class="top" cx="{X(gib):.1f}" cy="{Y(sec):.1f}" r="7" fill="{_c("top")}">'
                f"<title>{escape(tip)}</title></circle>"
            )
            body.append(_text(X(gib), Y(sec) + 4, label, "middle", 'fill="#fff" font-size="10"'))
        else:
            body.append(
                _text(
                    X(gib),
                    Y(sec) + 7,
                    "★",
                    "middle",
                    f'class="pick" fill="{_c("pick")}" font-size="22"',
                )
            )
            body.append(
                f'<circle cx="{X(gib):.1f}" cy="{Y(sec):.1f}" r="9" fill-opacity="0">'
                f"<title>{escape('seven-step pick: ' + tip)}</title></circle>"
            )
    return _svg(W, top + h + 44, body, "step time vs memory")


SVG = {
    "schedule": svg_schedule,
    "memory": svg_memory,
    "time": svg_waterfall,
    "grid": svg_grid,
    "scatter": svg_scatter,
}
TITLES = {
    "schedule": "Pipeline schedule",
    "memory": "Memory per pipeline rank",
    "time": "Step time, part by part",
    "grid": "GPU grid",
    "scatter": "Step time vs memory",
}


def _caption(name: str, pic) -> str:
    if name == "schedule":
        return pic.caption()
    if name == "memory":
        return pic.caption()
    if name == "time":
        return f"step {pic.total:.3f} s"
    if name == "grid":
        rows = [
            f"{g.axis} {g.degree}: ranks {g.describe(pic.gpus_per_node)} on "
            f"{'the network' if g.crosses_network else 'NVLink'} "
            f"({g.bandwidth_gb_per_s:.0f} GB/s)"
            for g in pic.groups
        ]
        return "; ".join(rows) or "one GPU"
    return pic.sample


def _figures(figs: dict) -> str:
    out = []
    for name, pic in figs.items():
        out.append(
            f'<figure id="{name}"><figcaption><b>{TITLES[name]}</b>: '
            f"{escape(_caption(name, pic))}</figcaption>{SVG[name](pic)}</figure>"
        )
    return "".join(out)


# -------------------------------------------------------------------------------- pages

CSS = """
body{font-family:system-ui,-apple-system,'DejaVu Sans',sans-serif;margin:24px auto;max-width:1000px;
color:#222;line-height:1.4}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
td.n,th.n{text-align:right}
.diff{background:#fff3c4;font-weight:bold}.bad{color:#b40426}.ok{color:#2a7a2a}
.caveat{background:#fff3c4;border-left:4px solid #e0a800;padding:6px 10px;margin:8px 0}
figure{margin:16px 0}figcaption{margin-bottom:6px}
details{margin:8px 0}summary{cursor:pointer;font-weight:bold}
.mono{font-family:'DejaVu Sans Mono',monospace;font-size:12px}
rect.blk{stroke:#fff;stroke-width:0.5}
"""


def _page(title: str, body: list[str]) -> str:
    from planner import __version__

    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        + "".join(body)
        + f'<p class="mono">planner {__version__}: estimates from its cost model '
        "(README: The cost model); every number here is also in --json.</p></body></html>"
    )


def _caveats(items: list[str]) -> str:
    return "".join(f'<div class="caveat">caveat: {escape(c)}</div>' for c in items)


_NUMBER = re.compile(r"^[-+]?[\d,.]+(?:\s*[%a-zA-Z/*!]*)?(?:\s*\([^)]*\))?$")


def _table(head: list[str], rows: list[list[str]], diff_rows: set[int] = frozenset()) -> str:
    """Numbers right-aligned (a column is numeric when its cells are), text left."""
    numeric = [
        i > 0 and all(_NUMBER.match(str(r[i])) or str(r[i]) == "-" for r in rows)
        for i in range(len(head))
    ]
    right = [' class="n"' if n else "" for n in numeric]
    h = "".join(f"<th{right[i]}>{escape(x)}</th>" for i, x in enumerate(head))
    body = []
    for i, r in enumerate(rows):
        cls = ' class="diff"' if i in diff_rows else ""
        body.append(
            f"<tr{cls}>"
            + "".join(f"<td{right[j]}>{escape(str(x))}</td>" for j, x in enumerate(r))
            + "</tr>"
        )
    return f"<table><tr>{h}</tr>{''.join(body)}</table>"


def _numbers(mem, tm) -> str:
    rows = [
        [name, f"{getattr(mem, attr) / GiB:.2f}"]
        for name, attr in (
            ("weights", "weights"),
            ("gradients", "gradients"),
            ("optimizer states", "optimizer"),
            ("activations", "activations"),
            ("other", "other"),
        )
    ]
    rows.append(
        ["total", f"{mem.total / GiB:.2f} ({mem.fraction:.0%} of {mem.capacity / GiB:.1f})"]
    )
    out = _table([f"memory, GiB ({mem.stage} pipeline rank)", "GiB"], rows)
    if tm is not None:
        trows = [[name, f"{val:.3f}"] for name, val in tm.parts()]
        trows.append(["step", f"{tm.step_time_s:.3f}"])
        out += _table(["step time", "seconds"], trows)
        out += (
            f"<p>{tm.tokens_per_s:,.0f} tokens/s, {tm.tokens_per_s_per_gpu:,.0f} per GPU; "
            f"{tm.model_tflops_per_gpu:.0f} model TFLOP/s per GPU; MFU {tm.mfu:.1%}, "
            f"HFU {tm.hfu:.1%}</p>"
        )
    return out


def _job_line(job) -> str:
    tr = job.training
    return (
        f"{job.model.name} on {job.num_gpus} x {job.hardware.name}, seq {tr.seq_length}, "
        f"global batch {tr.global_batch_size}, {tr.precision}"
    )


def validation_html(result, figs: dict, *, caveats: list[str], source: str = "") -> str:
    """The validate report: verdict, rules, layout, caveats, pictures and numbers."""
    job, lay = result.job, result.layout
    gbs = job.training.global_batch_size
    verdict = (
        '<span class="ok">VALID</span>' if result.valid else '<span class="bad">INVALID</span>'
    )
    body = [
        f"<p><b>{verdict}</b> {escape(_job_line(job))}"
        + (f' <span class="mono">({escape(source)})</span>' if source else "")
        + "</p>",
        f'<p class="mono">{escape(_layout_text(lay, gbs))}</p>',
        _caveats(caveats),
    ]
    if result.errors or result.warnings:
        rows = [["error", v.rule, v.message] for v in result.errors]
        rows += [["warning", v.rule, v.message] for v in result.warnings]
        body.append("<h2>Rules</h2>" + _table(["", "rule", "message"], rows))
    else:
        body.append("<p>Rules: all pass</p>")
    est = result.estimate
    if est is not None:
        body.append("<h2>Pictures</h2>" + _figures(figs))
        body.append("<h2>Numbers</h2>" + _numbers(est.memory, est.time))
        from planner.views.report import interval_line

        body.append(f"<p>{escape(interval_line(job, lay, est).plain)}</p>")
    else:
        from planner.views.report import no_estimate_reason

        body.append(
            f"<p>No estimate: {escape(no_estimate_reason(result))} (fix the errors above).</p>"
        )
    return _page("planner validate: " + (source or job.model.name), body)


def _layout_text(lay, gbs: int) -> str:
    d = lay.as_dict(gbs)
    return (
        f"tp {d['tp']}, pp {d['pp']}, dp {d['dp']}, cp {d['cp']}, ep {d['ep']}, etp {d['etp']}, "
        f"vpp {d['vpp']}, micro-batch {d['micro_batch_size']}, micro-batches "
        f"{d['num_microbatches']}, sp {'on' if d['sequence_parallel'] else 'off'}, "
        f"zero {d['zero_stage']}, recompute {d['recompute']}"
    )


def plan_html(
    result, *, scatter, per_plan: list[dict], caveats: dict[int, list[str]], job_caveats: list[str]
) -> str:
    """The plan report: the top K table, step time vs memory, then each plan's pictures
    (the first open)."""
    job = result.job
    gbs = job.training.global_batch_size
    body = [f"<p>{escape(_job_line(job))}</p>", _caveats(job_caveats)]
    if result.plans:
        from planner.calibration.intervals import label, time_interval
        from planner.views.shapes import plan_ties

        rows = []
        for p, tie in zip(result.plans, plan_ties(result)):
            lay, mem, tm = p.layout, p.memory, p.time
            mark = (
                ("*" if result.pick_rank == p.rank else "")
                + ("=" if tie else "")
                + ("!" if caveats.get(p.rank) else "")
            )
            rows.append(
                [
                    f"{p.rank}{mark}",
                    lay.tp,
                    lay.pp,
                    lay.dp,
                    lay.cp,
                    lay.ep,
                    lay.vpp,
                    lay.micro_batch_size,
                    lay.num_microbatches(gbs),
                    lay.zero,
                    lay.recompute,
                    " ".join(in_use(lay, job.training)) or "-",
                    ", ".join(p.frameworks) if p.frameworks is not None else "-",
                    f"{mem.total / GiB:.1f} ({mem.fraction:.0%})",
                    f"{tm.bubble_fraction:.0%}",
                    f"{tm.step_time_s:.3f} {label(time_interval(job, lay))}",
                    f"{tm.tokens_per_s_per_gpu:,.0f}",
                    f"{tm.mfu:.1%}",
                    ", ".join(v.rule for v in p.warnings) or "-",
                ]
            )
        body.append(
            "<h2>Top layouts</h2>"
            + _table(
                [
                    "#",
                    "tp",
                    "pp",
                    "dp",
                    "cp",
                    "ep",
                    "vpp",
                    "mbs",
                    "m",
                    "zero",
                    "recompute",
                    "savers",
                    "frameworks",
                    "GiB/GPU",
                    "bubble",
                    "step s",
                    "tok/s/GPU",
                    "MFU",
                    "warnings",
                ],
                rows,
            )
        )
        body.append(
            "<p>* the seven-step pick; = a tie with the fastest (their 80% step-time "
            "intervals overlap); ! an estimate outside calibrated ground (see its "
            "caveats); step s: the estimate and its 80% interval. Savers: sel/sel+ selective recompute (core_attn / more "
            "modules), fullN full recompute of N layers per stage, offN N layers' "
            "activations offloaded to the host, bf16g/bf16m bf16 gradient reduction / "
            "Adam moments, fp8pg FP8 parameter all-gather.</p>"
        )
        body.append("<h2>Step time vs memory</h2>" + _figures({"scatter": scatter}))
    else:
        body.append(
            "<h2>No layout fits</h2><ul>"
            + "".join(f"<li>{escape(s)}</li>" for s in result.suggestions)
            + "</ul>"
        )
    body.append(
        "<h2>Seven-step procedure</h2><ol>"
        + "".join(
            f"<li><b>{escape(s['title'])}</b>: {escape(s['decision'])}</li>" for s in result.steps
        )
        + "</ol>"
        + (f"<p>{escape(result.pick_note)}</p>" if result.pick_note else "")
    )
    for i, (p, figs) in enumerate(zip(result.plans, per_plan)):
        open_ = " open" if i == 0 else ""
        body.append(
            f"<details{open_}><summary>#{p.rank} {escape(p.layout.name)} zero "
            f"{p.layout.zero} recompute {p.layout.recompute} micro-batch "
            f"{p.layout.micro_batch_size}: {p.time.step_time_s:.3f} s/step</summary>"
            + _caveats(caveats.get(p.rank, []))
            + _figures(figs)
            + _numbers(p.memory, p.time)
            + "</details>"
        )
    return _page(f"planner plan: {job.model.name} on {job.num_gpus} x {job.hardware.name}", body)


def compare_html(rows: list[tuple[str, str, list[str], bool]], names: list[str]) -> str:
    """`planner compare` as a table, the rows that differ highlighted."""
    diff = {i for i, (_, _, _, d) in enumerate(rows) if d}
    table = _table([""] + names, [[label] + vals for _, label, vals, _ in rows], diff)
    return _page(
        "planner compare",
        ["<p>Highlighted: the rows that differ; (+x%) against the first config.</p>", table],
    )
