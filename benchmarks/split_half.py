"""Split-half check of `planner calibrate`'s fit: calibrate each GPU's profile from one half
of calibration-modern.yaml's runs (each run's measured step time written as a Megatron-LM log
and read back by planner/calibration/logs.py, as a user's logs would be), and predict the
other half; against the shipped profile (fitted to every run, both halves) and from a
deliberately perturbed base (HBM, NVLink and network bandwidths halved).

    python benchmarks/split_half.py [--gpu NAME ...] [--full] [--json]

`--full` adds the recovery with every run of the GPU: the halved base calibrated from all its
runs and scored on all of them, against the shipped profile on the same runs (what a half
cannot identify, all the runs may: the check of the fit itself, apart from the sample size).

Halves: each GPU's runs in file order, alternately (run 0, 2, 4 ... fit; 1, 3, 5 ... test).
Scores on the held-out half: median |error| and the fit's mean Huber loss
(planner/calibration/fit.py). The calibration is `planner calibrate`'s
(planner/calibration/runs.py calibrate: the efficiencies chosen by held-out gain,
fit.select_parameters, and the bandwidths the runs identify, fit.fit_bandwidths); what it
fitted, the largest gains it left out (below Akaike's 2) and the factors it kept on the
bandwidths are printed. Runs the calibration marks as another GPU's
(accuracy.py NOT_THIS_HARDWARE) are left out.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy import DATA, load_cases  # noqa: E402
from planner.calibration.fit import Run, _huber, errors  # noqa: E402
from planner.calibration.logs import read_log  # noqa: E402
from planner.calibration.runs import calibrate  # noqa: E402

BANDWIDTHS = ("hbm_bandwidth_gb_per_s", "nvlink_bandwidth_gb_per_s", "network_bandwidth_gb_per_s")


def synthetic_log(t: float) -> str:
    """A Megatron-LM log of a run whose steady step time is t (three slower warm-up steps)."""
    return "".join(
        f" iteration {10 * i:6d}/ 100 | elapsed time per iteration (ms): "
        f"{t * 1e3 * (1.3 if i <= 3 else 1.0):.4f} |\n"
        for i in range(1, 11)
    )


def as_runs(cases) -> list[Run]:
    out = []
    for c in cases:
        s = read_log(synthetic_log(c.measured_s))
        out.append(Run(c.id, c.job, c.layout, s.step_time_s, "half"))
    return out


def halves(cases) -> dict[str, tuple[list, list]]:
    by: dict[str, list] = {}
    for c in cases:
        if not c.other_hardware:
            by.setdefault(c.job.hardware.name, []).append(c)
    return {g: (cs[0::2], cs[1::2]) for g, cs in by.items() if len(cs) >= 4}


def perturbed(hw):
    return hw.model_copy(update={k: getattr(hw, k) / 2 for k in BANDWIDTHS})


def _scores(runs, hw) -> dict:
    e = errors(runs, {hw.name: hw})
    return {
        "median_abs_error": statistics.median(abs(math.expm1(x)) for x in e),
        "huber_loss": sum(_huber(x) for x in e) / len(e),
    }


def split_half(gpus=None, full: bool = False) -> dict:
    cases = load_cases(paths=[DATA / "calibration-modern.yaml"])
    out = {}
    for gpu, (fit, test) in sorted(halves(cases).items()):
        if gpus and gpu not in gpus:
            continue
        shipped = fit[0].job.hardware
        fit_runs, test_runs = as_runs(fit), as_runs(test)
        row = {"fit_runs": len(fit), "test_runs": len(test), "shipped": _scores(test_runs, shipped)}
        if full:
            every = fit_runs + test_runs
            got = calibrate(every, perturbed(shipped))
            row["full"] = {
                "runs": len(every),
                "shipped": _scores(every, shipped),
                "perturbed_base": _scores(every, perturbed(shipped)),
                "recovered": _scores(every, got.profile),
                "fitted": list(got.fitted),
                "at_bound": got.at_bound,
                "bandwidths": got.bandwidths,
            }
        for name, base in (("calibrated", shipped), ("perturbed", perturbed(shipped))):
            got = calibrate(fit_runs, base)
            row[f"{name}_base"] = _scores(test_runs, base)
            row[name] = _scores(test_runs, got.profile)
            row[f"{name}_fitted"] = list(got.fitted)
            row[f"{name}_gains"] = {k: round(v, 2) for k, v in got.gains.items()}
            row[f"{name}_at_bound"] = got.at_bound
            row[f"{name}_bandwidths"] = got.bandwidths
            row[f"{name}_bandwidth_note"] = got.bandwidth_note
        out[gpu] = row
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="append", default=None)
    ap.add_argument("--full", action="store_true", help="also recover from every run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = split_half(args.gpu, full=args.full)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(
        f"{'gpu':12s} {'fit/test':>8s}  held-out median |error| (Huber loss): shipped | "
        "calibrated from half | perturbed base -> calibrated"
    )
    for gpu, r in res.items():

        def f(s):
            return f"{s['median_abs_error']:6.1%} ({s['huber_loss']:.4f})"

        print(
            f"{gpu:12s} {r['fit_runs']:3d}/{r['test_runs']:<4d}  {f(r['shipped'])} | "
            f"{f(r['calibrated'])} | {f(r['perturbed_base'])} -> {f(r['perturbed'])}"
        )
        for name in ("calibrated", "perturbed"):
            g = r[name + "_gains"]
            top = sorted((k for k in g if k not in r[name + "_fitted"]), key=lambda k: -g[k])[:2]
            print(
                f"{'':14s} {name}: fitted "
                + (", ".join(f"{k} (gain {g[k]:.1f})" for k in r[name + "_fitted"]) or "none")
                + "; largest gains left out: "
                + ", ".join(f"{k} {g[k]:.1f}" for k in top)
                + f"; at a bound: {', '.join(r[name + '_at_bound']) or '-'}"
            )
            print(f"{'':14s} {name}: {r[name + '_bandwidth_note']}")
        if "full" in r:
            a = r["full"]
            bw = ", ".join(f"{k.split('_')[0]} x{v}" for k, v in a["bandwidths"].items()) or "-"
            print(
                f"{'':14s} every run ({a['runs']}): shipped {f(a['shipped'])} | halved "
                f"{f(a['perturbed_base'])} -> {f(a['recovered'])}; fitted "
                f"{', '.join(a['fitted']) or 'none'}; bandwidths {bw}; at a bound: "
                f"{', '.join(a['at_bound']) or '-'}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
