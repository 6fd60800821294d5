"""Split-half check of the whole fit: benchmarks/calibrate.py's fit (every profile, in ORDER,
the parameters each GPU's runs identify) on one half of the runs of both calibration files,
scored on the other half, against the shipped profiles (fitted to both halves).

    python benchmarks/split_fit.py [--json]

Halves: the runs of each calibration file, within each (GPU, model) group in file order,
alternately (the 1st, 3rd ... run of a group in half A; the 2nd, 4th ... in half B), so each
half holds every job the data measure more than once and neither is one model's sweep;
calibration.yaml groups by GPU alone (its models are one run each). Each half is fitted once
and predicts the other. Prints, per held-out half and class, the number of runs and the
median and max |error|. This is the fit's own generalisation; benchmarks/split_half.py checks
`planner calibrate` (a user's few logs on top of a shipped profile) per GPU.

Measured (docs/accuracy.md): the fit on one half predicts the other better than the profiles
shipped before issue 17's re-fit did, though those had seen both halves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy import default_paths, evaluate  # noqa: E402
from benchmarks.calibrate import base_profiles, fit_all, fit_cases  # noqa: E402


def halves(cases) -> tuple[list, list]:
    """(A, B): alternately within each (file, GPU, model) group; calibration.yaml by GPU."""
    a, b, seen = [], [], {}
    for c in cases:
        dense = Path(c.source_file).name == "calibration.yaml"
        key = (c.source_file, c.job.hardware.name, None if dense else c.job.model.name)
        k = seen[key] = seen.get(key, -1) + 1
        (a if k % 2 == 0 else b).append(c)
    return a, b


def fit(cases) -> dict:
    by_hw: dict[str, list] = {}
    for c in cases:
        by_hw.setdefault(c.job.hardware.name, []).append(c)
    return fit_all(by_hw, base_profiles(by_hw), log=lambda *a, **k: None)


def summary(rows) -> dict:
    by: dict[str, list[float]] = {}
    for r in rows:
        dense = Path(r["file"]).name == "calibration.yaml"
        by.setdefault("dense" if dense else r["class"], []).append(abs(r["error"]))
        by.setdefault("dense, all" if dense else "modern, all", []).append(abs(r["error"]))
    return {
        k: {"runs": len(v), "median": statistics.median(v), "max": max(v)}
        for k, v in sorted(by.items())
    }


def split_fit() -> dict:
    a, b = halves(fit_cases(default_paths(), log=lambda *a, **k: None))
    out = {}
    for held, other in (("B", a), ("A", b)):
        test = b if held == "B" else a
        out[held] = {
            "shipped": summary(evaluate(test)),
            "fitted_on_other_half": summary(evaluate(test, hardware_override=fit(other))),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = split_fit()
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    for held, r in res.items():
        print(
            f"held-out half {held}: class  runs  shipped median / max  |  fitted on the other half"
        )
        for cls, s in r["shipped"].items():
            f = r["fitted_on_other_half"][cls]
            print(
                f"  {cls:14s} {s['runs']:4d}  {s['median']:6.1%} / {s['max']:6.1%}  |  "
                f"{f['median']:6.1%} / {f['max']:6.1%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
