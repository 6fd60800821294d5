"""OmegaConf interpolations in NeMo YAML (`${.hidden_size}`, `${model.encoder_seq_length}`,
`${multiply:4, ${.hidden_size}}`), resolved the way OmegaConf resolves them, with the resolvers
NeMo and its launcher register, and with bounds OmegaConf lacks.

What resolves (OmegaConf 2.x grammar, the part NeMo files use):
- `${a.b.c}` from the top of the file; `${.x}` a key of the mapping holding the value, `${..x}`
  of its parent (one more dot per level); `a.0` or `a[0]` index lists.
- A value that is exactly one interpolation keeps the referenced value's type; interpolations
  inside text are joined as text (`${data_dir}/bpe/vocab.json`). `\\${` is a literal `${`.
- Resolvers (`${name:arg, arg}`; arguments are interpolations, quoted strings or plain values
  read as int, float, true/false, null or text): `multiply` (x*y) and `sum` (x+y), which
  NeMo registers (nemo/core/config/hydra_runner.py, with `gpu_name`: "a100"/"h100" from the
  GPU's compute capability 8/9, else null; here from the hardware profile's architecture);
  `divide_ceil` int(ceil(x/y)) and `divide_floor` int(floor(x/y)), which NeMo-Framework-
  Launcher registers (launcher_scripts/main.py); OmegaConf's own `oc.select:key,default`,
  `oc.decode:text` and `oc.env:NAME,default` (the default only: planner never reads the
  environment, so `oc.env` without a default cannot resolve).
- NeMo-Framework-Launcher mounts a training config under `training:`, so `${training.x}` in
  such a file (no top-level `training` key) means its own `x`.

What does not resolve is not an error by itself (NeMo resolves a key only when it reads it, and
most of a launcher file is paths planner never reads): the value becomes an `Unresolved`,
which raises a one-line SpecError naming the key, the text and the reason as soon as an
importer uses it. `???` (OmegaConf's missing value) is one too.

Bounds (OmegaConf has none: twenty keys that each join the previous one twice take it 2**20
evaluations): every value is resolved once and remembered, a reference cycle is an error, an
interpolation nests at most 32 levels and a value chain at most 256, a result is at most
100,000 characters and an integer at most 2**63 in size.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from planner.errors import SpecError

__all__ = ["resolve", "Unresolved", "has_interpolation", "RESOLVERS"]

_MAX_NEST = 32
_MAX_CHAIN = 256
_MAX_TEXT = 100_000
_MAX_INT = 2**63
_MISSING = "???"
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_INT = re.compile(r"[-+]?\d{1,25}")
_FLOAT = re.compile(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d{1,4})?")


class _Fail(Exception):
    """Why one value cannot be resolved (`root`: the first cause, not the chain to it)."""

    def __init__(self, message: str, root: str | None = None) -> None:
        super().__init__(message)
        self.root = root or message


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Unresolved:
    """A value whose interpolation did not resolve: any use of it (truth, text, number,
    comparison) is a SpecError naming the key; only `repr` (for messages) is allowed."""

    __slots__ = ("key", "text", "reason")

    def __init__(self, key: str, text: str, reason: str) -> None:
        self.key, self.text, self.reason = key, text, reason

    def fail(self, *_args: Any) -> Any:
        raise SpecError(
            f"{self.key} = {_short(self.text)!r} cannot be resolved: {self.reason}; "
            "write the value there or fix the interpolation",
            field=self.key,
            value=self.text,
        )

    def __repr__(self) -> str:
        return repr(_short(self.text))

    __bool__ = __str__ = __int__ = __index__ = __float__ = __len__ = __iter__ = fail
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __format__ = fail
    __hash__ = __add__ = __radd__ = __mul__ = __rmul__ = fail


def has_interpolation(value: Any) -> bool:
    return isinstance(value, str) and ("${" in value or value == _MISSING)


# ---------------------------------------------------------------------------- resolvers


def _numbers(name: str, *args: Any) -> None:
    for a in args:
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            raise _Fail(f"{name} needs numbers, got {_short(repr(a), 40)}")


def _arith(name: str, fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def run(ctx: _Resolver, *args: Any) -> Any:
        if len(args) != 2:
            raise _Fail(f"{name} takes 2 arguments, got {len(args)}")
        _numbers(name, *args)
        try:
            return fn(*args)
        except (ZeroDivisionError, OverflowError, ValueError) as exc:
            raise _Fail(f"{name}{tuple(args)}: {exc}") from None

    return run


def _gpu_name(ctx: _Resolver, *args: Any) -> Any:
    return {"ampere": "a100", "hopper": "h100"}.get(ctx.architecture or "")


def _env(ctx: _Resolver, *args: Any) -> Any:
    if len(args) >= 2:
        return args[1]
    raise _Fail(
        f"oc.env:{args[0] if args else ''} reads an environment variable, which planner "
        "does not read (give it a default: ${oc.env:NAME,default})"
    )


def _select(ctx: _Resolver, *args: Any) -> Any:
    if not args or not isinstance(args[0], str):
        raise _Fail("oc.select needs a key")
    try:
        return ctx.lookup(args[0], ctx.current)
    except _Fail:
        if len(args) >= 2:
            return args[1]
        raise


def _decode(ctx: _Resolver, *args: Any) -> Any:
    if len(args) != 1:
        raise _Fail("oc.decode takes 1 argument")
    return _primitive(str(args[0]).strip()) if isinstance(args[0], str) else args[0]


RESOLVERS: dict[str, Callable[..., Any]] = {
    "multiply": _arith("multiply", lambda x, y: x * y),  # NeMo hydra_runner.py
    "sum": _arith("sum", lambda x, y: x + y),  # NeMo hydra_runner.py
    "gpu_name": _gpu_name,  # NeMo hydra_runner.py
    "divide_ceil": _arith("divide_ceil", lambda x, y: int(math.ceil(x / y))),  # Launcher
    "divide_floor": _arith("divide_floor", lambda x, y: int(math.floor(x / y))),  # Launcher
    "oc.env": _env,
    "oc.select": _select,
    "oc.decode": _decode,  # OmegaConf built-ins
}


# ------------------------------------------------------------------------------- parsing


def _primitive(text: str) -> Any:
    """OmegaConf's reading of an unquoted resolver argument."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "null":
        return None
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


class _Interp:
    __slots__ = ("resolver", "parts", "args")

    def __init__(self, resolver: str | None, parts: list, args: list) -> None:
        self.resolver, self.parts, self.args = resolver, parts, args


def _parse(text: str, i: int, stops: str, depth: int) -> tuple[list, int]:
    """Literal text and interpolations from text[i:] up to one of `stops` (at this level)."""
    parts: list = []
    buf: list[str] = []
    while i < len(text):
        ch = text[i]
        if text.startswith("\\${", i):
            buf.append("${")
            i += 3
        elif text.startswith("${", i):
            if buf:
                parts.append("".join(buf))
                buf = []
            node, i = _interp(text, i + 2, depth + 1)
            parts.append(node)
        elif ch in stops:
            break
        elif ch in "'\"" and "," in stops:  # a quoted resolver argument
            end = text.find(ch, i + 1)
            if end < 0:
                raise _Fail("an unclosed quote in a resolver argument")
            parts.append(("quoted", text[i + 1 : end]))
            i = end + 1
        else:
            buf.append(ch)
            i += 1
    if buf:
        parts.append("".join(buf))
    return parts, i


def _interp(text: str, i: int, depth: int) -> tuple[_Interp, int]:
    if depth > _MAX_NEST:
        raise _Fail(f"interpolations nested more than {_MAX_NEST} deep")
    m = _NAME.match(text, i)
    if m and text.startswith(":", m.end()):
        name, i, args = m.group(), m.end() + 1, []
        while True:
            arg, i = _parse(text, i, ",}", depth)
            if i >= len(text):
                raise _Fail("an unclosed ${")
            if arg or text[i] == ",":
                args.append(arg)
            if text[i] == "}":
                return _Interp(name, [], args), i + 1
            i += 1
    parts, i = _parse(text, i, "}", depth)
    if i >= len(text):
        raise _Fail("an unclosed ${")
    return _Interp(None, parts, []), i + 1


# ----------------------------------------------------------------------------- resolving


class _Resolver:
    def __init__(self, root: Any, architecture: str | None) -> None:
        self.root, self.architecture = root, architecture
        self.done: dict[tuple, Any] = {}
        self.active: list[tuple] = []
        self.current: tuple = ()

    # a path is a tuple of keys/indices from the root
    def raw(self, path: tuple) -> Any:
        node = self.root
        for key in path:
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                node = node[key]
            else:
                raise _Fail(f"${{{'.'.join(map(str, path))}}} is not in the file")
        return node

    def lookup(self, ref: str, here: tuple) -> Any:
        ref = re.sub(r"\[(\d+)\]", r".\1", ref.strip())
        dots = len(ref) - len(ref.lstrip("."))
        keys = [k for k in ref[dots:].split(".") if k != ""]
        if dots:
            base = here[:-1]
            if dots - 1 > len(base):
                raise _Fail(f"${{{ref}}} goes above the top of the file")
            base = base[: len(base) - (dots - 1)]
        else:
            base = ()
            if (
                keys
                and keys[0] == "training"
                and isinstance(self.root, dict)
                and "training" not in self.root
            ):
                keys = keys[1:]  # NeMo-Framework-Launcher mounts the file at training
        path = base
        for key in keys:
            parent = self.raw(path)
            path += (int(key) if isinstance(parent, list) and key.isdigit() else key,)
        try:
            return self.value(path)
        except _Fail as exc:
            if exc.root != str(exc) or has_interpolation(self.raw(path)):
                name = ".".join(map(str, path))
                raise _Fail(
                    f"it uses {name}, which cannot be resolved ({exc.root})", exc.root
                ) from None
            raise

    def value(self, path: tuple) -> Any:
        if path in self.done:
            result = self.done[path]
            if isinstance(result, _Fail):
                raise result
            return result
        raw = self.raw(path)
        if isinstance(raw, (dict, list)):
            return self.tree(raw, path)
        if not has_interpolation(raw):
            return raw
        if path in self.active:
            cycle = " -> ".join(
                ".".join(map(str, p)) for p in self.active[self.active.index(path) :]
            )
            raise _Fail(
                f"the interpolations form a cycle ({_short(cycle, 200)} -> "
                f"{'.'.join(map(str, path))})"
            )
        if len(self.active) >= _MAX_CHAIN:
            raise _Fail(f"a chain of more than {_MAX_CHAIN} interpolations")
        self.active.append(path)
        outer, self.current = self.current, path
        try:
            result: Any = self.evaluate(raw, path)
        except _Fail as exc:
            result = exc
        finally:
            self.active.pop()
            self.current = outer
        self.done[path] = result
        if isinstance(result, _Fail):
            raise result
        return result

    def evaluate(self, raw: str, path: tuple) -> Any:
        if raw == _MISSING:
            raise _Fail("??? is OmegaConf's missing value, to be given on the command line")
        if len(raw) > _MAX_TEXT:
            raise _Fail(f"longer than {_MAX_TEXT} characters")
        parts, _ = _parse(raw, 0, "", 0)
        return self.join(parts, path, typed=True)

    def join(self, parts: list, path: tuple, *, typed: bool) -> Any:
        if len(parts) == 1 and isinstance(parts[0], _Interp) and typed:
            return self.interp(parts[0], path)
        text = "".join(
            p
            if isinstance(p, str)
            else p[1]
            if isinstance(p, tuple)
            else self.text(self.interp(p, path))
            for p in parts
        )
        if len(text) > _MAX_TEXT:
            raise _Fail(f"the result is longer than {_MAX_TEXT} characters")
        return text

    def text(self, value: Any) -> str:
        if isinstance(value, (dict, list)):
            raise _Fail("a mapping or list cannot be joined into text")
        return "None" if value is None else str(value)

    def interp(self, node: _Interp, path: tuple) -> Any:
        if node.resolver is None:
            return self.lookup(self.join(node.parts, path, typed=False), path)
        fn = RESOLVERS.get(node.resolver)
        if fn is None:
            raise _Fail(
                f"resolver {node.resolver!r} is not one NeMo registers (multiply, sum, "
                "gpu_name; the launcher: divide_ceil, divide_floor; OmegaConf: oc.env, "
                "oc.select, oc.decode)"
            )
        args = [self.arg(a, path) for a in node.args]
        result = fn(self, *args)
        if isinstance(result, int) and not isinstance(result, bool) and abs(result) > _MAX_INT:
            raise _Fail(f"{node.resolver} gives an integer beyond 2**63")
        if isinstance(result, float) and not math.isfinite(result):
            raise _Fail(f"{node.resolver} gives {result}")
        return result

    def arg(self, parts: list, path: tuple) -> Any:
        if len(parts) == 1 and isinstance(parts[0], tuple):
            return parts[0][1]
        stripped = [p.strip() if isinstance(p, str) else p for p in parts]
        stripped = [p for p in stripped if p != ""]
        if len(stripped) == 1 and isinstance(stripped[0], _Interp):
            return self.interp(stripped[0], path)
        if all(isinstance(p, str) for p in stripped):
            return _primitive("".join(stripped))
        return self.join(parts, path, typed=False).strip()

    def tree(self, node: Any, path: tuple) -> Any:
        if isinstance(node, dict):
            return {k: self.tree(v, path + (k,)) for k, v in node.items()}
        if isinstance(node, list):
            return [self.tree(v, path + (i,)) for i, v in enumerate(node)]
        if not has_interpolation(node):
            return node
        try:
            return self.value(path)
        except _Fail as exc:
            return Unresolved(".".join(map(str, path)), node, str(exc))


def resolve(data: Any, *, architecture: str | None = None) -> Any:
    """`data` (parsed YAML) with every interpolation resolved, or replaced by an `Unresolved`
    that fails when used. `architecture` (the hardware profile's) answers `${gpu_name:}`."""
    r = _Resolver(data, architecture)
    return r.tree(data, ())
