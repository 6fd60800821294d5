"""The search: candidates -> rules in the seven-step order -> estimate -> rank.

The space: tp (divisors of the GPU count up to --max-tp, default the NVLink domain), cp
(powers of two), pp (divisors of what is left, at most the layer count, with the uneven
first/last split where the layers do not divide), dp (the rest), ep and etp (MoE: divisors of
the experts; etp 1 or tp), vpp (divisors of the layers per rank), micro-batch 1..8, sp,
ZeRO 0..3, recompute none/selective/full. Rules prune level by level in the seven-step order,
cheapest first; `pruned` counts the layouts each rule removed (the whole subtree below the
level where it fired). Exact shortcuts keep it fast without changing the answer: memory
grows with the micro-batch, so once a micro-batch size does not fit the larger ones are
counted as pruned by memory unevaluated; with the same other knobs more recompute is
strictly slower, so only the least recompute that fits is a contender (the others count as
feasible but are not ranked); and contenders are timed in order of a lower bound on their
step time, stopping when the bound passes the K-th best (see `_rank`).

What makes each step cheap without changing a number: the leaves of one (base, vpp, sp)
share their memory pieces (`_Group`), the lower bound is kept per search on what it reads
(`_least_bound_sum`), and on two cores the processes share the (tp, cp) pairs through a
queue and rank their own contenders ahead, merged in one fixed order (`_collect_all`).
"""

from __future__ import annotations

import bisect
import gc
import math
import os
import pickle
import time as _time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

from planner.config import Job
from planner.cost import cost_model
from planner.cost.memory import MemoryBreakdown
from planner.cost.step import StepTime
from planner.errors import SpecError, Violation, short
from planner.layout import Layout
from planner.rules import (DEFAULT_HEADROOM, Context, batch_ok, check, expert_grid,
                           experts_divisible_by_ep, fits, heads_divisible_by_tp,
                           interleave_ok, kv_heads_vs_tp, moe_sp_ok, seq_divisible_by_cp,
                           seq_tp_ok, split_options, vpp_options)
from planner.savers import Saver, chains, savers
from planner.seven_steps import pick_note, seven_steps
from planner.units import divisors

__all__ = ["SearchOptions", "Plan", "SearchResult", "search", "FIXABLE", "parse_fix"]

RECOMPUTE = ("none", "selective", "full")
ZERO = (0, 1, 2, 3)
FIXABLE = {"tp": int, "pp": int, "dp": int, "cp": int, "ep": int, "etp": int, "vpp": int,
           "micro_batch_size": int, "zero": int, "recompute": str, "sp": bool}
_ALIASES = {"mbs": "micro_batch_size", "micro_batch": "micro_batch_size",
            "zero_stage": "zero", "sequence_parallel": "sp"}


def parse_fix(text: str | None) -> dict:
    """'tp=8,pp=4,recompute=full' -> {'tp': 8, 'pp': 4, 'recompute': 'full'}."""
    out: dict = {}
    if not text:
        return out
    for item in text.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise SpecError(f"--fix item {short(item.strip())} must look like axis=value, e.g. tp=8",
                            field="--fix", value=item.strip())
        key, val = (x.strip() for x in item.split("=", 1))
        key = _ALIASES.get(key, key)
        if key not in FIXABLE:
            raise SpecError(f"--fix axis {short(key)} is unknown; valid: {', '.join(FIXABLE)}",
                            field="--fix", value=key)
        kind = FIXABLE[key]
        try:
            if kind is bool:
                if val.lower() not in ("true", "false", "1", "0", "on", "off"):
                    raise ValueError
                out[key] = val.lower() in ("true", "1", "on")
            elif kind is int:
                out[key] = int(val)
                if out[key] < (0 if key == "zero" else 1) or (key == "zero" and out[key] > 3):
                    raise ValueError
            else:
                if val not in RECOMPUTE:
                    raise ValueError
                out[key] = val
        except ValueError:
            want = {"recompute": "none, selective or full", "sp": "true or false",
                    "zero": "0, 1, 2 or 3"}.get(key, "a positive whole number")
            raise SpecError(f"--fix {key}={short(val)}: must be {want}", field=f"--fix {key}",
                            value=val) from None
    return out


@dataclass(frozen=True)
class SearchOptions:
    top: int = 10
    sort_by: str = "time"                      # time | memory | mfu
    fix: Mapping[str, object] = field(default_factory=dict)
    max_tp: int | None = None                  # default: the NVLink domain size
    max_cp: int = 32
    max_micro_batch: int = 8
    max_vpp: int = 16
    headroom: float = DEFAULT_HEADROOM
    tokens: float | None = None                # training tokens, for time-to-train


@dataclass(frozen=True)
class Plan:
    rank: int
    layout: Layout
    memory: MemoryBreakdown
    time: StepTime
    warnings: list[Violation]


@dataclass
class SearchResult:
    job: Job
    plans: list[Plan]
    searched: int
    feasible: int
    evaluated: int                             # layouts whose memory was estimated
    timed: int                                 # contenders ranked by their step time
    pruned: dict[str, int]
    steps: list[dict]
    pick: Plan | None = None                   # the seven-step procedure's own choice
    pick_rank: int | None = None
    pick_note: str = ""
    closest: tuple[Layout, MemoryBreakdown] | None = None
    suggestions: list[str] = field(default_factory=list)   # the lines printed (binding first)
    suggested: list["Suggestion"] = field(default_factory=list)  # each checked to fit
    binding: str = ""                          # what stops every layout (nothing fits)
    elapsed_s: float = 0.0
    headroom: float = DEFAULT_HEADROOM

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None


# ---------------------------------------------------------------------------- the space

def _moe_variants(model, fix) -> list[tuple[str, bool]]:
    """(dispatcher, all-to-all overlap) pairs tried for an MoE layout with ep > 1: Megatron's
    default allgather, alltoall, and alltoall with overlap; `--fix` pins either."""
    if not model.is_moe:
        return [("allgather", False)]
    out = [("allgather", False), ("alltoall", False), ("alltoall", True)]
    if "moe_token_dispatcher" in fix:
        d = fix["moe_token_dispatcher"]
        out = [(d, False), (d, True)] if d != "allgather" else [(d, False)]
    if "overlap_moe_expert_parallel_comm" in fix:
        out = [v for v in out if v[1] == fix["overlap_moe_expert_parallel_comm"]] or \
            [(out[0][0], fix["overlap_moe_expert_parallel_comm"])]
    return out


def _pow2_upto(n: int, cap: int) -> list[int]:
    out, c = [], 1
    while c <= cap and n % c == 0:
        out.append(c)
        c *= 2
    return out


class _Space:
    """Per-axis candidate lists for one job and its options."""

    def __init__(self, job: Job, opts: SearchOptions):
        m, N = job.model, job.num_gpus
        fix = opts.fix
        self.max_tp = opts.max_tp or job.hardware.nvlink_domain_size
        self.tp = [d for d in divisors(N) if d <= self.max_tp]
        self.max_cp, self.mbs = opts.max_cp, list(range(1, opts.max_micro_batch + 1))
        self.max_vpp = opts.max_vpp
        self.moe = m.is_moe
        self.ep_all = divisors(m.num_experts) if m.is_moe else [1]
        self.fix = fix
        if "tp" in fix:
            self.tp = [fix["tp"]] if N % fix["tp"] == 0 else []
        if "micro_batch_size" in fix:
            self.mbs = [fix["micro_batch_size"]]
        self.zero = [fix["zero"]] if "zero" in fix else list(ZERO)
        self.rec: list[Saver] = savers(m, fix)
        self.chains = chains(self.rec)
        self.by_key = {sv.key: sv for sv in self.rec}
        self.fp32_twin = {sv.key: self.by_key.get(sv.key.replace("+bf16", ""))
                          for sv in self.rec if sv.bf16_states}
        self.zero_order = _zero_order(self.zero)
        self.variants = _moe_variants(m, fix)
        self.bound_sums: dict[tuple, float] = {}   # `_least_bound_sum`'s, for this search
        self.act_tables: dict[tuple, dict] = {}     # `_Group.acts`, for this search
        # what the activations (`_Group.acts`) and the time bound (`_least_bound_sum`) read
        # of a saver; the options before each saver in its chain and its fp32 twin (they
        # need no less memory)
        self.act_class = {sv.key: (sv.recompute, sv.modules, sv.num_layers, sv.offload_layers)
                          for sv in self.rec}
        self.time_class = {sv.key: (sv.recompute, sv.modules, sv.num_layers) for sv in self.rec}
        before = {sv.key: tuple(b for b in (sv.after, self.fp32_twin.get(sv.key) and
                                            self.fp32_twin[sv.key].key)
                                if b and b != sv.key)
                  for sv in self.rec}
        # per pipeline kind (pp 1, pp > 1: no offload), what the leaf loops walk, precomputed
        self.pairs = {multi: _Pairs(self, before, multi) for multi in (False, True)}

    def cp(self, N: int, tp: int, seq: int) -> list[int]:
        if "cp" in self.fix:
            c = self.fix["cp"]
            return [c] if N % tp == 0 and (N // tp) % c == 0 and 2 * c <= seq else []
        return [c for c in _pow2_upto(N // tp, self.max_cp) if 2 * c <= seq]

    def pp(self, rest: int, L: int) -> list[int]:
        if "pp" in self.fix:
            p = self.fix["pp"]
            return [p] if rest > 0 and rest % p == 0 and p <= L else []
        return [p for p in divisors(rest) if p <= L]

    def sp(self, tp: int) -> list[bool]:
        opts = [False, True] if tp > 1 else [False]
        return [self.fix["sp"]] if "sp" in self.fix and self.fix["sp"] in opts else (
            [] if "sp" in self.fix else opts)

    def ep_etp(self, tp: int) -> list[tuple[int, int]]:
        eps = [self.fix["ep"]] if "ep" in self.fix else self.ep_all
        if not self.moe:
            return [(e, tp) for e in eps]
        etps = [self.fix["etp"]] if "etp" in self.fix else sorted({1, tp})
        return [(e, x) for e in eps for x in etps]

    def vpp(self, L: int, pp: int, split) -> list[int]:
        vs = vpp_options(L, pp, split[0], split[1], self.max_vpp)
        if "vpp" in self.fix:
            return [self.fix["vpp"]] if self.fix["vpp"] in vs else []
        return vs


class _Pair(NamedTuple):
    """One (saver, ZeRO) of `_fitting_prefixes`, with the pairs whose fitting prefix bounds
    its own (`_known_bounds`), by their index in the pair list."""

    sv: Saver
    zero: int
    capped: bool                  # bounded by the vpp-1 ceiling (not block recompute)
    uppers: tuple[int, ...]       # ZeRO z + 1 <= 2 needs no more memory than z
    lowers: tuple[int, ...]       # ZeRO z - 1, and the options before it in its chain and
    #                               its fp32 twin, need no less
    z3: int                       # ZeRO-2 of the same saver, for ZeRO-3 when z3_ok (else -1)
    corner: bool                  # filled by the corner estimate when it fits


class _Pairs:
    """The (saver, ZeRO) pairs of one pipeline kind (pp 1, or pp > 1: no offload), in the
    order `_fitting_prefixes` resolves them (savers in order, each over `zero_order`), and
    the chains `_contenders` walks, by pair index."""

    def __init__(self, space: "_Space", before: dict, multi_stage: bool):
        options = [sv for sv in space.rec if not (sv.offload_layers and multi_stage)]
        self.options, self.zeros = options, space.zero_order
        self.none = space.by_key.get("none")
        order = [(sv, zero) for sv in options for zero in space.zero_order]
        self.index = {(sv.key, zero): j for j, (sv, zero) in enumerate(order)}
        at = self.index.get
        ordered_z = [z for z in space.zero_order if 1 <= z <= 2]
        self.pairs = []
        for sv, zero in order:
            k = sv.key
            ups = tuple(range(zero + 1, 3)) if zero <= 2 else ()
            downs = [(k, z) for z in range(0, zero)] if zero <= 2 else []
            downs += [(b, zero) for b in before[k]]
            self.pairs.append(_Pair(
                sv, zero, sv.num_layers is None,
                tuple(at((k, z)) for z in ups if at((k, z)) is not None),
                tuple(at(d) for d in downs if at(d) is not None),
                at((k, 2), -1) if zero == 3 else -1,
                sv.recompute != "full" and zero in ordered_z))
        self.nothing = [0] * len(order)       # the ceiling where nothing fits
        # per ZeRO stage: (bf16 chain, [(saver, pair index)]) for each chain
        self.chains = {zero: [(chain[0].bf16_states,
                               [(sv, self.index[(sv.key, zero)]) for sv in chain
                                if not (sv.offload_layers and multi_stage)])
                              for chain in space.chains]
                       for zero in space.zero}


# ---------------------------------------------------------------------------- the search

class _Counter:
    """What the search counted: the space, what each rule pruned, what was estimated."""

    def __init__(self):
        self.pruned: dict[str, int] = {}
        self.searched = self.feasible = self.evaluated = 0

    def prune(self, rule: str, count: int) -> None:
        if count:
            self.pruned[rule] = self.pruned.get(rule, 0) + count
            self.searched += count

    def keep(self) -> None:
        self.searched += 1
        self.feasible += 1


def _tp_cp_pairs(job: Job, space: _Space) -> list[tuple[int, int]]:
    """The (tp, cp) pairs of the space, in the order the search walks them."""
    N, seq = job.num_gpus, job.training.seq_length
    return [(tp, cp) for tp in space.tp for cp in space.cp(N, tp, seq)]


def _groups(job: Job, space: _Space, cnt: _Counter, pairs: list | None = None):
    """Yield (base layout, vpp options, sp options): every axis but vpp, sp, micro-batch,
    ZeRO and recompute, passing the structural rules level by level in the seven-step order
    (TP, CP, PP, DP, EP), for these (tp, cp) pairs (default: all of them; processes split
    the work by pairs)."""
    m, N, tr = job.model, job.num_gpus, job.training
    L = m.num_layers
    leaf = len(space.mbs) * len(space.zero) * len(space.rec)

    def ctx(lay: Layout) -> Context:
        return Context(model=m, hardware=job.hardware, training=tr, num_gpus=N, layout=lay)

    def below_pp(tp: int, cp: int, pp: int) -> int:
        """Layouts under one (tp, cp, pp): ep x etp x sp x vpp x micro-batch x ZeRO x recompute
        (one vpp value when no layer split exists: layers-divisible removes it there)."""
        if "dp" in space.fix and space.fix["dp"] != N // (tp * cp * pp):
            return 0
        splits = split_options(L, pp)
        vpps = space.vpp(L, pp, splits[0]) if splits else [1]
        return leaf * len(space.sp(tp)) * len(space.ep_etp(tp)) * len(vpps)

    for tp, cp in _tp_cp_pairs(job, space) if pairs is None else pairs:
        sps, eps = space.sp(tp), space.ep_etp(tp)
        pps = space.pp(N // (tp * cp), L)
        probe = ctx(Layout(tp=tp, dp=N // tp))
        rule = ("heads-divisible-by-tp" if heads_divisible_by_tp(probe) else
                "kv-heads-vs-tp" if kv_heads_vs_tp(probe) else
                "seq-divisible-by-cp" if seq_divisible_by_cp(ctx(Layout(tp=tp, cp=cp))) else None)
        if rule:
            cnt.prune(rule, sum(below_pp(tp, cp, p) for p in pps))
            continue
        for pp in pps:
            dp = N // (tp * cp * pp)
            if "dp" in space.fix and space.fix["dp"] != dp:
                continue
            splits = split_options(L, pp)
            if not splits:
                cnt.prune("layers-divisible", below_pp(tp, cp, pp))
                continue
            split = splits[0]
            vpps = space.vpp(L, pp, split)
            for ep, etp in eps:
                base = Layout(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, etp=etp,
                              first_stage_layers=split[0], last_stage_layers=split[1])
                c = ctx(base)
                n = leaf * len(vpps) * len(sps)
                if experts_divisible_by_ep(c):
                    cnt.prune("experts-divisible-by-ep", n)
                    continue
                if expert_grid(c):
                    cnt.prune("expert-grid", n)
                    continue
                yield base, vpps, sps


def _subtree(job: Job, base: Layout, vpps: list[int], sps: list[bool], space: _Space, cm,
             cnt: _Counter, headroom: float, cands: list, closest: list,
             all_fitting: bool = False) -> None:
    """All vpp x sp x micro-batch x ZeRO x recompute below one base layout.

    First a bound: memory is smallest at vpp 1 (interleaving only adds micro-batches in
    flight), with SP where tp > 1 (it divides every activation by tp; its gather buffer is
    smaller than what it saves) and at micro-batch 1, so if no ZeRO x recompute fits there,
    nothing below fits: the subtree is counted rule by rule without estimating it."""
    m, seq = job.model, job.training.seq_length
    probe_sp = [sp for sp in sps if seq_tp_ok(seq, base.cp, base.tp, sp)
                and moe_sp_ok(m.is_moe, base.ep, base.tp, sp)]
    any_fit = False
    if probe_sp and space.mbs:
        low = base.with_(vpp=1, sp=max(probe_sp), tp_comm_overlap=max(probe_sp) and base.tp > 1,
                         micro_batch_size=space.mbs[0])
        # the minimum is at ZeRO 2 or 3 (0-2 only shard more), among the savers that need
        # the least: bf16 states (they never need more than fp32) with some recompute
        zs = [z for z in space.zero if z >= 2] or [max(space.zero)]
        least = [sv for sv in space.rec if sv.bf16_states] or space.rec
        rs = [sv for sv in least if sv.recompute != "none" or sv.offload_layers] or least
        tail = _tail(low)
        for zero in zs:
            for sv in rs:
                if sv.offload_layers and base.pp > 1:
                    continue
                head = (low.tp, low.cp, low.ep, low.dp, low.pp, low.vpp, low.etp, low.sp)
                probe = _build(head, zero, low.micro_batch_size, sv, tail, space.variants[0])
                total = cm.memory_total(probe)
                cnt.evaluated += 1
                if fits(total, cm.capacity, headroom):
                    any_fit = True
                    break
                _closer(closest, probe, total)
            if any_fit:
                break
    leaf = len(space.mbs) * len(space.zero) * len(space.rec)
    for sp in sps:
        if not seq_tp_ok(seq, base.cp, base.tp, sp):
            cnt.prune("seq-divisible-by-tp", leaf * len(vpps))
            continue
        if not moe_sp_ok(m.is_moe, base.ep, base.tp, sp):
            cnt.prune("moe-needs-sp", leaf * len(vpps))
            continue
        ceiling = None
        for vpp in vpps:
            fit = _leaves(job, base, vpp, sp, space, cm, cnt, headroom, cands, closest,
                          estimate=any_fit, all_fitting=all_fitting, ceiling=ceiling)
            if vpp == 1:
                # 1F1B holds the fewest micro-batches on every rank: what does not fit at vpp 1
                # does not fit interleaved either
                ceiling = fit


def _zero_order(zeros: list[int]) -> list[int]:
    """ZeRO 2, then 0, then 1 (then 3): 2 bounds 1 and 0 from above, 0 bounds 1 from below,
    so when everything (or nothing) fits ZeRO 1 needs no estimate at all."""
    return sorted(zeros, key=lambda z: (z == 3, {2: 0, 0: 1, 1: 2}.get(z, 3)))


def _leaves(job: Job, base: Layout, vpp: int, sp: bool, space: _Space, cm, cnt: _Counter,
            headroom: float, cands: list, closest: list, *, estimate: bool = True,
            all_fitting: bool = False, ceiling: list | None = None) -> list[int]:
    """Micro-batch x ZeRO x recompute of one base layout; returns, per (saver, ZeRO) pair
    (`_Pairs`), the largest micro-batch that fits (0: none)."""
    b = base   # positional construction: dataclasses.replace costs more than the estimate
    head = (b.tp, b.cp, b.ep, b.dp, b.pp, vpp, b.etp, sp)
    tail = (b.first_stage_layers, b.last_stage_layers, b.cp_comm_type, b.overlap_grad_reduce,
            b.overlap_param_gather, sp and b.tp > 1)
    pairs = space.pairs[b.pp > 1]
    if b.pp > 1 and any(sv.offload_layers for sv in space.rec):
        # Megatron offloads activations only without pipeline parallelism
        n_off = sum(1 for sv in space.rec if sv.offload_layers)
        cnt.prune("cpu-offloading", n_off * len(space.zero) * len(space.mbs))
    valid = _valid_micro_batches(job, base, vpp, space, cnt)
    if not valid:
        return pairs.nothing
    if not estimate:
        cnt.prune("fits-in-memory", len(pairs.options) * len(space.zero) * len(valid))
        return pairs.nothing
    group = _Group(head, tail, space, cm)
    prefix = _fitting_prefixes(group, valid, pairs, cnt, headroom, closest, ceiling)
    _contenders(group, valid, prefix, pairs, space, cands, all_fitting)
    return [valid[k - 1] if k else 0 for k in prefix]


class _Group:
    """The leaves below one (base, vpp, sp): layouts that differ only in ZeRO, micro-batch
    and saver, as (head, tail) plus those three.

    `total` is `cm.memory_total` of a leaf, composed the same way (`worst_total`) from the
    model states, which depend on the leaf only through ZeRO (an argument of `stage_states`)
    and the state dtypes, and the activations, which depend on it only through the
    micro-batch and the recompute and offload settings, and not on ep at all (`act_vector`'s
    key): the states are looked up once per group, from one Layout per state dtype; the
    activations once per search for the groups that differ only in ep (`space.act_tables`).
    So a Layout is built only for those lookups, the closest misfit and the contenders that
    get timed."""

    __slots__ = ("head", "tail", "cm", "moe", "act_class", "states", "acts", "by_dtype")

    def __init__(self, head: tuple, tail: tuple, space: _Space, cm):
        self.head, self.tail, self.cm = head, tail, cm
        self.moe = space.variants[0]
        self.act_class = space.act_class
        self.states: dict = {}
        self.by_dtype: dict = {}
        tp, cp, _, dp, pp, vpp, etp, sp = head
        self.acts = space.act_tables.setdefault((tp, cp, dp, pp, vpp, etp, sp, tail), {})

    def layout(self, zero: int, mbs: int, sv: Saver) -> Layout:
        return _build(self.head, zero, mbs, sv, self.tail, self.moe)

    def with_states_of(self, sv: Saver) -> Layout:
        """A leaf with the state dtypes of `sv`: what `stage_states` reads of a leaf but
        ZeRO, which it takes apart."""
        lay = self.by_dtype.get(sv.bf16_states)
        if lay is None:
            lay = self.by_dtype[sv.bf16_states] = self.layout(1, 1, sv)
        return lay

    def total(self, zero: int, mbs: int, sv: Saver) -> float:
        skey = (zero, sv.bf16_states)
        states = self.states.get(skey)
        if states is None:
            states = self.states[skey] = self.cm.stage_states(self.with_states_of(sv), zero)
        akey = (mbs, self.act_class[sv.key])
        acts = self.acts.get(akey)
        if acts is None:
            acts = self.acts[akey] = self.cm.act_vector(self.layout(zero, mbs, sv))
        return self.cm.worst_total(states, acts)


def _valid_micro_batches(job: Job, base: Layout, vpp: int, space: _Space, cnt: _Counter) -> list[int]:
    """Micro-batch sizes that pass batch-divisible and vpp-needs-microbatches."""
    gbs, dp = job.training.global_batch_size, base.dp
    n_zr = len(_savers_for(space, base.pp)) * len(space.zero)
    valid = []
    for mbs in space.mbs:
        if not batch_ok(gbs, mbs, dp):
            cnt.prune("batch-divisible", n_zr)
        elif not interleave_ok(vpp, base.pp, gbs // (mbs * dp)):
            cnt.prune("vpp-needs-microbatches", n_zr)
        else:
            valid.append(mbs)
    return valid


_HEAD = ("tp", "cp", "ep", "dp", "pp", "vpp", "etp", "sp")
"""The Layout fields a search head tuple holds, in its order."""
_TAIL = ("first_stage_layers", "last_stage_layers", "cp_comm_type", "overlap_grad_reduce",
         "overlap_param_gather", "tp_comm_overlap")
"""The Layout fields a search tail tuple holds, in its order."""


def _tail(lay: Layout) -> tuple:
    return tuple(getattr(lay, name) for name in _TAIL)


def _build(head: tuple, zero: int, mbs: int, sv: Saver, tail: tuple,
           moe: tuple[str, bool]) -> Layout:
    """A Layout from the search's pieces, by field name (never by position: the layout
    table's order is free to change)."""
    dt = "bf16" if sv.bf16_states else "fp32"
    return Layout(**dict(zip(_HEAD, head)), **dict(zip(_TAIL, tail)), zero=zero,
                  micro_batch_size=mbs, recompute=sv.recompute, recompute_modules=sv.modules,
                  recompute_num_layers=sv.num_layers, cpu_offloading_num_layers=sv.offload_layers,
                  grad_reduce_in_fp32=not sv.bf16_states, exp_avg_dtype=dt, exp_avg_sq_dtype=dt,
                  moe_token_dispatcher=moe[0], overlap_moe_expert_parallel_comm=moe[1])


def _savers_for(space: _Space, pp: int) -> list[Saver]:
    return [sv for sv in space.rec if not (sv.offload_layers and pp > 1)]


def _fitting_prefixes(group: _Group, valid: list[int], pairs: _Pairs, cnt: _Counter,
                      headroom: float, closest: list, ceiling: list | None) -> list[int]:
    """For each (saver, ZeRO) pair: how many of the valid micro-batch sizes fit.

    Memory grows strictly with the micro-batch (every activation term scales with it), so the
    sizes that fit are a prefix. Exact orderings narrow each search: with the same
    micro-batch, a saver needs no more memory than the one before it in its chain
    (savers.py), bf16 states no more than fp32 ones, ZeRO z no more than z - 1 (z <= 2: pure
    sharding), ZeRO-3 no more than ZeRO-2 where its sharding outweighs its gather buffers
    (checked per layout), and 1F1B no more than any interleaving (`ceiling`, from vpp 1). The
    largest micro-batch at ZeRO 1 without recompute needs the most of every ZeRO 1-2 layout
    but full recompute (whose working layer is searched on its own): when it fits, they all
    do, with one estimate.
    """
    cm = group.cm
    limit = cm.capacity * (1 - headroom)          # rules.fits: total <= limit
    n = len(valid)
    items = pairs.pairs
    prefix: list = [None] * len(items)
    zeros, none = pairs.zeros, pairs.none
    z3_ok = 3 in zeros and 2 in zeros and cm.zero3_no_worse_than_2(
        group.with_states_of(pairs.options[0]))
    ordered_z = [z for z in zeros if 1 <= z <= 2]
    if ordered_z and none is not None:
        cnt.evaluated += 1
        if group.total(min(ordered_z), valid[-1], none) <= limit:
            for j, pair in enumerate(items):
                if pair.corner:
                    prefix[j] = n
    estimates = 0

    def fits_at(i: int, zero: int, sv: Saver) -> bool:
        nonlocal estimates
        total = group.total(zero, valid[i], sv)
        estimates += 1
        if total <= limit:
            return True
        if not closest or total < closest[0][1]:
            _closer(closest, group.layout(zero, valid[i], sv), total)
        return False

    misfit = fitting = 0
    for j, pair in enumerate(items):
        k = prefix[j]
        if k is None:
            zero, sv = pair.zero, pair.sv
            lo, hi = _known_bounds(pair, j, prefix, n, valid, ceiling, z3_ok)
            if 0 < lo < hi:              # a neighbour's boundary: this one is likely the same
                if fits_at(lo, zero, sv):
                    lo += 1
                else:
                    hi = lo
            if lo < hi:                  # then the largest: usually everything fits
                if fits_at(hi - 1, zero, sv):
                    lo = hi
                else:
                    hi -= 1
            while lo < hi:
                mid = (lo + hi) // 2
                if fits_at(mid, zero, sv):
                    lo = mid + 1
                else:
                    hi = mid
            k = prefix[j] = lo
        fitting += k
        misfit += n - k
    cnt.evaluated += estimates
    cnt.feasible += fitting
    cnt.searched += fitting
    cnt.prune("fits-in-memory", misfit)
    return prefix


def _known_bounds(pair: _Pair, j: int, prefix: list, n: int, valid: list[int],
                  ceiling: list | None, z3_ok: bool) -> tuple[int, int]:
    """(lo, hi): the fitting prefix of pair `j` is known to lie in [lo, hi]."""
    lo, hi = 0, n
    if ceiling is not None and pair.capped:
        # the largest micro-batch that fit at vpp 1 (block recompute is not bounded by it:
        # its N layers per virtual stage are a larger share of a smaller chunk)
        hi = bisect.bisect_right(valid, ceiling[j])
    for u in pair.uppers:
        k = prefix[u]
        if k is not None and k < hi:
            hi = k
    for d in pair.lowers:
        k = prefix[d]
        if k is not None and k > lo:
            lo = k
    if z3_ok and pair.z3 >= 0:
        k = prefix[pair.z3]
        if k is not None and k > lo:
            lo = k
    return lo, lo if hi < lo else hi


def _contenders(group: _Group, valid: list[int], prefix: list, pairs: _Pairs, space: _Space,
                cands: list, all_fitting: bool) -> None:
    """Per ZeRO stage and micro-batch, the least saver of each chain that fits (along a chain
    each step is no faster), with the lower bound on its step time (the same for every ZeRO
    stage; the least over the dispatcher variants); bf16 states only where the fp32 states
    need some recompute to fit; every fitting layout when ranking by memory. Stored as
    (bound, head, zero, micro-batch, saver, tail): `_layout` builds the Layout only for those
    that get timed."""
    bounds: dict[tuple[int, str], float] = {}
    head, tail, cm = group.head, group.tail, group.cm
    pp, vpp, dp = head[4], head[5], head[3]
    none = space.by_key.get("none")

    def bound(mbs: int, sv: Saver) -> float:
        lb = bounds.get((mbs, sv.key))
        if lb is None:
            lb = bounds[(mbs, sv.key)] = cm.scale_bound(
                _least_bound_sum(head, mbs, sv, tail, space, cm), pp, vpp, dp, mbs)
        return lb

    for zero in space.zero:
        chains_z = pairs.chains[zero]
        none_fits = prefix[pairs.index[(none.key, zero)]] if none is not None else 0
        for i, mbs in enumerate(valid):
            roomy = i < none_fits
            if roomy and not all_fitting:
                # every fp32 chain starts at none, which fits: it is the only contender
                cands.append((bound(mbs, none), head, zero, mbs, none, tail))
                continue
            seen = set()
            for bf16, chain in chains_z:
                if bf16 and roomy:
                    continue             # fp32 states fit without recompute: no need for bf16
                for sv, j in chain:
                    if i < prefix[j]:
                        if sv.key not in seen:
                            seen.add(sv.key)
                            cands.append((bound(mbs, sv), head, zero, mbs, sv, tail))
                        if not all_fitting:
                            break


def _least_bound_sum(head: tuple, mbs: int, sv: Saver, tail: tuple, space: _Space,
                     cm) -> float:
    """The least `bound_sum` over the dispatcher variants: with `scale_bound` (increasing in
    it) the least `time_lower_bound` of the candidate, the same for every ZeRO stage and dp.
    Kept for the whole search in `space.bound_sums`, keyed on every field `bound_sum` reads
    (the head without dp, and without vpp unless block recompute; the tail; micro-batch;
    the saver's recompute settings, not its state dtypes or offload); the variants tried
    depend only on ep and the recompute."""
    tp, cp, ep, _, pp, vpp, etp, sp = head
    key = (tp, cp, ep, pp, vpp if sv.num_layers else 1, etp, sp, tail, mbs,
           space.time_class[sv.key])
    got = space.bound_sums.get(key)
    if got is None:
        got = space.bound_sums[key] = min(
            cm.bound_sum(_build(head, 0, mbs, sv, tail, v)) for v in _variants_for(space, head, sv))
    return got


def _variants_for(space: _Space, head: tuple, sv: Saver) -> list[tuple[str, bool]]:
    """The dispatcher variants that apply: only with ep > 1; the all-to-all overlap not with
    full recompute (Megatron rejects it)."""
    if head[2] <= 1:
        return space.variants[:1]
    return [v for v in space.variants if not (v[1] and sv.recompute == "full")] \
        or space.variants[:1]


def _layout(cand: tuple, variant: tuple[str, bool] = ("allgather", False)) -> Layout:
    _, head, zero, mbs, sv, tail = cand
    return _build(head, zero, mbs, sv, tail, variant)


def _fastest(cand: tuple, space: _Space, cm,
             kth: float = float("inf")) -> tuple[Layout | None, float]:
    """The candidate at its fastest dispatcher variant (the first of them on a tie), and its
    step time; or (None, a lower bound on it) when even the variants' pipeline times exceed
    `kth` (the step adds DP and optimizer time to them)."""
    lays = [_layout(cand, v) for v in _variants_for(space, cand[1], cand[4])]
    if kth < float("inf"):
        low = min(cm.pipeline_seconds(lay) for lay in lays)
        if low > kth:
            return None, low
    best = None
    for lay in lays:
        step = cm.step_seconds(lay)
        if best is None or step < best[1]:
            best = (lay, step)
    return best


def _closer(closest: list, lay: Layout, total: float) -> None:
    """Keep the smallest layout that did not fit (its breakdown is built at the end)."""
    if not closest or total < closest[0][1]:
        closest[:] = [(lay, total)]


def search(job: Job, opts: SearchOptions = SearchOptions(), *, suggest: bool = True) -> SearchResult:
    """Every layout of `job`, pruned by the rules, estimated, ranked. When nothing fits and
    `suggest`, the changes that make something fit (each checked by searching again)."""
    t0 = _time.perf_counter()
    with _collector_paused():
        result = _search(job, opts, suggest)
    result.elapsed_s = _time.perf_counter() - t0
    return result


def _search(job: Job, opts: SearchOptions, suggest: bool) -> SearchResult:
    cm = cost_model(job)
    space = _Space(job, opts)
    cnt, cands, closest, known = _collect_all(job, space, cm, opts)
    plans, timed = _rank(job, cm, cands, opts, space, known)
    if opts.tokens:
        plans = [_with_train(p, job, opts.tokens) for p in plans]
    near = (closest[0][0], cm.memory(closest[0][0])) if closest and not cands else None
    result = SearchResult(job=job, plans=plans, searched=cnt.searched, feasible=cnt.feasible,
                          evaluated=cnt.evaluated, timed=timed, pruned=cnt.pruned, steps=[],
                          closest=near,
                          headroom=opts.headroom)
    _seven_step_pick(result, cm, opts)
    if not cands and suggest:
        _suggestions(result, opts)
    return result


@contextmanager
def _collector_paused():
    """The cyclic garbage collector off during a search: the walk allocates millions of
    short-lived tuples (freed by reference counting as ever, none in cycles), and each of
    the collector's passes over the growing caches costs time (~8 % of the walk) for
    nothing. Restored as it was afterwards, once the caches are gone with the search's
    frame (the collector then runs as usual, over what is left)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _seven_step_pick(result: SearchResult, cm, opts: SearchOptions) -> None:
    """The seven-step trace, and where its pick ranks among the plans."""
    steps, pick = seven_steps(result.job, cm, opts)
    result.steps = steps
    if pick is None:
        return
    result.pick = Plan(0, pick, cm.memory(pick), cm.time(pick), [])
    result.pick_rank = next((p.rank for p in result.plans if p.layout == pick), None)
    result.pick_note = pick_note(result.pick, result.pick_rank, result.best, len(result.plans))


def _collect(job: Job, space: _Space, cm, opts: SearchOptions, pairs: list | None = None):
    """(counter, contenders, closest misfit) of these (tp, cp) pairs (default: all)."""
    cnt, cands, closest = _Counter(), [], []
    for base, vpps, sps in _groups(job, space, cnt, pairs):
        _subtree(job, base, vpps, sps, space, cm, cnt, opts.headroom, cands, closest,
                 all_fitting=opts.sort_by == "memory")
    return cnt, cands, closest


def _collect_all(job: Job, space: _Space, cm, opts: SearchOptions):
    """The whole space: (counter, contenders, closest misfit, {contender index: (variant, step time,
    memory total)} of those timed ahead).

    On machines with two or more cores (PLANNER_SERIAL=1 turns it off) this process and a
    forked child share the (tp, cp) pairs, each taking the next from a common queue (largest
    first) until none is left, then rank their own contenders ahead (`_ranked_ahead`). The
    pairs' results are merged exactly, in one fixed order (`_merge`), whoever computed
    them: the same counts, contenders and closest misfit, and the ranking by time of the
    contenders kept gives the same as with all of them."""
    pairs = _tp_cp_pairs(job, space)
    if (not hasattr(os, "fork") or (os.cpu_count() or 1) < 2 or len(pairs) < 6
            or os.environ.get("PLANNER_SERIAL")):
        return _collect(job, space, cm, opts) + ({},)
    order = list(range(0, len(pairs), 2)) + list(range(1, len(pairs), 2))
    biggest = sorted(range(len(pairs)), key=lambda i: -_pair_size(job, space, *pairs[i]))
    queue, fill = os.pipe()
    os.write(fill, b"".join(i.to_bytes(2, "big") for i in biggest))   # < 64 KiB: no block
    os.close(fill)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:   # child
        code = 0
        try:
            os.close(read_fd)
            data = pickle.dumps(_work(job, space, cm, opts, pairs, order, queue))
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_fd)
    mine = _work(job, space, cm, opts, pairs, order, queue)
    os.close(queue)
    with os.fdopen(read_fd, "rb") as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    theirs = pickle.loads(data) if status == 0 and data else {}
    results = {**theirs, **mine}
    for i in order:       # what a failed child left undone
        if i not in results:
            results[i] = _collect(job, space, cm, opts, [pairs[i]]) + ({},)
    return _merge([results[i] for i in order])


def _pair_size(job: Job, space: _Space, tp: int, cp: int) -> int:
    """The leaf groups (pp, vpp, ep, etp, sp) below one (tp, cp) pair: its share of the work,
    roughly, for the queue's order."""
    L = job.model.num_layers
    n = 0
    for pp in space.pp(job.num_gpus // (tp * cp), L):
        splits = split_options(L, pp)
        if splits:
            n += len(space.vpp(L, pp, splits[0]))
    return n * len(space.ep_etp(tp)) * len(space.sp(tp))


def _work(job: Job, space: _Space, cm, opts: SearchOptions, pairs: list, order: list[int],
          queue: int) -> dict:
    """Collect the pairs taken from `queue` (2-byte indices; reads of a pipe this short are
    atomic) until it is empty, then rank them ahead: {pair index: `_ranked_ahead`'s}."""
    got = {}
    while True:
        taken = os.read(queue, 2)
        if not taken:
            break
        i = int.from_bytes(taken, "big")
        got[i] = _collect(job, space, cm, opts, [pairs[i]])
    return _ranked_ahead(got, order, opts, space, cm)


def _ranked_ahead(got: dict, order: list[int], opts: SearchOptions, space: _Space,
                  cm) -> dict:
    """Per pair: (counter, contenders, closest misfit, {index among those contenders:
    (variant, step time, memory total)}), after ranking this process's contenders alone by time (`_by_bound`), in
    the merge order, so the two processes time them side by side: only those that ranking
    timed are kept, with their timings.

    The ranking of all the contenders times no other of these (`_by_bound`), nor do the
    others change where it stops: it stops at the first contender whose bound passes the
    K-th best time so far, and each of these from where ranking them alone stopped on has a
    bound past the K-th best time of these before it, so of all before it. Ranking by memory
    needs them all."""
    mine = [i for i in order if i in got]
    if opts.sort_by == "memory":
        return {i: got[i] + ({},) for i in mine}
    cands, owner = [], []
    for i in mine:
        cands += got[i][1]
        owner += [i] * len(got[i][1])
    done = _by_bound(cands, opts.top, space, cm)[2]
    kept: dict = {i: ([], {}) for i in mine}
    for j in sorted(done):
        share, timings = kept[owner[j]]
        timings[len(share)] = done[j]
        share.append(cands[j])
    return {i: (got[i][0], kept[i][0], got[i][2], kept[i][1]) for i in mine}


def _merge(results: list) -> tuple:
    """The pairs' (counter, contenders, closest misfit, timings) as one, in this order:
    counts summed (the rules in the order they first pruned), contenders concatenated, the
    first smallest misfit."""
    cnt, cands, closest, known = _Counter(), [], [], {}
    for part, share, near, timings in results:
        for rule, count in part.pruned.items():
            cnt.pruned[rule] = cnt.pruned.get(rule, 0) + count
        cnt.searched += part.searched
        cnt.feasible += part.feasible
        cnt.evaluated += part.evaluated
        if near and (not closest or near[0][1] < closest[0][1]):
            closest = near
        known.update({len(cands) + j: got for j, got in timings.items()})
        cands += share
    return cnt, cands, closest, known


def _by_bound(cands: list, top: int, space: _Space, cm,
              known: dict | None = None) -> tuple[list, int, dict]:
    """Time the contenders in order of their lower bound until it passes the `top`-th best
    step time found: (the `top` best as (key, layout, memory, time), how many were timed,
    {index in `cands`: (dispatcher variant, step time, memory total)} of those timed here,
    not found in `known`, which holds the same for contenders timed elsewhere).

    A contender timed counts whether or not it enters: one whose pipeline time (`_fastest`)
    or step time is past the `top`-th best cannot, and is recorded as (None, that time,
    None) without its memory or the other dispatchers' DP time.

    Ranking a subset of `cands` alone times (at least) every one of the subset that ranking
    all of them does: its order is the subset's order in the whole (a stable sort), and
    before any candidate the subset's `top`-th best time is no better than the whole's, so
    its bound stops no earlier (and what it ruled out is ruled out in the whole). Hence
    `known` from the shares ranked alone leaves nothing to time (what is missing is timed
    here); the best of those known are estimated again (the same numbers: the estimates
    depend on the layout only)."""
    order = sorted(range(len(cands)), key=lambda i: cands[i][0])
    scored, done, here = [], {}, {}
    kth = float("inf")
    timed = 0
    for i in order:
        cand = cands[i]
        if cand[0] > kth:
            break
        got = known.get(i) if known else None
        timed += 1
        if got is None:
            lay, step = _fastest(cand, space, cm, kth)
            if lay is None or step > kth:     # slower than the `top`-th best: it cannot
                done[i] = (None, step, None)  # enter, here or (its kth no better) there
                continue
            variant = (lay.moe_token_dispatcher, lay.overlap_moe_expert_parallel_comm)
            mem = here[i] = cm.memory(lay)
            got = done[i] = (variant, step, mem.total)
        elif got[1] > kth:
            continue             # as above
        else:
            lay = _layout(cand, got[0])
        scored.append(((got[1], _compromises(lay), got[2], _mp(lay)) + _tie(lay), i, lay))
        if len(scored) >= top:
            scored.sort(key=lambda x: x[0])
            del scored[top:]
            kth = scored[-1][0][0]
    best = [(key, lay, here[i] if i in here else cm.memory(lay), cm.time(lay))
            for key, i, lay in scored]
    return best, timed, done


def _rank(job: Job, cm, cands, opts: SearchOptions, space: _Space,
          known: dict | None = None) -> tuple[list[Plan], int]:
    """Sort the feasible layouts and keep the top K with their warnings.

    By time (or MFU, the same order): the contenders (the least saver of each chain that fits
    per otherwise-equal layout, with a lower bound on their step time, from `_leaves`) are
    timed, each at its fastest dispatcher variant, in order of that bound until it passes the
    K-th best time found, which leaves the top K exactly as timing all of them would
    (`known`: timings made ahead, `_ranked_ahead`). By memory: memory first, then time, for the K
    smallest.
    """
    timed = 0
    if opts.sort_by == "memory":
        with_mem = sorted(((c, cm.memory(_layout(c))) for c in cands), key=lambda c: c[1].total)
        scored = []
        for cand, mem in with_mem[: max(opts.top * 4, opts.top)]:
            lay = _fastest(cand, space, cm)[0]
            tm = cm.time(lay)
            timed += 1
            scored.append(((mem.total, tm.step_time_s, _compromises(lay), _mp(lay)) + _tie(lay),
                           lay, mem, tm))
    else:
        scored, timed, _ = _by_bound(cands, opts.top, space, cm, known)
    scored.sort(key=lambda x: x[0])
    plans = []
    for i, (_, lay, mem, tm) in enumerate(scored[:opts.top], start=1):
        warns = [v for v in check(Context(model=job.model, hardware=job.hardware,
                                          training=job.training, num_gpus=job.num_gpus,
                                          layout=lay, memory=mem, headroom=opts.headroom))
                 if v.severity == "warning"]
        plans.append(Plan(i, lay, mem, tm, warns))
    return plans, timed


def _with_train(p: Plan, job: Job, tokens: float) -> Plan:
    from dataclasses import replace
    tr = job.training
    steps = tokens / (tr.global_batch_size * tr.seq_length)
    sec = steps * p.time.step_time_s
    train = {"tokens": tokens, "steps": steps, "days": sec / 86400,
             "gpu_hours": sec * p.time.num_gpus / 3600}
    return replace(p, time=replace(p.time, train=train))


def _compromises(lay: Layout) -> int:
    """Numerics a layout gives up to save memory (bf16 gradient reduction, bf16 Adam moments):
    at an equal step time the layout that keeps fp32 ranks first, memory headroom next."""
    return ((not lay.grad_reduce_in_fp32) + (lay.exp_avg_dtype == "bf16")
            + (lay.exp_avg_sq_dtype == "bf16"))


def _mp(lay: Layout) -> int:
    """Model-parallel ranks (the last tie-break: fewer is simpler)."""
    return lay.tp * lay.cp * lay.pp * lay.ep


_REC_ORDER = {r: i for i, r in enumerate(RECOMPUTE)}


def _tie(lay: Layout) -> tuple:
    """A deterministic order among layouts equal on every measured key."""
    return (lay.tp, lay.cp, lay.ep, lay.pp, lay.vpp, lay.etp, lay.zero, lay.micro_batch_size,
            _REC_ORDER[lay.recompute], len(lay.recompute_modules),
            lay.recompute_num_layers or 0, lay.cpu_offloading_num_layers,
            not lay.grad_reduce_in_fp32, lay.exp_avg_dtype, lay.exp_avg_sq_dtype, lay.sp,
            lay.moe_token_dispatcher, lay.overlap_moe_expert_parallel_comm)



# ------------------------------------------------------------------- when nothing fits

MAX_RERUNS = 12
"""Searches `_suggestions` may run to check its suggestions (each ~0.01-0.5 s)."""
SUGGEST_BUDGET_S = 3.0
"""... and the seconds they may take together: no new search starts after this (a slow
search space then checks fewer suggestions, and prints only those it checked)."""


@dataclass(frozen=True)
class Suggestion:
    """One change to the `plan` command that makes a layout fit, and the best it gives."""

    args: tuple[str, ...]                      # e.g. ("--gpus", "96"): replace these options
    why: str
    best: Plan
    global_batch_size: int                     # of the job searched with the change
    drop: tuple[str, ...] = ()                 # options to remove (e.g. "--fix")

    @property
    def option(self) -> str:
        return " ".join(self.args) if self.args else "without " + " ".join(self.drop)

    def line(self) -> str:
        b = self.best
        return (f"{self.option}: {self.why}; best {b.layout.name} zero {b.layout.zero} "
                f"recompute {b.layout.recompute} micro-batch {b.layout.micro_batch_size}: "
                f"{b.time.step_time_s:.2f} s/step, {b.memory.total / 2**30:.1f} GiB/GPU")

    def as_dict(self) -> dict:
        b = self.best
        return {"option": self.option, "args": list(self.args), "drop": list(self.drop),
                "why": self.why, "layout": b.layout.as_dict(self.global_batch_size),
                "memory": b.memory.as_dict(), "time": b.time.as_dict()}


class _Tries:
    """Re-runs of the search with one change, at most MAX_RERUNS; remembers what it tried."""

    def __init__(self, job: Job, opts: SearchOptions):
        self.job, self.opts, self.left = job, opts, MAX_RERUNS
        self.deadline = _time.perf_counter() + SUGGEST_BUDGET_S

    def best(self, *, job: Job | None = None, fix: dict | None = None,
             max_tp: int | None = None, reserve: int = 0) -> Plan | None:
        """The best plan with the change, or None (also when fewer than `reserve` + 1
        searches are left: those are kept for the suggestions tried later)."""
        if self.left <= reserve or _time.perf_counter() > self.deadline:
            return None
        self.left -= 1
        from dataclasses import replace
        opts = replace(self.opts, top=1, tokens=None,
                       fix=self.opts.fix if fix is None else fix,
                       max_tp=self.opts.max_tp if max_tp is None else max_tp)
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
        return (f"{rule} removed every layout the other rules left ({count:,}): "
                + _rule_detail(rule, job, opts))
    lay, mem = result.closest
    short = mem.total - usable
    closest = (f"the closest layout, {lay.name} zero {lay.zero} recompute {lay.recompute} "
               f"micro-batch {lay.micro_batch_size}, needs {mem.total / 2**30:.1f} GiB per GPU, "
               f"{short / 2**30:.1f} GiB more than the {usable / 2**30:.1f} GiB usable")
    if not batch_ok(gbs, lay.micro_batch_size, lay.dp):
        # the closest by memory is a layout the batch rules out: the batch binds first
        ok = [d for d in divisors(N) if gbs % d == 0]
        return (f"batch-divisible: the global batch {gbs} needs micro-batch x dp to divide it, "
                f"and of the dp a {N}-GPU layout can have only {', '.join(map(str, ok))} do; "
                f"none of those layouts fits, and by memory alone {closest}")
    text = "memory: " + closest
    floor = _states_floor(job, usable)
    if floor > N:
        text += (f"; the model states alone need {math.ceil(floor)} or more GPUs "
                 f"however they are sharded")
    return text


def _pin_problems(job: Job, opts: SearchOptions) -> list[str]:
    """Pinned degrees that leave the search nothing, each with the rule and nearest values."""
    m, N, fix = job.model, job.num_gpus, opts.fix
    out = []
    tp = fix.get("tp")
    if tp is not None:
        ok = [t for t in divisors(N) if m.num_attention_heads % t == 0
              and (m.is_mla or m.kv_heads % t == 0 or t % m.kv_heads == 0)]
        if N % tp:
            out.append(f"world-size: tp {tp} (pinned) must divide the {N} GPUs; nearest tp that "
                       f"also divides the heads: {' or '.join(map(str, _near(ok, tp)))}")
        elif tp not in ok:
            out.append(f"heads-divisible-by-tp: tp {tp} (pinned) must divide the "
                       f"{m.num_attention_heads} attention heads (and pair with the {m.kv_heads} "
                       f"KV heads); nearest: tp {' or '.join(map(str, _near(ok, tp)))}")
    for key in ("pp", "cp", "dp"):
        v = fix.get(key)
        if v is not None and N % v:
            out.append(f"world-size: {key} {v} (pinned) must divide the {N} GPUs; nearest: {key} "
                       f"{' or '.join(map(str, _near(divisors(N), v)))}")
    if "ep" in fix and m.is_moe and m.num_experts % fix["ep"]:
        out.append(f"experts-divisible-by-ep: ep {fix['ep']} (pinned) must divide the "
                   f"{m.num_experts} experts; nearest: ep "
                   f"{' or '.join(map(str, _near(divisors(m.num_experts), fix['ep'])))}")
    return out


def _rule_detail(rule: str, job: Job, opts: SearchOptions) -> str:
    m, N, fix = job.model, job.num_gpus, opts.fix
    gbs = job.training.global_batch_size
    if rule in ("heads-divisible-by-tp", "kv-heads-vs-tp") and "tp" in fix:
        ok = [t for t in divisors(m.num_attention_heads) if N % t == 0
              and (m.is_mla or m.kv_heads % t == 0 or t % m.kv_heads == 0)]
        return (f"tp {fix['tp']} (pinned) must divide the {m.num_attention_heads} attention heads"
                f" and pair with the {m.kv_heads} KV heads; nearest: tp "
                f"{' or '.join(map(str, _near(ok, fix['tp'])))}")
    if rule == "batch-divisible":
        ok = [d for d in divisors(N) if gbs % d == 0]
        return (f"the global batch {gbs} needs micro-batch x dp to divide it; on {N} GPUs only "
                f"dp {', '.join(map(str, ok))} divide {gbs}, and those leave tp x pp x cp = "
                f"{', '.join(str(N // d) for d in ok[-3:])}, which the other rules refuse")
    if rule in ("experts-divisible-by-ep", "expert-grid") and m.is_moe:
        ok = [e for e in divisors(m.num_experts) if N % e == 0]
        pinned = f"ep {fix['ep']} (pinned) " if "ep" in fix else "ep "
        return (f"{pinned}must divide the {m.num_experts} experts and, with etp and pp, the "
                f"{N} GPUs; ep that do: {', '.join(map(str, ok))}")
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
            vals = [t for t in divisors(N) if t <= max(dom, val) and m.num_attention_heads % t == 0
                    and (m.is_mla or m.kv_heads % t == 0 or t % m.kv_heads == 0)]
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
    found = (_pin_suggestions(result.job, opts, tries)
             + (_batch_suggestions(result.job, tries) if batch else [])
             + (_seq_suggestion(result.job, tries) if result.closest is not None else [])
             + _gpu_suggestions(result.job, opts, tries, below=batch))
    result.suggested = found
    result.suggestions = [result.binding] + [s.line() for s in found]
    if not found:
        result.suggestions.append(
            f"nothing checked fits ({MAX_RERUNS - tries.left} searches: other pinned values, "
            "batch, sequence, GPU counts); a GPU with more memory (--hardware) or a smaller "
            "model may")


def _pin_suggestions(job: Job, opts: SearchOptions, tries: _Tries) -> list[Suggestion]:
    """Per pinned axis: the nearest other value that fits, else the axis left to the search."""
    gbs, out = job.training.global_batch_size, []
    for key, values in _pinned_options(job, opts).items():
        for v in values:
            fix = {**opts.fix, key: v}
            best = tries.best(fix=fix, reserve=8)
            if best is not None:
                out.append(Suggestion(("--fix", _fix_text(fix)),
                                      f"{key} {v} instead of the pinned {opts.fix[key]}", best, gbs))
                break
        else:
            fix = {k: v for k, v in opts.fix.items() if k != key}
            best = tries.best(fix=fix, reserve=8)
            if best is not None:
                out.append(Suggestion(("--fix", _fix_text(fix)) if fix else (),
                                      f"{key} left to the search", best, gbs,
                                      drop=() if fix else ("--fix",)))
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
    for side in (sorted((c for c in cands if 0 < c < gbs), reverse=True)[:2],
                 sorted(c for c in cands if c > gbs)[:2]):
        for c in side:
            best = tries.best(job=_with(job, global_batch_size=c), reserve=5)
            if best is not None:
                out.append(Suggestion(("--global-batch-size", str(c)),
                                      f"dp {best.layout.dp} divides {c}", best, c))
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
    return [Suggestion(("--seq-length", str(seq // 2), "--global-batch-size", str(gbs * 2)),
                       "half the activations per sequence, the same tokens per step", best,
                       gbs * 2)]


def _gpu_suggestions(job: Job, opts: SearchOptions, tries: _Tries, *,
                     below: bool) -> list[Suggestion]:
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
    return (f"{where}, {'fewer' if n < job.num_gpus else 'more'} than {job.num_gpus}; dp "
            f"{best.layout.dp}" + (f" divides the global batch {job.training.global_batch_size}"
                                   if n < job.num_gpus else ""))
