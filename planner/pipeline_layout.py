"""Megatron's pipeline layout string (`--pipeline-model-parallel-layout`).

A layout names what every virtual pipeline stage holds, stage by stage in schedule order:
`E` the embedding, `t` a decoder (transformer) layer, `m` a multi-token-prediction layer,
`L` the loss (output layer), `|` ends a stage, `x*n` repeats one character and `(...)*n` a
group; commas are cosmetic. Stage i (0-based, in the order written) runs on pipeline rank
`i % pp` as its virtual stage `i // pp`, so the string has pp*vpp stages.
Example (DeepSeek-V3, 61 layers + 1 MTP, pp 16, vpp 2): `Et*3|(tt|)*29,m|L`.

Megatron's checks (megatron/core/transformer/pipeline_parallel_layer_layout.py): the stage
count divides by pp; the first layer is the embedding and the last the loss, each exactly
once; the decoder count equals num_layers and the MTP count mtp_num_layers; MTP layers come
after every decoder layer, in the last virtual stage of their rank, never on the first rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["parse_layout", "layout_problem", "RankStages", "rank_stages", "MAX_LAYOUT_CHARS"]

MAX_LAYOUT_CHARS = 100_000
"""Upper bound on the expanded layout (no real model has more than a few thousand layers)."""

_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_SINGLE = re.compile(r"([EtmL|])\*(\d+)")
_VALID = set("EtmL|")


def _expand(pattern: re.Pattern[str], text: str) -> str:
    def one(match: re.Match[str]) -> str:
        body: str = match.group(1)
        count = int(match.group(2))
        if len(body) * count > MAX_LAYOUT_CHARS:
            raise ValueError(
                f"'{match.group(0)[:40]}' expands beyond {MAX_LAYOUT_CHARS} characters"
            )
        return body * count

    out = pattern.sub(one, text)
    if len(out) > MAX_LAYOUT_CHARS:
        raise ValueError(f"the layout expands beyond {MAX_LAYOUT_CHARS} characters")
    return out


def parse_layout(text: str) -> list[str]:
    """The stages of a layout string, each a string of E/t/m/L; ValueError names what is
    wrong (an unknown character, unbalanced parentheses, a runaway repeat)."""
    s = text.replace(",", "").replace(" ", "")
    if len(s) > MAX_LAYOUT_CHARS:
        raise ValueError(f"the layout is longer than {MAX_LAYOUT_CHARS} characters")
    s = _expand(_GROUP, s)
    s = _expand(_SINGLE, s)
    bad = sorted(set(s) - _VALID)
    if bad:
        what = (
            "unbalanced '(' or ')' or a repeat without '*n'"
            if set(bad) & set("()*0123456789")
            else "unknown layer characters " + " ".join(repr(c) for c in bad)
        )
        raise ValueError(
            f"{what}; use E (embedding), t (decoder layer), m (MTP layer), "
            "L (loss), | (stage end), x*n and (...)*n"
        )
    return s.split("|")


def layout_problem(
    stages: list[str], *, pp: int, num_layers: int, mtp_num_layers: int
) -> str | None:
    """What Megatron would reject in this layout (None: it is valid)."""
    n = len(stages)
    if n % pp:
        return f"has {n} stages, which pp ({pp}) does not divide (it needs pp*vpp stages)"
    flat = "".join(stages)
    if not flat.startswith("E"):
        return "must start with the embedding (E)"
    if not flat.endswith("L"):
        return "must end with the loss (L)"
    if flat.count("E") != 1 or flat.count("L") != 1:
        return "must name the embedding (E) and the loss (L) exactly once each"
    if flat.count("t") != num_layers:
        return f"has {flat.count('t')} decoder layers (t), but num_layers is {num_layers}"
    if flat.count("m") != mtp_num_layers:
        return f"has {flat.count('m')} MTP layers (m), but mtp_num_layers is {mtp_num_layers}"
    if "m" in flat and "t" in flat[flat.index("m") :]:
        return "places decoder layers (t) after an MTP layer (m)"
    vpp = n // pp
    for i, stage in enumerate(stages):
        if "m" in stage and (i // pp != vpp - 1 or i % pp == 0 and pp > 1):
            return (
                f"puts MTP layers in stage {i}: Megatron needs them in the last virtual "
                "stage of a rank other than the first"
            )
    return None


@dataclass(frozen=True, slots=True)
class RankStages:
    """What one pipeline rank holds, over its virtual stages."""

    rank: int
    decoder: tuple[int, ...]  # decoder layers per virtual stage (schedule order)
    mtp: int
    embedding: bool
    loss: bool

    @property
    def layers(self) -> int:
        return sum(self.decoder)


def rank_stages(stages: list[str], pp: int) -> list[RankStages]:
    """Per pipeline rank: its virtual stages' decoder counts, MTP layers, embedding, loss."""
    vpp = len(stages) // pp
    out = []
    for r in range(pp):
        mine = [stages[v * pp + r] for v in range(vpp)]
        out.append(
            RankStages(
                rank=r,
                decoder=tuple(s.count("t") for s in mine),
                mtp=sum(s.count("m") for s in mine),
                embedding=any("E" in s for s in mine),
                loss=any("L" in s for s in mine),
            )
        )
    return out
