"""Same output: run a fixed set of `planner` commands and write (or compare) their output, so a
change meant to be faster only can be checked byte for byte against the version before it.

    python benchmarks/same_output.py --write DIR     # outputs of this checkout into DIR
    python benchmarks/same_output.py --check DIR     # this checkout's against DIR: exit 1 on a
                                                     # difference, each named

Each command runs as a fresh `python -m planner` of this checkout (PYTHONPATH set to it); its
stdout, stderr and exit code are kept. The elapsed time is the only part of the output that may
differ between runs (`elapsed_s` in the JSON, `... timed, 0.42 s)` in the terminal's summary line): it
is masked, and white space compared as one space (the terminal's summary line wraps where the
elapsed time's digits put it). `--serial` runs the search in one process (`PLANNER_SERIAL=1`); the counts (`timed`
among them) are checked too, so run both ways when a change touches the walk or the ranking.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PLAN = [
    "--model 70b --gpus 2048 --json",
    "--model 70b --gpus 2048",
    "--model 70b --gpus 512 --hardware h200 --json",
    "--model 70b --gpus 64 --sort-by memory --json",
    "--model 70b --gpus 256 --fix tp=8,pp=4 --json",
    "--model 405b --gpus 16384 --json",
    "--model 405b --gpus 16384 --export deepspeed",
    "--model 405b --gpus 2048 --hardware b200 --json",
    "--model 405b --gpus 1024 --tokens 15T --json",
    "--model deepseek-v3 --gpus 2048 --json",
    "--model deepseek-v3 --gpus 1024 --export torchtitan --json",
    "--model deepseek-v3 --gpus 1024 --export megatron",
    "--model deepseek-v3 --gpus 256 --json",
    "--model deepseek-v3 --gpus 512 --sort-by memory --json",
    "--model llama4-maverick --gpus 256 --json",
    "--model llama4-maverick --gpus 256",
    "--model llama4-maverick --gpus 64 --json",
    "--model llama4-maverick --gpus 512 --framework torchtitan --json",
    "--model qwen3-235b --gpus 512 --hardware b200 --json",
    "--model qwen3-235b --gpus 1024 --json",
    "--model qwen3-235b --gpus 128 --top 3 --json",
    "--model qwen3.5-397b-a17b --gpus 512 --hardware b200 --json",
    "--model qwen3.5-397b-a17b --gpus 256 --export megatron-bridge",
    "--model gpt-oss-120b --gpus 64 --json",
    "--model mixtral-8x7b --gpus 64 --fix ep=8 --json",
]
SERVE = [
    "--model 70b --gpus 8 --json",
    "--model deepseek-v3 --gpus 16 --json",
    "--model qwen3-235b --gpus 8 --hardware b200",
]
COMMANDS = [["plan", *c.split()] for c in PLAN] + [["serve", *c.split()] for c in SERVE]

_MASKS = [
    (re.compile(rb'"elapsed_s": [0-9.e+-]+'), b'"elapsed_s": ELAPSED'),
    (re.compile(rb"(timed, |fit; .{0,200}?; )[0-9]+\.[0-9]+ s\)"), rb"\1ELAPSED s)"),
]


def _flat(out: bytes) -> bytes:
    """The output with every run of white space as one space: the terminal wraps the summary
    line where the elapsed time's digits put it."""
    return re.sub(rb"\s+", b" ", out)


def name(cmd: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9.=,-]+", "_", " ".join(cmd)).strip("_")


def run(cmd: list[str], serial: bool) -> bytes:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    if serial:
        env["PLANNER_SERIAL"] = "1"
    p = subprocess.run(
        [sys.executable, "-m", "planner", *cmd], capture_output=True, env=env, cwd=ROOT
    )
    out = b"exit %d\n--- stdout\n%s\n--- stderr\n%s" % (p.returncode, p.stdout, p.stderr)
    for pat, rep in _MASKS:
        out = pat.sub(rep, out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path)
    g.add_argument("--check", type=Path)
    ap.add_argument("--serial", action="store_true", help="PLANNER_SERIAL=1")
    ap.add_argument("--jobs", type=int, default=1, help="commands run at once")
    args = ap.parse_args(argv)
    with ThreadPoolExecutor(args.jobs) as ex:
        outs = list(ex.map(lambda c: run(c, args.serial), COMMANDS))
    bad = 0
    for cmd, out in zip(COMMANDS, outs, strict=True):
        f = (args.write or args.check) / (name(cmd) + ".txt")
        if args.write:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(out)
        elif not f.exists() or _flat(f.read_bytes()) != _flat(out):
            bad += 1
            print(f"differs: planner {' '.join(cmd)}")
            old = f.read_bytes().decode(errors="replace").splitlines() if f.exists() else []
            new = out.decode(errors="replace").splitlines()
            for line in list(difflib.unified_diff(old, new, "before", "now", n=0, lineterm=""))[
                :20
            ]:
                print("    " + line)
    if args.check:
        print(f"{len(COMMANDS) - bad} of {len(COMMANDS)} the same")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
