"""Ranking fidelity: where the calibration data have two or more layouts of the same job (A/B
pairs and sweeps: same model, GPU, GPU count, sequence, global batch and precision), does the
planner order them as they measured?

    python benchmarks/ranking.py [--json]

Per group: the pairs of two different layouts (the same layout measured under two software
releases is no order the planner can rank) whose measured step times differ by at least TIE
(closer pairs are noise, not an order), how many the planner orders the same way, and Kendall's tau
((concordant - discordant) / scored pairs; 1 = the measured order, -1 = reversed). Overall:
the same over every scored pair. benchmarks/accuracy.py prints the summary after its errors.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy import evaluate, load_all  # noqa: E402

TIE = 0.01
"""Measured step times closer than this (relative) are not an order."""


def job_key(c) -> tuple:
    j = c.job
    return (
        j.model.name,
        j.hardware.name,
        j.num_gpus,
        j.training.seq_length,
        j.training.global_batch_size,
        j.training.precision,
        j.training.recipe,
    )


def groups(cases, rows) -> dict[tuple, list[tuple]]:
    """Jobs with two or more distinct layouts: [(case, row), ...]."""
    by: dict[tuple, list[tuple]] = {}
    for c, r in zip(cases, rows):
        by.setdefault(job_key(c), []).append((c, r))
    return {
        k: v
        for k, v in by.items()
        if len(v) >= 2 and len({(c.layout, c.job.training) for c, _ in v}) >= 2
    }


def score(members) -> dict:
    conc = disc = skipped = same = 0
    for (ca, a), (cb, b) in itertools.combinations(members, 2):
        if (ca.layout, ca.job.training) == (cb.layout, cb.job.training):
            same += 1  # one layout run twice (another software release): no order to rank
            continue
        dm = b["measured_s"] - a["measured_s"]
        if abs(dm) < TIE * min(a["measured_s"], b["measured_s"]):
            skipped += 1
            continue
        dp = b["predicted_s"] - a["predicted_s"]
        if dm * dp > 0:
            conc += 1
        else:
            disc += 1
    n = conc + disc
    return {
        "runs": len(members),
        "pairs": n,
        "agree": conc,
        "skipped_close": skipped,
        "same_layout": same,
        "agreement": conc / n if n else None,
        "kendall_tau": (conc - disc) / n if n else None,
    }


def ranking(cases=None, rows=None) -> dict:
    cases = load_all() if cases is None else cases
    rows = evaluate(cases) if rows is None else rows
    out = {}
    total = {"pairs": 0, "agree": 0}
    for key, members in sorted(groups(cases, rows).items(), key=lambda kv: str(kv[0])):
        s = score(members)
        s["ids"] = [c.id for c, _ in members]
        out[" / ".join(str(k) for k in key[:5])] = s
        total["pairs"] += s["pairs"]
        total["agree"] += s["agree"]
    n = total["pairs"]
    summary = {
        "groups": len(out),
        "pairs": n,
        "agree": total["agree"],
        "agreement": total["agree"] / n if n else None,
        "kendall_tau": (2 * total["agree"] - n) / n if n else None,
    }
    return {"groups": out, "summary": summary}


def print_ranking(result: dict) -> None:
    print(f"ranking fidelity: layouts of the same job (pairs measured {TIE:.0%} or more apart)")
    for name, s in result["groups"].items():
        if not s["pairs"]:
            print(f"  {name[:70]:70s} {s['runs']:2d} runs, no pair {TIE:.0%} apart")
            continue
        print(
            f"  {name[:70]:70s} {s['runs']:2d} runs {s['agree']:3d}/{s['pairs']:3d} pairs "
            f"agree  tau {s['kendall_tau']:+.2f}"
        )
    t = result["summary"]
    if t["pairs"]:
        print(
            f"  all: {t['groups']} jobs, {t['agree']} of {t['pairs']} pairs in the measured "
            f"order ({t['agreement']:.0%}), Kendall's tau {t['kendall_tau']:+.2f}"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = ranking()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_ranking(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
