"""The search space: what `--fix` pins (`parse_fix`, `FIXABLE`), the options of a search
(`SearchOptions`), and the candidate degrees of every axis for one job (`_Space`: tp
divisors, cp powers of two, pp divisors, ep and etp, vpp, sp, micro-batch, ZeRO, the savers
and the MoE dispatcher variants), with what the walk reads of them precomputed once (the
(saver, ZeRO) pairs per pipeline kind, `_Pairs`).

Also how one point of the space becomes a `Layout`: `_build`, by field name, from its head
(`_Head`: the degrees), its tail (`_Tail`: what its base layout decides besides) and the
leaf's ZeRO, micro-batch, saver and dispatcher variant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import NamedTuple, cast

from planner.config import Job
from planner.errors import SpecError, short
from planner.layout import Layout
from planner.rules import DEFAULT_HEADROOM, vpp_options
from planner.savers import Saver, chains, savers
from planner.units import divisors

RECOMPUTE = ("none", "selective", "full")
ZERO = (0, 1, 2, 3)
FIXABLE = {
    "tp": int,
    "pp": int,
    "dp": int,
    "cp": int,
    "ep": int,
    "etp": int,
    "vpp": int,
    "micro_batch_size": int,
    "zero": int,
    "recompute": str,
    "sp": bool,
}
_ALIASES = {
    "mbs": "micro_batch_size",
    "micro_batch": "micro_batch_size",
    "zero_stage": "zero",
    "sequence_parallel": "sp",
}


def parse_fix(text: str | None) -> dict:
    """'tp=8,pp=4,recompute=full' -> {'tp': 8, 'pp': 4, 'recompute': 'full'}."""
    out: dict = {}
    if not text:
        return out
    for item in text.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise SpecError(
                f"--fix item {short(item.strip())} must look like axis=value, e.g. tp=8",
                field="--fix",
                value=item.strip(),
            )
        key, val = (x.strip() for x in item.split("=", 1))
        key = _ALIASES.get(key, key)
        if key not in FIXABLE:
            raise SpecError(
                f"--fix axis {short(key)} is unknown; valid: {', '.join(FIXABLE)}",
                field="--fix",
                value=key,
            )
        kind = FIXABLE[key]
        try:
            if kind is bool:
                if val.lower() not in ("true", "false", "1", "0", "on", "off"):
                    raise ValueError
                out[key] = val.lower() in ("true", "1", "on")
            elif kind is int:
                out[key] = int(val)
                if out[key] < (0 if key == "zero" else 1) or (key == "zero" and out[key] > 3):
                    raise ValueError
            else:
                if val not in RECOMPUTE:
                    raise ValueError
                out[key] = val
        except ValueError:
            want = {
                "recompute": "none, selective or full",
                "sp": "true or false",
                "zero": "0, 1, 2 or 3",
            }.get(key, "a positive whole number")
            raise SpecError(
                f"--fix {key}={short(val)}: must be {want}", field=f"--fix {key}", value=val
            ) from None
    return out


@dataclass(frozen=True)
class SearchOptions:
    top: int = 10
    sort_by: str = "time"  # time | memory | mfu
    fix: Mapping[str, object] = field(default_factory=dict)
    max_tp: int | None = None  # default: the NVLink domain size
    max_cp: int = 32
    max_micro_batch: int = 8
    max_vpp: int = 16
    headroom: float = DEFAULT_HEADROOM
    tokens: float | None = None  # training tokens, for time-to-train
    # (job, layout) -> the layout as a framework runs it, or None where it refuses it:
    # `plan --framework F` passes F's own export refusals and mapping
    # (planner.frameworks.runnable.allow); every fitting saver is then a contender (the least
    # that fits may be one the framework refuses), each ranked as the framework runs it
    runs_as: Callable[[Job, Layout], Layout | None] | None = None


def _moe_variants(model, fix) -> list[tuple[str, bool]]:
    """(dispatcher, all-to-all overlap) pairs tried for an MoE layout with ep > 1: Megatron's
    default allgather, alltoall, and alltoall with overlap; `--fix` pins either."""
    if not model.is_moe:
        return [("allgather", False)]
    out = [("allgather", False), ("alltoall", False), ("alltoall", True)]
    if "moe_token_dispatcher" in fix:
        d = fix["moe_token_dispatcher"]
        out = [(d, False), (d, True)] if d != "allgather" else [(d, False)]
    if "overlap_moe_expert_parallel_comm" in fix:
        out = [v for v in out if v[1] == fix["overlap_moe_expert_parallel_comm"]] or [
            (out[0][0], fix["overlap_moe_expert_parallel_comm"])
        ]
    return out


def _classes(options: list[Saver], reads: Callable[[Saver], tuple]) -> dict[str, str]:
    """{saver key: the key of the first saver that reads alike}: the savers' classes by what
    `reads` takes of them."""
    first: dict[tuple, str] = {}
    return {sv.key: first.setdefault(reads(sv), sv.key) for sv in options}


def _pow2_upto(n: int, cap: int) -> list[int]:
    out, c = [], 1
    while c <= cap and n % c == 0:
        out.append(c)
        c *= 2
    return out


class _Space:
    """Per-axis candidate lists for one job and its options."""

    def __init__(self, job: Job, opts: SearchOptions):
        m, N = job.model, job.num_gpus
        fix = opts.fix
        self.max_tp = opts.max_tp or job.hardware.nvlink_domain_size
        self.tp = [d for d in divisors(N) if d <= self.max_tp]
        self.max_cp, self.mbs = opts.max_cp, list(range(1, opts.max_micro_batch + 1))
        self.max_vpp = opts.max_vpp
        self.moe = m.is_moe
        self.ep_all = divisors(m.num_experts) if m.is_moe else [1]
        self.fix = fix
        self.runs_as = None if opts.runs_as is None else (lambda lay: opts.runs_as(job, lay))
        self.headroom = opts.headroom
        if "tp" in fix:
            self.tp = [fix["tp"]] if N % fix["tp"] == 0 else []
        if "micro_batch_size" in fix:
            self.mbs = [fix["micro_batch_size"]]
        self.zero = [fix["zero"]] if "zero" in fix else list(ZERO)
        self.rec: list[Saver] = savers(m, fix)
        self.chains = chains(self.rec)
        self.by_key = {sv.key: sv for sv in self.rec}
        self.fp32_twin = {
            sv.key: self.by_key.get(sv.key.replace("+bf16", ""))
            for sv in self.rec
            if sv.bf16_states
        }
        self.zero_order = _zero_order(self.zero)
        self.variants = _moe_variants(m, fix)
        self.bound_sums: dict[tuple, tuple] = {}  # `_least_bound_sum`'s, for this search
        self.floor_parts: dict[tuple, float] = {}  # `_floor`'s least sums, for this search
        self.bounds: dict[tuple, float] = {}  # `_bound`'s, for this search
        # contenders carry their own bound rather than a floor (walk._contenders): with a
        # framework filter on a dense model, where most contenders get timed and a bound is
        # one variant's, the floors would only add to the bounds
        self.eager_bounds = opts.runs_as is not None and not m.is_moe
        self.act_tables: dict[tuple, dict] = {}  # `_Group.acts`, for this search
        # what the activations (`_Group.acts`) and the time bound (`_least_bound_sum`) read
        # of a saver, each class named by its first saver's key (a string: a cheap key to
        # hash, where the tuples would be hashed at every look-up); the options before each
        # saver in its chain and its fp32 twin (they need no less memory)
        self.act_class = _classes(
            self.rec, lambda sv: (sv.recompute, sv.modules, sv.num_layers, sv.offload_layers)
        )
        self.time_class = _classes(self.rec, lambda sv: (sv.recompute, sv.modules, sv.num_layers))
        before = {
            sv.key: tuple(
                b
                for b in (sv.after, self.fp32_twin.get(sv.key) and self.fp32_twin[sv.key].key)
                if b and b != sv.key
            )
            for sv in self.rec
        }
        # per pipeline kind (pp 1, pp > 1: no offload), what the leaf loops walk, precomputed
        self.pairs = {multi: _Pairs(self, before, multi) for multi in (False, True)}

    def cp(self, N: int, tp: int, seq: int) -> list[int]:
        if "cp" in self.fix:
            c = self.fix["cp"]
            return [c] if N % tp == 0 and (N // tp) % c == 0 and 2 * c <= seq else []
        return [c for c in _pow2_upto(N // tp, self.max_cp) if 2 * c <= seq]

    def pp(self, rest: int, L: int) -> list[int]:
        if "pp" in self.fix:
            p = self.fix["pp"]
            return [p] if rest > 0 and rest % p == 0 and p <= L else []
        return [p for p in divisors(rest) if p <= L]

    def sp(self, tp: int) -> list[bool]:
        opts = [False, True] if tp > 1 else [False]
        return (
            [self.fix["sp"]]
            if "sp" in self.fix and self.fix["sp"] in opts
            else ([] if "sp" in self.fix else opts)
        )

    def ep_etp(self, tp: int) -> list[tuple[int, int]]:
        eps = [self.fix["ep"]] if "ep" in self.fix else self.ep_all
        if not self.moe:
            return [(e, tp) for e in eps]
        etps = [self.fix["etp"]] if "etp" in self.fix else sorted({1, tp})
        return [(e, x) for e in eps for x in etps]

    def vpp(self, L: int, pp: int, split) -> list[int]:
        vs = vpp_options(L, pp, split[0], split[1], self.max_vpp)
        if "vpp" in self.fix:
            return [self.fix["vpp"]] if self.fix["vpp"] in vs else []
        return vs


class _Pair(NamedTuple):
    """One (saver, ZeRO) of `_fitting_prefixes`, with the pairs whose fitting prefix bounds
    its own (`_known_bounds`), by their index in the pair list."""

    sv: Saver
    zero: int
    capped: bool  # bounded by the vpp-1 ceiling (not block recompute)
    uppers: tuple[int, ...]  # ZeRO z + 1 <= 2 needs no more memory than z
    lowers: tuple[int, ...]  # ZeRO z - 1, and the options before it in its chain and
    #                               its fp32 twin, need no less
    z3: int  # ZeRO-2 of the same saver, for ZeRO-3 when z3_ok (else -1)
    corner: bool  # filled by the corner estimate when it fits


class _Pairs:
    """The (saver, ZeRO) pairs of one pipeline kind (pp 1, or pp > 1: no offload), in the
    order `_fitting_prefixes` resolves them (savers in order, each over `zero_order`), and
    the chains `_contenders` walks, by pair index."""

    def __init__(self, space: _Space, before: dict, multi_stage: bool):
        options = [sv for sv in space.rec if not (sv.offload_layers and multi_stage)]
        self.options, self.zeros = options, space.zero_order
        self.none = space.by_key.get("none")
        order = [(sv, zero) for sv in options for zero in space.zero_order]
        self.index = {(sv.key, zero): j for j, (sv, zero) in enumerate(order)}
        at = self.index.get
        ordered_z = [z for z in space.zero_order if 1 <= z <= 2]
        self.pairs = []
        for sv, zero in order:
            k = sv.key
            ups = tuple(range(zero + 1, 3)) if zero <= 2 else ()
            downs = [(k, z) for z in range(0, zero)] if zero <= 2 else []
            downs += [(b, zero) for b in before[k]]
            self.pairs.append(
                _Pair(
                    sv,
                    zero,
                    sv.num_layers is None,
                    tuple(at((k, z)) for z in ups if at((k, z)) is not None),
                    tuple(at(d) for d in downs if at(d) is not None),
                    at((k, 2), -1) if zero == 3 else -1,
                    sv.recompute != "full" and zero in ordered_z,
                )
            )
        self.nothing = [0] * len(order)  # the ceiling where nothing fits
        # per ZeRO stage: (bf16 chain, [(saver, pair index)]) for each chain
        self.chains = {
            zero: [
                (
                    chain[0].bf16_states,
                    [
                        (sv, self.index[(sv.key, zero)])
                        for sv in chain
                        if not (sv.offload_layers and multi_stage)
                    ],
                )
                for chain in space.chains
            ]
            for zero in space.zero
        }


def _zero_order(zeros: list[int]) -> list[int]:
    """ZeRO 2, then 0, then 1 (then 3): 2 bounds 1 and 0 from above, 0 bounds 1 from below,
    so when everything (or nothing) fits ZeRO 1 needs no estimate at all."""
    return sorted(zeros, key=lambda z: (z == 3, {2: 0, 0: 1, 1: 2}.get(z, 3)))


class _Head(NamedTuple):
    """The degrees of a leaf (each the Layout field of its name): with `_Tail`, what the
    leaves of one (base, vpp, sp) share (a tuple: a cache key, cheap to pickle)."""

    tp: int
    cp: int
    ep: int
    dp: int
    pp: int
    vpp: int
    etp: int
    sp: bool


class _Tail(NamedTuple):
    """The rest of a leaf its base layout decides (each the Layout field of its name)."""

    first_stage_layers: int | None
    last_stage_layers: int | None
    cp_comm_type: str
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    tp_comm_overlap: bool


def _head(lay: Layout, vpp: int, sp: bool) -> _Head:
    """The head of `lay` at this vpp and sp."""
    return _Head(tp=lay.tp, cp=lay.cp, ep=lay.ep, dp=lay.dp, pp=lay.pp, vpp=vpp, etp=lay.etp, sp=sp)


def _tail(lay: Layout, tp_comm_overlap: bool) -> _Tail:
    """The tail of `lay` with this TP-overlap setting."""
    return _Tail(
        first_stage_layers=lay.first_stage_layers,
        last_stage_layers=lay.last_stage_layers,
        cp_comm_type=lay.cp_comm_type,
        overlap_grad_reduce=lay.overlap_grad_reduce,
        overlap_param_gather=lay.overlap_param_gather,
        tp_comm_overlap=tp_comm_overlap,
    )


_LEAF = (
    "zero",
    "micro_batch_size",
    "recompute",
    "recompute_modules",
    "recompute_num_layers",
    "cpu_offloading_num_layers",
    "grad_reduce_in_fp32",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "moe_token_dispatcher",
    "overlap_moe_expert_parallel_comm",
)
"""The Layout fields `_build` takes from the leaf (ZeRO, micro-batch, saver, dispatcher
variant), in the order it gives them."""


def _layout_maker(named: tuple[str, ...]) -> Callable[[tuple], Layout]:
    """How `_build` makes a Layout from values in the order of `named`, every other field at
    its default, at a tenth of the cost of `Layout(...)` (a frozen dataclass's __init__ sets
    each of its ~30 fields through object.__setattr__; building Layouts was some 15-25 % of
    a search): a function, generated once from `dataclasses.fields(Layout)`, that fills an
    instance of `_Twin` (a plain class with Layout's very slots, so its attribute stores are
    the interpreter's plain slot stores, ~3x cheaper than calling each slot's descriptor)
    and then makes it a Layout by assigning `__class__`, which Python allows between two
    classes of the same slots and base (the Data model, "__class__ assignment"); from then on
    it is a frozen Layout like any other. This is what `Layout.__init__` does without a
    `__post_init__`. A field inserted in Layout takes its default; a name Layout lacks, an
    unnamed field without a plain default, a Layout with `__post_init__`, without slots or
    with a base of its own fails at import (tests/test_search_shortcuts.py checks the result
    equals `Layout(**fields)`)."""
    init = [f for f in fields(Layout) if f.init]
    unknown = set(named) - {f.name for f in init}
    if unknown:
        raise TypeError(f"Layout has no field {', '.join(sorted(unknown))}")
    if (
        hasattr(Layout, "__post_init__")
        or len(init) != len(fields(Layout))
        or "__slots__" not in vars(Layout)
        or Layout.__bases__ != (object,)
    ):
        raise TypeError(
            "Layout gained a __post_init__, a non-init field, a base or lost its slots: "
            "_layout_maker would skip it"
        )
    twin = type("_Twin", (), {"__slots__": tuple(vars(Layout)["__slots__"])})
    scope: dict = {"_new": object.__new__, "_Twin": twin, "_Layout": Layout}
    lines = ["def _make(v):", "    o = _new(_Twin)"]
    for i, f in enumerate(init):
        if f.name in named:
            lines.append(f"    o.{f.name} = v[{named.index(f.name)}]")
        elif f.default is MISSING:
            raise TypeError(f"Layout.{f.name} has no plain default for the search to give")
        else:
            scope[f"_default{i}"] = f.default
            lines.append(f"    o.{f.name} = _default{i}")
    lines += ["    o.__class__ = _Layout", "    return o"]
    exec("\n".join(lines), scope)  # our own field names, generated once at import
    return cast(Callable[[tuple], Layout], scope["_make"])


_MAKE = _layout_maker(_Head._fields + _Tail._fields + _LEAF)


def _build(
    head: _Head, zero: int, mbs: int, sv: Saver, tail: _Tail, moe: tuple[str, bool]
) -> Layout:
    """A Layout from the search's pieces, each given to the Layout field of its name
    (`_layout_maker`; dataclasses.replace costs more than an estimate)."""
    dt = "bf16" if sv.bf16_states else "fp32"
    return _MAKE(
        head
        + tail
        + (
            zero,
            mbs,
            sv.recompute,
            sv.modules,
            sv.num_layers,  # _LEAF
            sv.offload_layers,
            not sv.bf16_states,
            dt,
            dt,
            moe[0],
            moe[1],
        )
    )


def _savers_for(space: _Space, pp: int) -> list[Saver]:
    return [sv for sv in space.rec if not (sv.offload_layers and pp > 1)]


def _variants_for(space: _Space, head: _Head, sv: Saver) -> list[tuple[str, bool]]:
    """The dispatcher variants that apply: only with ep > 1; the all-to-all overlap not with
    full recompute (Megatron rejects it)."""
    if head.ep <= 1:
        return space.variants[:1]
    return [v for v in space.variants if not (v[1] and sv.recompute == "full")] or space.variants[
        :1
    ]
