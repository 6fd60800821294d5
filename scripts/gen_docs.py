"""Regenerate the generated blocks of docs/ and README from the code.

    python scripts/gen_docs.py            rewrite every stale block
    python scripts/gen_docs.py --check    exit 1 naming each stale block, change nothing

A generated block sits between two marker comments in a Markdown file:

    <!-- generated: NAME -->
    ...
    <!-- end generated -->

and NAME says what fills it (GENERATORS below):

- config-keys-*: a key table per config section, from the pydantic spec classes
  (planner.specs: the field's type and default from `cls.model_fields`, its meaning from the
  docstring under it, `field_help(cls)`);
- config-schema: the config file's JSON schema (`ConfigSpec.model_json_schema()`);
- accuracy-*: the accuracy tables, from benchmarks/accuracy.py's functions run on the
  calibration files kept in benchmarks/ (so the figures do not depend on anything outside
  the repository);
- readme-first-plan, serving-example, serving-export-vllm, commands-schedule: what a command
  prints, trailing blanks cut: README's first plan (`planner plan --model 70b --gpus 2048
  --top 3` at 100 columns), docs/serving.md's example (`planner serve --model 70b --gpus 8
  --objective throughput` at 80) and its `--export vllm` script, and docs/commands.md's
  schedule picture (`planner validate examples/llama3-70b-2048xh100.yaml --show schedule`
  at 80). The search's elapsed time (`... timed, 0.42 s)`) is the one part that differs
  between runs: `--check` masks it, and compares white space as one space (the summary line
  wraps where the time's digits put it).

Only the text between the markers changes; everything else in a page is written by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOCS = ROOT / "docs"
BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S
)


# --------------------------------------------------------------------------- config keys


def _type_name(t: Any) -> str:
    """A field's annotation as a reader would write it in YAML terms."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, getattr(types, "UnionType", typing.Union)):
        parts = [a for a in args if a is not type(None)]
        name = " or ".join(_type_name(a) for a in parts)
        return name + (" or unset" if len(parts) < len(args) else "")
    if origin in (tuple, list):
        inner = [a for a in args if a is not Ellipsis]
        return "list of " + (_type_name(inner[0]) if inner else "values")
    if origin is dict:
        return "mapping"
    if isinstance(t, type):
        from pydantic import BaseModel

        if issubclass(t, BaseModel):
            return "mapping"
        return {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}.get(
            t.__name__, t.__name__
        )
    return str(t)


def _default(field: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(map(str, value)) + "]`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def key_table(cls: type, prefix: str = "") -> str:
    from planner.specs import field_help

    help_ = field_help(cls)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, field in cls.model_fields.items():
        key = field.alias or name
        rows.append(
            f"| `{prefix}{key}` | {_type_name(field.annotation)} | {_default(field)} | "
            f"{_cell(help_.get(name, ''))} |"
        )
    return "\n".join(rows) + "\n"


def _spec(name: str) -> Callable[[], str]:
    def gen() -> str:
        import planner.specs as specs

        cls, prefix = {
            "top": (specs.ConfigSpec, ""),
            "training": (specs.TrainingInput, "training."),
            "parallel": (specs.ParallelSpec, "parallel."),
            "model": (specs.ModelSpec, "model."),
            "hardware": (specs.HardwareSpec, "hardware."),
            "peak-tflops": (specs.PeakTflops, "hardware.peak_tflops."),
        }[name]
        return key_table(cls, prefix)

    return gen


def config_schema() -> str:
    from planner.specs import ConfigSpec

    schema = json.dumps(ConfigSpec.model_json_schema(), indent=2, ensure_ascii=False)
    return (
        "<details><summary>ConfigSpec.model_json_schema()</summary>\n\n"
        f"```json\n{schema}\n```\n\n</details>\n"
    )


# ------------------------------------------------------------------------------ accuracy

_ROWS: list[dict] | None = None


def _accuracy():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import accuracy  # benchmarks/accuracy.py
    finally:
        sys.path.pop(0)
    return accuracy


def _rows() -> list[dict]:
    """Every case of the calibration files kept in benchmarks/, evaluated once."""
    global _ROWS
    if _ROWS is None:
        acc = _accuracy()
        _ROWS = acc.evaluate(acc.load_cases(paths=acc.default_paths()))
    return _ROWS


def _case_line(r: dict) -> str:
    return (
        f"{r['id'][:52]:52s} {r['layout'][:24]:24s} {r['predicted_s']:8.3f} "
        f"{r['measured_s']:8.3f} {r['error']:+7.1%} {r['mfu']:6.1%} "
        f"{r['memory_fraction']:5.0%}"
    )


def _stats_text(file: str) -> str:
    acc = _accuracy()
    sub = [r for r in _rows() if r["file"] == file]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        acc._print_stats(f"{file}: step time by class", acc.summarize_by(sub, "class"))
        acc._print_stats(f"{file}: step time by GPU", acc.summarize_by(sub, "hardware"))
        acc._print_stats(f"{file}: all", {"all": acc._stats([r["error"] for r in acc.scored(sub)])})
    return out.getvalue()


def accuracy_dense() -> str:
    f = "calibration.yaml"
    head = (
        f"{'case':52s} {'layout':24s} {'pred s':>8s} {'meas s':>8s} {'error':>7s} "
        f"{'MFU':>6s} {'mem':>5s}"
    )
    lines = [head] + [_case_line(r) for r in _rows() if r["file"] == f]
    return "```\n" + "\n".join(lines) + "\n\n" + _stats_text(f) + "```\n"


def accuracy_modern_summary() -> str:
    f = "calibration-modern.yaml"
    other = _accuracy().other_hardware_lines([r for r in _rows() if r["file"] == f])
    return "```\n" + _stats_text(f) + "".join(line + "\n" for line in other) + "```\n"


def accuracy_modern_cases() -> str:
    lines = [_case_line(r) for r in _rows() if r["file"] == "calibration-modern.yaml"]
    return "```\n" + "\n".join(lines) + "\n```\n"


def accuracy_memory() -> str:
    acc = _accuracy()
    rows = _rows()
    return "```\n" + "\n".join(acc.memory_lines(rows, acc.memory_check(rows))) + "\n```\n"


# (label, file, class or None for the whole file, statistic, bar)
BARS = [
    (
        "calibration.yaml median ≤ 5 %, max ≤ 15 %",
        "calibration.yaml",
        None,
        (("median_abs_error", 0.05), ("max_abs_error", 0.15)),
    ),
    ("moe median ≤ 10 %", "calibration-modern.yaml", "moe", (("median_abs_error", 0.10),)),
    (
        "long-context median ≤ 10 %, max ≤ 25 %",
        "calibration-modern.yaml",
        "long-context",
        (("median_abs_error", 0.10), ("max_abs_error", 0.25)),
    ),
    ("moe max ≤ 25 %", "calibration-modern.yaml", "moe", (("max_abs_error", 0.25),)),
    (
        "fsdp median ≤ 10 %, max ≤ 25 %",
        "calibration-modern.yaml",
        "fsdp",
        (("median_abs_error", 0.10), ("max_abs_error", 0.25)),
    ),
]


def accuracy_bars() -> str:
    acc = _accuracy()
    out = ["| bar | figure | met |", "|---|---|---|"]
    for label, file, cls, checks in BARS:
        errors = [
            r["error"]
            for r in acc.scored(_rows())
            if r["file"] == file and (cls is None or r["class"] == cls)
        ]
        st = acc._stats(errors)
        figure = ", ".join(f"{st[k] * 100:.1f} %" for k, _ in checks)
        met = "yes" if all(st[k] <= bar for k, bar in checks) else "no"
        out.append(f"| {label} | {figure} | {met} |")
    return "\n".join(out) + "\n"


_ELAPSED = re.compile(r"(timed, |; )[0-9.]+ s\)")
"""The search's elapsed time in a plan's or serve's summary line (`... timed, 0.42 s)`,
`...; no SLO; 0.04 s)`)."""


def _command_block(args: list[str], columns: int) -> str:
    """What `planner ARGS` prints on stdout at `columns` columns, in a fenced block, each
    line's trailing blanks cut."""
    import os
    import subprocess

    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)}
    for var in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        env.pop(var, None)
    out = subprocess.run(
        [sys.executable, "-m", "planner", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    ).stdout
    lines = [line.rstrip() for line in out.rstrip("\n").split("\n")]
    return "```\n" + "\n".join(lines) + "\n```\n"


def readme_first_plan() -> str:
    return _command_block(["plan", "--model", "70b", "--gpus", "2048", "--top", "3"], 100)


def serving_example() -> str:
    return _command_block(
        ["serve", "--model", "70b", "--gpus", "8", "--objective", "throughput"], 80
    )


def serving_export_vllm() -> str:
    """The export `serving_example`'s plan gets (`--export vllm`), from its JSON."""
    out = _command_block(
        ["serve", "--model", "70b", "--gpus", "8", "--objective", "throughput", "--export", "vllm"]
        + ["--json"],
        80,
    )
    text = json.loads(out.removeprefix("```\n").removesuffix("```\n"))["export"]["text"]
    return "```bash\n" + text.rstrip("\n") + "\n```\n"


SCHEDULE = ["validate", "examples/llama3-70b-2048xh100.yaml", "--show", "schedule"]


def commands_schedule() -> str:
    """docs/commands.md's schedule picture: `planner validate ... --show schedule` at 80
    columns from its `Pipeline schedule` line on (the breakdown above it elided)."""
    body = _command_block(SCHEDULE, 80).removeprefix("```\n").removesuffix("```\n")
    picture = body[body.index("Pipeline schedule") :]
    return f"```\n$ COLUMNS=80 planner {' '.join(SCHEDULE)}\n...\n{picture}```\n"


COMMAND_BLOCKS = {"readme-first-plan", "serving-example", "serving-export-vllm"}
"""The blocks that are a command's output: their elapsed time may differ (`_same`)."""


def _same(a: str, b: str) -> bool:
    """The same text but for the elapsed time and how white space falls (the summary line
    wraps where the time's digits put it)."""
    return " ".join(_ELAPSED.sub(r"\1T s)", a).split()) == " ".join(
        _ELAPSED.sub(r"\1T s)", b).split()
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "config-keys-top": _spec("top"),
    "config-keys-training": _spec("training"),
    "config-keys-parallel": _spec("parallel"),
    "config-keys-model": _spec("model"),
    "config-keys-hardware": _spec("hardware"),
    "config-keys-peak-tflops": _spec("peak-tflops"),
    "config-schema": config_schema,
    "accuracy-dense": accuracy_dense,
    "accuracy-modern-summary": accuracy_modern_summary,
    "accuracy-bars": accuracy_bars,
    "accuracy-modern-cases": accuracy_modern_cases,
    "accuracy-memory": accuracy_memory,
    "readme-first-plan": readme_first_plan,
    "serving-example": serving_example,
    "serving-export-vllm": serving_export_vllm,
    "commands-schedule": commands_schedule,
}


# ----------------------------------------------------------------------------------- run


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def render(text: str, where: str) -> tuple[str, list[str]]:
    """The page with every block regenerated, and the names of the blocks that changed."""
    stale: list[str] = []

    def one(m: re.Match) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise SystemExit(f"{where}: unknown generated block {name!r}")
        body = GENERATORS[name]()
        if body == m.group("body"):
            return m.group(0)
        if name in COMMAND_BLOCKS and _same(body, m.group("body")):
            return m.group(0)  # only the elapsed time differs: keep the page as it is
        stale.append(name)
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(one, text), stale


def run(check: bool) -> list[str]:
    """Regenerate (or, with check, only compare) every page; returns 'page: block' per stale one."""
    stale_all: list[str] = []
    seen: set[str] = set()
    for page in pages():
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(ROOT).as_posix()
        new, stale = render(text, rel)
        seen.update(m.group("name") for m in BLOCK.finditer(text))
        stale_all += [f"{rel}: {name}" for name in stale]
        if stale and not check:
            page.write_text(new, encoding="utf-8")
    missing = sorted(set(GENERATORS) - seen)
    if missing:
        raise SystemExit(f"no page holds the generated block(s) {', '.join(missing)}")
    return stale_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 naming each stale block"
    )
    args = ap.parse_args(argv)
    stale = run(check=args.check)
    for s in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {s}")
    if args.check and stale:
        print("run: python scripts/gen_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
