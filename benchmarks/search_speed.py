"""Search speed: wall time of whole `planner plan` commands (process start included) and the
evaluation rate of the cost model.

    python benchmarks/search_speed.py [--repeat 5]

For each command (405b on 16,384 GPUs, 70b on 2,048, deepseek-v3 on 2,048 and on 1,024,
qwen3-235b on 512 B200, llama4-maverick on 256, qwen3.5-397b-a17b on 512 B200) it runs `python -m planner` of this checkout (PYTHONPATH set to it,
whatever `planner` is installed) as a fresh process `--repeat` times and prints the best and
the median wall time; then, in process, the layouts the search covered, the memory estimates
and step-time estimates it made and their rate; and the raw rate of full estimates (memory +
step time) over every layout the search kept for 70b on 2,048 GPUs.

Its times are wall times, which on a shared machine move with the other sessions' load
(docs/search.md has the last run, with the load it ran under). To compare two versions of the
search, time its CPU in one process (`PLANNER_SERIAL=1`, `time.process_time()` around
`search(job)`), the least of a few runs, alternating the versions: measured so on the
2-core machine, the 70B x 2,048 search went from 0.24-0.35 s to 0.23-0.27 s of CPU and the
DeepSeek-V3 x 2,048 one from 1.53-1.73 s to 1.33-1.61 s (before the unpaired-EP ends joined
its bound: 1.24-1.67 s). The two `--export` rows time the framework filter (each contender
asked whether the framework runs it, and how): with its look-ups cached, whole commands
(CPU of both processes, best of 3, interleaved with the commit before, load average 2.5-4)
went from 7.2 to 4.9 s (deepseek-v3 x 1,024 --export torchtitan) and from 2.8 to 1.8 s (405b
x 16,384 --export deepspeed); docs/search.md has the table and this benchmark's last run.
Since then contenders carry a floor under their bound and the ranking takes a bound only
when its floor comes up (planner/search/walk.py `_floor`), and a search under 2,000 leaf
groups without a framework filter runs in one process (planner/search/pool.py
`POOL_MIN_WORK`): whole commands (CPU of both processes, best of 3, interleaved with the
commit before, load average 1-2) went from 3.44 to 2.59 s (llama4-maverick x 256), 3.38 to
2.72 s (qwen3.5-397b-a17b x 512 B200), 4.79 to 3.44 s (deepseek-v3 x 1,024 --export
torchtitan), 2.60 to 2.25 s (deepseek-v3 x 2,048), 0.88 to 0.73 s (70b x 2,048), with the
same output (benchmarks/same_output.py); docs/search.md has the table. Since then a search
of 100 leaf groups or more forks (docs/search.md, "Two processes from 100 leaf groups"): on
the idle machine the 70B x 2,048 plan takes 0.91 s of wall time instead of 1.13 s, for
1.17 s of CPU instead of 1.13 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMMANDS = [
    ("405b", 16384, "h100-sxm", None),
    ("70b", 2048, "h100-sxm", None),
    ("deepseek-v3", 2048, "h100-sxm", None),
    ("deepseek-v3", 1024, "h100-sxm", None),
    ("qwen3-235b", 512, "b200", None),
    ("llama4-maverick", 256, "h100-sxm", None),
    ("qwen3.5-397b-a17b", 512, "b200", None),
    # `--export F` searches what F runs (its refusals and `runs_as` on every contender)
    ("deepseek-v3", 1024, "h100-sxm", "torchtitan"),
    ("405b", 16384, "h100-sxm", "deepspeed"),
]


def wall(cmd: list[str], repeat: int) -> list[float]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    }
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(
            cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        times.append(time.perf_counter() - t0)
    return times


def label(model: str, gpus: int, hw: str, fw: str | None = None) -> str:
    return (
        f"--model {model} --gpus {gpus}"
        + ("" if hw == "h100-sxm" else f" --hardware {hw}")
        + ("" if fw is None else f" --export {fw}")
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    base = [sys.executable, "-m", "planner"]

    from planner.config import Job, default_training, resolve_hardware
    from planner.cost import cost_model
    from planner.frameworks import runnable
    from planner.presets import get_preset
    from planner.search import SearchOptions, search

    print(f"{'command':66s} {'best s':>7s} {'median s':>9s}")
    for model, gpus, hw, fw in COMMANDS:
        ts = wall(base + ["plan"] + label(model, gpus, hw, fw).split(), args.repeat)
        print(
            f"planner plan {label(model, gpus, hw, fw)}".ljust(66)
            + f" {min(ts):7.3f} {statistics.median(ts):9.3f}"
        )
    print()
    print(
        f"{'in process':30s} {'layouts':>9s} {'memory est.':>11s} {'timed':>6s} {'search s':>9s} "
        f"{'layouts/s':>10s} {'estimates/s':>12s}"
    )
    kept = None
    for model, gpus, hw, fw in COMMANDS:
        m = get_preset(model)
        job = Job(
            model=m, hardware=resolve_hardware(hw), num_gpus=gpus, training=default_training(m)
        )
        if fw is not None:  # as `plan --export fw` searches
            job = runnable.job_for(job, fw)
        r = search(job, SearchOptions(runs_as=None if fw is None else runnable.allow(fw)))
        name = (
            f"{model} x {gpus}"
            + ("" if hw == "h100-sxm" else f" {hw}")
            + ("" if fw is None else f" {fw}")
        )
        print(
            f"{name:30s} {r.searched:9,d} {r.evaluated:11,d} {r.timed:6,d} "
            f"{r.elapsed_s:9.3f} {r.searched / r.elapsed_s:10,.0f} "
            f"{(r.evaluated + r.timed) / r.elapsed_s:12,.0f}"
        )
        if model == "70b":
            kept = (job, r)
    # raw rate: full estimates (memory + time) of distinct layouts, fresh cost model
    from planner.search.space import _Space
    from planner.search.walk import _Counter, _groups

    job, _ = kept
    cm = cost_model(job)
    layouts = []
    for base, vpps, _sps in _groups(job, _Space(job, SearchOptions()), _Counter()):
        for vpp in vpps:
            for mbs in (1, 2):
                for zero in (1, 2):
                    layouts.append(
                        base.with_(vpp=vpp, sp=base.tp > 1, micro_batch_size=mbs, zero=zero)
                    )
    t0 = time.perf_counter()
    for lay in layouts:
        cm.memory(lay)
        cm.time(lay)
    dt = time.perf_counter() - t0
    print(
        f"\nfull estimates (memory + step time), 70b x 2048, {len(layouts):,} layouts: "
        f"{len(layouts) / dt:,.0f} layouts/s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
