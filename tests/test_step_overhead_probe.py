"""benchmarks/step_overhead.py: the per-step time a run asks of `step_overhead_ms`."""

from benchmarks.step_overhead import needed_overhead_ms, rows


def test_needed_overhead_by_hand():
    # a run measured at 0.452 s, estimated at 0.462 s with a 150 ms overhead: the rest of the
    # model gives 0.462 - 0.150 = 0.312 s, so 0.452 - 0.312 = 0.140 s = 140 ms is unexplained
    assert abs(needed_overhead_ms(0.452, 0.462, 150.0) - 140.0) < 1e-9
    # an estimate that overshoots without any overhead asks for a negative one
    assert abs(needed_overhead_ms(1.0, 1.2, 0.0) - (-200.0)) < 1e-9


def test_rows_hardest_pull_first():
    got = rows("h100-sxm")
    assert got and all(a["err0"] <= b["err0"] for a, b in zip(got, got[1:]))
    for r in got:
        # needed_ms is measured - the estimate without the overhead (its definition)
        assert abs(r["needed"] - (r["measured"] - r["measured"] * (1 + r["err0"])) * 1e3) < 1e-6
