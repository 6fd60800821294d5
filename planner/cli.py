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
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", help="Hardware profile name or YAML path (default h100-sxm).")]
GpusOpt = Annotated[Optional[int], typer.Option("--gpus", help="Total GPUs.")]
NodesOpt = Annotated[Optional[int], typer.Option("--nodes", help="Nodes (x the profile's GPUs per node), instead of --gpus.")]


def _console(stderr: bool = False):
    """Rich console; when not a terminal (pipes, CI) wide enough for the plan table."""
    from rich.console import Console
    console = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console = Console(stderr=stderr, highlight=False, soft_wrap=False, width=132)
    return console


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


def _world(gpus: Optional[int], nodes: Optional[int], hardware) -> Optional[int]:
    """--gpus, or --nodes x gpus_per_node; both given must agree."""
    if gpus is not None and gpus < 1:
        raise SpecError(f"--gpus = {gpus}: must be a positive whole number")
    if nodes is not None and nodes < 1:
        raise SpecError(f"--nodes = {nodes}: must be a positive whole number")
    if nodes is None:
        return gpus
    n = nodes * hardware.gpus_per_node
    if gpus is not None and gpus != n:
        raise SpecError(f"--gpus ({gpus}) and --nodes ({nodes}) x {hardware.gpus_per_node} GPUs "
                        f"per node ({n}) disagree; give one of them")
    return n


@app.command()
def plan(
    model: Annotated[str, typer.Option("--model", help="Preset, alias, model YAML or HF config.json.")],
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    hardware: HardwareOpt = None,
    seq_length: Annotated[Optional[int], typer.Option("--seq-length", help="Tokens per sequence (default: the model's).")] = None,
    global_batch_size: Annotated[Optional[int], typer.Option("--global-batch-size", help="Sequences per step (default: ~4M tokens).")] = None,
    precision: Annotated[str, typer.Option("--precision", help="bf16 | fp16 | fp8.")] = "bf16",
    top: Annotated[int, typer.Option("--top", help="How many layouts to list.")] = 10,
    sort_by: Annotated[str, typer.Option("--sort-by", help="time | memory | mfu.")] = "time",
    fix: Annotated[Optional[str], typer.Option("--fix", help="Pin axes, e.g. tp=8,pp=4,recompute=full.")] = None,
    max_tp: Annotated[Optional[int], typer.Option("--max-tp", help="Largest TP degree tried (default: the NVLink domain).")] = None,
    headroom: HeadroomOpt = 0.05,
    tokens: TokensOpt = None,
    export_format: Annotated[Optional[str], typer.Option("--export", help="Also print the top plan as megatron|deepspeed|torchtitan|nemo.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Search every layout and rank the ones that fit, with the seven-step reasoning."""

    def body() -> int:
        from planner import report
        from planner.config import Job, default_training, resolve_hardware
        from planner.presets import resolve_model
        from planner.search import SearchOptions, parse_fix, search

        hw = resolve_hardware(hardware or "h100-sxm")
        n = _world(gpus, nodes, hw)
        if n is None:
            raise SpecError("the GPU count is missing; give --gpus N or --nodes N")
        if top < 1:
            raise SpecError(f"--top = {top}: must be at least 1")
        for flag, value in (("--seq-length", seq_length), ("--global-batch-size", global_batch_size)):
            if value is not None and value < 1:
                raise SpecError(f"{flag} = {value}: must be a positive whole number")
        if sort_by not in ("time", "memory", "mfu"):
            raise SpecError(f"--sort-by = {sort_by!r}: must be time, memory or mfu")
        if precision not in ("bf16", "fp16", "fp8"):
            raise SpecError(f"--precision = {precision!r}: must be bf16, fp16 or fp8")
        if max_tp is not None and max_tp < 1:
            raise SpecError(f"--max-tp = {max_tp}: must be a positive whole number")
        fmt = None
        if export_format is not None:
            from planner.export import check_format
            fmt = check_format(export_format, option="--export")
        m = resolve_model(model)
        job = Job(model=m, hardware=hw, num_gpus=n,
                  training=default_training(m, seq_length=seq_length,
                                            global_batch_size=global_batch_size,
                                            precision=precision))
        from planner.rules import Context, precision_supported
        unsupported = precision_supported(Context(model=m, hardware=hw, training=job.training,
                                                  num_gpus=n, layout=None))
        if unsupported:
            raise SpecError(f"--precision {precision}: {unsupported}")
        opts = SearchOptions(top=top, sort_by=sort_by, fix=parse_fix(fix), max_tp=max_tp,
                             headroom=_headroom(headroom), tokens=_tokens(tokens))
        result = search(job, opts)
        text = None
        if fmt and result.plans:
            from planner.cost import Estimate
            from planner.export import export as run_export
            best = result.best
            text = run_export(job, best.layout, fmt,
                              estimate=Estimate(memory=best.memory, time=best.time))
        if json_out:
            out = report.plan_json(result)
            if text is not None:
                out["export"] = {"format": fmt, "text": text}
            print(json.dumps(out, indent=2))
        else:
            _console().print(report.plan_view(result))
            if text is not None:
                print(text)
        if not result.plans:
            lay_mem = result.closest
            short = ""
            if lay_mem is not None:
                lay, mem = lay_mem
                short = (f"; the closest ({lay.name}) lacks "
                         f"{(mem.total - mem.capacity * (1 - opts.headroom)) / 2**30:.1f} GiB per GPU")
            print(f"error: no layout of {m.name} fits on {n} x {hw.name}{short}; see the "
                  "suggestions above", file=sys.stderr)
            return 1
        return 0

    _run(body)


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="Config: planner YAML (see examples/), Megatron-LM "
                                                "script or argument file, NeMo YAML, DeepSpeed "
                                                "ds_config.json or torchtitan TOML.")],
    model: Annotated[Optional[str], typer.Option("--model", help="Preset, alias, model YAML or HF config.json; replaces the file's model (needed when it has none).")] = None,
    hardware: HardwareOpt = None,
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    json_out: JsonOpt = False,
    headroom: HeadroomOpt = 0.05,
    tokens: TokensOpt = None,
) -> None:
    """Check a config rule by rule (ours and its framework's) and estimate its memory."""

    def body() -> int:
        from planner.importers import load_any
        from planner.validate import validate as run_validate
        from planner import report

        imported = load_any(config, model=model, hardware=hardware, gpus=gpus, nodes=nodes)
        from planner.serve.importer import SERVE_FORMATS
        if imported.format in SERVE_FORMATS:
            if tokens is not None:
                raise SpecError(f"--tokens = {tokens!r}: training tokens mean nothing for a "
                                "serving config; remove --tokens")
            if headroom != 0.05:
                raise SpecError(f"--headroom = {headroom}: a serving engine sizes its memory "
                                "with serving.memory_fraction; set that instead of --headroom")
            return _validate_serve(imported, config, json_out)
        result = run_validate(imported.job, imported.layout, headroom=_headroom(headroom),
                              tokens=_tokens(tokens), extra=imported.violations)
        if json_out:
            out = report.validation_json(result)
            out["format"] = imported.format
            print(json.dumps(out, indent=2))
        else:
            _console().print(report.validation_view(result,
                                                    source=f"{imported.format}: {config}"))
        return 0 if result.valid else 1

    _run(body)


def _serve_console():
    """The console of the serving views: COLUMNS when set (they are laid out for 80), else
    the terminal's width, else 100."""
    import os
    from rich.console import Console
    console = Console(highlight=False, soft_wrap=False)
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return Console(highlight=False, soft_wrap=False, width=int(cols))
    if not console.is_terminal:
        return Console(highlight=False, soft_wrap=False, width=100)
    return console


def _validate_serve(imported, config: Path, json_out: bool) -> int:
    """`validate` of a serving deployment (a serving YAML or an engine's launch command)."""
    from planner.serve import report as serve_report
    from planner.serve.validate import caveats, validate as serve_validate

    result = serve_validate(imported.job, imported.layout, extra=imported.violations)
    notes = caveats(imported.job, imported.layout)
    if json_out:
        out = serve_report.validation_json(result, caveats=notes)
        out["format"] = imported.format
        print(json.dumps(out, indent=2))
    else:
        _serve_console().print(serve_report.validation_view(
            result, source=f"{imported.format}: {config}", caveats=notes))
    return 0 if result.valid else 1


def _positive(flag: str, value, *, whole: bool = True):
    if value is not None and (value <= 0 or (whole and int(value) != value)):
        kind = "a positive whole number" if whole else "a positive number"
        raise SpecError(f"{flag} = {value}: must be {kind}")
    return value


@app.command()
def serve(
    model: Annotated[str, typer.Option("--model", help="Preset, alias, model YAML or HF config.json.")],
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    hardware: HardwareOpt = None,
    isl: Annotated[int, typer.Option("--isl", help="Prompt tokens per request.")] = 2048,
    osl: Annotated[int, typer.Option("--osl", help="Generated tokens per request.")] = 512,
    ttft_ms: Annotated[Optional[float], typer.Option("--ttft-ms", help="SLO: time to first token, ms.")] = None,
    tpot_ms: Annotated[Optional[float], typer.Option("--tpot-ms", help="SLO: time per output token, ms.")] = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help="bf16 | fp8 | fp4 (default fp8 where the GPU has FP8).")] = None,
    kv_cache_dtype: Annotated[Optional[str], typer.Option("--kv-cache-dtype", help="bf16 | fp8 (default fp8 with fp8/fp4 weights).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="vllm | sglang | trtllm.")] = "vllm",
    top: Annotated[int, typer.Option("--top", help="How many deployments to list.")] = 10,
    max_tp: Annotated[Optional[int], typer.Option("--max-tp", help="Largest TP degree tried (default: the NVLink domain).")] = None,
    no_disagg: Annotated[bool, typer.Option("--no-disagg", help="Leave prefill/decode disaggregation out of the search.")] = False,
    export_format: Annotated[Optional[str], typer.Option("--export", help="Also print the top deployment's launch commands: vllm | sglang | trtllm.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Plan an inference deployment: parallelism, replicas, P/D split, within the SLOs."""

    def body() -> int:
        from planner.config import resolve_hardware
        from planner.presets import resolve_model
        from planner.serve import report as serve_report
        from planner.serve.search import ServeOptions, search
        from planner.serve.specs import ENGINES, ServeJob, ServingSpec
        from planner.specs import parse_spec

        hw = resolve_hardware(hardware or "h100-sxm")
        n = _world(gpus, nodes, hw)
        if n is None:
            raise SpecError("the GPU count is missing; give --gpus N or --nodes N")
        for flag, value in (("--isl", isl), ("--osl", osl), ("--top", top), ("--max-tp", max_tp)):
            _positive(flag, value)
        for flag, value in (("--ttft-ms", ttft_ms), ("--tpot-ms", tpot_ms)):
            _positive(flag, value, whole=False)
        if precision is not None and precision not in ("bf16", "fp8", "fp4"):
            raise SpecError(f"--precision = {precision!r}: must be bf16, fp8 or fp4")
        if kv_cache_dtype is not None and kv_cache_dtype not in ("bf16", "fp8"):
            raise SpecError(f"--kv-cache-dtype = {kv_cache_dtype!r}: must be bf16 or fp8")
        if engine not in ENGINES:
            raise SpecError(f"--engine = {engine!r}: must be {', '.join(ENGINES)}")
        fmt = None
        if export_format is not None:
            from planner.serve.export import check_engine
            fmt = check_engine(export_format)
        chosen = []
        prec = precision
        if prec is None:
            prec = "fp8" if hw.peak_tflops.fp8 is not None else "bf16"
            chosen.append("precision")
        sv = parse_spec(ServingSpec, dict(precision=prec, kv_cache_dtype=kv_cache_dtype,
                                          input_length=isl, output_length=osl,
                                          engine=fmt or engine), where="serving")
        job = ServeJob(model=resolve_model(model), hardware=hw, num_gpus=n, serving=sv)
        opts = ServeOptions(top=top, ttft_s=ttft_ms / 1e3 if ttft_ms else None,
                            tpot_s=tpot_ms / 1e3 if tpot_ms else None, max_tp=max_tp,
                            disaggregated=not no_disagg)
        result = search(job, opts)
        text = None
        if fmt and result.plans:
            from planner.serve.export import export as serve_export
            best = result.plans[0]
            text = serve_export(job, best.layout, fmt, estimate=best.estimate)
        if json_out:
            out = serve_report.plan_json(result)
            out["chosen_by_planner"] = chosen
            if text is not None:
                out["export"] = {"format": fmt, "text": text}
            print(json.dumps(out, indent=2))
        else:
            if chosen:
                print(f"precision {prec} (chosen by planner: {hw.name} "
                      f"{'has' if prec == 'fp8' else 'has no'} FP8 tensor cores; --precision "
                      "to pin)")
            _serve_console().print(serve_report.plan_view(result))
            if text is not None:
                print(text, end="")
        if not result.plans:
            c = result.closest
            if c is None:
                print(f"error: no instance of {job.model.name} fits on {n} x {hw.name} with "
                      f"requests of {isl + osl:,} tokens; add GPUs, use fp8/fp4 or shorter "
                      "requests", file=sys.stderr)
            else:
                e = c.estimate
                print(f"error: no deployment of {job.model.name} on {n} x {hw.name} meets the "
                      f"SLOs; the closest ({c.layout.name} at {e.concurrency} requests) has "
                      f"TTFT {e.ttft_s * 1e3:,.0f} ms and TPOT {e.tpot_s * 1e3:.1f} ms; relax "
                      "--ttft-ms/--tpot-ms or add GPUs", file=sys.stderr)
            return 1
        return 0

    _run(body)


@app.command()
def models(json_out: JsonOpt = False) -> None:
    """List the preset models with their parameter counts."""

    def body() -> int:
        from planner import report
        from planner.cost.params import active_params, total_params
        from planner.presets import ALIASES, PRESETS, PUBLISHED_PARAMS, get_preset

        rows = []
        for key in PRESETS:
            m = get_preset(key)
            rows.append(dict(name=key, aliases=[a for a, k in ALIASES.items() if k == key],
                             parameters=total_params(m), active_parameters=active_params(m),
                             published_parameters=PUBLISHED_PARAMS.get(key),
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

        from planner.tune import fill_auto

        name = check_format(fmt)
        job, layout = load_config(config)
        layout = fill_auto(job, layout)
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


def main(argv: list[str] | None = None) -> None:
    """Entry point: typer's own usage errors (unknown option, missing or malformed value) also
    become one `error:` line and exit 2, like every other bad input."""
    try:
        code = app(args=argv, standalone_mode=False)
    except typer.Abort:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:   # typer's (vendored click's) usage errors
        if not hasattr(exc, "format_message") or not hasattr(exc, "exit_code"):
            raise
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            sys.exit(2)
        cmd = ctx.command_path if ctx is not None else "planner"
        print(f"error: {exc.format_message().rstrip('.')}; see '{cmd} --help'", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
