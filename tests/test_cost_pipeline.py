"""Pipeline schedules' bubbles, parameter copies and activation counts (planner/cost/pipeline.py).

Sources: DeepSeek-V3 report (arXiv:2412.19437) Table 2 and the deepseek-ai/DualPipe README
(1F1B (PP-1)(F+B), 1x, PP; DualPipe (PP/2-1)(F&B+B-3W), 2x, PP+1; DualPipeV the same bubble
with 1x); Narayanan et al. 2021 (arXiv:2104.04473) §2.2 for the interleaved schedule.
"""

from __future__ import annotations

import pytest

from planner.cost.pipeline import (
    activations_in_flight,
    parameter_copies,
    schedule_bubble,
)
from planner.cost.schedule import build_dualpipe_schedule, build_schedule
from planner.layout import bubble_fraction, dualpipe_fits

# a chunk: forward 1, backward 2 (input 1 + weight 1): the usual 1:2 forward:backward FLOPs
F, B, W = 1.0, 2.0, 1.0


@pytest.mark.parametrize(
    "schedule, p, v, fb, want",
    [
        ("1f1b", 4, 1, None, 3 * (F + B)),  # (4-1)(1+2) = 9
        ("interleaved", 4, 2, None, 3 * (F + B) / 2),  # 9/2
        # DualPipe, PP 16 (DeepSeek-V3): (16/2-1)(F&B + B - 3W) = 7 (3 + 2 - 3) = 14 with
        # F&B = F+B (no overlap credit) against 1F1B's 15 * 3 = 45
        ("dualpipe", 16, 1, None, 7 * (F + B + B - 3 * W)),
        # with the forward and backward chunks fully overlapped (F&B = max(F, B) = 2): 7 * 1 = 7
        ("dualpipe", 16, 1, 2.0, 7 * (2.0 + B - 3 * W)),
        ("dualpipev", 8, 1, None, 3 * (F + B + B - 3 * W)),
        ("1f1b", 1, 1, None, 0.0),
    ],
    ids=[
        "1f1b-p4",
        "interleaved-p4-v2",
        "dualpipe-p16",
        "dualpipe-p16-overlapped",
        "dualpipev-p8",
        "no-pipeline",
    ],
)
def test_schedule_bubble(schedule, p, v, fb, want):
    assert schedule_bubble(schedule, p=p, f=F, b=B, w=W, fb=fb, v=v) == pytest.approx(want)


def test_dualpipe_bubble_is_below_1f1b_at_deepseek_v3_scale():
    one = schedule_bubble("1f1b", p=16, f=F, b=B, w=W)
    dual = schedule_bubble("dualpipe", p=16, f=F, b=B, w=W)
    assert dual < one / 3  # 14 against 45


def test_1f1b_bubble_matches_the_simulated_schedule():
    # the closed form against the block-by-block schedule Megatron runs (schedule.py): with
    # equal stages the busiest rank idles (p-1)(F+B)
    p, m = 4, 8
    sim = build_schedule(forward=[F] * p, backward=[B] * p, m=m)
    assert sim.makespan - sim.ideal == pytest.approx(schedule_bubble("1f1b", p=p, f=F, b=B, w=W))


@pytest.mark.parametrize(
    "schedule, copies, acts",
    [
        ("1f1b", 1, 8.0),
        ("interleaved", 1, 8 * (1 + 7 / (8 * 2))),  # v = 2: p (1 + (p-1)/(p v))
        ("dualpipe", 2, 9.0),
        ("dualpipev", 1, 9.0),
    ],
    ids=["1f1b", "interleaved", "dualpipe", "dualpipev"],
)
def test_parameter_copies_and_activations(schedule, copies, acts):
    assert parameter_copies(schedule) == copies
    assert activations_in_flight(schedule, p=8, v=2) == pytest.approx(acts)


def test_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="gpipe"):
        schedule_bubble("gpipe", p=4, f=F, b=B, w=W)


def _v3_job(schedule: str, vpp: int = 1):
    from planner.config import config_from_data

    return config_from_data(
        {
            "model": "deepseek-v3",
            "hardware": "h800",
            "num_gpus": 2048,
            "training": {"seq_length": 4096, "global_batch_size": 15360, "precision": "bf16"},
            "parallel": {
                "tp": 1,
                "pp": 16,
                "ep": 64,
                "etp": 1,
                "micro_batch_size": 1,
                "vpp": vpp,
                "moe_token_dispatcher": "deepep",
                "pipeline_schedule": schedule,
                "first_stage_layers": 4,
                "last_stage_layers": 3,
            },
        }
    )


def test_dualpipe_in_the_step_and_the_memory():
    # The same layout under 1F1B and DualPipe: DualPipe's pipeline part is m * t_max plus
    # (p/2-1)(F&B + B - 3W) of the slowest rank (F, B in the ratio of its compute, W half of
    # the backward).
    from planner.cost.model import CostModel

    job, one = _v3_job("1f1b")
    _, dual = _v3_job("dualpipe")
    cm = CostModel(job)
    m, pipe, t_slow = cm._pipeline(dual)[:3]
    assert m == 15360 // (1 * 128)
    # stage_times: each rank's (F, B with recompute, recompute) per micro-batch
    f, b, rec = max(cm.stage_times(dual), key=lambda x: x[0] + x[1])
    assert f + b == pytest.approx(t_slow, rel=1e-12)
    w = (b - rec) / 2
    assert pipe == pytest.approx(m * t_slow + (16 / 2 - 1) * (f + b + b - 3 * w), rel=1e-9)
    # DualPipe's rank r holds stages r and p-1-r (deepseek-ai/DualPipe's example:
    # nn.Sequential(full_modules[rank], full_modules[pp_size - 1 - rank])): the end ranks the
    # first and the last stage, a middle rank two middle ones, so its states are the two
    # stages' 1F1B states, and it runs half the micro-batches through each: its compute per
    # micro-batch is the mean of theirs
    first, middle, last = cm.stages(one)
    lc = cm.layer_costs(one)
    states_1f1b = {st.name: (w, g, o) for st, w, g, o in cm.stage_states(one, 1)[1]}
    pairs = cm.stages(dual)
    assert [(st.name, st.rank, st.count) for st in pairs] == [
        ("first", 0, 1),
        ("middle", 1, 14),
        ("last", 15, 1),
    ]
    for st, w, g, o in cm.stage_states(dual, 1)[1]:
        halves = ("first", "last") if st.name != "middle" else ("middle", "middle")
        for i, got in enumerate((w, g, o)):
            assert got == pytest.approx(sum(states_1f1b[h][i] for h in halves), rel=1e-12)
    assert pairs[0].embedding and pairs[0].output and pairs[0].layers == first.layers + last.layers
    lc_dual = cm.layer_costs(dual)
    for st, halves in ((pairs[0], (first, last)), (pairs[1], (middle, middle))):
        want = sum(cm._stage_parts(one, lc, h)[0] for h in halves) / 2
        assert cm._stage_parts(dual, lc_dual, st)[0] == pytest.approx(want, rel=1e-12)
    # the DualPipe bubble is below 1F1B's (p-1) t_max of the same stage times
    assert pipe - m * t_slow < (16 - 1) * t_slow / 3


@pytest.mark.parametrize("p, m", [(4, 8), (8, 20), (16, 120)])
def test_dualpipe_bubble_fractions_are_table_2_over_the_ideal_step(p, m):
    # Table 2's bubbles with B = 2F, W = F (the chunk above), over the ideal m(F + B):
    #   DualPipe  (p/2-1)(F + 2B - 3W) / (3m) = (p/2-1) * 2 / (3m) = (p-2)/(3m)
    #   DualPipeV its 2p chunks of half a rank (F/2, B/2, W/2): (p-1) * 1 / (3m) = (p-1)/(3m)
    ideal = m * (F + B)
    dual = schedule_bubble("dualpipe", p=p, f=F, b=B, w=W) / ideal
    v = schedule_bubble("dualpipev", p=2 * p, f=F / 2, b=B / 2, w=W / 2) / ideal
    assert bubble_fraction(p, m, schedule="dualpipe") == pytest.approx(dual, rel=1e-12)
    assert bubble_fraction(p, m, schedule="dualpipe") == pytest.approx((p - 2) / (3 * m))
    assert bubble_fraction(p, m, schedule="dualpipev") == pytest.approx(v, rel=1e-12)
    assert bubble_fraction(p, m, schedule="dualpipev") == pytest.approx((p - 1) / (3 * m))


def test_a_dualpipe_layout_reports_dualpipes_bubble_not_1f1bs():
    # DeepSeek-V3's recipe (examples/deepseek-v3-2048xh800.yaml): pp 16, dp 128, batch 15,360
    # of micro-batch 1: m = 15,360 / 128 = 120; DualPipe (16-2)/(3*120) = 3.9%, where 1F1B's
    # (16-1)/120 = 12.5% is what the step table and the schedule picture used to print
    from pathlib import Path

    from planner.config import load_config
    from planner.cost import estimate
    from planner.views.pictures import schedule_picture

    example = Path(__file__).resolve().parent.parent / "examples" / "deepseek-v3-2048xh800.yaml"
    job, lay = load_config(example)[:2]
    assert (lay.pp, lay.pipeline_schedule, lay.num_microbatches(15360)) == (16, "dualpipe", 120)
    tm = estimate(job, lay).time
    assert tm.bubble_fraction == pytest.approx(14 / 360, rel=1e-12)
    pic = schedule_picture(job, lay)
    assert pic.caption().startswith(
        "DualPipe, 16 stages, 120 micro-batches (60 from each end): bubble (pp-2)/(3m)"
    )
    # the picture is DualPipe's own schedule (below), whose idle share is close to the closed
    # form: the stages are not equal (the embedding, the loss and MTP on the outer ranks)
    assert pic.drawn_dualpipe and "drawn in DualPipe's own order" in pic.caption()
    assert {b.kind for b in pic.schedule.blocks} == {"F", "B", "W"}
    assert pic.bubble_drawn == pytest.approx(14 / 360, abs=0.01)


def test_a_dualpipev_layout_is_drawn_in_1f1b_order_and_says_so():
    from pathlib import Path

    from planner.config import load_config
    from planner.views.pictures import schedule_picture

    example = Path(__file__).resolve().parent.parent / "examples" / "deepseek-v3-2048xh800.yaml"
    job, lay = load_config(example)[:2]
    pic = schedule_picture(job, lay.with_(pipeline_schedule="dualpipev", vpp=2))
    assert not pic.drawn_dualpipe
    assert "in interleaved 1F1B order" in pic.caption()  # vpp 2: the two chunks a rank
    assert "planner does not draw DualPipeV's schedule" in pic.caption()


# ------------------------------------------------------------------ DualPipe's own schedule


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (8, 16), (8, 20), (16, 32), (16, 120)])
def test_dualpipes_simulated_order_idles_table_2s_bubble(p, m):
    # deepseek-ai/DualPipe's eight steps with its held-back sends (dualpipe_order), equal
    # stages F 1, B 2 of which W 1: the busiest rank idles exactly Table 2's
    # (p/2-1)(F&B + B - 3W) with F&B = F + B, (p/2-1) * 2 seconds
    sched = build_dualpipe_schedule(forward=[F] * p, backward=[B] * p, weight=[W] * p, m=m)
    assert sched.ideal == pytest.approx(m * (F + B))
    assert sched.makespan - sched.ideal == pytest.approx(
        schedule_bubble("dualpipe", p=p, f=F, b=B, w=W), abs=1e-9
    )


def test_dualpipes_simulated_order_runs_every_micro_batch_once_each_way():
    # m/2 micro-batches enter at each end; each passes every stage once forward and once
    # backward, in dependency order, and each zero-bubble backward's W comes after it
    p, m = 8, 20
    sched = build_dualpipe_schedule(forward=[F] * p, backward=[B] * p, weight=[W] * p, m=m)
    at = {}
    for b in sched.blocks:
        stage = b.rank if b.chunk == 0 else p - 1 - b.rank
        if b.kind in "FB":
            assert (b.kind, b.chunk, b.micro_batch, stage) not in at
            at[(b.kind, b.chunk, b.micro_batch, stage)] = b
    assert len(at) == 2 * 2 * (m // 2) * p
    for (kind, d, mb, s), b in at.items():
        if kind == "F" and s > 0:
            assert b.start >= at[("F", d, mb, s - 1)].end
        if kind == "B":
            before = at[("B", d, mb, s + 1)] if s < p - 1 else at[("F", d, mb, s)]
            assert b.start >= before.end
    for r in range(p):
        row = sched.rank_blocks(r)
        assert all(x.end <= y.start + 1e-12 for x, y in zip(row, row[1:]))  # one at a time
        assert sum(b.end - b.start for b in row) == pytest.approx(m * (F + B))


@pytest.mark.parametrize(
    "p, m, why",
    [(3, 8, "even pp"), (4, 6, "at least 2*pp = 8"), (4, 9, "even number of micro-batches")],
)
def test_dualpipe_refuses_what_its_step_asserts(p, m, why):
    # DualPipe.step: assert num_ranks % 2 == 0; num_chunks % 2 == 0 and >= num_ranks * 2
    assert why in dualpipe_fits(p, m)
    with pytest.raises(ValueError, match="DualPipe needs"):
        build_dualpipe_schedule(forward=[F] * p, backward=[B] * p, weight=[W] * p, m=m)
