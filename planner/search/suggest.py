"""When nothing fits: the constraint that binds (`_binding`: a pinned degree, a structural
rule, the batch, or memory with the closest misfit), and the changes that make a layout fit
(`_suggestions`: other pinned values, the nearest global batches, half the sequence, the
nearest whole-node GPU counts), each checked by searching again (`_Tries`, at most
MAX_RERUNS searches within SUGGEST_BUDGET_S).
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Mapping
from dataclasses import dataclass

from planner.config import Job
from planner.rules import batch_ok, split_options
from planner.search.result import Plan, SearchResult
from planner.search.space import ZERO, SearchOptions, _pow2_upto
from planner.units import divisors

MAX_RERUNS = 12
"""Searches `_suggestions` may run to check its suggestions (each ~0.01-0.5 s)."""
SUGGEST_BUDGET_S = 3.0
"""... and the seconds they may take together: no new search starts after this (a slow
search space then checks fewer suggestions, and prints only those it checked)."""


@dataclass(frozen=True)
class Suggestion:
    """One change to the `plan` command that makes a layout fit, and the best it gives."""

    args: tuple[str, ...]  # e.g. ("--gpus", "96"): replace these options
    why: str
    best: Plan
    global_batch_size: int  # of the job searched with the change
    drop: tuple[str, ...] = ()  # options to remove (e.g. "--fix")

    @property
    def option(self) -> str:
        return " ".join(self.args) if self.args else "without " + " ".join(self.drop)

    def line(self) -> str:
        b = self.best
        return (
            f"{self.option}: {self.why}; best {b.layout.name} zero {b.layout.zero} "
            f"recompute {b.layout.recompute} micro-batch {b.layout.micro_batch_size}: "
            f"{b.time.step_time_s:.2f} s/step, {b.memory.total / 2**30:.1f} GiB/GPU"
        )

    def as_dict(self) -> dict:
        b = self.best
        return {
            "option": self.option,
            "args": list(self.args),
            "drop": list(self.drop),
            "why": self.why,
            "layout": b.layout.as_dict(self.global_batch_size),
            "memory": b.memory.as_dict(),
            "time": b.time.as_dict(),
        }


class _Tries:
    """Re-runs of the search with one change, at most MAX_RERUNS; remembers what it tried."""

    def __init__(self, job: Job, opts: SearchOptions):
        self.job, self.opts, self.left = job, opts, MAX_RERUNS
        self.deadline = _time.perf_counter() + SUGGEST_BUDGET_S

    def best(
        self,
        *,
        job: Job | None = None,
        fix: dict | None = None,
        max_tp: int | None = None,
        reserve: int = 0,
    ) -> Plan | None:
        """The best plan with the change, or None (also when fewer than `reserve` + 1
        searches are left: those are kept for the suggestions tried later)."""
        if self.left <= reserve or _time.perf_counter() > self.deadline:
            return None
        self.left -= 1
        from dataclasses import replace

        from planner.search import search  # the package's (a test may stand in for it)

        opts = replace(
            self.opts,
            top=1,
            tokens=None,
            fix=self.opts.fix if fix is None else fix,
            max_tp=self.opts.max_tp if max_tp is None else max_tp,
        )
        got = search(job or self.job, opts, suggest=False)
        return got.best


def _with(job: Job, **training) -> Job:
    from dataclasses import replace

    return replace(job, training=job.training.model_copy(update=training))


def _fix_text(fix: Mapping) -> str:
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in fix.items())


def _near(values, x, n_below: int = 1, n_above: int = 1) -> list:
    below = sorted((v for v in set(values) if v < x), reverse=True)[:n_below]
    above = sorted(v for v in set(values) if v > x)[:n_above]
    return below + above


def _nice_counts(job: Job, lo: float, hi: float) -> list[int]:
    """Whole-node GPU counts with many divisors (1, 2, 3 x powers of two nodes) in [lo, hi]."""
    gpn = job.hardware.gpus_per_node
    out, k = set(), 1
    while k * gpn <= hi:
        for mult in (1, 3):
            n = k * mult * gpn
            if lo <= n <= hi:
                out.add(n)
        k *= 2
    return sorted(out)


def _states_floor(job: Job, usable: float) -> float:
    """GPUs below which the model states alone cannot fit however they are sharded:
    bytes per parameter x parameters / usable bytes per GPU (ZeRO-3 over every GPU)."""
    from planner.cost.params import total_params

    per = 18 if job.training.accounting == "megatron" else 16
    return per * total_params(job.model) / usable


def _binding(result: SearchResult, opts: SearchOptions) -> str:
    """The constraint that removed every layout, with its numbers."""
    job, pruned = result.job, result.pruned
    N, gbs = job.num_gpus, job.training.global_batch_size
    usable = job.hardware.memory_gib * 2**30 * (1 - opts.headroom)
    structural = {r: c for r, c in pruned.items() if r != "fits-in-memory"}
    if result.closest is None:
        pins = _pin_problems(job, opts)
        if pins or not structural:
            return "; ".join(pins) or "no layout to search: check --fix"
        rule, count = max(structural.items(), key=lambda kv: kv[1])
        return f"{rule} removed every layout the other rules left ({count:,}): " + _rule_detail(
            rule, job, opts
        )
    lay, mem = result.closest
    short = mem.total - usable
    closest = (
        f"the closest layout, {lay.name} zero {lay.zero} recompute {lay.recompute} "
        f"micro-batch {lay.micro_batch_size}, needs {mem.total / 2**30:.1f} GiB per GPU, "
        f"{short / 2**30:.1f} GiB more than the {usable / 2**30:.1f} GiB usable"
    )
    if not batch_ok(gbs, lay.micro_batch_size, lay.dp):
        # the closest by memory is a layout the batch rules out: the batch binds first
        ok = [d for d in divisors(N) if gbs % d == 0]
        return (
            f"batch-divisible: the global batch {gbs} needs micro-batch x dp to divide it, "
            f"and of the dp a {N}-GPU layout can have only {', '.join(map(str, ok))} do; "
            f"none of those layouts fits, and by memory alone {closest}"
        )
    text = "memory: " + closest
    floor = _states_floor(job, usable)
    if floor > N:
        text += (
            f"; the model states alone need {math.ceil(floor)} or more GPUs "
            f"however they are sharded"
        )
    return text


def _pin_problems(job: Job, opts: SearchOptions) -> list[str]:
    """Pinned degrees that leave the search nothing, each with the rule and nearest values."""
    m, N, fix = job.model, job.num_gpus, opts.fix
    out = []
    tp = fix.get("tp")
    if tp is not None:
        ok = [
            t
            for t in divisors(N)
            if m.num_attention_heads % t == 0
            and (m.is_mla or m.kv_heads % t == 0 or t % m.kv_heads == 0)
        ]
        if N % tp:
            out.append(
                f"world-size: tp {tp} (pinned) must divide the {N} GPUs; nearest tp that "
                f"also divides the heads: {' or '.join(map(str, _near(ok, tp)))}"
            )
        elif tp not in ok:
            out.append(
                f"heads-divisible-by-tp: tp {tp} (pinned) must divide the "
                f"{m.num_attention_heads} attention heads (and pair with the {m.kv_heads} "
                f"KV heads); nearest: tp {' or '.join(map(str, _near(ok, tp)))}"
            )
    for key in ("pp", "cp", "dp"):
        v = fix.get(key)
        if v is not None and N % v:
            out.append(
                f"world-size: {key} {v} (pinned) must divide the {N} GPUs; nearest: {key} "
                f"{' or '.join(map(str, _near(divisors(N), v)))}"
            )
    if "ep" in fix and m.is_moe and m.num_experts % fix["ep"]:
        out.append(
            f"experts-divisible-by-ep: ep {fix['ep']} (pinned) must divide the "
            f"{m.num_experts} experts; nearest: ep "
            f"{' or '.join(map(str, _near(divisors(m.num_experts), fix['ep'])))}"
        )
    return out


def _rule_detail(rule: str, job: Job, opts: SearchOptions) -> str:
    m, N, fix = job.model, job.num_gpus, opts.fix
    gbs = job.training.global_batch_size
    if rule in ("heads-divisible-by-tp", "kv-heads-vs-tp") and "tp" in fix:
        ok = [
            t
            for t in divisors(m.num_attention_heads)
            if N % t == 0 and (m.is_mla or m.kv_heads % t == 0 or t % m.kv_heads == 0)
        ]
        return (
            f"tp {fix['tp']} (pinned) must divide the {m.num_attention_heads} attention heads"
            f" and pair with the {m.kv_heads} KV heads; nearest: tp "
            f"{' or '.join(map(str, _near(ok, fix['tp'])))}"
        )
    if rule == "batch-divisible":
        ok = [d for d in divisors(N) if gbs % d == 0]
        return (
            f"the global batch {gbs} needs micro-batch x dp to divide it; on {N} GPUs only "
            f"dp {', '.join(map(str, ok))} divide {gbs}, and those leave tp x pp x cp = "
            f"{', '.join(str(N // d) for d in ok[-3:])}, which the other rules refuse"
        )
    if rule in ("experts-divisible-by-ep", "expert-grid") and m.is_moe:
        ok = [e for e in divisors(m.num_experts) if N % e == 0]
        pinned = f"ep {fix['ep']} (pinned) " if "ep" in fix else "ep "
        return (
            f"{pinned}must divide the {m.num_experts} experts and, with etp and pp, the "
            f"{N} GPUs; ep that do: {', '.join(map(str, ok))}"
        )
    if rule == "layers-divisible" and "pp" in fix:
        return f"pp {fix['pp']} (pinned) leaves no whole split of the {m.num_layers} layers"
    pins = ", ".join(f"{k}={v}" for k, v in fix.items())
    return "see `planner validate` for the rule's message" + (f" (pinned: {pins})" if pins else "")


def _pinned_options(job: Job, opts: SearchOptions) -> dict[str, list]:
    """For each pinned axis, the nearest other values the search would accept."""
    m, N = job.model, job.num_gpus
    dom = job.hardware.nvlink_domain_size
    out = {}
    for key, val in opts.fix.items():
        if key == "tp":
            vals = [
                t
                for t in divisors(N)
                if t <= max(dom, val)
                and m.num_attention_heads % t == 0
                and (m.is_mla or m.kv_heads % t == 0 or t % m.kv_heads == 0)
            ]
        elif key == "pp":
            vals = [p for p in divisors(N) if p <= m.num_layers and split_options(m.num_layers, p)]
        elif key == "cp":
            vals = [c for c in _pow2_upto(N, 32)]
        elif key == "ep" and m.is_moe:
            vals = [e for e in divisors(m.num_experts) if N % e == 0]
        elif key == "dp":
            vals = [d for d in divisors(N) if job.training.global_batch_size % d == 0]
        elif key == "micro_batch_size":
            vals = list(range(1, 9))
        elif key == "zero":
            vals = [z for z in ZERO]
        else:
            vals = []
        if isinstance(val, (bool, str)):
            out[key] = []
        else:
            out[key] = _near(vals, val)
    return out


def _suggestions(result: SearchResult, opts: SearchOptions) -> None:
    """What would make a layout fit: each candidate change is searched again (at most
    MAX_RERUNS searches) and only those that fit are kept, with the best layout each gives.

    Tried, in this order: other values of each pinned axis (--fix) and unpinning it; the
    nearest global batches that more data-parallel degrees divide (when batch-divisible
    pruned); half the sequence at the same tokens per step (when memory binds); the nearest
    GPU counts in whole nodes below (when the batch binds) and above, from the count the
    model states need however they are sharded. Each kind leaves searches for the next."""
    tries = _Tries(result.job, opts)
    result.binding = _binding(result, opts)
    batch = result.pruned.get("batch-divisible", 0) > 0
    found = (
        _pin_suggestions(result.job, opts, tries)
        + (_batch_suggestions(result.job, tries) if batch else [])
        + (_seq_suggestion(result.job, tries) if result.closest is not None else [])
        + _gpu_suggestions(result.job, opts, tries, below=batch)
    )
    result.suggested = found
    result.suggestions = [result.binding] + [s.line() for s in found]
    if not found:
        result.suggestions.append(
            f"nothing checked fits ({MAX_RERUNS - tries.left} searches: other pinned values, "
            "batch, sequence, GPU counts); a GPU with more memory (--hardware) or a smaller "
            "model may"
        )


def _pin_suggestions(job: Job, opts: SearchOptions, tries: _Tries) -> list[Suggestion]:
    """Per pinned axis: the nearest other value that fits, else the axis left to the search."""
    gbs, out = job.training.global_batch_size, []
    for key, values in _pinned_options(job, opts).items():
        for v in values:
            fix = {**opts.fix, key: v}
            best = tries.best(fix=fix, reserve=8)
            if best is not None:
                out.append(
                    Suggestion(
                        ("--fix", _fix_text(fix)),
                        f"{key} {v} instead of the pinned {opts.fix[key]}",
                        best,
                        gbs,
                    )
                )
                break
        else:
            fix = {k: v for k, v in opts.fix.items() if k != key}
            best = tries.best(fix=fix, reserve=8)
            if best is not None:
                out.append(
                    Suggestion(
                        ("--fix", _fix_text(fix)) if fix else (),
                        f"{key} left to the search",
                        best,
                        gbs,
                        drop=() if fix else ("--fix",),
                    )
                )
    return out


def _batch_suggestions(job: Job, tries: _Tries) -> list[Suggestion]:
    """The nearest global batch below and above that a data-parallel degree of this GPU
    count divides (where the current one divides fewer)."""
    N, gbs = job.num_gpus, job.training.global_batch_size
    cands = set()
    for d in divisors(N):
        if gbs % d:
            cands |= {gbs // d * d, -(-gbs // d) * d}
    out = []
    for side in (
        sorted((c for c in cands if 0 < c < gbs), reverse=True)[:2],
        sorted(c for c in cands if c > gbs)[:2],
    ):
        for c in side:
            best = tries.best(job=_with(job, global_batch_size=c), reserve=5)
            if best is not None:
                out.append(
                    Suggestion(
                        ("--global-batch-size", str(c)), f"dp {best.layout.dp} divides {c}", best, c
                    )
                )
                break
    return out


def _seq_suggestion(job: Job, tries: _Tries) -> list[Suggestion]:
    """Half the sequence, twice the sequences: the same tokens per step, half the
    activations per sequence."""
    seq, gbs = job.training.seq_length, job.training.global_batch_size
    if seq < 1024 or seq % 2:
        return []
    best = tries.best(job=_with(job, seq_length=seq // 2, global_batch_size=gbs * 2), reserve=4)
    if best is None:
        return []
    return [
        Suggestion(
            ("--seq-length", str(seq // 2), "--global-batch-size", str(gbs * 2)),
            "half the activations per sequence, the same tokens per step",
            best,
            gbs * 2,
        )
    ]


def _gpu_suggestions(
    job: Job, opts: SearchOptions, tries: _Tries, *, below: bool
) -> list[Suggestion]:
    """The nearest whole-node GPU count that fits above (from the count the model states
    need), and below when the batch binds (fewer GPUs can mean a dp that divides it)."""
    N, gbs = job.num_gpus, job.training.global_batch_size
    floor = _states_floor(job, job.hardware.memory_gib * 2**30 * (1 - opts.headroom))
    sides = [_nice_counts(job, max(floor, N + 1), 64 * N)[:4]]
    if below:
        sides.insert(0, sorted(_nice_counts(job, floor, N - 1), reverse=True)[:2])
    out = []
    for i, side in enumerate(sides):
        for n in side:
            best = tries.best(job=_with_gpus(job, n), reserve=2 if below and i == 0 else 0)
            if best is not None:
                out.append(Suggestion(("--gpus", str(n)), _gpus_why(job, n, best), best, gbs))
                break
    return out


def _with_gpus(job: Job, n: int) -> Job:
    from dataclasses import replace

    return replace(job, num_gpus=n)


def _gpus_why(job: Job, n: int, best: Plan) -> str:
    nodes = n / job.hardware.gpus_per_node
    where = f"{nodes:g} nodes" if nodes == int(nodes) else f"{n} GPUs"
    return (
        f"{where}, {'fewer' if n < job.num_gpus else 'more'} than {job.num_gpus}; dp "
        f"{best.layout.dp}"
        + (
            f" divides the global batch {job.training.global_batch_size}"
            if n < job.num_gpus
            else ""
        )
    )
