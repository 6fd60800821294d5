"""Fill the tuning knobs a config left out: micro-batch size and virtual pipeline stages.

Megatron has no default for --micro-batch-size, and published runs are tuned, so when a
config leaves `micro_batch_size` or `vpp` out, planner picks the value with the shortest
estimated step time among those that pass every hard rule and keep the memory headroom (as
`plan` does), and reports it
as chosen (`Layout.auto`). Everything the config does state is kept as it is.
"""

from __future__ import annotations

from planner.cost import cost_model
from planner.layout import Layout
from planner.rules import DEFAULT_HEADROOM, RULES, Context, fits, vpp_options

__all__ = ["fill_auto", "MAX_MICRO_BATCH", "MAX_VPP"]

MAX_MICRO_BATCH = 8
MAX_VPP = 16


def _options(job, lay: Layout) -> tuple[list[int], list[int]]:
    gbs = job.training.global_batch_size
    mbs = (
        [b for b in range(1, MAX_MICRO_BATCH + 1) if gbs % (b * lay.dp) == 0] or [1]
        if "micro_batch_size" in lay.auto
        else [lay.micro_batch_size]
    )
    if "vpp" in lay.auto and lay.pp > 1:
        vpp = vpp_options(
            job.model.num_layers, lay.pp, lay.first_stage_layers, lay.last_stage_layers, MAX_VPP
        )
    else:
        vpp = [lay.vpp]
    return mbs, vpp


def fill_auto(job, lay: Layout, *, headroom: float = DEFAULT_HEADROOM) -> Layout:
    """The fastest valid choice of the fields in `lay.auto`; `lay` itself when none is valid
    (the rules then report why)."""
    if not lay.auto:
        return lay
    cm = cost_model(job)
    best, best_t = lay, float("inf")
    mbs_opts, vpp_opts = _options(job, lay)
    for b in mbs_opts:
        for v in vpp_opts:
            cand = lay.with_(micro_batch_size=b, vpp=v)
            try:
                mem = cm.memory(cand)
            except (ZeroDivisionError, ValueError):
                continue
            ctx = Context(
                model=job.model,
                hardware=job.hardware,
                training=job.training,
                num_gpus=job.num_gpus,
                layout=cand,
                memory=mem,
                headroom=headroom,
            )
            if not fits(mem.total, mem.capacity, headroom) or any(fn(ctx) for _, fn in RULES):
                continue
            t = cm.time(cand).step_time_s
            if t < best_t:
                best, best_t = cand, t
    return best
