"""Run planner commands in one process under a memory limit, timing each (tests/test_hostile.py).

Usage: python tests/limited_worker.py LIMIT_BYTES < cases.json > results.json, where cases is
[{"id": ..., "argv": [...]}]. Each case runs `planner.cli.main(argv)` with stdout and stderr
captured; the result per id is {"code", "stdout", "stderr", "seconds"}. The address-space
limit (RLIMIT_AS) holds for the whole run, so a case that needs more memory fails with a
MemoryError inside planner (which the CLI reports as exit 3).
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import time


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cases = json.load(sys.stdin)
    from planner.cli import main as cli

    results = {}
    for case in cases:
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli(case["argv"])
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:   # noqa: BLE001 - reported, the test fails on it
                code = f"raised {exc.__class__.__name__}: {str(exc)[:200]}"
        results[case["id"]] = {"code": code, "stdout": out.getvalue()[:200_000],
                               "stderr": err.getvalue()[:20_000],
                               "seconds": time.perf_counter() - t0}
    json.dump(results, sys.__stdout__)


if __name__ == "__main__":
    main()
