"""The pipeline schedule itself: which block each pipeline rank runs when.

`pipeline.py` prices a step with the closed form m*t_max + (sum t_i - t_max)/v, whose bubble
for equal stages is (p - 1)/m for 1F1B and (p - 1)/(v*m) for interleaved 1F1B (Narayanan et
al. 2021 §2.2). This module builds the schedule that formula describes, block by block, so a
picture can show it and a test can check that its idle time is the formula's:

- order: each rank's sequence of forward (F) and backward (B) blocks, as Megatron-LM's
  `forward_backward_pipelining_without_interleaving` (warm-up of p - r - 1 forwards, then
  one forward one backward, then the cool-down backwards) and
  `..._with_interleaving` (micro-batches taken in groups of p per virtual stage, warm-up of
  2(p - r - 1) + (v - 1)p forward chunks, then 1F1B over chunks);
- timing: every block starts when its rank is free and its input has arrived (the previous
  stage's forward of the same micro-batch and chunk; the next stage's backward), with
  point-to-point transfers taken as free (the time model charges them inside each stage).

Chunk c of rank r holds the model's virtual stage c*p + r (Megatron's interleaving), so a
forward leaves the last rank's chunk c for the first rank's chunk c + 1.

DualPipe (`build_dualpipe_schedule`) is simulated from deepseek-ai/DualPipe's own order
(`DualPipe.step`'s eight steps, `dualpipe_order`): m/2 micro-batches enter at each end, each
rank holds stage r of one direction and stage p - 1 - r of the other, zero-bubble backwards
leave their weight gradients to later W blocks, and the outputs the code sends only after a
later chunk has run become available then. With equal stages (F 1, B 2, W 1) its busiest rank
idles exactly the report's (p/2 - 1)(F&B + B - 3W) (arXiv:2412.19437 Table 2; tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.layout import dualpipe_fits

__all__ = [
    "Block",
    "Schedule",
    "rank_order",
    "build_schedule",
    "dualpipe_order",
    "build_dualpipe_schedule",
]


@dataclass(frozen=True, slots=True)
class Block:
    """One forward or backward of one micro-batch through one virtual stage of one rank."""

    rank: int
    kind: str  # "F" forward, "B" backward (its recompute, if any, runs first), "W" a
    # deferred weight gradient (DualPipe's zero-bubble split: its "B" then computes the
    # input gradient only)
    micro_batch: int
    chunk: int  # virtual stage on this rank, 0..v-1 (DualPipe: the direction, 0 or 1)
    start: float
    end: float
    recompute: float = 0.0  # seconds at the start of a backward block spent recomputing


@dataclass(frozen=True)
class Schedule:
    p: int
    m: int
    v: int
    blocks: tuple[Block, ...]

    @property
    def makespan(self) -> float:
        return max((b.end for b in self.blocks), default=0.0)

    def busy(self, rank: int) -> float:
        return sum(b.end - b.start for b in self.blocks if b.rank == rank)

    @property
    def ideal(self) -> float:
        """The busiest rank's work: the step time without any bubble (m * t_max)."""
        return max((self.busy(r) for r in range(self.p)), default=0.0)

    @property
    def bubble_fraction(self) -> float:
        """Idle time of the busiest rank over its work: (makespan - ideal) / ideal."""
        ideal = self.ideal
        return (self.makespan - ideal) / ideal if ideal else 0.0

    def rank_blocks(self, rank: int) -> list[Block]:
        return sorted((b for b in self.blocks if b.rank == rank), key=lambda b: b.start)


def _chunk_sequence(m: int, group_size: int, v: int, *, backward: bool) -> list[tuple[int, int]]:
    """(micro-batch, chunk) in the order a rank runs them: groups of `group_size`
    micro-batches, each group through chunk 0..v-1 (forward) or v-1..0 (backward)."""
    out: list[tuple[int, int]] = []
    for g in range(0, m, group_size):
        group = range(g, min(g + group_size, m))
        chunks = range(v - 1, -1, -1) if backward else range(v)
        for c in chunks:
            out.extend((mb, c) for mb in group)
    return out


def group_size(p: int, m: int, v: int) -> int:
    """Micro-batches per group of the interleaved schedule: Megatron's default p
    (--microbatch-group-size-per-virtual-pipeline-stage). Megatron refuses a last group
    smaller than p (schedules.py: 'dependency bubbles'; in this simulation that order can
    deadlock), so for m not a multiple of p the setting it accepts for any m >= p is used:
    one group of m, whose bubble is again (p-1)/(v*m)."""
    return p if v == 1 or m % p == 0 else m


def rank_order(p: int, m: int, v: int, rank: int) -> list[tuple[str, int, int]]:
    """The (kind, micro-batch, chunk) sequence rank `rank` of `p` runs in one step."""
    if v == 1 or p == 1:
        fwd = [(mb, 0) for mb in range(m)]
        bwd = list(fwd)
        warmup = min(p - rank - 1, m)
    else:
        g = group_size(p, m, v)
        fwd = _chunk_sequence(m, g, v, backward=False)
        bwd = _chunk_sequence(m, g, v, backward=True)
        warmup = min(2 * (p - rank - 1) + (v - 1) * g, m * v)
    order = [("F", *x) for x in fwd[:warmup]]
    steady = len(fwd) - warmup
    for i in range(steady):
        order.append(("F", *fwd[warmup + i]))
        order.append(("B", *bwd[i]))
    order += [("B", *x) for x in bwd[steady:]]
    return order


def _dependency(
    kind: str, mb: int, chunk: int, rank: int, p: int, v: int
) -> tuple[str, int, int, int] | None:
    """The block whose end this block waits for, as (kind, mb, chunk, rank), or None."""
    if kind == "F":
        if rank > 0:
            return ("F", mb, chunk, rank - 1)
        return ("F", mb, chunk - 1, p - 1) if chunk > 0 else None
    if rank < p - 1:
        return ("B", mb, chunk, rank + 1)
    if chunk < v - 1:
        return ("B", mb, chunk + 1, 0)
    return ("F", mb, chunk, rank)  # the loss: the last stage's own forward


def build_schedule(
    *,
    forward: list[float],
    backward: list[float],
    m: int,
    v: int = 1,
    recompute: list[float] | None = None,
) -> Schedule:
    """Simulate one step: `forward[r]`, `backward[r]` are rank r's seconds per micro-batch
    through all its layers (backward including `recompute[r]`); each of its v chunks takes
    1/v of them. Returns every block with its start and end."""
    p = len(forward)
    if p < 1 or len(backward) != p or m < 1 or v < 1:
        raise ValueError("build_schedule needs p >= 1 stages, m >= 1 and v >= 1")
    if p == 1:
        v = 1  # no pipeline: virtual stages change nothing (Megatron needs pp > 1)
    rec = recompute or [0.0] * p
    orders = [rank_order(p, m, v, r) for r in range(p)]
    done: dict[tuple[str, int, int, int], float] = {}
    free = [0.0] * p
    pos = [0] * p
    blocks: list[Block] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                kind, mb, c = orders[r][pos[r]]
                dep = _dependency(kind, mb, c, r, p, v)
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep is not None else 0.0)
                dur = (forward[r] if kind == "F" else backward[r]) / v
                end = start + dur
                blocks.append(Block(r, kind, mb, c, start, end, rec[r] / v if kind == "B" else 0.0))
                done[(kind, mb, c, r)] = free[r] = end
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for the orders above; guards a future edit
            raise RuntimeError(f"pipeline schedule p={p} m={m} v={v} deadlocks")
    return Schedule(p, m, v, tuple(blocks))


# ----------------------------------------------------------------------------- DualPipe

DualPipeOp = tuple[Any, ...]
"""One item of `dualpipe_order`: ("C", comps), ("S", kind, phase) or ("W",)."""
_Key = tuple[str, int, int, int]  # (kind, direction, micro-batch, stage)


def dualpipe_order(p: int, m: int, rank: int) -> list[DualPipeOp]:
    """The operations rank `rank` of `p` runs in one DualPipe step of m micro-batches, m/2
    fed from each end: the eight steps of deepseek-ai/DualPipe `DualPipe.step` (h = p/2,
    k = min(rank, p - 1 - rank), n = m/2):
        1  nF0       2(h - k - 1) x  F0
        2  nF0F1     (k + 1)      x  F0 F1
        3  nB1W1F1   (h - k - 1)  x  B1(zb) W F1
        4  nF0B1F1B0 (n - p + k + 1) x [F0 B1] [F1 B0]   (a forward and a backward in one
                                                          overlapped operation)
        5  nB1F1B0   (h - k - 1)  x  B1 [F1 B0]
        6  nB1B0     (k + 1)      x  B1 B0 (zero-bubble from the middle iteration on)
        7  nWB0      (h - k - 1)  x  W B0(zb)
        8  nW        (k + 1)      x  W
    Each item is ("C", ((kind, phase, zero_bubble, sent), ...)) for one compute operation
    (`sent`: its output goes out when the operation ends), ("S", kind, phase) for a send the
    code makes later (step 2 holds a forward's output back until the next forward of the
    other phase has run; the middle ranks' first step-4 iteration runs F0 and B1 apart and
    sends after both), or ("W",) for a weight gradient. Phase 0 is the forward direction
    (rank 0 towards rank p - 1) on the first half of the ranks and the reverse direction on
    the second half; a zero-bubble backward computes the input gradient and queues its weight
    gradient, which the next W runs (first in, first out)."""
    h, k, n = p // 2, min(rank, p - 1 - rank), m // 2
    middle = k == h - 1
    out: list[DualPipeOp] = []
    out += [("C", (("F", 0, False, True),))] * (2 * (h - k - 1))
    for i in range(k + 1):
        out.append(("C", (("F", 0, False, middle),)))
        out.append(("C", (("F", 1, False, not middle or i < k),)))
        if not middle:
            out.append(("S", "F", 0))
    out += [("C", (("B", 1, True, True),)), ("W",), ("C", (("F", 1, False, True),))] * (h - k - 1)
    both = ("C", (("F", 1, False, True), ("B", 0, False, True)))
    for i in range(n - p + k + 1):
        if i == 0 and middle:
            out += [("C", (("F", 0, False, False),)), ("S", "F", 1)]
            out += [("C", (("B", 1, False, False),)), ("S", "F", 0), ("S", "B", 1)]
        else:
            out.append(("C", (("F", 0, False, True), ("B", 1, False, True))))
        out.append(both)
    out += [("C", (("B", 1, False, True),)), both] * (h - k - 1)
    zb = False
    for i in range(k + 1):
        if i == (k + 1) // 2 and k % 2 == 1:
            zb = True
        out.append(("C", (("B", 1, zb, True),)))
        if i == (k + 1) // 2 and k % 2 == 0:
            zb = True
        out.append(("C", (("B", 0, zb, True),)))
    out += [("W",), ("C", (("B", 0, True, True),))] * (h - k - 1)
    out += [("W",)] * (k + 1)
    return out


def build_dualpipe_schedule(
    *,
    forward: list[float],
    backward: list[float],
    weight: list[float],
    m: int,
    recompute: list[float] | None = None,
) -> Schedule:
    """Simulate one DualPipe step (`dualpipe_order`): `forward[r]`, `backward[r]` are rank
    r's seconds per micro-batch (backward including `recompute[r]`), `weight[r]` the
    weight-gradient part of its backward, which a zero-bubble backward leaves to a later W
    block. Rank r holds stage r of the forward direction (direction 0: rank 0 to p - 1) and
    stage p - 1 - r of the reverse one; a forward waits for the previous stage's forward of
    the same micro-batch and direction, a backward for the next stage's backward (the last
    stage's for its own forward: the loss), transfers free, as `build_schedule`. A block's
    `chunk` is its direction."""
    p = len(forward)
    why = dualpipe_fits(p, m)
    if why is not None or len(backward) != p or len(weight) != p:
        raise ValueError(why or "build_dualpipe_schedule needs one time per rank")
    rec = recompute or [0.0] * p
    orders = [dualpipe_order(p, m, r) for r in range(p)]
    # (kind, direction, micro-batch, stage) -> when the next stage can have it; and when it
    # ended on its own rank (the last stage's backward waits for its own forward: the loss)
    sent: dict[_Key, float] = {}
    ended: dict[_Key, float] = {}
    counts = [{(k, d): 0 for k in "FB" for d in (0, 1)} for _ in range(p)]
    held: list[dict[tuple[str, int], list[_Key]]] = [{} for _ in range(p)]  # sent later
    queued: list[list[tuple[int, int]]] = [[] for _ in range(p)]  # zero-bubble weight grads
    free = [0.0] * p
    pos = [0] * p
    blocks: list[Block] = []
    remaining = sum(len(o) for o in orders)

    def key(r: int, kind: str, d: int) -> _Key:
        s = r if d == 0 else p - 1 - r  # rank r's stage in direction d
        return (kind, d, counts[r][(kind, d)], s)

    def needs(kind: str, d: int, mb: int, s: int) -> tuple[dict[_Key, float], _Key] | None:
        if kind == "F":
            return (sent, ("F", d, mb, s - 1)) if s > 0 else None
        return (sent, ("B", d, mb, s + 1)) if s < p - 1 else (ended, ("F", d, mb, s))

    while remaining:
        progressed = False
        for r in range(p):
            second = int(r >= p // 2)
            while pos[r] < len(orders[r]):
                op = orders[r][pos[r]]
                if op[0] == "S":  # a held-back output goes out as the rank moves on
                    _, kind, phase = op
                    sent[held[r][(kind, phase ^ second)].pop(0)] = free[r]
                elif op[0] == "W":
                    d, mb = queued[r].pop(0)
                    blocks.append(Block(r, "W", mb, d, free[r], free[r] + weight[r]))
                    free[r] += weight[r]
                else:
                    comps = [(kind, phase ^ second, zb, out) for kind, phase, zb, out in op[1]]
                    keys = [key(r, kind, d) for kind, d, _, _ in comps]
                    deps = [needs(*k) for k in keys]
                    if any(dep is not None and dep[1] not in dep[0] for dep in deps):
                        break
                    t = max([free[r]] + [dep[0][dep[1]] for dep in deps if dep is not None])
                    for (kind, d, zb, _), k in zip(comps, keys):
                        dur = forward[r] if kind == "F" else backward[r] - weight[r] * zb
                        blocks.append(
                            Block(r, kind, k[2], d, t, t + dur, rec[r] if kind == "B" else 0.0)
                        )
                        t += dur
                        ended[k] = t
                        counts[r][(kind, d)] += 1
                        if zb:
                            queued[r].append((d, k[2]))
                    for (kind, d, _, out), k in zip(comps, keys):
                        if out:
                            sent[k] = t
                        else:
                            held[r].setdefault((kind, d), []).append(k)
                    free[r] = t
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for DualPipe's order; guards a future edit
            raise RuntimeError(f"DualPipe schedule p={p} m={m} deadlocks")
    return Schedule(p, m, 1, tuple(blocks))
