"""Which training frameworks can run a layout: each exporter's own refusal list
(`refusals(job, layout)` in its writer), so the search filter (`planner plan --framework F`,
through `SearchOptions.runs_as`, set by cli: the search does not import frameworks) and the
export refuse by the same predicates; and how each runs a layout it takes (the writer's
`runs_as`: what reading its export back gives) and counts the model states (`job_for`).

`model_refusal(job, fw)`: the one line saying a framework cannot train this model at all
(whatever the layout), e.g. NeMo 1 and Megatron-DeepSpeed have no multi-latent attention.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from importlib import import_module
from types import ModuleType

from planner.errors import SpecError, short
from planner.layout import Layout

__all__ = [
    "TRAIN_FRAMEWORKS",
    "SHORT",
    "check_framework",
    "refusals",
    "runs_as",
    "runnable",
    "allow",
    "job_for",
    "ACCOUNTING",
    "model_refusal",
]

TRAIN_FRAMEWORKS = ("megatron", "megatron-bridge", "nemo", "deepspeed", "torchtitan")
SHORT = {"megatron": "M", "megatron-bridge": "B", "nemo": "N", "deepspeed": "D", "torchtitan": "T"}
"""One letter each, for the plan table's `fw` column (its legend says which)."""

_WRITERS = {
    "megatron": "megatron.writer",
    "megatron-bridge": "nemo.bridge_writer",
    "nemo": "nemo.writer",
    "deepspeed": "deepspeed.writer",
    "torchtitan": "torchtitan.writer",
}
_NAMES = {
    "megatron": "Megatron-LM",
    "megatron-bridge": "Megatron-Bridge",
    "nemo": "NeMo 1",
    "deepspeed": "Megatron-DeepSpeed",
    "torchtitan": "torchtitan",
}


def check_framework(name: str, *, option: str = "--framework") -> str:
    key = str(name).strip().lower()
    if key not in TRAIN_FRAMEWORKS:
        raise SpecError(
            f"{option} = {short(name)}: not a training framework; use one of "
            f"{', '.join(TRAIN_FRAMEWORKS)}",
            field=option,
            value=name,
        )
    return key


_LOADED: dict[str, ModuleType] = {}


def _writer(fw: str) -> ModuleType:
    """The writer module of `fw`, imported on first use (the search filter asks for every
    layout it ranks: one dict look-up, not the import machinery, each time)."""
    module = _LOADED.get(fw)
    if module is None:
        module = _LOADED[fw] = import_module(f"planner.frameworks.{_WRITERS[fw]}")
    return module


def refusals(job, layout: Layout, fw: str) -> list[str]:
    """The writer's own reasons to refuse (empty: it exports)."""
    return _writer(fw).refusals(job, layout)


def runnable(job, layout: Layout) -> list[str]:
    """The frameworks whose exporter takes this layout, in TRAIN_FRAMEWORKS order."""
    return [fw for fw in TRAIN_FRAMEWORKS if not refusals(job, layout, fw)]


def runs_as(job, layout: Layout, fw: str) -> Layout | None:
    """The layout as `fw` runs it (its writer's `runs_as`: what reading the export back
    gives), or None when the writer refuses it."""
    module = _writer(fw)
    if module.refusals(job, layout):
        return None
    return module.runs_as(job, layout)


def _run(fw: str, job, layout: Layout) -> Layout | None:
    return runs_as(job, layout, fw)


def allow(fw: str) -> Callable:
    """The search filter for `fw` (SearchOptions.runs_as): (job, layout) -> the layout as
    `fw` runs it, or None when its export refuses it."""
    return partial(_run, fw)


# how each framework's reader counts the model states (TrainingSpec.accounting): DeepSpeed
# and torchtitan keep 16 B/param (no separate fp32 gradient buffer), Megatron 18
ACCOUNTING = {"deepspeed": "deepspeed", "torchtitan": "deepspeed"}


def job_for(job, fw: str):
    """The job as `fw` runs it: its model-state accounting (what reading its export back
    gives)."""
    acc = ACCOUNTING.get(fw, "megatron")
    if job.training.accounting == acc:
        return job
    from dataclasses import replace

    return replace(job, training=job.training.model_copy(update={"accounting": acc}))


def model_refusal(job, fw: str) -> str | None:
    """Why `fw` cannot train this model with any layout (one line), else None: the
    refusals that hold for every layout (the model's features, the precision), found as the
    refusals shared by a plain layout and its variants."""
    probes = [
        Layout(dp=job.num_gpus),
        Layout(dp=job.num_gpus, zero=1, recompute="full"),
        Layout(dp=job.num_gpus, zero=3, recompute="selective"),
    ]
    common = None
    for lay in probes:
        got = set(refusals(job, lay, fw))
        common = got if common is None else common & got
    if not common:
        return None
    first = next(m for m in refusals(job, probes[0], fw) if m in common)
    if first.startswith("cannot export"):
        first = first.split(": ", 1)[-1]
    return f"{_NAMES[fw]} cannot train {job.model.name}: {first}"
