"""The command line: the only typer module, and the one place errors become exit codes.

Exit codes: 0 success; 1 a rule is broken or nothing fits (InfeasibleError); 2 unusable input
(SpecError, and typer's own usage errors); 3 an internal error (a bug: please report it).
"""

from __future__ import annotations

import errno
import gc
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

from planner.errors import InternalError, PlannerError, SpecError, clip, short

if TYPE_CHECKING:  # the aliases' types; `_option_aliases` adds typer's metadata at run time
    import typer

    JsonOpt = bool
    HeadroomOpt = float
    TokensOpt = HardwareOpt = ShowOpt = Optional[str]
    GpusOpt = NodesOpt = Optional[int]
    HtmlOpt = Optional[Path]

# The typer app is built on first use (`app`, `main`), not at import: typer and the building
# cost ~50 ms of CPU that `planner --version` does not need, and each command imports only
# what it uses. The commands' annotations are strings (`from __future__ import annotations`)
# that typer evaluates in this module's namespace when it builds the app: `_build_app` puts
# `typer` and the option aliases below there first.


def _option_aliases(typer) -> dict[str, Any]:
    """The options several commands share (their annotations name them)."""
    return dict(
        JsonOpt=Annotated[bool, typer.Option("--json", help="Print one JSON object (see README).")],
        HeadroomOpt=Annotated[
            float, typer.Option("--headroom", help="Fraction of GPU memory kept free.")
        ],
        TokensOpt=Annotated[
            str | None,
            typer.Option("--tokens", help="Training tokens (e.g. 15T) for time-to-train."),
        ],
        HardwareOpt=Annotated[
            str | None,
            typer.Option(
                "--hardware", help="Hardware profile name or YAML path (default h100-sxm)."
            ),
        ],
        GpusOpt=Annotated[int | None, typer.Option("--gpus", help="Total GPUs.")],
        NodesOpt=Annotated[
            int | None,
            typer.Option(
                "--nodes", help="Nodes (x the profile's GPUs per node), instead of --gpus."
            ),
        ],
        ShowOpt=Annotated[
            str | None,
            typer.Option(
                "--show",
                help="Draw pictures in the terminal: schedule, memory, time, grid (plan: also scatter), comma-separated, or all.",
            ),
        ],
        HtmlOpt=Annotated[
            Path | None,
            typer.Option(
                "--html",
                help="Also write a self-contained HTML report (pictures and numbers) to this file.",
            ),
        ],
    )


def _console(*, serve: bool = False):
    """A console by the one policy (planner.views.console); `serve` for the serving views."""
    from planner.views.console import SERVE_PIPE_WIDTH, make_console

    return make_console(pipe_width=SERVE_PIPE_WIDTH) if serve else make_console()


def _run(fn: Callable[[], int], *, json_mode: bool = False) -> None:
    """Run a command body; map every error to one stderr line and an exit code.

    Every command calls its body through here, saying whether it prints JSON (`json_mode`):
    then every exit prints exactly one JSON object on stdout; the body prints its own result
    (exit 0 or 1), this prints `{"error": {"code", "field", "value", "message"}}` for 2 and 3.
    Output that cannot be written ends quietly: a closed pipe (`| head`) with 141, as a
    process that SIGPIPE ends; a full disk with one line and 2.
    """
    import typer

    try:
        code = fn()
        sys.stdout.flush()
    except PlannerError as exc:
        _fail(exc, json_mode)
        raise typer.Exit(exc.exit_code) from None
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            raise typer.Exit(_internal(exc, json_mode)) from None
        raise typer.Exit(_output_failed(exc)) from None
    except RecursionError:  # the reading limits stop deep input first; this is the backstop
        _fail(
            SpecError("the input nests too deeply to read (RecursionError); flatten it"), json_mode
        )
        raise typer.Exit(2) from None
    except MemoryError:  # likewise: input that grows (a script's A=$A$A) past memory
        _fail(
            SpecError(
                "reading the input ran out of memory (MemoryError); a value grows "
                "without bound: simplify the input"
            ),
            json_mode,
        )
        raise typer.Exit(2) from None
    except Exception as exc:  # a bug: one line, never a traceback
        raise typer.Exit(_internal(exc, json_mode)) from None
    raise typer.Exit(code)


_OUTPUT_ERRNOS = {
    errno.EPIPE,
    errno.ENOSPC,
    errno.EIO,
    errno.EFBIG,
    getattr(errno, "EDQUOT", errno.ENOSPC),
}
MAX_TOP = 1000  # --top: more rows than anyone reads, and bounded search time
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`


def _fail(exc: PlannerError, json_mode: bool) -> None:
    """The one stderr line, and with --json the error object on stdout."""
    print(f"error: {exc.message}", file=sys.stderr)
    if json_mode:
        try:
            print(json.dumps({"error": exc.as_json()}, indent=2))
            sys.stdout.flush()
        except OSError as out:
            _output_failed(out)


def _internal(exc: BaseException, json_mode: bool) -> int:
    err = InternalError(
        f"internal error (a bug in planner, please report it): "
        f"{exc.__class__.__name__}: {clip(str(exc), 300)}"
    )
    print(err.message, file=sys.stderr)
    if json_mode:
        try:
            print(json.dumps({"error": err.as_json()}, indent=2))
            sys.stdout.flush()
        except OSError:
            pass
    return 3


def _output_failed(exc: OSError) -> int:
    """stdout cannot take the output: a reader that closed the pipe ends us quietly (141);
    anything else (a full disk) is one line and exit 2. stdout then points at /dev/null so
    the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests' captured stdout)
        pass
    if exc.errno == errno.EPIPE:
        return EXIT_BROKEN_PIPE
    print(
        f"error: cannot write the output ({exc.strerror or exc.__class__.__name__}); free "
        "space or write it elsewhere",
        file=sys.stderr,
    )
    return 2


def _headroom(value: float) -> float:
    if not 0 <= value < 1:
        raise SpecError(f"--headroom = {value}: must be a fraction in [0, 1), e.g. 0.1")
    return value


MIN_PLAIN_TOKENS = 1e6
"""A --tokens count without a unit below this is almost surely a missing unit (15 for 15T)."""


def _tokens(value: str | None) -> float | None:
    if value is None:
        return None
    from planner.units import parse_count

    try:
        n = parse_count(value)
    except ValueError as exc:
        raise SpecError(
            f"--tokens = {short(value)}: {exc}", field="--tokens", value=value
        ) from None
    if value.strip()[-1:].isdigit() and n < MIN_PLAIN_TOKENS:
        raise SpecError(
            f"--tokens = {short(value)} reads as {n:,.0f} tokens; give a unit "
            f"(e.g. {value.strip()}T for {value.strip()} trillion, or {value.strip()}B) "
            "or a count of at least 1e6",
            field="--tokens",
            value=value,
        )
    return n


SORT_KEYS = ("time", "memory", "mfu")
TRAIN_PRECISIONS = ("bf16", "fp16", "fp8")
SERVE_PRECISIONS = ("bf16", "fp8", "fp4")
KV_CACHE_DTYPES = ("bf16", "fp8")
SERVE_OBJECTIVES = ("interactive", "throughput")


# The choices and ranges of options are checked here, not by typer (Literal / min= / max=):
# typer's messages (`Invalid value for '--top': Input should be greater than or equal to 1`)
# name neither the value given nor a fix, so the --json error object would lose its `value`;
# and a half-open range ([0, 1) for --headroom) or a bound that depends on another option
# (--nodes on the profile's GPUs per node) it cannot say at all.


def _choice(flag: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise SpecError(f"{flag} = {short(value)}: must be {_or(choices)}", field=flag, value=value)


def _or(words: tuple[str, ...]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _positive(flag: str, value, *, whole: bool = True) -> None:
    if value is not None and (value <= 0 or (whole and int(value) != value)):
        kind = "a positive whole number" if whole else "a positive number"
        raise SpecError(f"{flag} = {short(value)}: must be {kind}", field=flag, value=value)


def _count(flag: str, value: int | None, most: int) -> None:
    if value is not None and not 1 <= value <= most:
        raise SpecError(
            f"{flag} = {short(value)}: must be a whole number from 1 to {most:,} "
            "(limit: GPUs, as for num_gpus)",
            field=flag,
            value=value,
        )


def _show(value: str | None, *, allowed: tuple[str, ...], json_out: bool) -> list[str]:
    """--show a,b,c -> the pictures in that order; 'all' for every one allowed."""
    if value is None:
        return []
    if json_out:
        raise SpecError(
            "--show draws pictures in the terminal and --json prints only JSON; "
            "drop one of them (--html writes the pictures to a file with either)"
        )
    names = [x.strip() for x in value.split(",") if x.strip()]
    if names == ["all"]:
        return list(allowed)
    from planner.views.pictures import SHOWABLE

    for name in names:
        if name not in allowed:
            where = (
                " (scatter is for planner plan: it draws the searched layouts)"
                if name in SHOWABLE
                else ""
            )
            raise SpecError(
                f"--show {short(name)} is not a picture here{where}; choose from "
                f"{', '.join(allowed)} or all"
            )
    if not names:
        raise SpecError(
            f"--show = {short(value)}: name at least one of {', '.join(allowed)} or all"
        )
    return list(dict.fromkeys(names))


def _write_html(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(
            f"--html {short(str(path))} cannot be written ({exc.__class__.__name__}); "
            "check the path"
        ) from None
    print(f"wrote {path}", file=sys.stderr)


def _world(gpus: int | None, nodes: int | None, hardware) -> int | None:
    """--gpus, or --nodes x gpus_per_node; both given must agree; capped like num_gpus."""
    from planner.specs import MAX_GPUS

    _count("--gpus", gpus, MAX_GPUS)
    _count("--nodes", nodes, MAX_GPUS // hardware.gpus_per_node)
    if nodes is None:
        return gpus
    n = nodes * hardware.gpus_per_node
    if gpus is not None and gpus != n:
        raise SpecError(
            f"--gpus ({gpus}) and --nodes ({nodes}) x {hardware.gpus_per_node} GPUs "
            f"per node ({n}) disagree; give one of them"
        )
    return n


def _cluster(hardware: str | None, gpus: int | None, nodes: int | None):
    """(the hardware profile, the GPU count) of a search command (plan, serve): the profile
    named or h100-sxm, and --gpus or --nodes, one of which is required."""
    from planner.config import resolve_hardware

    hw = resolve_hardware(hardware or "h100-sxm")
    n = _world(gpus, nodes, hw)
    if n is None:
        raise SpecError("the GPU count is missing; give --gpus N or --nodes N")
    return hw, n


def _plan_framework(framework: str | None, fmt: str | None) -> str | None:
    """--framework, or the --export format (it implies it); both must agree."""
    from planner.frameworks.runnable import check_framework

    fw = None if framework is None else check_framework(framework)
    if fw is not None and fmt is not None and fw != fmt:
        raise SpecError(
            f"--framework {fw} with --export {fmt}: the export implies its "
            f"framework; drop --framework or give --export {fw}",
            field="--framework",
            value=framework,
        )
    return fw if fw is not None else fmt


def _export_best(job, result, fmt):
    """(text, None) for the top plan in `fmt`, or (None, the refusal): a refusal goes into
    the result (JSON `"export": {"refused": ...}`), it does not replace it."""
    if fmt is None:
        return None, None
    if not result.plans:
        return None, SpecError("no layout fits, so there is no plan to export")
    from planner.cost import Estimate
    from planner.frameworks.export import export as run_export

    best = result.best
    try:
        return run_export(
            job, best.layout, fmt, estimate=Estimate(memory=best.memory, time=best.time)
        ), None
    except PlannerError as exc:
        return None, exc


def _version(value: bool) -> None:
    if value:
        import typer

        from planner import __version__

        print(f"planner {__version__}")
        raise typer.Exit(0)


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Plan and check how to split a large model across a GPU cluster."""


def plan(
    model: Annotated[
        str,
        typer.Option(
            "--model", help="Preset, alias, model YAML, HF config.json or a folder with one."
        ),
    ],
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    hardware: HardwareOpt = None,
    seq_length: Annotated[
        int | None, typer.Option("--seq-length", help="Tokens per sequence (default: the model's).")
    ] = None,
    global_batch_size: Annotated[
        int | None,
        typer.Option(
            "--global-batch-size",
            help="Sequences per step (default: as published recipes at this scale, >= ~4M tokens).",
        ),
    ] = None,
    precision: Annotated[str, typer.Option("--precision", help="bf16 | fp16 | fp8.")] = "bf16",
    top: Annotated[int, typer.Option("--top", help="How many layouts to list.")] = 10,
    sort_by: Annotated[str, typer.Option("--sort-by", help="time | memory | mfu.")] = "time",
    fix: Annotated[
        str | None, typer.Option("--fix", help="Pin axes, e.g. tp=8,pp=4,recompute=full.")
    ] = None,
    max_tp: Annotated[
        int | None,
        typer.Option("--max-tp", help="Largest TP degree tried (default: the NVLink domain)."),
    ] = None,
    headroom: HeadroomOpt = 0.05,
    tokens: TokensOpt = None,
    export_format: Annotated[
        str | None,
        typer.Option(
            "--export",
            help="Also print the top plan as megatron|megatron-bridge|deepspeed|torchtitan|nemo (implies --framework).",
        ),
    ] = None,
    framework: Annotated[
        str | None,
        typer.Option(
            "--framework",
            help="Keep only what this framework runs: megatron|megatron-bridge|nemo|deepspeed|torchtitan.",
        ),
    ] = None,
    json_out: JsonOpt = False,
    show: ShowOpt = None,
    html: HtmlOpt = None,
) -> None:
    """Search every layout and rank the ones that fit, with the seven-step reasoning."""

    def body() -> int:
        from planner.config import Job, default_training
        from planner.presets import resolve_model
        from planner.search import SearchOptions, parse_fix, search

        hw, n = _cluster(hardware, gpus, nodes)
        if not 1 <= top <= MAX_TOP:
            raise SpecError(
                f"--top = {short(top)}: must be from 1 to {MAX_TOP:,}", field="--top", value=top
            )
        for flag, value in (
            ("--seq-length", seq_length),
            ("--global-batch-size", global_batch_size),
        ):
            _positive(flag, value)
        _choice("--sort-by", sort_by, SORT_KEYS)
        _choice("--precision", precision, TRAIN_PRECISIONS)
        _positive("--max-tp", max_tp)
        fmt = None
        if export_format is not None:
            from planner.frameworks.export import check_format

            fmt = check_format(export_format, option="--export")
        fw = _plan_framework(framework, fmt)
        m = resolve_model(model)
        job = Job(
            model=m,
            hardware=hw,
            num_gpus=n,
            training=default_training(
                m,
                seq_length=seq_length,
                global_batch_size=global_batch_size,
                precision=precision,
                num_gpus=n,
            ),
        )
        from planner.rules import Context, precision_supported

        unsupported = precision_supported(
            Context(model=m, hardware=hw, training=job.training, num_gpus=n, layout=None)
        )
        if unsupported:
            raise SpecError(f"--precision {precision}: {unsupported}")
        wanted = []
        if show is not None:  # the pictures module only when they are asked for
            from planner.views.pictures import SHOWABLE

            wanted = _show(show, allowed=SHOWABLE, json_out=json_out)
        from dataclasses import replace

        from planner.errors import InfeasibleError
        from planner.frameworks import runnable

        cannot = None
        if fw is not None:
            if why := runnable.model_refusal(job, fw):
                if fmt is None:
                    raise InfeasibleError(why)
                # --export F: the plans as without it, the refusal in the result (one line)
                cannot, fw = InfeasibleError(why), None
            else:
                job = runnable.job_for(job, fw)
        opts = SearchOptions(
            top=top,
            sort_by=sort_by,
            fix=parse_fix(fix),
            max_tp=max_tp,
            headroom=_headroom(headroom),
            tokens=_tokens(tokens),
            runs_as=None if fw is None else runnable.allow(fw),
        )
        result = search(job, opts)
        result.plans = [
            replace(p, frameworks=tuple(runnable.runnable(job, p.layout))) for p in result.plans
        ]
        result.framework = fw
        if global_batch_size is None:
            from planner.config import default_batch

            tr = job.training
            result.batch_note = (
                f"global batch {tr.global_batch_size:,} x {tr.seq_length:,} = "
                f"{tr.global_batch_size * tr.seq_length / 1e6:.1f}M tokens "
                "per step, the default: "
                f"{default_batch(m, tr.seq_length, n)[1]}; "
                "--global-batch-size sets it"
            )
        text, refused = (None, cannot) if cannot else _export_best(job, result, fmt)
        if json_out:
            from planner.views.shapes import plan_json

            out = plan_json(result)
            if result.batch_note:
                out["default_batch"] = result.batch_note
            if fmt is not None:
                out["export"] = (
                    {"format": fmt, "text": text}
                    if refused is None
                    else {"format": fmt, "refused": refused.message}
                )
            print(json.dumps(out, indent=2))
        else:
            from planner.views import report

            console = _console()
            console.print(report.plan_view(result))
            if wanted:
                console.print(
                    report.plan_pictures_view(result, _plan_pictures(result, opts, wanted))
                )
            if text is not None:
                print(text)
        if html is not None:
            _write_html(html, _plan_html(result, opts))
        if not result.plans:
            print(
                f"error: no layout of {m.name} fits on {n} x {hw.name}"
                + (f" ({result.binding.split('; ')[0]})" if result.binding else "")
                + "; see the suggestions above",
                file=sys.stderr,
            )
            return 1
        if refused is not None:
            print(f"error: --export {fmt}: {refused.message}", file=sys.stderr)
            return refused.exit_code
        return 0

    _run(body, json_mode=json_out)


def validate(
    config: Annotated[
        Path,
        typer.Argument(
            help="Config: planner YAML (see examples/), Megatron-LM "
            "script or argument file, NeMo YAML, DeepSpeed "
            "ds_config.json or torchtitan TOML."
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Preset, alias, model YAML, HF config.json or a folder with one; replaces the file's model (needed when it has none).",
        ),
    ] = None,
    hardware: HardwareOpt = None,
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    json_out: JsonOpt = False,
    headroom: HeadroomOpt = 0.05,
    tokens: TokensOpt = None,
    show: ShowOpt = None,
    html: HtmlOpt = None,
    set_values: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="NAME=VALUE: a value a launch script takes from the environment, or from $1, $2 ... (NAME 1, 2 ...); repeatable.",
        ),
    ] = None,
    vocab_size: Annotated[
        int | None,
        typer.Option(
            "--vocab-size",
            help="The model's vocabulary size, where the file's tokenizer is unknown (replaces the one it implies).",
        ),
    ] = None,
    isl: Annotated[
        int | None,
        typer.Option(
            "--isl",
            help="Serving: prompt tokens per request (a launch command does not say it; replaces its '# planner serve:' isl).",
        ),
    ] = None,
    osl: Annotated[
        int | None,
        typer.Option(
            "--osl",
            help="Serving: generated tokens per request (replaces the '# planner serve:' osl).",
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            "--concurrency",
            help="Serving: requests in flight per engine instance, or max (default: max, what the KV cache holds).",
        ),
    ] = None,
    acceptance_rate: Annotated[
        float | None,
        typer.Option(
            "--acceptance-rate",
            help="Serving: the measured acceptance rate of a command's speculative decoding (MTP, EAGLE, draft model).",
        ),
    ] = None,
    global_batch_size: Annotated[
        int | None,
        typer.Option(
            "--global-batch-size",
            help="Sequences per step, for a DeepSpeed ds_config's \"auto\" train_batch_size (the Hugging Face Trainer's value).",
        ),
    ] = None,
    micro_batch_size: Annotated[
        int | None,
        typer.Option(
            "--micro-batch-size",
            help="Sequences per GPU per micro-step, for a ds_config's \"auto\" train_micro_batch_size_per_gpu (the Trainer's per_device_train_batch_size).",
        ),
    ] = None,
) -> None:
    """Check a config rule by rule (ours and its framework's) and estimate its memory."""

    def body() -> int:
        from planner.frameworks import load_any
        from planner.frameworks.common import parse_set
        from planner.validate import validate as run_validate

        wanted = _show(show, allowed=("schedule", "memory", "time", "grid"), json_out=json_out)
        sets = tuple(parse_set(s) for s in set_values or ())
        workload = tuple(
            (flag, str(value))
            for flag, value in (
                ("--isl", isl),
                ("--osl", osl),
                ("--concurrency", concurrency),
                ("--acceptance-rate", acceptance_rate),
            )
            if value is not None
        )
        imported = load_any(
            config,
            model=model,
            hardware=hardware,
            gpus=gpus,
            nodes=nodes,
            sets=sets,
            vocab_size=vocab_size,
            workload=workload,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
        )
        from planner.frameworks.engines.reader import SERVE_FORMATS

        if imported.format in SERVE_FORMATS:
            if tokens is not None:
                raise SpecError(
                    f"--tokens = {short(tokens)}: training tokens mean nothing for a "
                    "serving config; remove --tokens",
                    field="--tokens",
                    value=tokens,
                )
            if headroom != 0.05:
                raise SpecError(
                    f"--headroom = {headroom}: a serving engine sizes its memory "
                    "with serving.memory_fraction; set that instead of --headroom",
                    field="--headroom",
                    value=headroom,
                )
            if wanted or html is not None:
                raise SpecError(
                    "--show and --html draw training layouts; a serving config has "
                    "its own views: remove them",
                    field="--show",
                    value=show,
                )
            return _validate_serve(imported, config, json_out)
        room = _headroom(headroom)
        result = run_validate(
            imported.job,
            imported.layout,
            headroom=room,
            tokens=_tokens(tokens),
            extra=imported.violations,
        )
        source = f"{imported.format}: {config}"
        if json_out:
            from planner.views.shapes import validation_json

            out = validation_json(result)
            out["format"] = imported.format
            print(json.dumps(out, indent=2))
        else:
            from planner.views import report

            console = _console()
            console.print(report.validation_view(result, source=source))
            if wanted and result.estimate is None:
                console.print(f"No pictures: {report.no_estimate_reason(result)}.", style="dim")
            elif wanted:
                console.print(report.pictures_view(_layout_pictures(result, wanted, room)))
        if html is not None:
            from planner.caveats import caveats
            from planner.views.html import validation_html

            figs = _layout_pictures(result, ["schedule", "memory", "time", "grid"], room)
            _write_html(
                html,
                validation_html(
                    result, figs, source=source, caveats=caveats(result.job, result.layout)
                ),
            )
        return 0 if result.valid else 1

    _run(body, json_mode=json_out)


HTML_PLANS = 3
"""Plans of the top K whose pictures the HTML report draws (the table lists all K): the
schedules of big jobs run to thousands of blocks each."""

CLOUD = 200
"""Feasible layouts drawn in the step-time-vs-memory picture (the fastest, from a second,
wider search)."""


def _plan_pictures(result, opts, wanted: list[str]) -> dict:
    """The best plan's pictures, and the scatter of the fastest feasible layouts."""
    from planner.views.pictures import layout_pictures, scatter_picture

    if not result.plans:
        return {}
    out = layout_pictures(
        result.job,
        result.best.layout,
        headroom=opts.headroom,
        show=[w for w in wanted if w != "scatter"],
    )
    if "scatter" in wanted:
        out["scatter"] = scatter_picture(result, _cloud(result, opts), order=_ORDER[opts.sort_by])
    return {name: out[name] for name in wanted if name in out}


_ORDER = {"time": "fastest", "mfu": "fastest", "memory": "smallest-memory"}


def _cloud(result, opts) -> list:
    from dataclasses import replace

    from planner.search import search

    if opts.top >= CLOUD:
        return list(result.plans)
    return search(result.job, replace(opts, top=CLOUD)).plans


def _plan_html(result, opts) -> str:
    from planner.caveats import caveats
    from planner.views.html import plan_html
    from planner.views.pictures import layout_pictures, scatter_picture

    per_plan = [
        layout_pictures(
            result.job,
            p.layout,
            headroom=opts.headroom,
            show=["schedule", "memory", "time", "grid"],
        )
        for p in result.plans[:HTML_PLANS]
    ]
    scatter = (
        scatter_picture(result, _cloud(result, opts), order=_ORDER[opts.sort_by])
        if result.plans
        else None
    )
    return plan_html(
        result,
        scatter=scatter,
        per_plan=per_plan,
        caveats={p.rank: caveats(result.job, p.layout) for p in result.plans},
        job_caveats=caveats(result.job, None),
    )


def _layout_pictures(result, wanted: list[str], headroom: float) -> dict:
    """Pictures of a validated layout; none when it has no estimate (it does not tile)."""
    if result.estimate is None or not wanted:
        return {}
    from planner.views.pictures import layout_pictures

    return layout_pictures(result.job, result.layout, show=wanted, headroom=headroom)


def compare(
    configs: Annotated[
        list[Path], typer.Argument(help="Two or more configs, in any format validate reads.")
    ],
    json_out: JsonOpt = False,
    headroom: HeadroomOpt = 0.05,
    html: HtmlOpt = None,
) -> None:
    """Show two or more configs side by side: layout, memory, time, throughput; what differs."""

    def body() -> int:
        from planner.frameworks import load_any
        from planner.validate import validate as run_validate
        from planner.views import shapes

        if len(configs) < 2:
            raise SpecError(
                f"compare needs two or more configs, got {len(configs)}; "
                "use planner validate for one"
            )
        room = _headroom(headroom)
        results, formats = [], []
        for path in configs:
            imported = load_any(path)
            results.append(
                run_validate(
                    imported.job, imported.layout, headroom=room, extra=imported.violations
                )
            )
            formats.append(imported.format)
        names = _short_names(configs)
        if json_out:
            print(json.dumps(shapes.compare_json(results, names, formats), indent=2))
        else:
            from planner.views import report

            _console().print(report.compare_view(results, names))
        if html is not None:
            from planner.views.html import compare_html

            _write_html(html, compare_html(shapes.compare_rows(results), names))
        return 0 if all(r.valid for r in results) else 1

    _run(body)


def _short_names(paths: list[Path]) -> list[str]:
    """File names, or the paths where two files share a name."""
    names = [p.name for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def _validate_serve(imported, config: Path, json_out: bool) -> int:
    """`validate` of a serving deployment (a serving YAML or an engine's launch command)."""
    from planner.serve.validate import caveats
    from planner.serve.validate import validate as serve_validate

    result = serve_validate(imported.job, imported.layout, extra=imported.violations)
    notes = list(getattr(imported, "notes", [])) + caveats(imported.job, imported.layout)
    if json_out:
        from planner.views.serve_shapes import validation_json

        out = validation_json(result, caveats=notes)
        out["format"] = imported.format
        print(json.dumps(out, indent=2))
    else:
        from planner.views import serve_report

        _console(serve=True).print(
            serve_report.validation_view(
                result, source=f"{imported.format}: {config}", caveats=notes
            )
        )
    return 0 if result.valid else 1


def serve(
    model: Annotated[
        str, typer.Option("--model", help="Preset, alias, model YAML or HF config.json.")
    ],
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    hardware: HardwareOpt = None,
    isl: Annotated[int, typer.Option("--isl", help="Prompt tokens per request.")] = 2048,
    osl: Annotated[int, typer.Option("--osl", help="Generated tokens per request.")] = 512,
    ttft_ms: Annotated[
        float | None, typer.Option("--ttft-ms", help="SLO: time to first token, ms.")
    ] = None,
    tpot_ms: Annotated[
        float | None, typer.Option("--tpot-ms", help="SLO: time per output token, ms.")
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option("--precision", help="bf16 | fp8 | fp4 (default fp8 where the GPU has FP8)."),
    ] = None,
    kv_cache_dtype: Annotated[
        str | None,
        typer.Option("--kv-cache-dtype", help="bf16 | fp8 (default fp8 with fp8/fp4 weights)."),
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help="vllm | sglang | trtllm.")] = "vllm",
    top: Annotated[int, typer.Option("--top", help="How many deployments to list.")] = 10,
    max_tp: Annotated[
        int | None,
        typer.Option("--max-tp", help="Largest TP degree tried (default: the NVLink domain)."),
    ] = None,
    no_disagg: Annotated[
        bool,
        typer.Option("--no-disagg", help="Leave prefill/decode disaggregation out of the search."),
    ] = False,
    export_format: Annotated[
        str | None,
        typer.Option(
            "--export",
            help="Also print the top deployment's launch commands: vllm | sglang | trtllm.",
        ),
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            help="Without --ttft-ms/--tpot-ms: interactive (TPOT <= 50 ms, TTFT <= 3 s) | throughput (no SLO).",
        ),
    ] = "interactive",
    json_out: JsonOpt = False,
) -> None:
    """Plan an inference deployment: parallelism, replicas, P/D split, within the SLOs."""

    def body() -> int:
        from planner.presets import resolve_model
        from planner.serve.search import ServeOptions, search
        from planner.serve.specs import ENGINES, ServeJob, ServingSpec
        from planner.specs import parse_spec

        hw, n = _cluster(hardware, gpus, nodes)
        for flag, value in (("--isl", isl), ("--osl", osl), ("--top", top), ("--max-tp", max_tp)):
            _positive(flag, value)
        for flag, value in (("--ttft-ms", ttft_ms), ("--tpot-ms", tpot_ms)):
            _positive(flag, value, whole=False)
        _choice("--precision", precision, SERVE_PRECISIONS)
        _choice("--kv-cache-dtype", kv_cache_dtype, KV_CACHE_DTYPES)
        _choice("--engine", engine, ENGINES)
        _choice("--objective", objective, SERVE_OBJECTIVES)
        fmt = None
        if export_format is not None:
            from planner.frameworks.engines.writer import check_engine

            fmt = check_engine(export_format)
        chosen = []
        prec = precision
        if prec is None:
            prec = "fp8" if hw.peak_tflops.fp8 is not None else "bf16"
            chosen.append("precision")
        sv = parse_spec(
            ServingSpec,
            dict(
                precision=prec,
                kv_cache_dtype=kv_cache_dtype,
                input_length=isl,
                output_length=osl,
                engine=fmt or engine,
            ),
            where="serving",
        )
        job = ServeJob(model=resolve_model(model), hardware=hw, num_gpus=n, serving=sv)
        from planner.frameworks.engines.writer import accepts
        from planner.serve.search import INTERACTIVE_TPOT_S, INTERACTIVE_TTFT_S

        ttft_s, tpot_s = (ttft_ms / 1e3 if ttft_ms else None, tpot_ms / 1e3 if tpot_ms else None)
        slo_note = None
        if ttft_s is None and tpot_s is None and objective == "interactive":
            ttft_s, tpot_s = INTERACTIVE_TTFT_S, INTERACTIVE_TPOT_S
            slo_note = (
                f"SLO: the default interactive target, TPOT <= {tpot_s * 1e3:.0f} ms "
                f"(>= {1 / tpot_s:.0f} output tokens/s per user) and TTFT <= "
                f"{ttft_s:.0f} s; --ttft-ms/--tpot-ms set your own, --objective "
                "throughput ranks without one"
            )
        opts = ServeOptions(
            top=top,
            ttft_s=ttft_s,
            tpot_s=tpot_s,
            max_tp=max_tp,
            disaggregated=not no_disagg,
            accepts=accepts,
        )
        result = search(job, opts)
        text = None
        if fmt and result.plans:
            from planner.frameworks.engines.writer import export as serve_export

            best = result.plans[0]
            text = serve_export(job, best.layout, fmt, estimate=best.estimate)
        if json_out:
            from planner.views.serve_shapes import plan_json

            out = plan_json(result)
            out["chosen_by_planner"] = chosen
            if slo_note:
                out["default_slo"] = {
                    "ttft_ms": ttft_s * 1e3,
                    "tpot_ms": tpot_s * 1e3,
                    "note": slo_note,
                }
            if text is not None:
                out["export"] = {"format": fmt, "text": text}
            print(json.dumps(out, indent=2))
        else:
            from planner.views import serve_report
            from planner.views.console import print_note

            con = _console(serve=True)  # the notes wrap at the table's width
            if chosen:
                print_note(
                    con,
                    f"precision {prec} (chosen by planner: {hw.name} "
                    f"{'has' if prec == 'fp8' else 'has no'} FP8 tensor cores; "
                    "--precision to pin)",
                )
            if slo_note:
                print_note(con, slo_note)
            con.print(serve_report.plan_view(result))
            if text is not None:
                print(text, end="")
        if not result.plans:
            c = result.closest
            if c is None:
                print(
                    f"error: no instance of {job.model.name} fits on {n} x {hw.name} with "
                    f"requests of {isl + osl:,} tokens; add GPUs, use fp8/fp4 or shorter "
                    "requests",
                    file=sys.stderr,
                )
            else:
                e = c.estimate
                print(
                    f"error: no deployment of {job.model.name} on {n} x {hw.name} meets the "
                    f"SLOs; the closest ({c.layout.name} at {e.concurrency} requests) has "
                    f"TTFT {e.ttft_s * 1e3:,.0f} ms and TPOT {e.tpot_s * 1e3:.1f} ms; relax "
                    "--ttft-ms/--tpot-ms"
                    + (" (or --objective throughput)" if slo_note else "")
                    + " or add GPUs",
                    file=sys.stderr,
                )
            return 1
        return 0

    _run(body, json_mode=json_out)


def models(json_out: JsonOpt = False) -> None:
    """List the preset models with their parameter counts."""

    def body() -> int:
        from planner.cost.params import active_params, total_params
        from planner.presets import (
            ALIASES,
            FAMILY_ALIASES,
            FAMILY_PRESETS,
            PRESETS,
            PUBLISHED_PARAMS,
            get_preset,
        )

        rows = []
        aliases = {**ALIASES, **FAMILY_ALIASES}
        for key in [*PRESETS, *FAMILY_PRESETS]:
            m = get_preset(key)
            rows.append(
                dict(
                    name=key,
                    aliases=[a for a, k in aliases.items() if k == key],
                    parameters=total_params(m),
                    active_parameters=active_params(m),
                    published_parameters=PUBLISHED_PARAMS.get(key),
                    num_layers=m.num_layers,
                    hidden_size=m.hidden_size,
                    num_attention_heads=m.num_attention_heads,
                    num_kv_heads=m.kv_heads,
                    num_experts=m.num_experts or 0,
                    moe_top_k=m.moe_top_k if m.is_moe else 0,
                    seq_length=m.seq_length,
                )
            )
        if json_out:
            print(json.dumps({"models": rows}, indent=2))
        else:
            from planner.views import report

            _console().print(report.models_view(rows))
        return 0

    _run(body, json_mode=json_out)


def hardware(json_out: JsonOpt = False) -> None:
    """List the hardware profiles."""

    def body() -> int:
        from planner.config import profile_names, resolve_hardware

        rows = [resolve_hardware(n).model_dump() for n in profile_names()]
        if json_out:
            print(json.dumps({"hardware": rows}, indent=2))
        else:
            from planner.views import report

            _console().print(report.hardware_view(rows))
        return 0

    _run(body, json_mode=json_out)


def export_cmd(
    config: Annotated[Path, typer.Argument(help="Config YAML (see examples/).")],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="megatron | deepspeed | torchtitan | nemo.")
    ],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
) -> None:
    """Write a config's layout as a framework's launch flags or config file."""

    def body() -> int:
        from planner.config import load_config
        from planner.cost import estimate
        from planner.frameworks.export import check_exportable, check_format, export, prepare
        from planner.rules import Context, fits_in_memory
        from planner.tune import fill_auto

        name = check_format(fmt)
        job, layout = load_config(config)
        layout = fill_auto(job, prepare(layout, name))
        check_exportable(job, layout)
        est = estimate(job, layout)
        text = export(job, layout, name, estimate=est)
        too_big = fits_in_memory(
            Context(
                model=job.model,
                hardware=job.hardware,
                training=job.training,
                num_gpus=job.num_gpus,
                layout=layout,
                memory=est.memory,
            )
        )
        if too_big:
            print(f"warning: {too_big}", file=sys.stderr)
        if output is None:
            sys.stdout.write(text)
        else:
            try:
                output.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise SpecError(
                    f"--output {short(str(output), 200)} cannot be written "
                    f"({exc.__class__.__name__}); check the path"
                ) from None
            print(f"wrote {output}", file=sys.stderr)
        return 0

    _run(body)


def calibrate_cmd(
    runs_file: Annotated[
        Path | None,
        typer.Argument(
            help="RUNS.yaml: runs: [{config: PATH, log: PATH, hardware: NAME}] (paths relative to it; hardware optional)."
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="One run's config (any format validate reads, training or serving), instead of RUNS.yaml.",
        ),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            help="That run's log: training (Megatron-LM, NeMo / Megatron-Bridge, torchtitan, DeepSpeed) or serving benchmark (vllm bench serve, sglang.bench_serving, trtllm-bench).",
        ),
    ] = None,
    hardware: HardwareOpt = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus",
            help="Total GPUs of the --config run, where the config does not say (torchtitan).",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write the fitted hardware profile YAML here (use it with --hardware)."
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="megatron | nemo | torchtitan | deepspeed | vllm | sglang | trtllm (default: detected from the lines).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Fit a hardware profile to your own runs (configs + their logs); see docs/calibration.md."""

    def body() -> int:
        from planner.calibration.logs import LOG_FORMATS
        from planner.calibration.runs import RunRef, calibrate, read_runs_file
        from planner.calibration.serve_logs import SERVE_LOG_FORMATS

        if out is None:
            raise SpecError(
                "--out is missing: give the file to write the profile to, e.g. "
                "--out my-cluster.yaml",
                field="--out",
            )
        if log_format is not None:
            _choice("--log-format", log_format, LOG_FORMATS + SERVE_LOG_FORMATS)
        if runs_file is not None and (config is not None or log is not None):
            raise SpecError("give RUNS.yaml or --config with --log, not both", field="--config")
        if runs_file is not None and gpus is not None:
            raise SpecError(
                "--gpus is for one --config run; in RUNS.yaml give each run's `gpus:`",
                field="--gpus",
                value=gpus,
            )
        _positive("--gpus", gpus)
        if runs_file is None:
            if config is None or log is None:
                raise SpecError(
                    "give RUNS.yaml, or one run as --config C --log L",
                    field="--log" if config is not None else "--config",
                )
            refs, source = [RunRef(config, log, None, gpus)], str(config)
        else:
            refs, source = read_runs_file(runs_file), str(runs_file)
        train, serving = _calibration_runs(refs, hardware, log_format)
        runs, logs, trefs = train
        base = (runs[0].job if runs else serving[0][0].job).hardware
        result = calibrate(runs, base) if runs else None
        sresult = None
        if serving:
            from planner.serve.calibrate import calibrate_serving

            sresult = calibrate_serving(
                [r for r, _, _, _ in serving], result.profile if result else base
            )
        text = _calibrated_profile(result, sresult, len(runs), len(serving), Path(source).name)
        try:
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SpecError(
                f"--out {short(str(out))} cannot be written "
                f"({exc.__class__.__name__}); check the path",
                field="--out",
            ) from None
        if json_out:
            data: dict[str, Any] = {"profile": str(out), "base": base.name}
            if result is not None:
                data.update(
                    {
                        "fitted": list(result.fitted),
                        "at_bound": result.at_bound,
                        "not_fitted": result.not_fitted,
                        "bandwidths": result.bandwidths,
                        "calibration": result.profile.calibration.model_dump(mode="json"),
                        "runs": [
                            {
                                "config": str(r.id),
                                "log": str(ref.log),
                                "format": s.format,
                                "measured_step_time_s": r.measured_s,
                                "steady_state": s.rule,
                                "error_before": b,
                                "error_after": a,
                            }
                            for r, ref, s, b, a in zip(
                                runs, trefs, logs, result.before, result.after
                            )
                        ],
                    }
                )
            if sresult is not None:
                data["serving"] = {
                    "fitted": list(sresult.fitted),
                    "at_bound": sresult.at_bound,
                    "not_fitted": sresult.left_out,
                    "infeasible": sresult.infeasible,
                    "serving_calibration": sresult.profile.serving_calibration.model_dump(
                        mode="json"
                    ),
                    "runs": [
                        {
                            "config": str(ref.config),
                            "log": str(ref.log),
                            "format": s.format,
                            "measured": r.measured,
                            "aggregate": s.aggregate,
                            "notes": notes,
                            "error_before": b,
                            "error_after": a,
                        }
                        for (r, ref, s, notes), b, a in zip(serving, sresult.before, sresult.after)
                    ],
                }
            print(json.dumps(data, indent=2))
            return 0
        if result is not None:
            print(
                f"{'run':40s} {'log':10s} {'measured':>10s} {'before':>8s} {'after':>8s}  steady state"
            )
            for r, s, b, a in zip(runs, logs, result.before, result.after):
                print(
                    f"{Path(r.id).name[:40]:40s} {s.format:10s} {r.measured_s:9.3f}s {b:+8.1%} {a:+8.1%}"
                    f"  {s.rule}" + "".join(f"; {n}" for n in s.notes)
                )
            print(f"fitted from {result.base.name}: {', '.join(result.fitted) or 'none'}")
            if result.fitted:
                print(
                    "  held-out gain n (loss before - after) / 0.1^2 > 2 (Akaike): "
                    + ", ".join(f"{k} {result.gains[k]:.1f}" for k in result.fitted)
                )
            below = [k for k, w in result.not_fitted.items() if w.startswith("held-out gain")]
            if below:
                print(
                    f"kept from {result.base.name}, held-out gain not above Akaike's 2: "
                    + ", ".join(f"{k} {result.gains[k]:.1f}" for k in below)
                )
            for w in sorted({w for k, w in result.not_fitted.items() if k not in below}):
                names = [k for k, v in result.not_fitted.items() if v == w]
                print(f"kept from {result.base.name}, {w}: {', '.join(names)}")
            if result.at_bound:
                print(f"at a bound of its physical range: {', '.join(result.at_bound)}")
            if result.bandwidths:
                print(f"{result.bandwidth_note}: check {result.base.name}'s hardware numbers")
        if sresult is not None:
            _print_serving_calibration(serving, sresult)
        print(f"wrote {out} (use it with --hardware {out})", file=sys.stderr)
        return 0

    _run(body, json_mode=json_out)


def _calibrated_profile(result, sresult, n_train: int, n_serve: int, source: str) -> str:
    """The profile YAML: the training fit's, the serving fit's (fitted from the training
    one's profile), or both headers over the serving fit's profile."""
    from planner.calibration.runs import profile_yaml

    if sresult is None:
        return profile_yaml(result, runs=n_train, source=source)
    from planner.serve.calibrate import serve_profile_yaml

    text = serve_profile_yaml(sresult, runs=n_serve, source=source)
    if result is None:
        return text
    head = [
        line
        for line in profile_yaml(result, runs=n_train, source=source).splitlines()
        if line.startswith("#")
    ]
    return "\n".join(head) + "\n" + text


def _print_serving_calibration(serving, sresult) -> None:
    scale = {"ttft_s": (1e3, "ms"), "tpot_s": (1e3, "ms"), "output_tokens_per_s": (1.0, "tok/s")}
    label = {"ttft_s": "TTFT", "tpot_s": "TPOT", "output_tokens_per_s": "output"}
    print(
        f"{'serving run':32s} {'log':7s} {'metric':7s} {'measured':>14s} {'before':>8s} "
        f"{'after':>8s}  aggregate"
    )
    for (r, _, s, notes), b, a in zip(serving, sresult.before, sresult.after):
        for m, v in r.measured.items():
            k, unit = scale[m]
            print(
                f"{Path(r.id).name[:32]:32s} {s.format:7s} {label[m]:7s} "
                f"{v * k:>8.1f} {unit:5s} {b[m]:+8.1%} {a[m]:+8.1%}  {s.aggregate[m]}"
            )
        for n in notes:
            print(f"  note: {n}")
    print(
        f"serving parameters fitted from {sresult.base.name}: {', '.join(sresult.fitted) or 'none'}"
    )
    if sresult.at_bound:
        print(f"at a bound of its physical range: {', '.join(sresult.at_bound)}")
    if sresult.infeasible:
        print(
            f"left out of the fit (not one request fits in the KV cache planner leaves): "
            f"{', '.join(Path(i).name for i in sresult.infeasible)}"
        )


def _calibration_runs(refs, hardware: str | None, log_format: str | None):
    """Each run's config read as validate reads it (knobs it left out chosen as validate
    does), and its log's steady state; every run on one profile. Returns the training runs
    (runs, logs, refs) and the serving ones ([(ServeRun, ref, log summary, notes)])."""
    from planner.calibration.fit import Run
    from planner.calibration.logs import LOG_FORMATS, load_log
    from planner.frameworks import detect_format, load_any
    from planner.frameworks.engines.reader import SERVE_FORMATS
    from planner.validate import why_no_estimate

    runs, logs, trefs, serving = [], [], [], []
    for ref in refs:
        if hardware is not None and ref.hardware is not None:
            raise SpecError(
                f"run {short(str(ref.config))} names hardware {short(ref.hardware)} "
                f"and --hardware {short(hardware)} is given: keep one",
                field="--hardware",
                value=hardware,
            )
        if detect_format(ref.config) in SERVE_FORMATS:
            serving.append(_serving_run(ref, ref.hardware or hardware, log_format))
            continue
        if log_format is not None and log_format not in LOG_FORMATS:
            raise SpecError(
                f"--log-format {log_format} is a serving benchmark's; "
                f"{short(str(ref.config))} is a training config: give megatron, "
                "nemo, torchtitan or deepspeed (or leave it out)",
                field="--log-format",
                value=log_format,
            )
        imported = load_any(ref.config, hardware=ref.hardware or hardware, gpus=ref.gpus)
        job, layout = imported.job, imported.layout
        why = why_no_estimate(layout, job)
        if why:
            raise SpecError(
                f"{short(str(ref.config))}: {why}; `planner validate` says what to fix",
                field="config",
                value=str(ref.config),
            )
        s = load_log(ref.log, fmt=log_format)
        t, _ = s.step_time(
            global_batch_size=job.training.global_batch_size,
            seq_length=job.training.seq_length,
            num_gpus=job.num_gpus,
        )
        if layout.auto:
            from planner.tune import fill_auto

            layout = fill_auto(job, layout)
        runs.append(Run(str(ref.config), job, layout, t, "runs", s.peak_memory_gib))
        logs.append(s)
        trefs.append(ref)
    names = sorted(
        {r.job.hardware.name for r in runs} | {r.job.hardware.name for r, _, _, _ in serving}
    )
    if len(names) > 1:
        raise SpecError(
            f"the runs are on {', '.join(names)}: one profile is fitted per GPU "
            "type; calibrate each apart (or give --hardware)",
            field="hardware",
            value=", ".join(names),
        )
    return (runs, logs, trefs), serving


def _serving_run(ref, hardware: str | None, log_format: str | None):
    """A serving config (a serving YAML or an engine's launch command) and its benchmark
    output: the launch command's request lengths come from the log where it states them,
    and the concurrency the benchmark's clients kept replaces the config's."""
    from planner.calibration.logs import LOG_FORMATS
    from planner.calibration.serve_logs import load_serve_log
    from planner.frameworks import detect_format, load_any
    from planner.serve.calibrate import ServeRun, with_log_workload

    if log_format in LOG_FORMATS:
        raise SpecError(
            f"--log-format {log_format} is a training log; {short(str(ref.config))} "
            "is a serving config: give vllm, sglang or trtllm (or leave it out)",
            field="--log-format",
            value=log_format,
        )
    s = load_serve_log(ref.log, fmt=log_format)
    workload: tuple[tuple[str, str], ...] = ()
    if detect_format(ref.config) != "serve":
        workload = tuple(
            (flag, str(round(v)))
            for flag, v in (("--isl", s.input_length), ("--osl", s.output_length))
            if v
        )
    imported = load_any(ref.config, hardware=hardware, gpus=ref.gpus, workload=workload)
    if s.format == "trtllm" and imported.job.serving.engine != "trtllm":
        raise SpecError(
            f"{short(str(ref.log))} is a trtllm-bench report, which runs TensorRT-LLM "
            f"only; {short(str(ref.config))} serves with "
            f"{imported.job.serving.engine}: give that run's benchmark output",
            field="log",
            value=str(ref.log),
        )
    job, notes = with_log_workload(imported.job, imported.layout, s)
    from planner.serve.validate import validate as serve_validate

    checked = serve_validate(job, imported.layout, extra=imported.violations)
    broken = [v for v in checked.violations if v.severity == "error"]
    if broken:
        raise SpecError(
            f"{short(str(ref.config))}: {broken[0].message}; `planner validate` says what to fix",
            field="config",
            value=str(ref.config),
        )
    notes = [f"{v.severity}: {v.message}" for v in imported.violations] + notes
    if workload:
        notes.append(
            "request lengths from the log (the launch command has none): "
            + ", ".join(f"{flag} {v}" for flag, v in workload)
        )
    return ServeRun(str(ref.config), job, imported.layout, s.measured()), ref, s, notes


_COMMANDS = (
    ("plan", plan),
    ("validate", validate),
    ("compare", compare),
    ("serve", serve),
    ("models", models),
    ("hardware", hardware),
    ("export", export_cmd),
    ("calibrate", calibrate_cmd),
)
"""The commands, in the order --help lists them."""


def _build_app() -> typer.Typer:
    import typer

    globals().update(typer=typer, **_option_aliases(typer))
    app = typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        help="Plan and check how to split a large model across a GPU cluster.",
    )
    app.callback()(_root)
    for name, fn in _COMMANDS:
        app.command(name)(fn)
    return app


def _app() -> typer.Typer:
    app = globals().get("app")
    if app is None:
        app = globals()["app"] = _build_app()
    return app


def __getattr__(name: str) -> Any:
    """`app`, the typer app (built on first use, then an ordinary module attribute)."""
    if name == "app":
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: typer's own usage errors (unknown option, missing or malformed value) also
    become one `error:` line and exit 2, like every other bad input (with `--json`, the error
    object on stdout too); output that cannot be written ends as `_run` says.

    `planner --version` alone answers without building the app (it prints the same).
    As the process's entry (no `argv`), the objects left are frozen on the way out: the
    interpreter's final garbage collection then skips them (~35 ms of traversing what the
    imports built, for memory the OS takes back anyway)."""
    try:
        _main(argv)
    finally:
        if argv is None:
            gc.freeze()


# typer (0.29) coerces option values with pydantic and reports pydantic's words without the
# value; these say what to give instead
_COERCION_WORDS = {
    "Input should be a valid integer, unable to parse string as an integer": "must be a whole number",
    "Input should be a valid integer, got a number with a fractional part": "must be a whole number",
    "Input should be a valid number, unable to parse string as a number": "must be a number",
}


def _raw_value(args: list[str], opts: list[str]) -> str | None:
    """What the command line gave an option (`--gpus abc` or `--gpus=abc`; the last one
    given, as click keeps the last), or None when the option is not on it."""
    found = None
    for i, token in enumerate(args):
        if token == "--":
            break
        for opt in opts:
            if token == opt and i + 1 < len(args):
                found = args[i + 1]
            elif token.startswith(opt + "="):
                found = token[len(opt) + 1 :]
    return found


def _bad_value_message(flag: str, raw: str, message: str) -> str:
    """`--gpus = 'abc': must be a whole number` from typer's
    `Invalid value for '--gpus': Input should be a valid integer, ...`."""
    reason = message.split("': ", 1)[1] if message.startswith("Invalid value for '") else message
    reason = _COERCION_WORDS.get(reason, reason)
    return f"{flag} = {short(raw)}: {reason}"


def _main(argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    json_mode = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
    try:
        if args == ["--version"]:  # the app's answer, without importing typer
            from planner import __version__

            print(f"planner {__version__}")
            code = 0
        else:
            code = _app()(args=argv, standalone_mode=False)
        sys.stdout.flush()
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            sys.exit(_internal(exc, json_mode))
        sys.exit(_output_failed(exc))
    except Exception as exc:  # typer's (vendored click's) usage errors
        import typer  # loaded: only the app raises these

        if isinstance(exc, typer.Abort):
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        if not hasattr(exc, "format_message") or not hasattr(exc, "exit_code"):
            sys.exit(_internal(exc, json_mode))
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            sys.exit(2)
        cmd = ctx.command_path if ctx is not None else "planner"
        param = getattr(exc, "param", None)
        opts = list(getattr(param, "opts", None) or []) if param else []
        flag = opts[0] if opts else None
        message = clip(exc.format_message(), 400).rstrip(".")
        raw = _raw_value(args, opts) if type(exc).__name__ == "BadParameter" else None
        if raw is not None and flag is not None:
            message = _bad_value_message(flag, raw, message)
        _fail(SpecError(f"{message}; see '{cmd} --help'", field=flag, value=raw), json_mode)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
