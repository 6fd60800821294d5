"""Units and number formatting. Imports nothing of ours.

Internally planner works in bytes, seconds and FLOP/s. `GiB` is 2**30 bytes (what
`nvidia-smi` and PyTorch report); `GB` is 1e9 bytes (what the ZeRO paper and datasheets use).
"""

from __future__ import annotations

import math
import re

__all__ = [
    "GiB",
    "GB",
    "TB",
    "TFLOPS",
    "GB_PER_S",
    "parse_count",
    "fmt_bytes",
    "fmt_seconds",
    "fmt_count",
    "pct",
    "divisors",
]

GiB = float(2**30)
GB = 1e9
TB = 1e12
TFLOPS = 1e12
GB_PER_S = 1e9

_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_COUNT_RE = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBGTP]?)\s*$", re.IGNORECASE
)


def parse_count(text: str) -> float:
    """Parse '15T', '2.5e12', '300B', '1M' into a number. Raises ValueError on anything else."""
    m = _COUNT_RE.match(str(text))
    if not m:
        raise ValueError(f"cannot read {text[:60]!r} as a count; write e.g. 15T, 300B or 2.5e12")
    value = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text[:60]!r} must be a positive number")
    return value


def fmt_bytes(n: float) -> str:
    """Bytes as GiB with two decimals (the unit users compare against `nvidia-smi`)."""
    return f"{n / GiB:.2f} GiB"


def fmt_seconds(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.1f} d"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.1f} ms"


def fmt_count(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def divisors(n: int) -> list[int]:
    """All positive divisors of n, ascending."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]
