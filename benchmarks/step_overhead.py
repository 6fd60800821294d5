"""Which runs hold a profile's `step_overhead_ms` up, and how large the per-step mechanisms the
model does count are on them (issue 17: a fitted parameter at a bound is missing physics).

    python benchmarks/step_overhead.py [PROFILE ...]

Per run on the profile (default h100-sxm), the hardest-pulling first (the most negative error
without the overhead: the fit weighs log errors): the measured step, the
micro-batches per rank m, the error with the profile's `step_overhead_ms` and with none, and
`needed_ms` = measured - (estimate without the overhead): the per-step time the rest of the
model leaves unexplained. Beside it, per step, the parts a per-step mechanism would live in:
the attention core (forward + backward at the profile's attention rate), the output layer and
loss, the host's layer launches (launch.host_parts, forward + 2x backward, every micro-batch:
when it reaches the compute the run is host-bound and host work outside the layers is on the
critical path), the exposed data-parallel traffic and the optimizer's update and clipping.
A mechanism explains a run's `needed_ms` only if it is that large there and small on the runs
that ask for nothing.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.calibrate import default_paths, fit_cases
from planner.calibration.fit import with_values
from planner.cost import estimate
from planner.cost.compute import ATTN_BWD_FACTOR, attention_kernel_share
from planner.cost.launch import host_parts
from planner.cost.model import CostModel


def needed_overhead_ms(measured_s: float, predicted_s: float, overhead_ms: float) -> float:
    """The per-step time, in ms, that would make the estimate match the run with everything
    else as it is: measured - (predicted - overhead). Negative: the rest already overshoots."""
    return (measured_s - (predicted_s - overhead_ms * 1e-3)) * 1e3


def parts_ms(job, lay) -> dict[str, float]:
    """Per step, in ms, on the first pipeline rank: attention core, output layer + loss, host
    layer launches (the model's kernel counts at the profile's launch overhead), exposed DP,
    optimizer update + clipping, and the compute they sit in."""
    cm = CostModel(job)
    s, cal, st = cm.shape, cm.cal, cm.stages(lay)[0]
    m = max(1, lay.num_microbatches(job.training.global_batch_size))
    lc = cm.layer_costs(lay)
    rate = (
        cm.bf16
        * cal.attention_efficiency
        * attention_kernel_share(job.training.attention_kernel, job.hardware.architecture)
    )
    attn = (1 + ATTN_BWD_FACTOR) * lc.tokens * s.attn_core(cm.seq) / lay.tp / rate * st.layers
    kw = dict(
        cuda_graphs=lay.cuda_graphs, launch_us=cal.launch_overhead_us, recipe=cm.recipe, tp=lay.tp
    )
    dense = sum(host_parts(moe=False, mla=s.mla, q_lora=s.q_lora, **kw))
    moe = (
        sum(
            host_parts(
                moe=True,
                local_experts=max(1, s.E // lay.ep),
                padded=lay.moe_pad_expert_input_to_capacity,
                mla=s.mla,
                q_lora=s.q_lora,
                shared=s.f_s > 0,
                **kw,
            )
        )
        if s.E
        else 0.0
    )
    host = 3.0 * ((st.layers - st.moe_layers) * dense + st.moe_layers * moe)
    t = cm.time(lay)
    return {
        "compute": t.compute_s * 1e3,
        "attention": m * attn * 1e3,
        "logits": m * lc.logits * 1e3 if st.output else 0.0,
        "host": m * host * 1e3,
        "dp": t.dp_comm_s * 1e3,
        "optimizer": (t.optimizer_update_s + t.grad_clip_s) * 1e3,
    }


def rows(profile: str) -> list[dict]:
    cases = fit_cases(default_paths(), log=lambda *a: None)
    out = []
    for c in cases:
        if c.job.hardware.name != profile:
            continue
        hw = c.job.hardware
        ov = hw.calibration.step_overhead_ms
        with_ov = estimate(c.job, c.layout).time.step_time_s
        job0 = replace(c.job, hardware=with_values(hw, {"step_overhead_ms": 0.0}))
        without = estimate(job0, c.layout).time.step_time_s
        m = c.layout.num_microbatches(c.job.training.global_batch_size)
        out.append(
            {
                "id": c.id,
                "measured": c.measured_s,
                "m": m,
                "err": with_ov / c.measured_s - 1,
                "err0": without / c.measured_s - 1,
                "needed": needed_overhead_ms(c.measured_s, with_ov, ov),
                **parts_ms(job0, c.layout),
            }
        )
    return sorted(out, key=lambda r: r["err0"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="*", default=["h100-sxm"])
    args = ap.parse_args(argv)
    for p in args.profiles:
        print(f"# {p}: ms per step (first pipeline rank)")
        print(
            f"{'run':52s} {'meas s':>7s} {'m':>4s} {'err':>7s} {'err@0':>7s} {'needed':>7s} "
            f"{'compute':>8s} {'attn':>7s} {'logits':>7s} {'host':>8s} {'dp':>6s} {'opt':>6s}"
        )
        for r in rows(p):
            print(
                f"{r['id'][:52]:52s} {r['measured']:7.3f} {r['m']:4d} {r['err']:+7.1%} "
                f"{r['err0']:+7.1%} {r['needed']:7.0f} {r['compute']:8.0f} {r['attention']:7.0f} "
                f"{r['logits']:7.0f} {r['host']:8.0f} {r['dp']:6.1f} {r['optimizer']:6.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
