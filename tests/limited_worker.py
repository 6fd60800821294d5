"""Run planner commands in one process under a memory limit, measuring each (test_hostile.py).

Usage: python tests/limited_worker.py LIMIT_BYTES < cases.json > results.json, where cases is
[{"id": ..., "argv": [...]}]. Each case runs `planner.cli.main(argv)` with stdout and stderr
captured; the result per id is {"code", "stdout", "stderr", "cpu_seconds", "seconds"}:
cpu_seconds is the CPU time (user + system) the case used in this process and in the children
it waited for (the search's forked child), which machine load barely changes and which
tests/test_hostile.py bounds; seconds is the wall-clock time, for information only (it grows
with load, so no test asserts it). The address-space
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

from work_budget import cpu_seconds  # tests/ is this script's folder, so it is on sys.path


def _import_planner() -> None:
    """Import every planner module before the first case: the commands import theirs lazily,
    and the first case to need one would otherwise pay its import (and, on a fresh
    interpreter, its compilation: a second on this machine) inside its CPU budget, which is
    for the case's own work."""
    import importlib
    import pkgutil

    import planner

    for mod in pkgutil.walk_packages(planner.__path__, "planner."):
        with contextlib.suppress(ImportError):  # an optional extra that is not installed
            importlib.import_module(mod.name)


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cases = json.load(sys.stdin)
    from planner.cli import main as cli

    _import_planner()

    results = {}
    for case in cases:
        out, err = io.StringIO(), io.StringIO()
        t0, c0 = time.perf_counter(), cpu_seconds()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli(case["argv"])
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:
                code = f"raised {exc.__class__.__name__}: {str(exc)[:200]}"
        results[case["id"]] = {
            "code": code,
            "stdout": out.getvalue()[:200_000],
            "stderr": err.getvalue()[:20_000],
            "cpu_seconds": cpu_seconds() - c0,
            "seconds": time.perf_counter() - t0,
        }
    json.dump(results, sys.__stdout__)


if __name__ == "__main__":
    main()
