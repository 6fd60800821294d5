"""The search's exact shortcuts for speed (search.py, cost/model.py): each must give what the
plain composition gives, bit for bit."""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
from dataclasses import fields

import pytest

from planner.config import Job, default_training, resolve_hardware
from planner.cost import cost_model
from planner.layout import Layout
from planner.presets import get_preset
from planner.search import SearchOptions, parse_fix, search
from planner.search.rank import _by_bound
from planner.search.space import _build, _head, _Space, _tail, _variants_for
from planner.search.walk import (
    _bound,
    _collect,
    _Counter,
    _floor,
    _Group,
    _groups,
    _tp_cp_pairs,
)


def _job(model: str, gpus: int, hardware: str = "h100-sxm") -> Job:
    m = get_preset(model)
    return Job(
        model=m, hardware=resolve_hardware(hardware), num_gpus=gpus, training=default_training(m)
    )


def _leaves(job: Job, space: _Space, n: int, seed: int = 0):
    """`n` random leaves (head, tail, zero, micro-batch, saver) of the job's space."""
    rng = random.Random(seed)
    bases = list(_groups(job, space, _Counter()))
    for _ in range(n):
        base, vpps, sps = rng.choice(bases)
        sp = rng.choice(sps)
        head, tail = _head(base, rng.choice(vpps), sp), _tail(base, sp and base.tp > 1)
        yield head, tail, rng.choice(space.zero), rng.choice(space.mbs), rng.choice(space.rec)


@pytest.mark.parametrize(
    "model, gpus", [("deepseek-v3", 256), ("mixtral-8x7b", 64), ("llama3-70b", 128)]
)
def test_group_memory_totals_are_the_cost_models(model, gpus):
    job = _job(model, gpus)
    space, cm, fresh = _Space(job, SearchOptions()), cost_model(job), cost_model(job)
    for head, tail, zero, mbs, sv in _leaves(job, space, 400):
        group = _Group(head, tail, space, cm)
        lay = group.layout(zero, mbs, sv)
        assert group.total(zero, mbs, sv) == fresh.memory_total(lay)
        assert fresh.memory_total(lay) == pytest.approx(fresh.memory(lay).total, rel=1e-12)


@pytest.mark.parametrize("model, gpus", [("deepseek-v3", 256), ("llama3-70b", 128)])
def test_built_leaves_are_the_base_with_each_piece_in_its_field(model, gpus):
    # _build names every field it sets; the rest keep Layout's defaults, as on the base
    job = _job(model, gpus)
    space = _Space(job, SearchOptions())
    bases = list(_groups(job, space, _Counter()))
    rng = random.Random(4)
    for _ in range(200):
        base, vpps, sps = rng.choice(bases)
        vpp, sp, zero = rng.choice(vpps), rng.choice(sps), rng.choice(space.zero)
        mbs, sv, (d, o) = rng.choice(space.mbs), rng.choice(space.rec), rng.choice(space.variants)
        dt = "bf16" if sv.bf16_states else "fp32"
        built = _build(_head(base, vpp, sp), zero, mbs, sv, _tail(base, sp and base.tp > 1), (d, o))
        assert built == base.with_(
            vpp=vpp,
            sp=sp,
            tp_comm_overlap=sp and base.tp > 1,
            zero=zero,
            micro_batch_size=mbs,
            recompute=sv.recompute,
            recompute_modules=sv.modules,
            recompute_num_layers=sv.num_layers,
            cpu_offloading_num_layers=sv.offload_layers,
            grad_reduce_in_fp32=not sv.bf16_states,
            exp_avg_dtype=dt,
            exp_avg_sq_dtype=dt,
            moe_token_dispatcher=d,
            overlap_moe_expert_parallel_comm=o,
        )
        # filled as a twin of Layout's slots, then made a Layout (space._layout_maker): the
        # same object as Layout's own __init__ makes, as frozen, and it pickles (the forked
        # search sends Layouts through a pipe)
        rebuilt = Layout(**{f.name: getattr(built, f.name) for f in fields(built)})
        assert type(built) is Layout
        assert hash(built) == hash(rebuilt) and repr(built) == repr(rebuilt)
        assert pickle.loads(pickle.dumps(built)) == rebuilt
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.tp = 3  # type: ignore[misc]


@pytest.mark.parametrize("model, gpus", [("deepseek-v3", 256), ("qwen3-235b-a22b", 128)])
def test_activations_do_not_depend_on_ep(model, gpus):
    # _Group shares the activation vectors of groups that differ only in ep
    job = _job(model, gpus)
    space, cm = _Space(job, SearchOptions()), cost_model(job)
    for head, tail, zero, mbs, sv in _leaves(job, space, 200, seed=1):
        lay = _Group(head, tail, space, cm).layout(zero, mbs, sv)
        for ep in space.ep_all:
            assert cost_model(job).act_vector(lay.with_(ep=ep)) == cm.act_vector(lay)


def test_scaled_bound_sum_is_the_lower_bound():
    job = _job("deepseek-v3", 256)
    space, cm = _Space(job, SearchOptions()), cost_model(job)
    for head, tail, zero, mbs, sv in _leaves(job, space, 300, seed=2):
        lay = _Group(head, tail, space, cm).layout(zero, mbs, sv)
        bound = cm.scale_bound(cm.bound_sum(lay), lay.pp, lay.vpp, lay.dp, lay.micro_batch_size)
        assert bound == cost_model(job).time_lower_bound(lay) <= cm.time(lay).step_time_s
        # the search takes both parts from one call (bound_parts): the same numbers
        assert cost_model(job).bound_parts(lay) == (cm.bound_sum(lay), cm.bound_ends(lay))
        # with the EP overlap the unpaired micro-batches' traffic joins the bound
        # (CostModel.bound_ends): still below the step time, and above the bound without it
        if lay.ep > 1 and lay.recompute != "full":
            on = lay.with_(moe_token_dispatcher="alltoall", overlap_moe_expert_parallel_comm=True)
            ends = cm.bound_ends(on)
            full = cm.scale_bound(cm.bound_sum(on), on.pp, on.vpp, on.dp, on.micro_batch_size, ends)
            assert ends and full == cm.time_lower_bound(on) <= cm.time(on).step_time_s * (1 + 1e-12)
            assert cost_model(job).bound_parts(on) == (cm.bound_sum(on), ends)
            assert full > cm.scale_bound(
                cm.bound_sum(on), on.pp, on.vpp, on.dp, on.micro_batch_size
            )


@pytest.mark.parametrize("model, gpus", [("deepseek-v3", 512), ("mixtral-8x7b", 256)])
def test_shares_ranked_alone_time_every_contender_the_whole_ranking_needs(model, gpus):
    job = _job(model, gpus)
    opts = SearchOptions()
    space, cm = _Space(job, opts), cost_model(job)
    pairs = _tp_cp_pairs(job, space)
    shares = [_collect(job, space, cm, opts, pairs[k::3]) for k in range(3)]
    cands, known = [], {}
    for _, share, _ in shares:
        known.update(
            {len(cands) + i: got for i, got in _by_bound(share, opts.top, space, cm)[2].items()}
        )
        cands += share
    scored, timed, missing = _by_bound(cands, opts.top, space, cm, known)
    assert missing == {}
    plain = _by_bound(cands, opts.top, space, cost_model(job))
    assert (scored, timed) == plain[:2]


@pytest.mark.parametrize("model, gpus", [("deepseek-v3", 512), ("qwen3-235b-a22b", 256)])
def test_two_processes_give_exactly_the_one_process_result_for_moe(model, gpus, monkeypatch):
    job = _job(model, gpus)
    monkeypatch.delenv("PLANNER_SERIAL", raising=False)
    split = search(job)
    monkeypatch.setenv("PLANNER_SERIAL", "1")
    single = search(job)
    assert (split.searched, split.feasible, split.evaluated, split.timed, split.pruned) == (
        single.searched,
        single.feasible,
        single.evaluated,
        single.timed,
        single.pruned,
    )
    assert [(p.layout, p.memory, p.time) for p in split.plans] == [
        (p.layout, p.memory, p.time) for p in single.plans
    ]


@pytest.mark.skipif(
    not hasattr(os, "fork") or (os.cpu_count() or 1) < 2, reason="one process: nothing crosses"
)
def test_the_child_process_results_arrive_unpickled(monkeypatch):
    # the parent redoes what a failed child left undone, so the results above would hold
    # even if what the child sends back (counters, heads and tails, savers, layouts) no
    # longer pickled: check that it exits cleanly and its pairs arrive
    import pickle

    from planner.search import pool

    monkeypatch.delenv("PLANNER_SERIAL", raising=False)
    seen = []
    waitpid, loads = os.waitpid, pickle.loads

    def waited(pid, options):
        got = waitpid(pid, options)
        seen.append(("status", got[1]))
        return got

    def loaded(data):
        out = loads(data)
        seen.append(("pairs", len(out)))
        return out

    monkeypatch.setattr(pool.os, "waitpid", waited)
    monkeypatch.setattr(pool.pickle, "loads", loaded)
    search(_job("deepseek-v3", 512))
    assert len(seen) == 2 and seen[0] == ("status", 0)
    assert seen[1][0] == "pairs" and seen[1][1] > 0


@pytest.mark.parametrize(
    "model, gpus", [("deepseek-v3", 256), ("qwen3-235b-a22b", 128), ("llama3-70b", 128)]
)
def test_step_time_parts_shared_across_zero_and_dispatchers_are_exact(model, gpus):
    # time() caches its pipeline part without ZeRO and its DP part without the fields it
    # reads only through the compute windows: a warm cost model (every ZeRO stage,
    # dispatcher and saver of the layout timed first) must give what a fresh one gives
    job = _job(model, gpus)
    space, warm = _Space(job, SearchOptions()), cost_model(job)
    for head, tail, zero, mbs, sv in _leaves(job, space, 150, seed=3):
        group = _Group(head, tail, space, warm)
        lay = group.layout(zero, mbs, sv)
        for z in space.zero:
            for d, o in space.variants:
                for other in space.rec:
                    warm.time(
                        group.layout(z, mbs, other).with_(
                            moe_token_dispatcher=d, overlap_moe_expert_parallel_comm=o
                        )
                    )
        for d, o in space.variants:
            one = lay.with_(moe_token_dispatcher=d, overlap_moe_expert_parallel_comm=o)
            fresh = cost_model(job).time(one)
            assert warm.time(one) == fresh
            assert warm.step_seconds(one) == fresh.step_time_s
            assert warm.pipeline_seconds(one) <= fresh.step_time_s


FLOOR_CASES = [
    ("deepseek-v3", 256, ""),
    ("mixtral-8x7b", 64, ""),
    ("llama3-70b", 128, ""),
    ("qwen3-235b-a22b", 128, "recompute=full"),
    ("mixtral-8x7b", 128, "recompute=selective"),
]


@pytest.mark.parametrize(
    "model, gpus, fix", FLOOR_CASES, ids=[f"{m}-{g}-{f or 'free'}" for m, g, f in FLOOR_CASES]
)
def test_floor_is_below_every_contenders_bound(model, gpus, fix):
    # a contender's first element is its group's floor at its micro-batch (walk._floor): no
    # more than its own bound (walk._bound), which is no more than its step time
    job = _job(model, gpus)
    opts = SearchOptions(fix=parse_fix(fix), sort_by="memory")  # every fitting saver
    space, cm = _Space(job, opts), cost_model(job)
    _, cands, _ = _collect(job, space, cm, opts)
    assert cands
    below = 0
    for cand in cands:
        bound = _bound(cand, space, cm)
        assert cand[0] <= bound
        below += cand[0] < bound
    if not fix:  # the savers' recompute adds time: some floors are strictly below
        assert below


@pytest.mark.parametrize(
    "model, gpus", [("deepseek-v3", 256), ("qwen3-235b-a22b", 256), ("llama3-70b", 128)]
)
def test_floor_is_below_the_bound_of_every_leaf(model, gpus):
    # every saver, ZeRO stage and dispatcher variant of random leaves, contenders or not
    job = _job(model, gpus)
    space, cm = _Space(job, SearchOptions()), cost_model(job)
    for head, tail, zero, mbs, sv in _leaves(job, space, 300, seed=7):
        floor = _floor(head, mbs, tail, space, cm)
        for v in _variants_for(space, head, sv):
            lay = _build(head, zero, mbs, sv, tail, v)
            assert floor <= cm.time_lower_bound(lay) <= cm.time(lay).step_time_s * (1 + 1e-12)


@pytest.mark.parametrize("model, gpus", [("deepseek-v3", 512), ("llama3-70b", 256)])
def test_ranking_by_floors_times_what_ranking_by_bounds_does(model, gpus):
    # the ranking takes a contender's own bound only when its floor comes up: the same
    # contenders timed, in the same order, as with every bound taken up front
    job = _job(model, gpus)
    opts = SearchOptions()
    space, cm = _Space(job, opts), cost_model(job)
    _, cands, _ = _collect(job, space, cm, opts)
    exact = [(_bound(c, space, cm),) + c[1:] for c in cands]
    assert exact != cands  # the floors are not the bounds
    by_floor = _by_bound(cands, opts.top, space, cm)
    by_bound = _by_bound(exact, opts.top, space, cost_model(job))
    assert by_floor[1] == by_bound[1] and by_floor[2] == by_bound[2]
    assert [x[:2] for x in by_floor[0]] == [x[:2] for x in by_bound[0]]
