"""`planner plan` (issue "planner plan"): the search against a brute-force oracle on small
clusters, the hard rules on every plan, the ranking, --fix, the counts, the no-fit report, the
seven-step trace, Llama 3.1 405B's published production layout, and the CLI."""

from __future__ import annotations

import functools
import itertools
import json
import os

import pytest

from planner.cli import app
from planner.config import Job, default_training, resolve_hardware
from planner.cost.model import CostModel
from planner.layout import Layout, stage_layer_counts
from planner.presets import get_preset
from planner.rules import (
    DEFAULT_HEADROOM,
    RULES,
    Context,
    check,
    fits,
    layers_divisible,
    split_options,
    vpp_needs_pp,
)
from planner.savers import chains, savers
from planner.search import RECOMPUTE, SearchOptions, parse_fix, pool, search
from planner.specs import ModelSpec
from planner.units import divisors

H100 = resolve_hardware("h100-sxm")

# A small MoE (no published numbers needed: the oracle checks the search against itself):
# 8 experts top-2, GQA, SwiGLU, 14 layers so that pp 4 and pp 8 take the uneven
# "embedding and loss count as a layer" split (3 + 2x4 + 3 and 1 + 6x2 + 1).
TINY_MOE = ModelSpec(
    name="tiny-moe",
    num_layers=14,
    hidden_size=2048,
    ffn_hidden_size=5632,
    num_attention_heads=16,
    num_kv_heads=8,
    vocab_size=32000,
    activation="swiglu",
    num_experts=8,
    moe_top_k=2,
    seq_length=4096,
)


def _job(
    model, num_gpus: int, *, seq: int | None = None, gbs: int | None = None, hardware=H100
) -> Job:
    m = get_preset(model) if isinstance(model, str) else model
    return Job(
        model=m,
        hardware=hardware,
        num_gpus=num_gpus,
        training=default_training(m, seq_length=seq, global_batch_size=gbs),
    )


def _errors(job: Job, lay: Layout, memory=None) -> list[str]:
    ctx = Context(
        model=job.model,
        hardware=job.hardware,
        training=job.training,
        num_gpus=job.num_gpus,
        layout=lay,
        memory=memory,
    )
    return [v.rule for v in check(ctx) if v.severity == "error"]


# ------------------------------------------------------------------------------ the oracle

ORDER = {r: i for i, r in enumerate(RECOMPUTE)}


def _saver_fields(sv) -> dict:
    dt = "bf16" if sv.bf16_states else "fp32"
    return dict(
        recompute=sv.recompute,
        recompute_modules=sv.modules,
        recompute_num_layers=sv.num_layers,
        cpu_offloading_num_layers=sv.offload_layers,
        grad_reduce_in_fp32=not sv.bf16_states,
        exp_avg_dtype=dt,
        exp_avg_sq_dtype=dt,
    )


def _oracle(job: Job, opts: SearchOptions):
    """Every layout of the space search.py's docstring defines, no pruning: tp divisors of the
    NVLink domain, cp powers of two, pp divisors, every vpp the split allows, ep x etp, sp,
    micro-batch, ZeRO and every memory saver of savers.py. Kept: no error from rules.check
    with the memory of CostModel(job).memory, and the headroom. Returns [(saver, layout,
    memory)] with the Allgather dispatcher (memory does not depend on it)."""
    m, N, tr = job.model, job.num_gpus, job.training
    cm = CostModel(job)
    L, seq = m.num_layers, tr.seq_length
    options = savers(m, dict(opts.fix))
    feasible = []
    for tp in (t for t in divisors(N) if t <= job.hardware.nvlink_domain_size):
        cps = [
            c
            for c in (2**i for i in range(16))
            if c <= opts.max_cp and (N // tp) % c == 0 and 2 * c <= seq
        ]
        for cp in cps:
            for pp in (p for p in divisors(N // (tp * cp)) if p <= L):
                dp = N // (tp * cp * pp)
                first, last = (split_options(L, pp) or [(None, None)])[0]
                counts = stage_layer_counts(
                    L, Layout(pp=pp, first_stage_layers=first, last_stage_layers=last)
                )
                vpps = [
                    v
                    for v in range(1, opts.max_vpp + 1)
                    if any(c == int(c) and int(c) % v == 0 for c in counts)
                ]
                eps = (
                    [(e, x) for e in divisors(m.num_experts) for x in sorted({1, tp})]
                    if m.is_moe
                    else [(1, tp)]
                )
                sps = [False, True] if tp > 1 else [False]
                for (ep, etp), sp, vpp, mbs, zero, sv in itertools.product(
                    eps, sps, vpps, range(1, opts.max_micro_batch + 1), range(4), options
                ):
                    lay = Layout(
                        tp=tp,
                        cp=cp,
                        ep=ep,
                        dp=dp,
                        pp=pp,
                        vpp=vpp,
                        etp=etp,
                        sp=sp,
                        zero=zero,
                        micro_batch_size=mbs,
                        first_stage_layers=first,
                        last_stage_layers=last,
                        tp_comm_overlap=sp and tp > 1,
                        **_saver_fields(sv),
                    )
                    ctx = Context(
                        model=m, hardware=job.hardware, training=tr, num_gpus=N, layout=lay
                    )
                    # the hard rules without memory first (check's errors are exactly RULES)
                    # so that memory is estimated only where the layout tiles the GPUs
                    if any(fn(ctx) for _, fn in RULES):
                        continue
                    mem = cm.memory(lay)
                    # plan proposes only what passes every rule and keeps the headroom
                    if _errors(job, lay, mem) or not fits(
                        mem.total, mem.capacity, DEFAULT_HEADROOM
                    ):
                        continue
                    feasible.append((sv, lay, mem))
    return feasible


def _key(lay: Layout, mem, tm) -> tuple:
    """The ranking order search.py documents: time, then the fewest numerics given up (bf16
    gradients, bf16 moments), then memory, then fewer model-parallel ranks, then the axes in
    order."""
    compromises = (
        (not lay.grad_reduce_in_fp32)
        + (lay.exp_avg_dtype == "bf16")
        + (lay.exp_avg_sq_dtype == "bf16")
    )
    return (
        tm.step_time_s,
        compromises,
        mem.total,
        lay.tp * lay.cp * lay.pp * lay.ep,
        lay.tp,
        lay.cp,
        lay.ep,
        lay.pp,
        lay.vpp,
        lay.etp,
        lay.zero,
        lay.micro_batch_size,
        ORDER[lay.recompute],
        len(lay.recompute_modules),
        lay.recompute_num_layers or 0,
        lay.cpu_offloading_num_layers,
        not lay.grad_reduce_in_fp32,
        lay.exp_avg_dtype,
        lay.exp_avg_sq_dtype,
        lay.sp,
        lay.moe_token_dispatcher,
        lay.overlap_moe_expert_parallel_comm,
    )


def _fastest_variant(cm, lay: Layout):
    """The dispatcher variants search.py tries for an MoE layout with ep > 1 (allgather,
    alltoall, alltoall with overlap; no overlap with full recompute): the fastest."""
    if lay.ep <= 1:
        return lay, cm.time(lay)
    variants = [("allgather", False), ("alltoall", False)]
    if lay.recompute != "full":
        variants.append(("alltoall", True))
    timed = [
        (lay.with_(moe_token_dispatcher=d, overlap_moe_expert_parallel_comm=o),)
        for d, o in variants
    ]
    timed = [(v[0], cm.time(v[0])) for v in timed]
    return min(timed, key=lambda x: x[1].step_time_s)


def _least_recompute(job, feasible, opts):
    """The search ranks, per otherwise-equal layout, the least saver of each chain that fits
    (along a chain each is no faster: savers.py); bf16-state chains only where the fp32 states
    need recompute (no fp32 `none` fits). Each at its fastest dispatcher variant."""
    cm = CostModel(job)
    fit: dict = {}
    for sv, lay, mem in feasible:
        base = lay.with_(**_saver_fields(savers(job.model, {})[0]))
        fit.setdefault(base, {})[sv.key] = (lay, mem)
    out = []
    for got in fit.values():
        roomy = "none" in got
        picked = set()
        for chain in chains(savers(job.model, dict(opts.fix))):
            if chain[0].bf16_states and roomy:
                continue
            for sv in chain:
                if sv.key in got:
                    picked.add(sv.key)
                    break
        for key in picked:
            lay, mem = got[key]
            lay, tm = _fastest_variant(cm, lay)
            out.append((lay, mem, tm))
    return out


ORACLE_CASES = [("llama3-8b", 8), ("llama3-8b", 32), (TINY_MOE, 8), (TINY_MOE, 16)]


@pytest.mark.parametrize(
    "model, N",
    ORACLE_CASES,
    ids=[f"{m if isinstance(m, str) else m.name}-{n}gpu" for m, n in ORACLE_CASES],
)
def test_search_agrees_with_the_brute_force_oracle(model, N):
    job = _job(model, N, seq=4096, gbs=64)
    opts = SearchOptions(top=5)
    feasible = _oracle(job, opts)
    result = search(job, opts)
    # the same feasible set size: the search's shortcuts count, they do not drop
    assert result.feasible == len(feasible)
    assert feasible, "the oracle found no layout: pick a smaller model or more GPUs"
    ranked = sorted(_least_recompute(job, feasible, opts), key=lambda x: _key(*x))
    best_lay, best_mem, best_tm = ranked[0]
    assert result.best is not None
    assert result.best.time.step_time_s == pytest.approx(best_tm.step_time_s, rel=1e-12)
    assert result.best.layout == best_lay
    # and the whole top K, in order
    assert [p.layout for p in result.plans] == [lay for lay, _, _ in ranked[: opts.top]]
    assert [p.time.step_time_s for p in result.plans] == pytest.approx(
        [tm.step_time_s for _, _, tm in ranked[: opts.top]], rel=1e-12
    )


# ------------------------------------------------------------------------------ plans

PLAN_JOBS = [
    pytest.param("llama3-70b", 256, None, None, id="llama3-70b-256"),
    pytest.param("gpt3-175b", 1024, None, None, id="gpt3-175b-1024"),
    pytest.param("mixtral-8x7b", 64, 4096, None, id="mixtral-8x7b-64"),
    pytest.param("deepseek-v3", 1024, None, None, id="deepseek-v3-1024"),
]


@functools.cache
def _top10(key: str, N: int, seq: int | None, gbs: int | None):
    """One search per job for the tests below (the determinism test runs its own second)."""
    job = _job(key, N, seq=seq, gbs=gbs)
    return job, search(job, SearchOptions(top=10))


@pytest.mark.parametrize("key, N, seq, gbs", PLAN_JOBS)
def test_every_plan_passes_every_hard_rule_and_fits(key, N, seq, gbs):
    job, result = _top10(key, N, seq, gbs)
    assert len(result.plans) == 10
    cm = CostModel(job)
    for p in result.plans:
        mem = cm.memory(p.layout)
        assert mem == p.memory
        assert _errors(job, p.layout, mem) == []
        assert mem.total <= mem.capacity * 0.95
        assert cm.time(p.layout) == p.time


@pytest.mark.parametrize("key, N, seq, gbs", PLAN_JOBS)
def test_ranking_is_sorted_and_deterministic(key, N, seq, gbs):
    job, first = _top10(key, N, seq, gbs)
    again = search(job, SearchOptions(top=10))
    times = [p.time.step_time_s for p in first.plans]
    assert times == sorted(times)
    assert [p.rank for p in first.plans] == list(range(1, len(first.plans) + 1))
    assert [(p.layout, p.time, p.memory) for p in first.plans] == [
        (p.layout, p.time, p.memory) for p in again.plans
    ]
    assert (first.searched, first.feasible, first.pruned) == (
        again.searched,
        again.feasible,
        again.pruned,
    )


@pytest.mark.parametrize(
    "fix, want",
    [
        ("tp=4,pp=2", dict(tp=4, pp=2)),
        ("tp=8,recompute=full", dict(tp=8, recompute="full")),
        ("mbs=2,zero=3", dict(micro_batch_size=2, zero=3)),
    ],
    ids=["tp4-pp2", "tp8-full", "mbs2-zero3"],
)
def test_fix_is_honoured(fix, want):
    job = _job("llama3-70b", 256)
    result = search(job, SearchOptions(top=10, fix=parse_fix(fix)))
    assert result.plans
    for p in result.plans:
        for axis, value in want.items():
            assert getattr(p.layout, axis) == value, p.layout


@pytest.mark.parametrize(
    "key, N, seq, opts",
    [
        ("llama3-70b", 256, None, SearchOptions()),
        ("llama3-70b", 256, None, SearchOptions(fix=parse_fix("tp=4,pp=2"))),
        ("llama3-70b", 256, None, SearchOptions(sort_by="memory")),
        ("mixtral-8x7b", 64, 4096, SearchOptions()),
        ("llama3-405b", 8, None, SearchOptions()),  # nothing fits
        ("gpt3-175b", 48, None, SearchOptions()),  # 48 = 2^4*3: tp 3 and 6 break rules
    ],
    ids=["70b", "70b-fix", "70b-by-memory", "mixtral", "405b-8gpu", "175b-48gpu"],
)
def test_searched_is_pruned_plus_feasible(key, N, seq, opts):
    result = search(_job(key, N, seq=seq), opts)
    assert result.searched == sum(result.pruned.values()) + result.feasible
    assert result.feasible >= len(result.plans)
    assert all(count > 0 for count in result.pruned.values())


def _space_size(job: Job, opts: SearchOptions) -> int:
    """The size of the space search.py's docstring defines (the oracle's axes, with vpp
    counted as the values 1..max_vpp the layers-divisible and vpp-needs-pp rules accept for
    the split; 1 where no split exists, as the search counts it)."""
    m, N, L, seq = job.model, job.num_gpus, job.model.num_layers, job.training.seq_length
    leaf = opts.max_micro_batch * 4 * len(savers(m, {}))
    size = 0
    for tp in (t for t in divisors(N) if t <= job.hardware.nvlink_domain_size):
        eps = len(divisors(m.num_experts)) * len({1, tp}) if m.is_moe else 1
        sps = 2 if tp > 1 else 1
        for cp in (
            c
            for c in (2**i for i in range(16))
            if c <= opts.max_cp and (N // tp) % c == 0 and 2 * c <= seq
        ):
            for pp in (p for p in divisors(N // (tp * cp)) if p <= L):
                splits = split_options(L, pp)
                vpps = 1
                if splits:
                    first, last = splits[0]
                    lays = [
                        Layout(
                            tp=tp,
                            cp=cp,
                            dp=N // (tp * cp * pp),
                            pp=pp,
                            vpp=v,
                            first_stage_layers=first,
                            last_stage_layers=last,
                        )
                        for v in range(1, opts.max_vpp + 1)
                    ]
                    vpps = sum(
                        1
                        for lay in lays
                        if not any(
                            rule(
                                Context(
                                    model=m,
                                    hardware=job.hardware,
                                    training=job.training,
                                    num_gpus=N,
                                    layout=lay,
                                )
                            )
                            for rule in (layers_divisible, vpp_needs_pp)
                        )
                    )
                size += leaf * eps * sps * vpps
    return size


@pytest.mark.parametrize(
    "key, N, seq",
    [
        pytest.param("llama3-8b", 64, 4096, id="llama3-8b-64"),
        pytest.param("llama2-13b", 64, 4096, id="llama2-13b-64-layers-pruned"),
        pytest.param("gpt3-175b", 48, 2048, id="gpt3-175b-48"),
        pytest.param("mixtral-8x7b", 32, 4096, id="mixtral-8x7b-32"),
        pytest.param("llama3-8b", 24, 4096, id="llama3-8b-24-heads-pruned"),
    ],
)
def test_searched_is_the_size_of_the_space(key, N, seq):
    # search.py: `pruned` counts "the whole subtree below the level where it fired", so
    # `searched` = pruned + feasible is every layout of the space, wherever the rules fire.
    job = _job(key, N, seq=seq, gbs=48 if N % 3 == 0 else 64)
    opts = SearchOptions()
    assert search(job, opts).searched == _space_size(job, opts)


def test_seven_step_trace_has_seven_numbered_steps():
    result = search(_job("llama3-70b", 256), SearchOptions(top=3))
    assert [s["step"] for s in result.steps] == [1, 2, 3, 4, 5, 6, 7]
    assert all(s["title"] and s["decision"] for s in result.steps)


# ------------------------------------------------------------------------------ Llama 3 405B


def test_llama3_405b_production_layout_is_feasible_and_not_faster_than_the_top_plan():
    # Dubey et al. 2024 (arXiv:2407.21783) Table 4: Llama 3 405B pre-training on 16,384 H100,
    # TP 8, CP 1, PP 16, DP 128, seq 8192, 2,048 sequences per step (16 per DP group); §3.3.2:
    # the first and the last stage each hold one layer less ("remove one layer from the first
    # and the last stage"): 7 + 14 x 8 + 7 = 126.
    job = _job("llama3-405b", 16384, seq=8192, gbs=2048)
    assert split_options(126, 16) == [(7, 7)]
    cm = CostModel(job)
    production = Layout(
        tp=8,
        cp=1,
        dp=128,
        pp=16,
        etp=8,
        sp=True,
        tp_comm_overlap=True,
        first_stage_layers=7,
        last_stage_layers=7,
    )
    assert production.world_size == 16384
    assert production.num_microbatches(2048) == 16
    fitting = []
    for mbs, vpp, rec, zero in itertools.product(
        (1, 2, 4, 8, 16), (1, 2, 4, 8), RECOMPUTE, (0, 1, 2, 3)
    ):
        lay = production.with_(micro_batch_size=mbs, vpp=vpp, recompute=rec, zero=zero)
        if not _errors(job, lay, cm.memory(lay)):
            fitting.append((cm.time(lay).step_time_s, lay))
    assert fitting, "the published layout fits no micro-batch/vpp/recompute/zero by our model"
    prod_s, prod_lay = min(fitting, key=lambda x: x[0])
    result = search(job, SearchOptions(top=5))
    top = result.best
    assert top is not None
    assert _errors(job, top.layout, cm.memory(top.layout)) == []
    print(
        f"\nLlama 3.1 405B on 16,384 H100: production TP8 PP16 DP128 (7/7 split), best fitting "
        f"as {prod_lay.name} mbs {prod_lay.micro_batch_size} recompute {prod_lay.recompute} "
        f"zero {prod_lay.zero}: {prod_s:.3f} s/step; search top {top.layout.name} "
        f"mbs {top.layout.micro_batch_size} recompute {top.layout.recompute} zero "
        f"{top.layout.zero}: {top.time.step_time_s:.3f} s/step"
    )
    assert top.time.step_time_s <= prod_s


# ------------------------------------------------------------------------------ the CLI


def test_cli_nothing_fits_exits_1_with_the_shortfall_and_suggestions(runner):
    result = runner.invoke(app, ["plan", "--model", "405b", "--gpus", "8"])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "GiB" in errors[0]
    assert "No layout fits" in result.stdout
    suggestions = [line for line in result.stdout.splitlines() if line.startswith("  - ")]
    assert len(suggestions) >= 2
    assert any("GiB" in s for s in suggestions)


def test_cli_nothing_fits_json(runner):
    result = runner.invoke(app, ["plan", "--model", "405b", "--gpus", "8", "--json"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["plans"] == []
    assert out["feasible"] == 0
    closest = out["closest"]
    assert closest["shortfall_bytes"] > 0
    assert closest["memory"]["total_bytes"] > closest["memory"]["capacity_bytes"]
    assert isinstance(out["suggestions"], list) and out["suggestions"]
    assert [s["step"] for s in out["steps"]] == [1, 2, 3, 4, 5, 6, 7]


def test_cli_plan_json(runner):
    result = runner.invoke(
        app, ["plan", "--model", "70b", "--gpus", "2048", "--top", "3", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # one JSON object, nothing else on stdout
    assert {"plans", "searched", "feasible", "steps"} <= set(out)
    assert [p["rank"] for p in out["plans"]] == [1, 2, 3]
    for p in out["plans"]:
        assert {"rank", "layout", "memory", "time", "throughput"} <= set(p)
        assert p["layout"]["tp"] * p["layout"]["cp"] * p["layout"]["dp"] * p["layout"]["pp"] == 2048
        assert p["memory"]["total_bytes"] <= p["memory"]["capacity_bytes"]
    times = [p["time"]["step_time_s"] for p in out["plans"]]
    assert times == sorted(times)
    assert out["searched"] >= out["feasible"] >= 3
    assert [s["step"] for s in out["steps"]] == [1, 2, 3, 4, 5, 6, 7]


def test_cli_plan_human_output(runner):
    result = runner.invoke(app, ["plan", "--model", "70b", "--gpus", "2048", "--top", "3"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("Top 3 layouts for Llama 3 70B on 2048 x h100-sxm") for line in lines
    )
    header = [line for line in lines if line.split()[:4] == ["#", "tp", "pp", "dp"]]
    assert len(header) == 1
    assert "Seven-step procedure" in result.stdout
    assert sum(line.startswith("searched ") for line in lines) == 1


def _plans_json(runner, *args) -> dict:
    result = runner.invoke(app, ["plan", "--model", "70b", "--top", "5", "--json", *args])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    out.pop("elapsed_s")
    return out


def test_cli_nodes_is_gpus_times_gpus_per_node(runner):
    # h100-sxm: 8 GPUs per node, so 256 nodes = 2048 GPUs
    assert _plans_json(runner, "--nodes", "256") == _plans_json(runner, "--gpus", "2048")


def test_cli_gpus_and_nodes_disagreeing_is_a_usage_error(runner):
    result = runner.invoke(app, ["plan", "--model", "70b", "--gpus", "2048", "--nodes", "200"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "disagree" in result.stderr


def test_cli_sort_by_memory(runner):
    out = _plans_json(runner, "--gpus", "2048", "--sort-by", "memory")
    totals = [p["memory"]["total_bytes"] for p in out["plans"]]
    assert len(totals) == 5 and totals == sorted(totals)
    fastest = _plans_json(runner, "--gpus", "2048")["plans"][0]
    assert totals[0] <= fastest["memory"]["total_bytes"]


def test_cli_export_megatron_after_the_table(runner):
    result = runner.invoke(
        app, ["plan", "--model", "70b", "--gpus", "2048", "--top", "3", "--export", "megatron"]
    )
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "pretrain_gpt.py" in text
    assert text.index("Top 3 layouts") < text.index("searched ") < text.index("pretrain_gpt.py")


@pytest.mark.parametrize(
    "model, gpus", [("llama3-70b", 2048), ("mixtral-8x7b", 256)], ids=["70b-2048", "mixtral-256"]
)
def test_two_processes_give_exactly_the_one_process_result(model, gpus, monkeypatch):
    # search.py splits the (tp, cp) pairs with a forked child on 2+ cores; the merge must
    # not change a count or a plan.
    m = get_preset(model)
    job = Job(
        model=m, hardware=resolve_hardware("h100-sxm"), num_gpus=gpus, training=default_training(m)
    )
    monkeypatch.delenv("PLANNER_SERIAL", raising=False)
    monkeypatch.setattr(pool, "POOL_MIN_WORK", 0)  # split even a search this small
    split = search(job)
    monkeypatch.setenv("PLANNER_SERIAL", "1")
    single = search(job)
    assert (split.searched, split.feasible, split.evaluated, split.pruned) == (
        single.searched,
        single.feasible,
        single.evaluated,
        single.pruned,
    )
    assert [(p.layout, p.time.step_time_s) for p in split.plans] == [
        (p.layout, p.time.step_time_s) for p in single.plans
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--global-batch-size", "0"], "--global-batch-size = 0"),
        (["--seq-length", "0"], "--seq-length = 0"),
        (["--precision", "fp8", "--hardware", "a100-80g"], "needs FP8 tensor cores"),
    ],
    ids=["gbs-0", "seq-0", "fp8-on-a100"],
)
def test_plan_rejects_inputs_no_layout_could_satisfy(runner, args, message):
    # A zero must not fall back to the default silently; FP8 on a GPU without FP8 tensor
    # cores is an input problem, not "no layout fits".
    result = runner.invoke(app, ["plan", "--model", "70b", "--gpus", "64", *args])
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize(
    "gpus, fix",
    [
        (1, "tp=2,pp=2,cp=2"),  # pinned degrees larger than the cluster
        (48, "pp=4,vpp=2"),  # a pinned pp the seven steps cannot use with their tp
        (8, "tp=3"),  # a tp that does not divide the GPUs
        (64, "pp=500"),  # more stages than layers
    ],
    ids=["bigger-than-cluster", "pp-vpp", "tp-3", "pp-500"],
)
def test_pinned_axes_that_cannot_tile_give_a_clean_answer(runner, gpus, fix):
    # Found by fuzzing: these once divided by zero. Now: no layout (exit 1) or plans (exit 0),
    # never an internal error.
    result = runner.invoke(
        app, ["plan", "--model", "mixtral-8x7b", "--gpus", str(gpus), "--fix", fix]
    )
    assert result.exit_code in (0, 1), result.stderr
    assert "internal error" not in result.stderr


# ------------------------------------------------------------ the oracle, as a framework runs it

FRAMEWORK_ORACLE_CASES = [("llama3-8b", 8), (TINY_MOE, 8)]


@functools.lru_cache(maxsize=4)
def _feasible_for(model_index: int, accounting: str):
    """The oracle's feasible layouts of a case with the model-state accounting a framework
    counts (runnable.job_for), computed once for the frameworks that share it."""
    from planner.frameworks import runnable

    model, N = FRAMEWORK_ORACLE_CASES[model_index]
    fw = {"megatron": "megatron", "deepspeed": "deepspeed"}[accounting]
    job = runnable.job_for(_job(model, N, seq=4096, gbs=64), fw)
    return job, _oracle(job, SearchOptions(top=5))


def _as_run_oracle(job: Job, feasible, fw: str, top: int) -> list:
    """`plan --framework fw` by brute force: every feasible layout (fp32 savers, and bf16-state
    ones only where the fp32 `none` does not fit at that ZeRO and micro-batch) at every
    dispatcher variant, each as the framework runs it (runnable.runs_as; None: refused) and
    still fitting as it runs; per layout the fastest variant (the first on a tie); one plan
    per layout as run, and at dp*cp = 1 (ZeRO shards over nothing) the lowest ZeRO stage of
    those equal in time and memory; ranked by `_key`."""
    from planner.frameworks import runnable

    cm = CostModel(job)
    plain = _saver_fields(savers(job.model, {})[0])
    by_base: dict = {}
    for sv, lay, _mem in feasible:
        by_base.setdefault(lay.with_(**plain), []).append((sv, lay))
    ran_all: dict = {}
    for got in by_base.values():
        roomy = any(sv.key == "none" for sv, _ in got)
        for sv, lay in got:
            if sv.bf16_states and roomy:
                continue
            variants = [("allgather", False)]
            if lay.ep > 1:
                variants += [("alltoall", False)] + (
                    [("alltoall", True)] if lay.recompute != "full" else []
                )
            best = None
            for d, o in variants:
                ran = runnable.runs_as(
                    job, lay.with_(moe_token_dispatcher=d, overlap_moe_expert_parallel_comm=o), fw
                )
                if ran is None or not fits(cm.memory(ran).total, cm.capacity, DEFAULT_HEADROOM):
                    continue
                tm = cm.time(ran)
                if best is None or tm.step_time_s < best[1].step_time_s:
                    best = (ran, tm)
            if best is not None:
                ran_all[best[0]] = (best[0], cm.memory(best[0]), best[1])
    kept: dict = {}
    for ran, mem, tm in ran_all.values():
        key = (ran.with_(zero=0), tm.step_time_s, mem.total) if ran.dp * ran.cp == 1 else ran
        if key not in kept or ran.zero < kept[key][0].zero:
            kept[key] = (ran, mem, tm)
    return sorted(kept.values(), key=lambda x: _key(*x))[:top]


_FRAMEWORK_ORACLE_RUNS = [
    pytest.param(case, fw, id=f"{m if isinstance(m, str) else m.name}-{n}gpu-{fw}")
    for case, (m, n) in enumerate(FRAMEWORK_ORACLE_CASES)
    # the MoE case with the two frameworks that refuse the most (and share one accounting)
    for fw in (
        ("megatron", "megatron-bridge", "nemo", "deepspeed", "torchtitan")
        if isinstance(m, str)
        else ("deepspeed", "torchtitan")
    )
]


@pytest.mark.parametrize("case, fw", _FRAMEWORK_ORACLE_RUNS)
def test_framework_search_agrees_with_the_brute_force_oracle(case, fw):
    """The search with a framework's filter (its refusals and `runs_as`, as `plan --framework`
    passes them; the look-ups it caches for speed among them) ranks what the brute force
    ranks, in order."""
    from planner.frameworks import runnable

    job, feasible = _feasible_for(case, runnable.ACCOUNTING.get(fw, "megatron"))
    if runnable.model_refusal(job, fw):
        pytest.skip(f"{fw} cannot train {job.model.name}")
    want = _as_run_oracle(job, feasible, fw, top=5)
    assert want, "the framework runs no layout here: pick another case"
    result = search(job, SearchOptions(top=5, runs_as=runnable.allow(fw)))
    assert [p.layout for p in result.plans] == [lay for lay, _, _ in want]
    assert [p.time.step_time_s for p in result.plans] == pytest.approx(
        [tm.step_time_s for _, _, tm in want], rel=1e-12
    )


@pytest.mark.skipif(
    not hasattr(os, "fork") or (os.cpu_count() or 1) < 2, reason="one process: nothing to fork"
)
@pytest.mark.parametrize(
    "model, gpus, filtered, forks",
    [
        ("llama3-8b", 8, False, False),
        ("llama3-8b", 8, True, True),
        ("llama3-8b", 64, False, True),
        ("llama3-70b", 2048, False, True),
        ("deepseek-v3", 512, False, True),
    ],
    ids=["8b-8", "8b-8-framework", "8b-64", "70b-2048", "deepseek-v3-512"],
)
def test_the_search_forks_a_child_only_for_enough_work(model, gpus, filtered, forks, monkeypatch):
    # below POOL_MIN_WORK = 100 leaf groups (pool._pair_size summed: 80 for 8B x 8, 348 for
    # 8B x 64, 752 for 70B x 2,048, 3,150 for DeepSeek-V3 x 512) a search takes a few tens
    # of milliseconds and stays in one process, unless a framework filter ranks every
    # fitting saver (here one that runs every layout as it is)
    m = get_preset(model)
    job = Job(
        model=m, hardware=resolve_hardware("h100-sxm"), num_gpus=gpus, training=default_training(m)
    )
    monkeypatch.delenv("PLANNER_SERIAL", raising=False)
    forked = []
    real = os.fork

    def fork():
        forked.append(True)
        return real()

    monkeypatch.setattr(pool.os, "fork", fork)
    search(job, SearchOptions(runs_as=(lambda job, lay: lay) if filtered else None))
    assert bool(forked) == forks
