"""The CLI through typer's CliRunner: listings, the `validate --json` contract, `python -m`,
and the import direction (only cli.py imports typer; only the views import rich), and what
each command imports at start-up."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import app
from planner.config import resolve_hardware
from planner.cost.params import total_params
from planner.presets import FAMILY_PRESETS, PRESETS, PUBLISHED_PARAMS, get_preset

PACKAGE = Path(__file__).resolve().parent.parent / "planner"
PROFILES = [
    "a100-40g",
    "a100-80g",
    "h100-sxm",
    "h100-96g",
    "h800",
    "h200",
    "b200",
    "b300",
    "gb200-nvl72",
    "gb300-nvl72",
    "mi300x",
    "rtx-pro-6000",
]
LAYOUT_KEYS = {
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "etp",
    "vpp",
    "micro_batch_size",
    "num_microbatches",
    "sequence_parallel",
    "zero_stage",
    "recompute",
}
MEMORY_KEYS = {
    "weights_bytes",
    "gradients_bytes",
    "optimizer_bytes",
    "activations_bytes",
    "other_bytes",
    "total_bytes",
    "capacity_bytes",
}


def _table_row(text: str, name: str) -> str:
    rows = [line for line in text.splitlines() if f" {name} " in line]
    assert len(rows) == 1, f"{name}: {rows}"
    return rows[0]


# ---------------------------------------------------------------------------------- models


def test_models_lists_every_preset_with_its_count(runner):
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    for key in PRESETS:
        count = total_params(get_preset(key))
        assert f"{count / 1e9:.2f}B" in _table_row(result.stdout, key)


def test_models_json_counts_match_the_published_totals(runner):
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["models"]
    assert [r["name"] for r in rows] == list(PRESETS) + list(FAMILY_PRESETS)
    for r in rows:
        # published totals and their sources: tests/test_presets.py and, for the 2026
        # families, tests/test_families.py, which also says why Kimi K2 (-1.3%) and Llama 4
        # Scout (-1.1%, the vision encoder) are outside 1%
        rel = 0.015 if r["name"] in ("kimi-k2", "llama4-scout") else 0.01
        assert r["parameters"] == pytest.approx(PUBLISHED_PARAMS[r["name"]], rel=rel), r["name"]
        assert r["active_parameters"] <= r["parameters"]


# -------------------------------------------------------------------------------- hardware


def test_hardware_lists_every_profile(runner):
    result = runner.invoke(app, ["hardware"])
    assert result.exit_code == 0, result.output
    for name in PROFILES:
        _table_row(result.stdout, name)


def test_hardware_table_reads_at_80_columns():
    # in an 80-column terminal profile names must never truncate (h100-96g and h100-sxm would
    # both read "h100-…"), and no value or column may be dropped to fit (the CLI's pipes render
    # at 132, so the view is rendered here at 80 directly)
    from rich.console import Console

    from planner.config import profile_names
    from planner.views.report import hardware_view

    console = Console(width=80, no_color=True, force_terminal=False)
    with console.capture() as capture:
        console.print(hardware_view([resolve_hardware(n).model_dump() for n in profile_names()]))
    text = capture.get()
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    for name in PROFILES:
        row = _table_row(text, name).split()
        hw = resolve_hardware(name)
        assert row[0] == name and row[-1] == f"{hw.network_bandwidth_gb_per_s:.0f}", row
        assert row[4] == (f"{hw.peak_tflops.fp4:.0f}" if hw.peak_tflops.fp4 else "-"), row


def test_hardware_json_names(runner):
    result = runner.invoke(app, ["hardware", "--json"])
    assert result.exit_code == 0, result.output
    assert sorted(r["name"] for r in json.loads(result.stdout)["hardware"]) == sorted(PROFILES)


# ---------------------------------------------------------------------------- validate --json


def test_validate_json_contract(runner, examples_dir):
    result = runner.invoke(
        app, ["validate", str(examples_dir / "llama3-70b-2048xh100.yaml"), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    out = json.loads(result.stdout)  # exactly one JSON document: trailing text would not parse
    assert isinstance(out, dict)
    assert {"valid", "errors", "warnings", "layout", "memory"} <= set(out)
    assert LAYOUT_KEYS <= set(out["layout"])
    assert MEMORY_KEYS <= set(out["memory"])

    assert out["valid"] is True and out["errors"] == []
    # the example: 2048 GPUs, tp 8, pp 4 -> dp 2048/32 = 64; m = 1024/(1*64) = 16 = 4*pp, bubble
    # 3/16 = 19% <= 20%, tp 8 within the 8-GPU NVLink domain, 1024*8192 = 8.4M tokens <= 16.8M:
    # no warning applies
    assert out["warnings"] == []
    assert {k: out["layout"][k] for k in LAYOUT_KEYS} == dict(
        tp=8,
        pp=4,
        dp=64,
        cp=1,
        ep=1,
        etp=8,
        vpp=1,
        micro_batch_size=1,
        num_microbatches=16,
        sequence_parallel=True,
        zero_stage=1,
        recompute="none",
    )
    mem = out["memory"]
    parts = (
        "weights_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "activations_bytes",
        "other_bytes",
    )
    assert abs(mem["total_bytes"] - sum(mem[k] for k in parts)) <= len(parts)  # each rounded
    # hardware_profiles/h100-sxm.yaml: memory_gib 79.11 (torch-visible)
    assert mem["capacity_bytes"] == round(79.11 * 2**30)
    assert 0 < mem["total_bytes"] < mem["capacity_bytes"]


def test_validate_json_reports_broken_rules(runner, tmp_path):
    path = tmp_path / "tp3.yaml"
    path.write_text("model: llama3-70b\nnum_gpus: 64\nparallel:\n  tp: 3\n")
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["valid"] is False
    errors = {e["rule"]: e["message"] for e in out["errors"]}
    assert errors["heads-divisible-by-tp"] == (
        "num_attention_heads (64) must be divisible by tp (3); try tp 1, 2, 4, 8, 16, 32 or 64"
    )
    assert all(set(e) == {"rule", "message"} for e in out["errors"] + out["warnings"])


def test_validate_json_bad_input_prints_the_error_object(runner, tmp_path):
    # hostile input: with --json every exit prints one JSON object; on 2 it is the error
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml"), "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == 2 and error["field"] == "config"
    assert error["value"] == str(tmp_path / "nope.yaml")
    assert error["message"].endswith("does not exist; check the path")
    assert result.stderr == f"error: {error['message']}\n"


# -------------------------------------------------------------------------------- python -m


def test_python_m_planner_help():
    proc = subprocess.run(
        [sys.executable, "-m", "planner", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    for command in ("validate", "models", "hardware"):
        assert command in proc.stdout
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------------ import direction


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def _importers_of(module: str) -> set[str]:
    return {
        p.relative_to(PACKAGE.parent).as_posix()
        for p in PACKAGE.rglob("*.py")
        if module in _imported_roots(p)
    }


def test_only_cli_imports_typer():
    assert _importers_of("typer") == {"planner/cli.py"}


def test_only_the_views_import_rich():
    # the rich views, and the one console policy (cli.py makes its consoles there)
    importers = _importers_of("rich")
    assert "planner/views/report.py" in importers
    assert importers <= {
        "planner/views/console.py",
        "planner/views/report.py",
        "planner/views/serve_report.py",
    }


# ---------------------------------------------------------------------------------- start-up
# Each command imports only what it uses (benchmarks/startup_speed.py times them; no timing
# here). Fresh interpreters, since this one has imported everything already.

HEAVY = (
    "typer",
    "pydantic",
    "rich",
    "yaml",
    "planner.cli",
    "planner.specs",
    "planner.config",
    "planner.cost",
    "planner.search",
    "planner.views",
)


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (its own output dropped)."""
    probe = (
        "import contextlib, io, json, os, sys\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        + "".join(f"        {line}\n" for line in code.splitlines())
        + "    except SystemExit:\n        pass\n"
        "os.write(1, json.dumps(sorted(sys.modules)).encode())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PACKAGE.parent,
        env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout))


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY))}


def test_version_imports_nothing_heavy():
    # python -m planner --version: answered by planner/__main__.py; -X importtime lists every
    # module the process imported
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "planner", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PACKAGE.parent,
        env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)},
    )
    from planner import __version__

    assert proc.returncode == 0 and proc.stdout == f"planner {__version__}\n", proc.stderr[-2000:]
    imported = {
        line.split("|")[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "planner" in imported
    assert _heavy(imported) == set()
    # planner.cli's main (the old script entry, and callers of main) answers without typer
    assert _heavy(_modules_after("from planner.cli import main\nmain(['--version'])")) == {
        "planner.cli"
    }


def test_import_planner_is_lazy():
    assert _heavy(_modules_after("import planner")) == set()
    code = (
        "import planner\nassert planner.Layout.__module__ == 'planner.layout'\n"
        "import planner.validate\nassert callable(planner.validate)\n"
        "assert planner.validate is planner.validate.__globals__['validate']"
    )
    assert "planner.layout" in _modules_after(code)


def test_public_names_resolve():
    import planner

    assert set(planner.__all__) == set(planner._PUBLIC) | {"__version__"}
    for name in planner._PUBLIC:
        assert getattr(planner, name).__name__ == name
    assert not isinstance(planner.validate, type(planner))  # the function, not the module
    with pytest.raises(AttributeError):
        planner.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "args",
    [
        ["models", "--json"],
        ["hardware", "--json"],
        ["plan", "--model", "llama2-7b", "--gpus", "8", "--json"],
    ],
)
def test_json_commands_do_not_import_the_terminal_views(args):
    modules = _modules_after(f"from planner.cli import main\nmain({args!r})")
    assert "typer" in modules and "planner.cli" in modules
    assert not {m for m in modules if m == "rich" or m.startswith("rich.")}
    assert "planner.views.report" not in modules and "planner.views.serve_report" not in modules


READERS = (
    "planner.readers",
    "planner.frameworks.loading",
    "planner.frameworks.common",
    "planner.frameworks.megatron.reader",
    "planner.frameworks.nemo.reader",
    "planner.frameworks.deepspeed.reader",
    "planner.frameworks.torchtitan.reader",
)


def _readers(modules: set[str]) -> set[str]:
    return {m for m in modules if m in READERS or m.startswith(tuple(r + "." for r in READERS))}


def test_plan_does_not_import_the_config_readers(tmp_path):
    # plan reads no config file: the writers' refusals (the fw column), not the readers
    # (planner.frameworks loads load_any on first use); validate, which reads one, loads them
    plan = _modules_after(
        "from planner.cli import main\n"
        "main(['plan', '--model', 'llama2-7b', '--gpus', '8', '--json'])"
    )
    assert "planner.frameworks.runnable" in plan and "planner.frameworks.megatron.writer" in plan
    assert _readers(plan) == set()
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: llama2-7b\nnum_gpus: 8\n")
    validate = _modules_after(f"from planner.cli import main\nmain(['validate', {str(cfg)!r}])")
    assert {"planner.frameworks.loading", "planner.readers.bash"} <= _readers(validate)


def test_validate_chooses_the_knobs_a_config_leaves_out(runner, tmp_path):
    # micro_batch_size and vpp left out: planner picks the fastest that passes every rule
    # (memory with the requested headroom included) and says which it chose.
    cfg = tmp_path / "auto.yaml"
    cfg.write_text(
        "model: llama3-70b\nnum_gpus: 512\n"
        "training: {seq_length: 8192, global_batch_size: 512}\n"
        "parallel: {tp: 8, pp: 4}\n"
    )
    out = json.loads(runner.invoke(app, ["validate", str(cfg), "--json"]).stdout)
    assert out["valid"] is True
    assert out["chosen_by_planner"] == ["micro_batch_size", "vpp"]
    assert 20 % out["layout"]["vpp"] == 0  # 80 layers / pp 4 per rank
    tight = json.loads(
        runner.invoke(app, ["validate", str(cfg), "--json", "--headroom", "0.5"]).stdout
    )
    mem = tight["memory"]
    assert tight["valid"] is True  # a smaller choice that fits in half
    assert mem["total_bytes"] <= 0.5 * mem["capacity_bytes"]
    assert (tight["layout"]["vpp"], tight["layout"]["micro_batch_size"]) != (
        out["layout"]["vpp"],
        out["layout"]["micro_batch_size"],
    )
    # pinned values are kept as written
    cfg.write_text(
        cfg.read_text().replace("{tp: 8, pp: 4}", "{tp: 8, pp: 4, vpp: 1, micro_batch_size: 1}")
    )
    pinned = json.loads(runner.invoke(app, ["validate", str(cfg), "--json"]).stdout)
    assert pinned["chosen_by_planner"] == []
    assert (pinned["layout"]["vpp"], pinned["layout"]["micro_batch_size"]) == (1, 1)


# ------------------------------------------------------------- values typer cannot coerce


@pytest.mark.parametrize(
    "argv, flag, value, reason",
    [
        (["plan", "--model", "70b", "--gpus", "abc"], "--gpus", "abc", "must be a whole number"),
        (["plan", "--model", "70b", "--gpus=1.5"], "--gpus", "1.5", "must be a whole number"),
        (
            ["plan", "--model", "70b", "--gpus", "8", "--top", "x"],
            "--top",
            "x",
            "must be a whole number",
        ),
        (
            ["plan", "--model", "70b", "--gpus", "8", "--headroom", "half"],
            "--headroom",
            "half",
            "must be a number",
        ),
    ],
)
def test_a_value_typer_cannot_coerce_is_named_with_the_fix(capsys, argv, flag, value, reason):
    # typer's own words are pydantic's ("Input should be a valid integer, unable to parse
    # string as an integer") without the value; the one line names the option, the value and
    # what to give, and --json carries the value
    from planner.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    # (the command path is the program's name: here pytest's)
    assert err.startswith(f"error: {flag} = {value!r}: {reason}; see '") and err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(argv + ["--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert (error["field"], error["value"]) == (flag, value)
