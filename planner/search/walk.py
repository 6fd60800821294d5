"""The walk of the space: the groups of structural degrees that pass the rules level by
level in the seven-step order (`_groups`), the subtree below each (`_subtree`: a memory
bound first, then every vpp x sp), and the leaves of one (base, vpp, sp) (`_leaves`): the
micro-batch sizes the batch rules let through, how many of them fit per (saver, ZeRO) pair
(`_fitting_prefixes`, narrowed by `_known_bounds`), and the contenders for ranking with a
floor under their step time (`_contenders`, `_floor`: one per group and micro-batch) and,
taken by the ranking only when the floor comes up, their own lower bound (`_bound`,
`_least_bound_sum`).

`_Counter` counts what the walk covered: the layouts each rule pruned, those that fit, the
memory estimates made. `_collect` walks some (tp, cp) pairs (default: all of them) into
(counter, contenders, closest misfit).
"""

from __future__ import annotations

import bisect

from planner.config import Job
from planner.layout import Layout
from planner.rules import (
    Context,
    batch_ok,
    cp_dsa,
    cp_sliding_window,
    expert_grid,
    experts_divisible_by_ep,
    fits,
    heads_divisible_by_tp,
    interleave_ok,
    kv_heads_vs_tp,
    moe_sp_ok,
    seq_divisible_by_cp,
    seq_tp_ok,
    split_options,
)
from planner.savers import Saver
from planner.search.space import (
    SearchOptions,
    _build,
    _Head,
    _head,
    _Pair,
    _Pairs,
    _savers_for,
    _Space,
    _Tail,
    _tail,
    _variants_for,
)


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
        rule = (
            "heads-divisible-by-tp"
            if heads_divisible_by_tp(probe)
            else "kv-heads-vs-tp"
            if kv_heads_vs_tp(probe)
            else "seq-divisible-by-cp"
            if seq_divisible_by_cp(ctx(Layout(tp=tp, cp=cp)))
            else "cp-sliding-window"  # the search's CP is the p2p ring
            if cp_sliding_window(ctx(Layout(tp=tp, cp=cp)))
            else "cp-dsa"
            if cp_dsa(ctx(Layout(tp=tp, cp=cp)))
            else None
        )
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
                base = Layout(
                    tp=tp,
                    cp=cp,
                    ep=ep,
                    dp=dp,
                    pp=pp,
                    etp=etp,
                    first_stage_layers=split[0],
                    last_stage_layers=split[1],
                )
                c = ctx(base)
                n = leaf * len(vpps) * len(sps)
                if experts_divisible_by_ep(c):
                    cnt.prune("experts-divisible-by-ep", n)
                    continue
                if expert_grid(c):
                    cnt.prune("expert-grid", n)
                    continue
                yield base, vpps, sps


def _subtree(
    job: Job,
    base: Layout,
    vpps: list[int],
    sps: list[bool],
    space: _Space,
    cm,
    cnt: _Counter,
    headroom: float,
    cands: list,
    closest: list,
    all_fitting: bool = False,
) -> None:
    """All vpp x sp x micro-batch x ZeRO x recompute below one base layout.

    First a bound: memory is smallest at vpp 1 (interleaving only adds micro-batches in
    flight), with SP where tp > 1 (it divides every activation by tp; its gather buffer is
    smaller than what it saves) and at micro-batch 1, so if no ZeRO x recompute fits there,
    nothing below fits: the subtree is counted rule by rule without estimating it."""
    m, seq = job.model, job.training.seq_length
    probe_sp = [
        sp
        for sp in sps
        if seq_tp_ok(seq, base.cp, base.tp, sp) and moe_sp_ok(m.is_moe, base.ep, base.tp, sp)
    ]
    any_fit = False
    if probe_sp and space.mbs:
        low = base.with_(
            vpp=1,
            sp=max(probe_sp),
            tp_comm_overlap=max(probe_sp) and base.tp > 1,
            micro_batch_size=space.mbs[0],
        )
        # the minimum is at ZeRO 2 or 3 (0-2 only shard more), among the savers that need
        # the least: bf16 states (they never need more than fp32) with some recompute
        zs = [z for z in space.zero if z >= 2] or [max(space.zero)]
        least = [sv for sv in space.rec if sv.bf16_states] or space.rec
        rs = [sv for sv in least if sv.recompute != "none" or sv.offload_layers] or least
        head, tail = _head(low, low.vpp, low.sp), _tail(low, low.tp_comm_overlap)
        for zero in zs:
            for sv in rs:
                if sv.offload_layers and base.pp > 1:
                    continue
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
            fit = _leaves(
                job,
                base,
                vpp,
                sp,
                space,
                cm,
                cnt,
                headroom,
                cands,
                closest,
                estimate=any_fit,
                all_fitting=all_fitting,
                ceiling=ceiling,
            )
            if vpp == 1:
                # 1F1B holds the fewest micro-batches on every rank: what does not fit at vpp 1
                # does not fit interleaved either
                ceiling = fit


def _leaves(
    job: Job,
    base: Layout,
    vpp: int,
    sp: bool,
    space: _Space,
    cm,
    cnt: _Counter,
    headroom: float,
    cands: list,
    closest: list,
    *,
    estimate: bool = True,
    all_fitting: bool = False,
    ceiling: list | None = None,
) -> list[int]:
    """Micro-batch x ZeRO x recompute of one base layout; returns, per (saver, ZeRO) pair
    (`_Pairs`), the largest micro-batch that fits (0: none)."""
    b = base  # the leaves as (head, tail): dataclasses.replace costs more than the estimate
    head, tail = _head(b, vpp, sp), _tail(b, sp and b.tp > 1)
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
    key): the states are looked up (and summed, `state_sums`) once per group, from one
    Layout per state dtype; the activations once per search for the groups that differ only
    in ep (`space.act_tables`).
    So a Layout is built only for those lookups, the closest misfit and the contenders that
    get timed."""

    __slots__ = ("head", "tail", "cm", "moe", "act_class", "states", "acts", "by_dtype")

    def __init__(self, head: _Head, tail: _Tail, space: _Space, cm):
        self.head, self.tail, self.cm = head, tail, cm
        self.moe = space.variants[0]
        self.act_class = space.act_class
        self.states: dict = {}
        self.by_dtype: dict = {}
        h = head
        self.acts = space.act_tables.setdefault(
            (h.tp, h.cp, h.dp, h.pp, h.vpp, h.etp, h.sp, tail), {}
        )

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
            states = self.states[skey] = self.cm.state_sums(
                self.cm.stage_states(self.with_states_of(sv), zero)
            )
        akey = (mbs, self.act_class[sv.key])
        acts = self.acts.get(akey)
        if acts is None:
            acts = self.acts[akey] = self.cm.act_vector(self.layout(zero, mbs, sv))
        return self.cm.worst_total(states, acts)


def _valid_micro_batches(
    job: Job, base: Layout, vpp: int, space: _Space, cnt: _Counter
) -> list[int]:
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


def _fitting_prefixes(
    group: _Group,
    valid: list[int],
    pairs: _Pairs,
    cnt: _Counter,
    headroom: float,
    closest: list,
    ceiling: list | None,
) -> list[int]:
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
    limit = cm.capacity * (1 - headroom)  # rules.fits: total <= limit
    n = len(valid)
    items = pairs.pairs
    prefix: list = [None] * len(items)
    zeros, none = pairs.zeros, pairs.none
    z3_ok = (
        3 in zeros
        and 2 in zeros
        and cm.zero3_no_worse_than_2(group.with_states_of(pairs.options[0]))
    )
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
            if 0 < lo < hi:  # a neighbour's boundary: this one is likely the same
                if fits_at(lo, zero, sv):
                    lo += 1
                else:
                    hi = lo
            if lo < hi:  # then the largest: usually everything fits
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


def _known_bounds(
    pair: _Pair, j: int, prefix: list, n: int, valid: list[int], ceiling: list | None, z3_ok: bool
) -> tuple[int, int]:
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


def _contenders(
    group: _Group,
    valid: list[int],
    prefix: list,
    pairs: _Pairs,
    space: _Space,
    cands: list,
    all_fitting: bool,
) -> None:
    """Per ZeRO stage and micro-batch, the least saver of each chain that fits (along a chain
    each step is no faster), with a floor under its step time (`_floor`: the same for every
    saver, ZeRO stage and dispatcher variant of the group at this micro-batch); bf16 states
    only where the fp32 states need some recompute to fit; every fitting layout when ranking
    by memory. Stored as (floor, head, zero, micro-batch, saver, tail): `_layout` builds the
    Layout only for those that get timed, and the ranking takes each one's own lower bound
    (`_bound`) only when its floor comes up (`rank._by_bound`); or, where `space.eager_bounds`,
    its own bound at once."""
    floors: dict[int, float] = {}
    head, tail, cm = group.head, group.tail, group.cm
    none = space.by_key.get("none")

    def floor(mbs: int) -> float:
        lb = floors.get(mbs)
        if lb is None:
            lb = floors[mbs] = _floor(head, mbs, tail, space, cm)
        return lb

    if space.eager_bounds:  # each its own bound (`_Space.eager_bounds`)

        def lower(mbs: int, sv: Saver) -> float:
            return _bound((None, head, 0, mbs, sv, tail), space, cm)

    else:

        def lower(mbs: int, sv: Saver) -> float:
            return floor(mbs)

    for zero in space.zero:
        chains_z = pairs.chains[zero]
        none_fits = prefix[pairs.index[(none.key, zero)]] if none is not None else 0
        for i, mbs in enumerate(valid):
            roomy = i < none_fits
            if roomy and not all_fitting:
                # every fp32 chain starts at none, which fits: it is the only contender
                cands.append((lower(mbs, none), head, zero, mbs, none, tail))
                continue
            seen = set()
            for bf16, chain in chains_z:
                if bf16 and roomy:
                    continue  # fp32 states fit without recompute: no need for bf16
                for sv, j in chain:
                    if i < prefix[j]:
                        if sv.key not in seen:
                            seen.add(sv.key)
                            cands.append((lower(mbs, sv), head, zero, mbs, sv, tail))
                        if not all_fitting:
                            break


_NONE = Saver("none", "none")
"""No saver: the floor's layout (`_floor`), whether or not the search tries it."""


def _floor(head: _Head, mbs: int, tail: _Tail, space: _Space, cm) -> float:
    """A lower bound on the step time of every leaf of (head, tail) at this micro-batch, for
    every saver, ZeRO stage and dispatcher variant: no more than `_bound` of any of them.

    It is `scale_bound` of the least `bound_sum` over the dispatcher variants of the leaf
    without any saver (`_NONE`; ZeRO is not read), without the unpaired ends. A saver adds
    to the bound and takes nothing from it: the forward and backward times do not read the
    recompute settings, recompute adds its own time (>= 0; a share of it under block
    recompute), full recompute and the op-SAC rerun add TP and CP traffic and recomputing
    the MoE layer dispatches again (more EP traffic, of which the exposed part grows with
    it); offloading and the state dtypes are not read. `scale_bound` increases in the sum
    and in each unpaired end (>= 0), so each variant's bound of any saver is at least this
    of that variant's sum without a saver; and the variants a saver tries are among those
    of no saver (full recompute drops the EP overlap), so the least sum over all of them is
    at most a saver's (`_least_bound_sum` keeps a subset of those).
    `tests/test_search_shortcuts.py` checks it against `_bound` of every contender of
    several searches and against the bound of random leaves. Kept per search in
    `space.floor_parts` on what the sum reads: the head without dp and vpp (no saver: no
    block recompute), the tail, the micro-batch. One per group and micro-batch, and one
    scaling, where each saver class took one per variant before: the ranking takes the
    exact bound only of the few contenders whose floor comes up."""
    h = head
    key = (h.tp, h.cp, h.ep, h.pp, h.etp, h.sp, tail, mbs)
    least = space.floor_parts.get(key)
    if least is None:
        least = space.floor_parts[key] = min(
            cm.bound_parts(_build(head, 0, mbs, _NONE, tail, v))[0]
            for v in _variants_for(space, head, _NONE)
        )
    return cm.scale_bound(least, h.pp, h.vpp, h.dp, mbs)


def _bound(cand: tuple, space: _Space, cm) -> float:
    """The lower bound on the step time of a contender (the same for every ZeRO stage; the
    least over the dispatcher variants, `_least_bound_sum`), kept per search."""
    _, head, _zero, mbs, sv, tail = cand
    key = (head, tail, mbs, space.time_class[sv.key])
    lb = space.bounds.get(key)
    if lb is None:
        pp, vpp, dp = head.pp, head.vpp, head.dp
        lb = space.bounds[key] = min(
            cm.scale_bound(total, pp, vpp, dp, mbs, ends)
            for total, ends in _least_bound_sum(head, mbs, sv, tail, space, cm)
        )
    return lb


def _least_bound_sum(
    head: _Head, mbs: int, sv: Saver, tail: _Tail, space: _Space, cm
) -> tuple[tuple[float, tuple], ...]:
    """The `bound_sum` and `bound_ends` of each dispatcher variant, the least `bound_sum`
    first: with `scale_bound` (increasing in both) the least of them scaled is the least
    `time_lower_bound` of the candidate, the same for every ZeRO stage; the variants whose
    sum is the least's and whose ends add nothing are dropped. Kept for the whole search in
    `space.bound_sums`, keyed on every field `bound_sum` reads (the head without dp, and
    without vpp unless block recompute; the tail; micro-batch; the saver's recompute
    settings, not its state dtypes or offload); the variants tried depend only on ep and the
    recompute."""
    h = head
    key = (
        h.tp,
        h.cp,
        h.ep,
        h.pp,
        h.vpp if sv.num_layers else 1,
        h.etp,
        h.sp,
        tail,
        mbs,
        space.time_class[sv.key],
    )
    got = space.bound_sums.get(key)
    if got is None:
        variants = _variants_for(space, head, sv)
        if len(variants) == 1:  # ep 1 (every dense model): nothing to order
            got = space.bound_sums[key] = (
                cm.bound_parts(_build(head, 0, mbs, sv, tail, variants[0])),
            )
            return got
        parts = sorted({cm.bound_parts(_build(head, 0, mbs, sv, tail, v)) for v in variants})
        # a variant no cheaper in its sum and with no unpaired ends never gives the least
        got = space.bound_sums[key] = tuple(p for i, p in enumerate(parts) if i == 0 or p[1])
    return got


def _layout(cand: tuple, variant: tuple[str, bool] = ("allgather", False)) -> Layout:
    _, head, zero, mbs, sv, tail = cand
    return _build(head, zero, mbs, sv, tail, variant)


def _closer(closest: list, lay: Layout, total: float) -> None:
    """Keep the smallest layout that did not fit (its breakdown is built at the end)."""
    if not closest or total < closest[0][1]:
        closest[:] = [(lay, total)]


def _collect(job: Job, space: _Space, cm, opts: SearchOptions, pairs: list | None = None):
    """(counter, contenders, closest misfit) of these (tp, cp) pairs (default: all)."""
    cnt, cands, closest = _Counter(), [], []
    for base, vpps, sps in _groups(job, space, cnt, pairs):
        _subtree(
            job,
            base,
            vpps,
            sps,
            space,
            cm,
            cnt,
            opts.headroom,
            cands,
            closest,
            all_fitting=opts.sort_by == "memory" or opts.runs_as is not None,
        )
    return cnt, cands, closest
