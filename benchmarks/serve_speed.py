"""Speed of the serving search.

    python benchmarks/serve_speed.py [--repeat 5]

Times `planner serve` as a user runs it (a fresh process: Python start-up and imports
included) and the search itself in process, and prints the deployments evaluated per second.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMMANDS = [
    ["--model", "70b", "--gpus", "8"],
    ["--model", "70b", "--gpus", "8", "--ttft-ms", "500", "--tpot-ms", "30"],
    ["--model", "deepseek-v3", "--gpus", "16", "--hardware", "b200"],
    ["--model", "405b", "--gpus", "72", "--hardware", "gb200-nvl72"],
    ["--model", "deepseek-v3", "--gpus", "128", "--hardware", "b200"],
    ["--model", "70b", "--gpus", "1024"],
]


def wall(args, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "planner", "serve", *args, "--json"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        out.append(time.perf_counter() - t0)
    return out


def in_process(args, repeat: int):
    from planner.config import resolve_hardware
    from planner.presets import resolve_model
    from planner.serve.search import ServeOptions, search
    from planner.serve.specs import ServeJob, ServingSpec

    kv = dict(zip(args[::2], args[1::2]))
    hw = resolve_hardware(kv.get("--hardware", "h100-sxm"))
    job = ServeJob(
        resolve_model(kv["--model"]),
        hw,
        int(kv["--gpus"]),
        ServingSpec(precision="fp8", input_length=2048, output_length=512),
    )
    opts = ServeOptions(
        ttft_s=float(kv["--ttft-ms"]) / 1e3 if "--ttft-ms" in kv else None,
        tpot_s=float(kv["--tpot-ms"]) / 1e3 if "--tpot-ms" in kv else None,
    )
    times, res = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = search(job, opts)
        times.append(time.perf_counter() - t0)
    return times, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"{'command':62s} {'best s':>7s} {'median s':>9s}")
    for a in COMMANDS:
        t = wall(a, args.repeat)
        print(f"{'planner serve ' + ' '.join(a):62s} {min(t):7.3f} {statistics.median(t):9.3f}")
    print()
    print(f"{'in process':62s} {'points':>8s} {'shapes':>7s} {'search s':>9s} {'points/s':>10s}")
    for a in COMMANDS:
        t, res = in_process(a, args.repeat)
        best = min(t)
        print(
            f"{' '.join(a):62s} {res.searched:8,d} {res.shapes:7d} {best:9.3f} "
            f"{res.searched / best:10,.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
