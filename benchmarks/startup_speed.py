"""Start-up cost: CPU time (user + sys) of whole `planner` processes, as a ratio to a fixed
reference workload timed in the same run, so the figures compare across machines and loads.

    python benchmarks/startup_speed.py [--repeat 5] [--bytecode]

Each command runs as a fresh `python -m planner` of this checkout (PYTHONPATH set to it,
whatever `planner` is installed) `--repeat` times, interleaved with the reference
`python -c "sum(i*i for i in range(3_000_000))"` (so a change of load hits both alike); the
CPU time of each child comes from resource.getrusage(RUSAGE_CHILDREN), which counts the
search's forked worker too (PLANNER_SERIAL unset: two processes on two or more cores for a
search of 100 leaf groups or more, planner/search/pool.py POOL_MIN_WORK; the 70B plan's 752
run in two). It
prints the median CPU seconds of each and the ratio of the medians, and the targets:

    planner --version                               <= 0.3 x the reference
    planner plan --model 70b --gpus 2048 --json     <= 1.0 x the reference

The children inherit the environment; where it sets PYTHONDONTWRITEBYTECODE every process
compiles every module it imports. `--bytecode` measures the other case: the children may
write bytecode (to a cache of their own, PYTHONPYCACHEPREFIX, not the checkout), and one
unmeasured run of each command fills it first. Below the targets it times, alike and with
no target, what the plan stands on (`FLOORS`).

Measured on the 2-core development machine under other sessions' load (load average 4-6;
ratios move by ~10% between runs), `--bytecode --repeat 5`: reference 0.29 s, `--version`
0.18-0.23x, the plan 2.5-2.8x (the previous commit, interleaved with it: 2.9-3.1x), typer
alone parsing plan's options ~1.2x, the plan stopped by `--top 0` ~1.4x. The 1.0x target is
below typer's own floor (docs/search.md, "Start-up", says what it is made of); what moved:
plan no longer imports the config readers (planner.frameworks loads them on first use) and
the search's hot path builds Layouts and memory totals more cheaply (docs/search.md).
Since then (floors under the bounds, the 70B search in one process), a run right after the
commit before them, load average 2-4: reference 0.26 s, `--version` 0.21x, the plan 2.35x
(before: 2.85x), typer alone 0.78x, `--top 0` 1.16x.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

REFERENCE = ["-c", "sum(i*i for i in range(3_000_000))"]
COMMANDS = [
    ("planner --version", ["-m", "planner", "--version"], 0.3),
    (
        "planner plan --model 70b --gpus 2048 --json",
        ["-m", "planner", "plan", "--model", "70b", "--gpus", "2048", "--json"],
        1.0,
    ),
]
TYPER_ALONE = """
import inspect, typer, planner.cli as cli
cli._app()                      # typer and the shared option aliases in cli's namespace
def plan(**options): pass       # plan's options, an empty body
plan.__signature__ = inspect.signature(cli.plan, eval_str=True)
app = typer.Typer(add_completion=False)
app.callback()(lambda: None)
app.command("plan")(plan)
app(["plan", "--model", "70b", "--gpus", "2048", "--json"], standalone_mode=False)
"""
FLOORS = [
    ("  python -c pass (interpreter, site)", ["-c", "pass"]),
    ("  typer parsing plan's options, empty body", ["-c", TYPER_ALONE]),
    (
        "  the same plan with --top 0 (all but the search)",
        ["-m", "planner", "plan", "--model", "70b", "--gpus", "2048", "--json", "--top", "0"],
    ),
]
"""What the plan's figure stands on, timed alike (no target): the bare interpreter; typer
parsing the same command line into plan's own options (its signature) with an empty body
(typer 0.29 validates every option through a pydantic TypeAdapter, so this imports pydantic
whatever planner does); and the same command stopped by `--top 0` (exit 2) right after
typer's parse, planner's pydantic spec models built (planner.specs, at import) and the
cluster resolved: everything but the search and its output."""


def cpu(args: list[str], env: dict[str, str], *, check: bool = True) -> float:
    """CPU seconds (user + sys) of one child `python ARGS`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, *args],
        check=check,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def child_env(bytecode_cache: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    }
    if bytecode_cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = bytecode_cache
    return env


def measure(repeat: int, env: dict[str, str]) -> dict[str, list[float]]:
    """CPU seconds per run of the reference and of each command, interleaved."""
    runs: dict[str, list[float]] = (
        {"reference": []} | {name: [] for name, _, _ in COMMANDS} | {name: [] for name, _ in FLOORS}
    )
    for _ in range(repeat):
        runs["reference"].append(cpu(REFERENCE, env))
        for name, args, _ in COMMANDS:
            runs[name].append(cpu(args, env))
        for name, args in FLOORS:
            runs[name].append(cpu(args, env, check=False))
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--bytecode",
        action="store_true",
        help="let the children cache bytecode (in a temporary directory)",
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="planner-pyc-") as cache:
        env = child_env(cache if args.bytecode else None)
        if args.bytecode:
            for _, cmd, _ in COMMANDS:
                cpu(cmd, env)
            for _, cmd in FLOORS:
                cpu(cmd, env, check=False)
        runs = measure(args.repeat, env)
    ref = statistics.median(runs["reference"])
    bytecode = (
        "cached"
        if args.bytecode
        else "not written (PYTHONDONTWRITEBYTECODE)"
        if env.get("PYTHONDONTWRITEBYTECODE")
        else "as the environment has it"
    )
    print(f"CPU seconds (user + sys), median of {args.repeat}; bytecode {bytecode}")
    print(f"{'command':48s} {'median s':>9s} {'x ref':>6s} {'target':>7s}")
    print(f"{'reference: sum(i*i for i in range(3_000_000))':48s} {ref:9.3f} {1:6.2f}")
    for name, _, target in COMMANDS:
        t = statistics.median(runs[name])
        ok = t / ref <= target
        print(
            f"{name:48s} {t:9.3f} {t / ref:6.2f} {'<= ' + str(target):>7s}"
            f"{'' if ok else '  (missed)'}"
        )
    for name, _ in FLOORS:
        t = statistics.median(runs[name])
        print(f"{name:48s} {t:9.3f} {t / ref:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
