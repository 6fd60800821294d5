"""Exporters: a job and a layout (and optionally its estimate) -> a framework's config text.

`export(job, layout, fmt, *, estimate=None)` with fmt one of `FORMATS`. Each format is one
pure module (megatron, deepspeed, torchtitan, nemo) with `render(job, layout, *, estimate)`.
A layout that breaks a hard rule is refused (`InfeasibleError`), as is anything the target
framework cannot express; memory is not checked (the estimate is printed in the header when
given, and `planner validate` judges it). Goldens are written with `estimate=None`.
"""

from __future__ import annotations

from importlib import import_module

from planner.errors import SpecError, short
from planner.frameworks.writing import check_exportable

__all__ = ["export", "FORMATS", "check_format", "check_exportable", "prepare"]

FORMATS = ("megatron", "deepspeed", "torchtitan", "nemo", "megatron-bridge")
_MODULES = {"megatron-bridge": "nemo.bridge_writer"}


def check_format(fmt: str, *, option: str = "--format") -> str:
    """The format name, or a SpecError listing the valid ones."""
    name = str(fmt).strip().lower()
    if name not in FORMATS:
        raise SpecError(
            f"{option} {short(fmt)} is not a format; valid formats: {', '.join(FORMATS)}",
            field=option,
            value=fmt,
        )
    return name


def prepare(layout, fmt: str):
    """Pin the knobs a config left to the planner (`layout.auto`) that the format cannot run
    other than one way: DeepSpeed's pipeline engine has no interleaving, so vpp 1. Call before
    `tune.fill_auto` picks the rest."""
    if check_format(fmt) == "deepspeed" and "vpp" in layout.auto:
        return layout.with_(vpp=1, auto=tuple(a for a in layout.auto if a != "vpp"))
    return layout


def export(job, layout, fmt: str, *, estimate=None) -> str:
    """The export text for `fmt` (see each module's docstring for its layout)."""
    name = check_format(fmt)
    check_exportable(job, layout)
    module = import_module(f"planner.frameworks.{_MODULES.get(name, name + '.writer')}")
    return module.render(job, layout, estimate=estimate)
