"""torchtitan's Python configs (`config_registry.py` functions, or a module-level
`default_config = JobConfig(...)`), read with `ast` -- the file is never run -- into the same
sections and keys as a TOML job config (planner/frameworks/torchtitan/reader.py reads them).

A config is a call whose keyword arguments are the JobConfig sections: `JobConfig(...)` or
`Trainer.Config(...)`, returned by a function (`def llama3_8b(): return Trainer.Config(...)`)
or assigned at the top level. A section is a constructor call (`Parallelism(...)`,
`ParallelismConfig(...)`, `TrainingConfig(...)`; the class name is not checked) or a dict;
its keyword arguments are the keys, nested calls nest (`quantize=Quantize(linear=...)`).
Literal values are read (numbers, strings, booleans, None, -1, lists, tuples, dicts); any
other value (a variable, a function call, arithmetic on names) is left out and named in one
note. `model_spec=model_registry("8B")` (the newer registry's model) is read as `[model]`
name = the folder the file is in (torchtitan/models/<name>/config_registry.py), flavor "8B".

Which config: the only one in the file, else the one `--set config=NAME` names (torchtitan's
own `--config NAME` picks a registry function the same way); several without it is an error
listing them.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from planner.errors import SpecError, Violation

__all__ = ["read_python_config", "looks_like_python_config"]

_MAX_NODES = 200_000  # a registry is a few thousand nodes; beyond this is not one
_NOT_LITERAL = object()
_SECTION_ALIASES = {"model_spec": "model"}


def looks_like_python_config(text: str) -> bool:
    return "JobConfig" in text or "Trainer.Config" in text or "torchtitan" in text


def _candidates(tree: ast.Module) -> dict[str, ast.Call]:
    """name -> the config call: functions returning a call, top-level NAME = call(...)."""
    found: dict[str, ast.Call] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls = [
                n.value
                for n in ast.walk(node)
                if isinstance(n, ast.Return)
                and isinstance(n.value, ast.Call)
                and _is_config_call(n.value)
            ]
            if calls:
                found[node.name] = calls[-1]
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _is_config_call(node.value)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value
    return found


def _callee(call: ast.Call) -> str:
    return ast.unparse(call.func) if hasattr(ast, "unparse") else ""


def _is_config_call(call: ast.Call) -> bool:
    name = _callee(call)
    return (
        name.endswith("JobConfig")
        or name.endswith("Trainer.Config")
        or (
            name.endswith("Config")
            and any(k.arg in ("parallelism", "training") for k in call.keywords)
        )
    )


def _value(node: ast.AST, where: str, skipped: list[str]) -> Any:
    if isinstance(node, ast.Call):
        return _kwargs(node, where, skipped)
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                skipped.append(where)
                return _NOT_LITERAL
            value = _value(v, f"{where}.{k.value}", skipped)
            if value is not _NOT_LITERAL:
                out[k.value] = value
        return out
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_value(e, where, skipped) for e in node.elts]
        return _NOT_LITERAL if any(i is _NOT_LITERAL for i in items) else items
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        skipped.append(f"{where} = {_shown(node)}")
        return _NOT_LITERAL


def _shown(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."


def _kwargs(call: ast.Call, where: str, skipped: list[str]) -> dict:
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:  # **spread
            skipped.append(f"{where}: **{_shown(kw.value)}")
            continue
        key = f"{where}.{kw.arg}" if where else kw.arg
        value = _value(kw.value, key, skipped)
        if value is not _NOT_LITERAL:
            out[kw.arg] = value
    if call.args:
        skipped.append(f"{where or _callee(call)}: positional {_shown(call.args[0])}")
    return out


def _model_spec(call: ast.AST, path: Path) -> dict | None:
    """`model_registry("8B")` in torchtitan/models/<name>/config_registry.py."""
    if (
        isinstance(call, ast.Call)
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    ):
        return {"name": path.resolve().parent.name, "flavor": call.args[0].value}
    return None


def read_python_config(
    path: str | Path, text: str, choose: str | None
) -> tuple[dict, str, list[Violation]]:
    """(the TOML-shaped sections, the config's name, notes) of the config the file defines."""
    p = Path(path)
    source = str(path)
    try:
        tree = ast.parse(text, filename=source)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        line = getattr(exc, "lineno", None)
        raise SpecError(
            f"torchtitan config {source!r} is not valid Python"
            f"{f' at line {line}' if line else ''}; fix the syntax there",
            field="config",
        ) from None
    if sum(1 for _ in ast.walk(tree)) > _MAX_NODES:
        raise SpecError(
            f"{source}: the Python config is larger than planner reads "
            f"({_MAX_NODES:,} syntax nodes); give the config's TOML",
            field="config",
        )
    found = _candidates(tree)
    if not found:
        raise SpecError(
            f"{source}: no torchtitan config in this Python file (a function "
            "returning JobConfig(...)/Trainer.Config(...), or default_config = "
            "JobConfig(...)); give a torchtitan config_registry.py or TOML",
            field="config",
        )
    if choose is None and len(found) > 1:
        raise SpecError(
            f"{source}: {len(found)} configs ({', '.join(list(found)[:12])}); "
            "pick one with --set config=NAME",
            field="--set",
            value=None,
        )
    name = choose if choose is not None else next(iter(found))
    if name not in found:
        raise SpecError(
            f"{source}: --set config={name}: no such config (the file has "
            f"{', '.join(list(found)[:12])})",
            field="--set",
            value=name,
        )
    call = found[name]
    skipped: list[str] = []
    data: dict[str, Any] = {}
    notes: list[Violation] = []
    for kw in call.keywords:
        if kw.arg is None:
            skipped.append(f"**{_shown(kw.value)}")
            continue
        section = _SECTION_ALIASES.get(kw.arg, kw.arg)
        if kw.arg == "model_spec":
            spec = _model_spec(kw.value, p)
            if spec is None:
                skipped.append(f"model_spec = {_shown(kw.value)}")
            else:
                data.setdefault("model", {}).update(spec)
                notes.append(
                    Violation(
                        "torchtitan-python-model",
                        f"model_spec = {_shown(kw.value)}: read as [model] name "
                        f"{spec['name']!r} (the folder of the file) flavor "
                        f"{spec['flavor']!r}",
                        "warning",
                    )
                )
            continue
        value = _value(kw.value, section, skipped)
        if value is _NOT_LITERAL:
            continue
        if not isinstance(value, dict):
            skipped.append(f"{section} = {_shown(kw.value)}")
            continue
        data.setdefault(section, {}).update(value)
    if skipped:
        shown = "; ".join(skipped[:6]) + (
            f"; and {len(skipped) - 6} more" if len(skipped) > 6 else ""
        )
        notes.append(
            Violation(
                "torchtitan-python-not-literal",
                f"{len(skipped)} value(s) of config {name!r} are not literals, "
                f"so planner (which reads the file, never runs it) left them "
                f"out and their defaults apply: {shown}",
                "warning",
            )
        )
    return data, name, notes
