"""Are the 80% intervals honest? Leave-one-out over the calibration runs: each run's interval
from the residuals of every other run (planner/calibration/intervals.py build_table, the same
grouping and widening as the shipped table), and whether its measured value falls inside.

    python benchmarks/intervals.py [--json]

The bar (tests/test_calibration_intervals.py): 70-90% of runs inside, in every class. Each row
also carries the two-sided exact binomial p-value of its count under an honest 80% interval
(binomial_p): a class of 4-6 runs can miss the bar by one run at p >= 0.1, which says the
sample is small, not that the interval is wrong. The
profiles are not refitted per left-out run (a fit takes a minute per GPU): the residuals are
those of profiles fitted to every run, the held-out run included, so the coverage is of the
interval table, not of the fit.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy import evaluate, load_all  # noqa: E402
from planner.calibration.intervals import _lookup, build_table, interval_class  # noqa: E402
from planner.caveats import caveats  # noqa: E402

BAR = (0.70, 0.90)


def leave_one_out(cases=None, rows=None) -> list[dict]:
    """Per run (time) and per run with a published peak (memory): inside its interval? The
    residuals are scripts/gen_intervals.py's: no step time of a run on other hardware than its
    profile, each peak against the part of the estimate it counts."""
    cases = load_all() if cases is None else cases
    rows = evaluate(cases) if rows is None else rows
    out = []
    for kind in ("time", "memory"):
        data = []
        for c, r in zip(cases, rows):
            if kind == "time" and not r["other_hardware"]:
                ratio = r["measured_s"] / r["predicted_s"]
            elif kind == "memory" and r["peak_memory_gib"]:
                ratio = r["peak_memory_gib"] / r["predicted_peak_gib"]
            else:
                continue
            data.append((c, interval_class(c.job, c.layout), r["hardware"], math.log(ratio)))
        for i, (c, cls, gpu, res) in enumerate(data):
            table = build_table([(k, g, v) for j, (_, k, g, v) in enumerate(data) if j != i])
            iv = _lookup(table, cls, gpu, bool(caveats(c.job, c.layout)))
            out.append(
                {
                    "kind": kind,
                    "id": c.id,
                    "class": cls,
                    "gpu": gpu,
                    "ratio": math.exp(res),
                    "lo": iv.lo,
                    "hi": iv.hi,
                    "basis": f"{iv.cls}/{iv.gpu}",
                    "widened": iv.widened,
                    "inside": iv.lo <= math.exp(res) <= iv.hi,
                }
            )
    return out


def leave_one_out_serve() -> list[dict]:
    """The same for the serving metrics (no widening: every run is on a fitted profile)."""
    from scripts.gen_intervals import serve_residuals

    out = []
    for metric, data in sorted(serve_residuals().items()):
        for i, (cls, gpu, res) in enumerate(data):
            table = build_table([r for j, r in enumerate(data) if j != i])
            iv = _lookup(table, cls, gpu, False)
            out.append(
                {
                    "kind": metric,
                    "class": f"{metric} {cls}",
                    "gpu": gpu,
                    "inside": iv.lo <= math.exp(res) <= iv.hi,
                }
            )
    return out


def binomial_p(inside: int, n: int, p: float = 0.8) -> float:
    """Two-sided exact binomial p-value of `inside` of `n` under an honest `p` interval: the
    probability of a count no more likely than the one seen,

        P = sum over k with C(n,k) p^k (1-p)^(n-k) <= that of `inside`  of C(n,k) p^k (1-p)^(n-k)

    (the minimum-likelihood rule). A class far outside the bar with P >= 0.1 is a small
    sample, not a wrong interval: 4 of 6 inside has P = 0.34 (docs/calibration.md)."""
    if n <= 0:
        return 1.0
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    seen = pmf[inside] * (1 + 1e-9)
    return min(1.0, sum(q for q in pmf if q <= seen))


def coverage(results: list[dict], kind: str = "time", by: str = "class") -> dict:
    groups: dict[str, list[bool]] = {}
    for r in results:
        if r["kind"] == kind:
            groups.setdefault(r[by], []).append(r["inside"])
            groups.setdefault("all", []).append(r["inside"])
    return {
        k: {
            "n": len(v),
            "inside": sum(v),
            "coverage": sum(v) / len(v),
            "p_value": binomial_p(sum(v), len(v)),
        }
        for k, v in sorted(groups.items())
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = leave_one_out()
    tables = {
        f"{kind} by {by}": coverage(res, kind, by)
        for kind in ("time", "memory")
        for by in ("class", "gpu")
    }
    serve = leave_one_out_serve()
    for metric in sorted({r["kind"] for r in serve}):
        tables[f"serving {metric} by class"] = coverage(serve, metric, "class")
    if args.json:
        print(json.dumps(tables, indent=2))
        return 0
    for title, t in tables.items():
        print(
            f"leave-one-out coverage of the 80% interval, {title} (bar {BAR[0]:.0%}-{BAR[1]:.0%})"
        )
        for k, v in t.items():
            flag = ""
            if not BAR[0] <= v["coverage"] <= BAR[1]:
                flag = "  <- outside the bar" + (
                    " (a small sample: consistent with 80%)" if v["p_value"] >= 0.1 else ""
                )
            print(
                f"  {k:20s} {v['inside']:3d} of {v['n']:3d}  {v['coverage']:6.1%}"
                f"  p {v['p_value']:.2f}{flag}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
