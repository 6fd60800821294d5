"""`Instance` (one engine instance: tp, pp, ep, dp, attention DP, cp) and `ServeLayout` (an
aggregated instance times replicas, or prefill and decode workers).

Inside an instance the ranks are ordered tp (innermost), cp, dp, pp: tp*cp*dp*pp GPUs. The
attention of each dp rank is tensor-parallel over tp GPUs and, with context parallelism, each
sequence (its prompt tokens and KV cache) is split over cp such tp groups, which hold the same
weights (CP does not shard them); the MoE layers of a stage spread over the `moe_group`
(tp*dp with attention DP, else tp) as ep expert ranks of `etp` GPUs each. Plain frozen
dataclasses: the search builds thousands.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Instance", "ServeLayout", "layout_from_spec"]


@dataclass(frozen=True, slots=True)
class Instance:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    dp_attention: bool = False
    cp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def moe_group(self) -> int:
        """GPUs of one pipeline stage the routed experts spread over."""
        return self.tp * self.dp if self.dp_attention else self.tp

    @property
    def etp(self) -> int:
        """GPUs each expert rank splits its experts over (tensor-parallel experts)."""
        return max(1, self.moe_group // self.ep)

    @property
    def name(self) -> str:
        parts = [f"tp{self.tp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.dp > 1:
            parts.append(f"dp{self.dp}" + ("a" if self.dp_attention else ""))
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        return "-".join(parts)

    def as_dict(self) -> dict:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "ep": self.ep,
            "dp": self.dp,
            "dp_attention": self.dp_attention,
            "cp": self.cp,
        }


@dataclass(frozen=True, slots=True)
class ServeLayout:
    """Aggregated: `instance` x `replicas`. Disaggregated: `prefill` x `prefill_workers` and
    `decode` x `decode_workers` (instance None)."""

    instance: Instance | None = None
    replicas: int = 1
    prefill: Instance | None = None
    decode: Instance | None = None
    prefill_workers: int = 0
    decode_workers: int = 0

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None

    @property
    def num_gpus(self) -> int:
        if self.disaggregated:
            return self.prefill.gpus * self.prefill_workers + self.decode.gpus * self.decode_workers
        return self.instance.gpus * self.replicas

    @property
    def decode_instance(self) -> Instance:
        """The instance whose memory and steps set TPOT (the decode worker when disaggregated)."""
        return self.decode if self.disaggregated else self.instance

    @property
    def name(self) -> str:
        if self.disaggregated:
            return (
                f"P{self.prefill_workers}x{self.prefill.name}+"
                f"D{self.decode_workers}x{self.decode.name}"
            )
        return f"{self.instance.name}" + (f"x{self.replicas}" if self.replicas > 1 else "")

    def as_dict(self) -> dict:
        if self.disaggregated:
            return {
                "disaggregated": True,
                "prefill": {**self.prefill.as_dict(), "workers": self.prefill_workers},
                "decode": {**self.decode.as_dict(), "workers": self.decode_workers},
            }
        return {"disaggregated": False, **self.instance.as_dict(), "replicas": self.replicas}


def layout_from_spec(spec) -> ServeLayout:
    """A ServeParallelSpec as a ServeLayout."""
    if spec.prefill is not None:
        p, d = spec.prefill, spec.decode
        return ServeLayout(
            prefill=Instance(p.tp, p.pp, p.ep, p.dp, p.dp_attention, p.cp),
            decode=Instance(d.tp, d.pp, d.ep, d.dp, d.dp_attention, d.cp),
            prefill_workers=p.workers,
            decode_workers=d.workers,
        )
    return ServeLayout(
        instance=Instance(spec.tp, spec.pp, spec.ep, spec.dp, spec.dp_attention, spec.cp),
        replicas=spec.replicas,
    )
