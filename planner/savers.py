"""The memory savers the search tries, ordered so that "the least that fits" is well defined.

A layout that does not fit can trade time or numerics for memory. The search tries, for
every layout, options along chains in which each step needs no more memory than the one
before and is no faster:
  modules  none -> selective [core_attn] (Megatron's default) -> selective with the cheap
           element-wise modules (layernorm, and moe_act / mla_up_proj where the model has
           them) -> full recompute
  layers   none -> full recompute of 1, 2 layers per virtual stage (Megatron
           `--recompute-method block`) -> full recompute
  offload  none -> the activations of half the layers offloaded to host memory (pp 1 only)
The least option of each chain that fits is a contender; the ranking by time decides
between chains ("recompute 2 layers per stage" beats "full recompute" when both fit).
bf16 states (`grad_reduce_in_fp32: false` and bf16 Adam moments, the precision-aware
optimizer) change numerics, not only speed: they are tried only where the fp32 states need
some recompute to fit, along shorter chains (none -> the cheap modules; none -> 1, 2 layers
-> full).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.specs import ModelSpec

__all__ = ["Saver", "savers", "chains", "BASE_KEYS", "in_use"]

BASE_KEYS = ("none", "selective", "full")
"""The three plain recompute settings (`--fix recompute=...`)."""


@dataclass(frozen=True, slots=True)
class Saver:
    """One memory-saving option: Layout fields and where it stands in its chain."""

    key: str  # e.g. "none", "selective", "full:2", "offload", "+bf16"
    recompute: str
    modules: tuple[str, ...] = ()
    num_layers: int | None = None
    offload_layers: int = 0
    bf16_states: bool = False
    after: str | None = None  # the option before it in its chain (needs at least as much)

    @property
    def label(self) -> str:
        """How the plan table shows it."""
        base = {"none": "none", "selective": "sel", "full": "full"}[self.recompute]
        if self.key.startswith("selective+"):
            base = "sel+"
        elif self.num_layers is not None:
            base = f"full{self.num_layers}"
        elif self.offload_layers:
            base = f"off{self.offload_layers}"
        return base + ("*" if self.bf16_states else "")


def _chain(model: ModelSpec, bf16: bool) -> list[Saver]:
    sfx = "+bf16" if bf16 else ""
    cheap = ["core_attn", "layernorm"]
    if model.is_moe:
        cheap.append("moe_act")
    if model.is_mla:
        cheap.append("mla_up_proj")
    none = Saver("none" + sfx, "none", bf16_states=bf16, after="none" if bf16 else None)
    out = [none]
    prev = none.key
    if not bf16:  # bf16 states come with the cheap modules at once (fewer estimates)
        out.append(Saver("selective", "selective", after=none.key))
        prev = "selective"
    out.append(Saver("selective+" + sfx, "selective", tuple(cheap), bf16_states=bf16, after=prev))
    prev = none.key
    for n in (1, 2):
        out.append(Saver(f"full:{n}{sfx}", "full", num_layers=n, bf16_states=bf16, after=prev))
        prev = out[-1].key
    out.append(Saver("full" + sfx, "full", bf16_states=bf16, after=prev))
    if model.num_layers >= 4 and not bf16:
        out.append(Saver("offload", "none", offload_layers=model.num_layers // 2, after=none.key))
    return out


def savers(model: ModelSpec, fix: Mapping[str, Any]) -> list[Saver]:
    """Every option the search tries for this model, fp32 states first; `--fix recompute=X`
    keeps the plain setting X only (with fp32 states)."""
    if "recompute" in fix:
        r = fix["recompute"]
        return [Saver(r, r)]
    return _chain(model, False) + _chain(model, True)


def chains(options: list[Saver]) -> list[list[Saver]]:
    """The chains among `options` (by their `after` links): each from `none` (or the single
    fixed option) to its end, in order; the fp32 chains first."""
    by_key = {o.key: o for o in options}
    nexts: dict[str | None, list[Saver]] = {}
    for o in options:
        prev = o.after if o.after in by_key and o.after != o.key else None
        if o.bf16_states and o.key == "none+bf16":
            prev = None  # the bf16 chains start afresh (tried only where fp32 needs more)
        nexts.setdefault(prev, []).append(o)
    out: list[list[Saver]] = []

    def walk(path: list[Saver]) -> None:
        more = [
            o for o in nexts.get(path[-1].key, []) if not (o.bf16_states ^ path[-1].bf16_states)
        ]
        if not more:
            out.append(path)
        for o in more:
            walk(path + [o])

    for root in nexts.get(None, []):
        walk([root])
    return out


def in_use(layout: Any, training: Any = None) -> list[str]:
    """The memory savers a layout relies on, compactly, in a fixed order (the plan table's
    savers column, the HTML report, JSON `savers`): the recompute ("sel" core_attn only,
    "sel+" more modules, "full", "fullN" N layers per virtual stage), "offN" (N layers'
    activations offloaded to the host), "bf16g" / "bf16m" / "bf16gm" (bf16 gradient
    reduction, bf16 Adam moments, both), "fp8pg" (FP8 parameter all-gather). Empty: none."""
    out = []
    if layout.recompute == "selective":
        out.append("sel" if layout.selective_modules == ("core_attn",) else "sel+")
    elif layout.recompute == "full":
        n = layout.recompute_num_layers
        out.append("full" if n is None else f"full{n}")
    if layout.cpu_offloading_num_layers:
        out.append(f"off{layout.cpu_offloading_num_layers}")
    g = not layout.grad_reduce_in_fp32
    mom = "bf16" in (layout.exp_avg_dtype, layout.exp_avg_sq_dtype)
    if g or mom:
        out.append("bf16" + ("g" if g else "") + ("m" if mom else ""))
    if training is not None and training.precision == "fp8" and training.fp8_param_gather:
        out.append("fp8pg")
    return out
