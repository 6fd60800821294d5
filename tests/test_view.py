"""Pictures and terminal views: the pipeline schedule against the time model's bubble, the
per-rank memory against the worst rank, the views at pinned widths (80, 120, 200)."""

from __future__ import annotations

import pytest

from planner.cost.pipeline import bubble_fraction, pipeline_time
from planner.cost.schedule import build_schedule, rank_order


# ------------------------------------------------------------------------- the schedule

@pytest.mark.parametrize("p,m,v", [
    (4, 16, 1),    # the reference chapter's TP8 x PP4 x DP64 example: (4-1)/16 = 18.75 %
    (4, 4, 1),     # the chapter's bubble table: p 4, m 4 -> 75 %
    (8, 8, 1),     # ... p 8, m 8 -> 88 %
    (8, 32, 1),    # ... p 8, m 32 -> 22 %
    (16, 128, 1),  # ... p 16, m 128 -> 12 %
    (3, 7, 1),     # m not a multiple of p: 1F1B does not care
    (4, 16, 2),    # interleaved: (p-1)/(v*m)
    (4, 8, 4),
    (8, 32, 5),
    (16, 128, 5),
], ids=lambda x: str(x))
def test_schedule_idle_time_is_the_formula(p, m, v):
    """Equal stages, backward twice the forward: the busiest rank idles (p-1)/(v*m) of its
    work (Narayanan et al. 2021 §2.2), and the schedule ends when pipeline_time says."""
    sched = build_schedule(forward=[1.0] * p, backward=[2.0] * p, m=m, v=v)
    assert sched.bubble_fraction == pytest.approx(bubble_fraction(p, m, v), rel=1e-9)
    assert sched.makespan == pytest.approx(pipeline_time([3.0] * p, m=m, v=v), rel=1e-9)


def test_schedule_unequal_stages_end_when_the_time_model_says():
    """Uneven stages (embedding on the first rank, output layer on the last):
    m*t_max + (sum t_i - t_max)/v, the closed form in cost/pipeline.py."""
    fwd, bwd = [1.0, 1.2, 1.2, 1.5], [2.0, 2.4, 2.4, 3.2]
    for v in (1, 2):
        sched = build_schedule(forward=fwd, backward=bwd, m=16, v=v)
        assert sched.makespan == pytest.approx(
            pipeline_time([f + b for f, b in zip(fwd, bwd)], m=16, v=v), rel=1e-9)


def test_interleaved_with_a_partial_group_idles_more_than_the_formula():
    """m = 6 on p = 4 with v = 2: Megatron takes micro-batches in groups of p per virtual
    stage, so the last group of 2 leaves ranks waiting; the closed form (p-1)/(v*m) = 25 %
    assumes m a multiple of p. The schedule says so rather than hiding it."""
    sched = build_schedule(forward=[1.0] * 4, backward=[2.0] * 4, m=6, v=2)
    assert sched.bubble_fraction > bubble_fraction(4, 6, 2)


def test_1f1b_order_is_megatrons():
    """Rank r warms up with p - r - 1 forwards, then alternates, then cools down."""
    order = rank_order(4, 8, 1, 1)
    assert [k for k, _, _ in order[:3]] == ["F", "F", "F"]          # 2 warm-up + first steady F
    assert order[3] == ("B", 0, 0)
    assert sum(k == "F" for k, _, _ in order) == sum(k == "B" for k, _, _ in order) == 8
    last = rank_order(4, 8, 1, 3)
    assert [k for k, _, _ in last[:4]] == ["F", "B", "F", "B"]      # no warm-up on the last rank


def test_interleaved_order_groups_p_micro_batches_per_chunk():
    order = rank_order(2, 4, 2, 0)
    fwd = [(mb, c) for k, mb, c in order if k == "F"]
    assert fwd == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]
    bwd = [(mb, c) for k, mb, c in order if k == "B"]
    assert bwd[:4] == [(0, 1), (1, 1), (0, 0), (1, 0)]


# ------------------------------------------------------------- per-rank cost model views

from planner.config import load_config                                   # noqa: E402
from planner.cost import cost_model                                      # noqa: E402
from planner.layout import Layout                                        # noqa: E402

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "examples"


def _job(name):
    return load_config(EXAMPLES / name)


@pytest.mark.parametrize("example,changes", [
    ("llama3-70b-2048xh100.yaml", {}),
    ("llama3-70b-2048xh100.yaml", {"vpp": 5}),
    ("llama3-70b-2048xh100.yaml", {"pp": 8, "dp": 32, "recompute": "full"}),
    ("deepseek-v3-1024xb200.yaml", {}),
    ("mixtral-8x7b-64xh100.yaml", {}),
], ids=["70b", "70b-vpp5", "70b-pp8-full", "deepseek-v3", "mixtral"])
def test_memory_by_rank_contains_the_worst_rank(example, changes):
    """The bars are the same arithmetic as `memory`: its most loaded rank is one of them, and
    rank 0 holds the most activations (the most micro-batches in flight)."""
    job, lay = _job(example)
    lay = lay.with_(**changes)
    cm = cost_model(job)
    ranks = cm.memory_by_rank(lay)
    worst = cm.memory(lay)
    assert len(ranks) == lay.pp
    assert max(r.total for r in ranks) == pytest.approx(worst.total, rel=1e-12)
    assert ranks[0].stage == "first" and ranks[-1].stage == ("last" if lay.pp > 1 else "first")
    dense_acts = [r.activations for r in ranks[1:-1]]
    assert dense_acts == sorted(dense_acts, reverse=True)   # fewer in flight further down


@pytest.mark.parametrize("example,changes", [
    ("llama3-70b-2048xh100.yaml", {}),
    ("llama3-70b-2048xh100.yaml", {"vpp": 5}),
    ("llama3-70b-2048xh100.yaml", {"pp": 8, "dp": 32, "recompute": "full"}),
    ("deepseek-v3-1024xb200.yaml", {}),
], ids=["70b", "70b-vpp5", "70b-pp8-full", "deepseek-v3"])
def test_stage_times_add_up_to_the_step(example, changes):
    """pipeline_time over the stages' (forward + backward) is the step less DP and the
    optimizer: the schedule picture and the step time are one model."""
    job, lay = _job(example)
    lay = lay.with_(**changes)
    cm = cost_model(job)
    st = cm.time(lay)
    stages = cm.stage_times(lay)
    m = lay.num_microbatches(job.training.global_batch_size)
    pipe = pipeline_time([f + b for f, b, _ in stages], m=m, v=lay.vpp)
    assert pipe == pytest.approx(st.step_time_s - st.dp_comm_s - st.optimizer_s, rel=1e-9)
    sched = build_schedule(forward=[f for f, _, _ in stages], backward=[b for _, b, _ in stages],
                           m=m, v=lay.vpp)
    if len({round(f + b, 12) for f, b, _ in stages}) == 1:
        assert sched.makespan == pytest.approx(pipe, rel=1e-9)
    else:
        # unequal stages (DeepSeek-V3: 3 and 2 layers on the first and last of 16 ranks, 4 on
        # the others): the closed form m*t_max + (sum t_i - t_max) charges the whole fill and
        # drain at full stage time; the drawn schedule overlaps the short stages' part of it,
        # so it is never longer and here within 1 %
        assert pipe * 0.99 <= sched.makespan <= pipe * (1 + 1e-9)
