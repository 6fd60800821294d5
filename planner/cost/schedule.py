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
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Block", "Schedule", "rank_order", "build_schedule"]


@dataclass(frozen=True, slots=True)
class Block:
    """One forward or backward of one micro-batch through one virtual stage of one rank."""

    rank: int
    kind: str  # "F" forward, "B" backward (its recompute, if any, runs first)
    micro_batch: int
    chunk: int  # virtual stage on this rank, 0..v-1
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
