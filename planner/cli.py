"""The command line: the only typer module, and the one place errors become exit codes.

Exit codes: 0 success; 1 a rule is broken or nothing fits (InfeasibleError); 2 unusable input
(SpecError, and typer's own usage errors); 3 an internal error (a bug: please report it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from planner.errors import PlannerError, SpecError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Plan and check how to split a large model across a GPU cluster.")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (see README).")]
HeadroomOpt = Annotated[float, typer.Option("--headroom", help="Fraction of GPU memory kept free.")]
TokensOpt = Annotated[Optional[str], typer.Option("--tokens", help="Training tokens (e.g. 15T) for time-to-train.")]


def _console(stderr: bool = False):
    from rich.console import Console
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def _run(fn: Callable[[], int]) -> None:
    """Run a command body; map every error to one stderr line and an exit code."""
    try:
        code = fn()
    except PlannerError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        raise typer.Exit(exc.exit_code)
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130)
    except Exception as exc:  # a bug: one line, never a traceback
        print(f"internal error (a bug in planner, please report it): "
              f"{exc.__class__.__name__}: {exc}", file=sys.stderr)
        raise typer.Exit(3)
    raise typer.Exit(code)


def _headroom(value: float) -> float:
    if not 0 <= value < 1:
        raise SpecError(f"--headroom = {value}: must be a fraction in [0, 1), e.g. 0.1")
    return value


def _tokens(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    from planner.units import parse_count
    try:
        return parse_count(value)
    except ValueError as exc:
        raise SpecError(f"--tokens = {value!r}: {exc}") from None


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="Config YAML (see examples/).")],
    json_out: JsonOpt = False,
    headroom: HeadroomOpt = 0.05,
    tokens: TokensOpt = None,
) -> None:
    """Check a config rule by rule and estimate its memory (and step time)."""

    def body() -> int:
        from planner.config import load_config
        from planner.validate import validate as run_validate
        from planner import report

        job, layout = load_config(config)
        result = run_validate(job, layout, headroom=_headroom(headroom), tokens=_tokens(tokens))
        if json_out:
            print(json.dumps(report.validation_json(result), indent=2))
        else:
            _console().print(report.validation_view(result, source=str(config)))
        return 0 if result.valid else 1

    _run(body)


@app.command()
def models(json_out: JsonOpt = False) -> None:
    """List the preset models with their parameter counts."""

    def body() -> int:
        from planner import report
        from planner.cost.params import active_params, total_params
        from planner.presets import ALIASES, PRESETS, get_preset

        rows = []
        for key in PRESETS:
            m = get_preset(key)
            rows.append(dict(name=key, aliases=[a for a, k in ALIASES.items() if k == key],
                             parameters=total_params(m), active_parameters=active_params(m),
                             num_layers=m.num_layers, hidden_size=m.hidden_size,
                             num_attention_heads=m.num_attention_heads, num_kv_heads=m.kv_heads,
                             num_experts=m.num_experts or 0, moe_top_k=m.moe_top_k if m.is_moe else 0,
                             seq_length=m.seq_length))
        if json_out:
            print(json.dumps({"models": rows}, indent=2))
        else:
            _console().print(report.models_view(rows))
        return 0

    _run(body)


@app.command()
def hardware(json_out: JsonOpt = False) -> None:
    """List the hardware profiles."""

    def body() -> int:
        from planner import report
        from planner.config import profile_names, resolve_hardware

        rows = [resolve_hardware(n).model_dump() for n in profile_names()]
        if json_out:
            print(json.dumps({"hardware": rows}, indent=2))
        else:
            _console().print(report.hardware_view(rows))
        return 0

    _run(body)


@app.command("export")
def export_cmd(
    config: Annotated[Path, typer.Argument(help="Config YAML (see examples/).")],
    fmt: Annotated[str, typer.Option("--format", "-f",
                                     help="megatron | deepspeed | torchtitan | nemo.")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o",
                                                   help="Write to this file instead of stdout.")] = None,
) -> None:
    """Write a config's layout as a framework's launch flags or config file."""

    def body() -> int:
        from planner.config import load_config
        from planner.cost import estimate
        from planner.export import check_exportable, check_format, export
        from planner.rules import Context, fits_in_memory

        name = check_format(fmt)
        job, layout = load_config(config)
        check_exportable(job, layout)
        est = estimate(job, layout)
        text = export(job, layout, name, estimate=est)
        too_big = fits_in_memory(Context(model=job.model, hardware=job.hardware,
                                         training=job.training, num_gpus=job.num_gpus,
                                         layout=layout, memory=est.memory))
        if too_big:
            print(f"warning: {too_big}", file=sys.stderr)
        if output is None:
            sys.stdout.write(text)
        else:
            try:
                output.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise SpecError(f"--output {str(output)!r} cannot be written "
                                f"({exc.__class__.__name__}); check the path") from None
            print(f"wrote {output}", file=sys.stderr)
        return 0

    _run(body)


def main() -> None:
    app()
