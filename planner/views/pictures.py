"""What the pictures show, as plain data: the pipeline schedule, the memory per pipeline
rank, the step-time waterfall, the GPU grid and the plan's step time vs memory.

Pure functions from a job, a layout and the cost model to small frozen records, and from
those records to rows of (character, kind) cells for a terminal of a given width. The rich
renderables (report.py) and the SVG/HTML (html.py) both draw these records, so the terminal
and the report always show the same numbers. `KINDS` names every kind of cell with its
colour and its character (the character alone reads without colour).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost import cost_model
from planner.cost.pipeline import bubble_fraction
from planner.cost.schedule import Schedule, build_dualpipe_schedule, build_schedule
from planner.layout import bubble_formula, dualpipe_fits
from planner.units import GiB

__all__ = [
    "KINDS",
    "SchedulePicture",
    "schedule_picture",
    "schedule_cells",
    "MemoryPicture",
    "memory_picture",
    "bar_cells",
    "WaterfallPicture",
    "waterfall_picture",
    "waterfall_cells",
    "layout_pictures",
    "rank_coords",
    "node_text",
    "GridPicture",
    "grid_picture",
    "ScatterPicture",
    "scatter_picture",
    "scatter_cells",
    "SHOWABLE",
]

SHOWABLE = ("schedule", "memory", "time", "grid", "scatter")
"""Pictures `--show` accepts (scatter: plan only)."""

KINDS: dict[str, tuple[str, str]] = {
    # kind: (colour, character)
    "F": ("#3b7dd8", "F"),  # forward (colours used by no other picture)
    "B": ("#3aa35b", "B"),  # backward
    "R": ("#f2c14e", "r"),  # recompute (the start of a backward)
    "W": ("#8cd17d", "W"),  # a deferred weight gradient (DualPipe's zero-bubble backwards)
    "idle": ("#e8e8e8", "·"),  # pipeline bubble
    "weights": ("#4c78a8", "W"),
    "gradients": ("#f28e2b", "G"),
    "optimizer": ("#e15759", "O"),
    "activations": ("#59a14f", "A"),
    "other": ("#9c9c9c", "x"),
    "free": ("#ffffff", " "),
    "headroom": ("#fbe3e3", "-"),
    "over": ("#b40426", "!"),
    "compute": ("#4c78a8", "#"),
    "bubble": ("#bab0ac", "~"),
    "tp": ("#f28e2b", "t"),
    "pp": ("#76b7b2", "p"),
    "dp": ("#e15759", "d"),
    "ep": ("#b07aa1", "e"),
    "cp": ("#edc948", "c"),
    "optimizer_step": ("#9c755f", "o"),
    "point": ("#9c9c9c", "·"),
    "top": ("#4c78a8", "o"),
    "pick": ("#e15759", "*"),
}

Cells = list[tuple[str, str]]


def _scale(width: int, total: float) -> float:
    return width / total if total > 0 else 0.0


# ------------------------------------------------------------------------------ schedule


@dataclass(frozen=True)
class SchedulePicture:
    """One step of the pipeline: every rank's forward/backward blocks in seconds."""

    schedule: Schedule
    p: int
    m: int
    v: int
    bubble_formula: float  # the schedule's closed form (layout.bubble_fraction)
    recompute: bool
    pipeline_schedule: str = "1f1b"  # the layout's (DualPipe drawn in its own order)

    @property
    def bubble_drawn(self) -> float:
        return self.schedule.bubble_fraction

    @property
    def name(self) -> str:
        if self.drawn_dualpipe:
            return "DualPipe"
        return "interleaved 1F1B" if self.v > 1 else "1F1B"

    @property
    def drawn_dualpipe(self) -> bool:
        """The blocks are DualPipe's own schedule (cost.schedule.build_dualpipe_schedule)."""
        return _draws_dualpipe(self.pipeline_schedule, self.p, self.m)

    @property
    def why_not_drawn(self) -> str | None:
        """Why a DualPipe or DualPipeV layout is drawn in 1F1B order, or None."""
        if self.pipeline_schedule == "dualpipev":
            return "planner does not draw DualPipeV's schedule"
        if self.pipeline_schedule == "dualpipe":
            return dualpipe_fits(self.p, self.m)
        return None

    @property
    def legend(self) -> list[tuple[str, str]]:
        """(kind, words) of what the rows show, idle last."""
        items = [("F", "forward"), ("B", "backward")]
        items += [("R", "recompute")] if self.recompute else []
        if self.drawn_dualpipe:
            items[1] = ("B", "backward (its input gradient, where a W follows)")
            items.append(("W", "weight gradient left for later (zero bubble)"))
        return items + [("idle", "idle (bubble)")]

    @property
    def odd_note(self) -> str | None:
        """What the lower-case blocks are, or None."""
        if self.drawn_dualpipe:
            return "f b w the micro-batches fed from the last rank (the reverse direction)"
        return "f b the odd virtual stages" if self.v > 1 else None

    def caption(self) -> str:
        p, m, v = self.p, self.m, self.v
        if p == 1:
            return f"no pipeline (pp 1): {m} micro-batches back to back, no bubble"
        if self.pipeline_schedule in ("dualpipe", "dualpipev"):
            dual = "DualPipe" if self.pipeline_schedule == "dualpipe" else "DualPipeV"
            formula = bubble_formula(p, m, v, self.pipeline_schedule)
            ends = f" ({m // 2} from each end)" if dual == "DualPipe" else ""
            head = (
                f"{dual}, {p} stages, {m} micro-batches{ends}: bubble {formula} = "
                f"{_share(self.bubble_formula)} of the ideal step (DeepSeek-V3 Table 2 with "
                "B = 2F and W = F; the time model takes F, B and W from each stage)"
            )
            if self.drawn_dualpipe:
                return (
                    head + f"; drawn in DualPipe's own order (deepseek-ai/DualPipe), which "
                    f"idles {_share(self.bubble_drawn)}"
                )
            return (
                head + f". Drawn: the same stage times in {self.name} order, which idles "
                f"{_share(self.bubble_drawn)} ({self.why_not_drawn})"
            )
        formula = f"(p-1)/(v*m) = ({p}-1)/({v}*{m})" if v > 1 else f"(p-1)/m = ({p}-1)/{m}"
        text = (
            f"{self.name}, {p} stages, {m} micro-batches"
            + (f", {v} virtual stages per rank" if v > 1 else "")
            + f": bubble {formula} = {_share(self.bubble_formula)} of the ideal step"
        )
        if v > 1 and m % p:
            text += (
                f"; Megatron-LM's default groups of p micro-batches per virtual stage "
                f"need m a multiple of p (it refuses m {m} on pp {p}): drawn with one group "
                f"of {m} (--microbatch-group-size-per-virtual-pipeline-stage {m}), "
                f"which idles {_share(self.bubble_drawn)}"
            )
        elif abs(self.bubble_drawn - self.bubble_formula) > 0.005:
            text += (
                f"; the schedule drawn idles {_share(self.bubble_drawn)} (the closed form "
                "charges fill and drain at the slowest stage's time)"
            )
        return text


def _draws_dualpipe(schedule: str, p: int, m: int) -> bool:
    """A DualPipe layout that DualPipe's step accepts is drawn in DualPipe's own order."""
    return schedule == "dualpipe" and p > 1 and dualpipe_fits(p, m) is None


def _share(x: float) -> str:
    """19% or 0.4%: a whole percent unless that would round a small bubble to 0%."""
    return f"{x:.1%}" if 0 < x < 0.095 else f"{x:.0%}"


def schedule_picture(job, lay, cm=None) -> SchedulePicture:
    """The schedule the time model prices, from the cost model's per-stage times."""
    cm = cm or cost_model(job)
    stages = cm.stage_times(lay)
    m = max(1, lay.num_microbatches(job.training.global_batch_size))
    times = dict(
        forward=[f for f, _, _ in stages],
        backward=[b for _, b, _ in stages],
        recompute=[r for _, _, r in stages],
        m=m,
    )
    if _draws_dualpipe(lay.pipeline_schedule, lay.pp, m):
        # W: half the backward without its recompute (the weight-gradient GEMMs match the
        # input-gradient ones), as the time model's DualPipe bubble takes it
        weight = [(b - r) / 2 for _, b, r in stages]
        sched = build_dualpipe_schedule(weight=weight, **times)
    else:
        sched = build_schedule(v=lay.vpp, **times)
    return SchedulePicture(
        sched,
        lay.pp,
        m,
        lay.vpp,
        bubble_fraction(lay.pp, m, lay.vpp, lay.pipeline_schedule),
        lay.recompute != "none",
        lay.pipeline_schedule,
    )


def schedule_cells(pic: SchedulePicture, width: int) -> list[Cells]:
    """One row of `width` cells per pipeline rank: the block running at each cell's middle
    (F, B, R for the recompute part of a backward, idle; with virtual stages, the odd ones
    in lower case: f, b); a block wide enough shows its micro-batch number (1-based)."""
    sched = pic.schedule
    k = _scale(width, sched.makespan)
    blocks = [sched.rank_blocks(r) for r in range(pic.p)]
    # numbers only when every block has room for its own: a few numbered blocks among
    # unnumbered ones read as a different schedule
    labelled = all(
        round(b.end * k) - round(b.start * k) >= len(str(b.micro_batch + 1)) + 1
        for row in blocks
        for b in row
    )
    rows = []
    for r in range(pic.p):
        row: Cells = [(KINDS["idle"][1], "idle")] * width
        for b in blocks[r]:
            lo, hi = round(b.start * k), round(b.end * k)
            rec_end = round((b.start + b.recompute) * k)
            for c in range(lo, min(hi, width)):
                kind = "R" if b.kind == "B" and c < rec_end else b.kind
                ch = KINDS[kind][1]
                # virtual stages alternate case (F f F f ...) so the chunks can be told apart
                row[c] = (ch.lower() if kind != "R" and b.chunk % 2 else ch, kind)
            if labelled:
                for i, ch in enumerate(str(b.micro_batch + 1)):
                    if lo + i < width:
                        row[lo + i] = (ch, row[lo + i][1])
        rows.append(row)
    return rows


# -------------------------------------------------------------------------------- memory

MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "other")


@dataclass(frozen=True)
class MemoryPicture:
    """Per pipeline rank: bytes by component, against capacity and the usable share."""

    ranks: list  # MemoryBreakdown per pipeline rank, rank 0 first
    capacity: float
    usable: float  # capacity * (1 - headroom)
    headroom: float

    def parts(self, i: int) -> list[tuple[str, float]]:
        mem = self.ranks[i]
        return [(name, getattr(mem, name)) for name in MEMORY_PARTS]

    @property
    def worst(self) -> int:
        return max(range(len(self.ranks)), key=lambda i: self.ranks[i].total)

    def caption(self) -> str:
        w = self.ranks[self.worst]
        return (
            f"most loaded: pipeline rank {self.worst} ({w.stage}), {w.total / GiB:.1f} GiB "
            f"of {self.capacity / GiB:.1f} GiB; usable {self.usable / GiB:.1f} GiB "
            f"(headroom {self.headroom:.0%})"
        )


def memory_picture(job, lay, cm=None, *, headroom: float) -> MemoryPicture:
    cm = cm or cost_model(job)
    ranks = cm.memory_by_rank(lay)
    cap = ranks[0].capacity
    return MemoryPicture(ranks, cap, cap * (1 - headroom), headroom)


def bar_cells(pic: MemoryPicture, i: int, width: int) -> Cells:
    """One rank's stacked bar on a scale where `width` cells are the larger of the capacity
    and the rank's total; free cells below the usable line, headroom cells above it, and
    `!` past the capacity."""
    full = max(pic.capacity, max(r.total for r in pic.ranks))
    k = _scale(width, full)
    cells: Cells = []
    edge = 0.0
    for name, val in pic.parts(i):
        edge += val
        n = round(edge * k) - len(cells)
        cells += [(KINDS[name][1], name)] * max(0, n)
    usable_c, cap_c = round(pic.usable * k), round(pic.capacity * k)
    for c in range(width):
        if c < len(cells):
            if c >= cap_c:
                cells[c] = (KINDS["over"][1], "over")
            continue
        cells.append(
            (KINDS["headroom"][1], "headroom")
            if usable_c <= c < cap_c
            else (KINDS["free"][1], "free")
        )
    if 0 < usable_c < width:  # the usable line, visible over free cells and bars alike
        ch, kind = cells[usable_c]
        cells[usable_c] = ("|", kind if kind not in ("free", "headroom") else "headroom")
    return cells[:width]


# ------------------------------------------------------------------------------ waterfall

WATERFALL = (
    ("compute", "compute (incl. recompute)", "compute_s"),
    ("bubble", "pipeline bubble", "bubble_s"),
    ("tp", "TP communication", "tp_comm_s"),
    ("cp", "CP communication", "cp_comm_s"),
    ("ep", "EP communication", "ep_comm_s"),
    ("pp", "PP communication", "pp_comm_s"),
    ("dp", "DP communication", "dp_comm_s"),
    ("optimizer_step", "optimizer step", "optimizer_s"),
)


@dataclass(frozen=True)
class WaterfallPicture:
    """The step as consecutive parts: (kind, label, start, seconds)."""

    steps: list[tuple[str, str, float, float]]
    total: float


def waterfall_picture(tm) -> WaterfallPicture:
    steps, at = [], 0.0
    for kind, label, attr in WATERFALL:
        sec = getattr(tm, attr)
        if kind in ("compute", "bubble", "optimizer_step") or sec > 0:
            steps.append((kind, label, at, sec))
            at += sec
    return WaterfallPicture(steps, tm.step_time_s)


def waterfall_cells(pic: WaterfallPicture, i: int, width: int) -> Cells:
    kind, _, start, sec = pic.steps[i]
    k = _scale(width, pic.total)
    lo, hi = round(start * k), round((start + sec) * k)
    if sec > 0 and hi == lo:
        hi = lo + 1  # a part too small to see still gets a mark
    hi = min(hi, width)
    return (
        [(" ", "free")] * lo + [(KINDS[kind][1], kind)] * (hi - lo) + [(" ", "free")] * (width - hi)
    )


# ---------------------------------------------------------------------------- GPU grid


@dataclass(frozen=True)
class GroupRow:
    axis: str
    degree: int
    stride: int
    ranks: list[int]  # the group that holds rank 0
    crosses_network: bool
    bandwidth_gb_per_s: float  # achieved, as the cost model uses it
    nodes: int  # nodes the group spans

    def describe(self, gpus_per_node: int) -> str:
        shown = self.ranks if len(self.ranks) <= 6 else self.ranks[:4] + ["...", self.ranks[-1]]
        where = f"across {self.nodes} nodes" if self.nodes > 1 else "inside one node"
        return f"{', '.join(map(str, shown))} ({where})"


@dataclass(frozen=True)
class GridPicture:
    world: int
    gpus_per_node: int
    domain: int
    groups: list[GroupRow]
    coords: list[dict]  # per drawn GPU: rank, node, tp, cp, dp, pp indices
    drawn: int  # GPUs drawn (the first `drawn` ranks)


def rank_coords(rank: int, lay) -> dict:
    """Megatron's rank order, innermost first: tp, cp, dp, pp."""
    return {
        "rank": rank,
        "tp": rank % lay.tp,
        "cp": rank // lay.tp % lay.cp,
        "dp": rank // (lay.tp * lay.cp) % lay.dp,
        "pp": rank // (lay.tp * lay.cp * lay.dp),
    }


def node_text(coords: list[dict]) -> str:
    """'ranks 0-7: tp 0-7, cp 0, dp 0, pp 0' for one node's GPUs (a node holds consecutive
    ranks, so each axis's indices on it form a range)."""

    def span(key: str) -> str:
        vals = sorted({c[key] for c in coords})
        return f"{key} {vals[0]}" if len(vals) == 1 else f"{key} {vals[0]}-{vals[-1]}"

    return f"ranks {coords[0]['rank']}-{coords[-1]['rank']}: " + ", ".join(
        span(k) for k in ("tp", "cp", "dp", "pp")
    )


def grid_picture(job, lay, cm=None, *, max_drawn: int = 512) -> GridPicture:
    """Which ranks form each axis's groups and which link each uses (the cost model's
    placement: a group of n ranks `stride` apart inside one NVLink domain runs on NVLink)."""
    cm = cm or cost_model(job)
    hw = job.hardware
    gpn = hw.gpus_per_node
    axes = [
        ("tp", lay.tp, 1),
        ("cp", lay.cp, lay.tp),
        ("dp", lay.dp, lay.tp * lay.cp),
        ("pp", lay.pp, lay.tp * lay.cp * lay.dp),
    ]
    if lay.ep > 1:
        axes.insert(2, ("ep", lay.ep, lay.etp))
    groups = []
    for axis, n, stride in axes:
        if n <= 1:
            continue
        ranks = [i * stride for i in range(n)]
        link = cm.link(n, stride)
        nodes = len({r // gpn for r in ranks})
        groups.append(
            GroupRow(axis, n, stride, ranks, link.crosses_network, link.bandwidth / 1e9, nodes)
        )
    drawn = min(lay.world_size, max_drawn)
    coords = []
    for r in range(drawn):
        c = rank_coords(r, lay)
        c["node"] = r // gpn
        coords.append(c)
    return GridPicture(lay.world_size, gpn, hw.nvlink_domain_size, groups, coords, drawn)


# ------------------------------------------------------------------------------ scatter


@dataclass(frozen=True)
class ScatterPicture:
    """Feasible layouts as (memory GiB, step seconds, name, kind): kind 'point', 'top'
    (rank shown in `label`) or 'pick' (the seven-step pick)."""

    points: list[tuple[float, float, str, str, str]]  # (gib, step_s, name, kind, label)
    capacity_gib: float
    usable_gib: float
    sample: str  # what the cloud is

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        xs = [p[0] for p in self.points] + [self.usable_gib]
        ys = [p[1] for p in self.points]
        return min(xs), max(xs), min(ys), max(ys)


def scatter_picture(result, cloud: list | None = None, *, order: str = "fastest") -> ScatterPicture:
    """`result`'s top plans and seven-step pick over `cloud` (more feasible plans: Plan
    objects from a wider search, the first in `order`; default: only the top plans)."""
    job = result.job
    cap = job.hardware.memory_gib
    pts, seen = [], set()
    top = {p.layout: p.rank for p in result.plans}
    for p in cloud or []:
        if p.layout in top or p.layout in seen:
            continue
        seen.add(p.layout)
        pts.append((p.memory.total / GiB, p.time.step_time_s, _label(p.layout), "point", ""))
    for p in reversed(result.plans):  # rank 1 drawn last, over any plan at its point
        kind = "pick" if result.pick_rank == p.rank else "top"
        pts.append((p.memory.total / GiB, p.time.step_time_s, _label(p.layout), kind, str(p.rank)))
    if result.pick is not None and result.pick_rank is None:
        pk = result.pick
        pts.append((pk.memory.total / GiB, pk.time.step_time_s, _label(pk.layout), "pick", "*"))
    sample = (
        f"the {len(seen) + len(result.plans)} {order} feasible layouts"
        if cloud
        else f"the top {len(result.plans)}"
    )
    return ScatterPicture(pts, cap, cap * (1 - result.headroom), sample)


def _label(lay) -> str:
    return f"{lay.name} mbs {lay.micro_batch_size} zero {lay.zero} recompute {lay.recompute}"


def scatter_cells(pic: ScatterPicture, width: int, height: int) -> list[Cells]:
    """A character plot, memory across (left to right), step time up (fastest at the
    bottom): '·' other feasible layouts, the rank digit (1-9, then 'o') for the top plans,
    '*' the seven-step pick. Later points draw over earlier ones."""
    x0, x1, y0, y1 = pic.bounds
    grid: list[Cells] = [[(" ", "free")] * width for _ in range(height)]
    for gib, sec, _, kind, label in pic.points:
        cx = round((gib - x0) / (x1 - x0) * (width - 1)) if x1 > x0 else 0
        cy = round((sec - y0) / (y1 - y0) * (height - 1)) if y1 > y0 else 0
        ch = {"point": "·", "pick": "*"}.get(kind, label if len(label) == 1 else "o")
        row = grid[height - 1 - cy]
        if kind == "point" and row[cx][1] != "free":
            continue
        row[cx] = (ch, kind)
    return grid


# ------------------------------------------------------------------------------ together


def layout_pictures(job, lay, *, show, headroom: float, cm=None) -> dict:
    """The pictures named in `show` (a subset of schedule, memory, time, grid) for one
    layout: {name: picture}, in the order given."""
    cm = cm or cost_model(job)
    out = {}
    for name in show:
        if name == "schedule":
            out[name] = schedule_picture(job, lay, cm)
        elif name == "memory":
            out[name] = memory_picture(job, lay, cm, headroom=headroom)
        elif name == "time":
            out[name] = waterfall_picture(cm.time(lay))
        elif name == "grid":
            out[name] = grid_picture(job, lay, cm)
    return out
