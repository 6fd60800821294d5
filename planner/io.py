"""The one file reader: every file planner reads (configs, model YAML, config.json, hardware
profiles, framework files) goes through `read_text`, YAML through `read_yaml` / `load_yaml`,
JSON through `load_json` and TOML through `load_toml`, so every format gets the same limits,
each a one-line exit-2 error that names the limit (docs/commands.md, "Input limits"). No real
config comes near them.

Imports nothing of planner's but `errors`. TOML is read with the standard library's `tomllib`
(Python 3.11+) or its backport `tomli` on 3.10 (the same parser).
"""

from __future__ import annotations

import os
import re
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import yaml

from planner.errors import SpecError, clip, short

if TYPE_CHECKING:  # at run time: module __getattr__ below
    if sys.version_info >= (3, 11):
        import tomllib
        from tomllib import TOMLDecodeError
    else:
        import tomli as tomllib
        from tomli import TOMLDecodeError

if TYPE_CHECKING:
    from typing import TypeAlias

    _Loader: TypeAlias = yaml.SafeLoader | yaml.CSafeLoader  # libyaml's when it is built

__all__ = [
    "ref_path",
    "read_text",
    "read_yaml",
    "load_yaml",
    "load_json",
    "load_toml",
    "TOMLDecodeError",
    "tomllib",
    "check_text",
    "check_tree",
    "read_budget",
    "safe_exists",
    "safe_is_file",
    "safe_is_dir",
    "MAX_FILE_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_DIGITS",
    "MAX_NAME_CHARS",
    "MAX_PATH_CHARS",
    "READ_BUDGET_S",
]


def _tomllib() -> ModuleType:
    """The TOML parser: the standard library's, or its backport on Python 3.10."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


def __getattr__(name: str) -> Any:
    """`tomllib` (the parser module) and `TOMLDecodeError` (its syntax error), imported on
    first use: only the TOML readers need them."""
    if name == "tomllib":
        return _tomllib()
    if name == "TOMLDecodeError":
        return _tomllib().TOMLDecodeError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_toml(text: str) -> dict[str, Any]:
    """TOML text as data (`tomllib.loads`; raises TOMLDecodeError on a syntax error)."""
    data: dict[str, Any] = _tomllib().loads(text)
    return data


MAX_FILE_BYTES = 2 * 2**20
"""Largest file read (2 MiB; real configs are a few KB, the largest HF config.json ~50 KB)."""
MAX_NAME_CHARS = 255
"""Longest file or folder name in a path (NAME_MAX on Linux, macOS and Windows)."""
MAX_PATH_CHARS = 4096
"""Longest path (PATH_MAX on Linux)."""
MAX_DEPTH = 100
"""Deepest nesting of lists and mappings (JSON, YAML, TOML; real configs nest < 10)."""
MAX_NODES = 200_000
"""Most values in one file, counting every expansion of a YAML alias (a "billion laughs"
bomb expands to 10^9; real configs have a few hundred)."""
MAX_DIGITS = 1000
"""Longest run of digits in a number (Python refuses to print integers beyond 4,300)."""
READ_BUDGET_S = 10.0
"""Wall-clock budget for reading (and importing) one file."""


def _name(p: Path | str) -> str:
    return short(str(p), 200)


def _check_path(p: Path, what: str) -> None:
    text = str(p)
    if len(text) > MAX_PATH_CHARS:
        raise SpecError(
            f"{what} path is {len(text):,} characters long; paths are at most "
            f"{MAX_PATH_CHARS:,} (limit: path length); check the path",
            field=what,
            value=short(text),
        )
    for part in p.parts:
        if len(os.fsencode(part)) > MAX_NAME_CHARS:
            raise SpecError(
                f"{what} {_name(p)}: a name in the path is {len(part):,} characters "
                f"long; file and folder names are at most {MAX_NAME_CHARS} (limit: "
                "name length); check the path",
                field=what,
                value=short(text),
            )


def safe_is_file(path: Path) -> bool:
    """`path.is_file()` that answers False instead of raising for a path the system refuses
    (a name over 255 characters, an unreadable folder): read_text then says why."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def safe_is_dir(path: Path) -> bool:
    """`path.is_dir()` that answers False instead of raising (see safe_is_file)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def safe_exists(path: Path) -> bool:
    """`path.exists()` that answers False instead of raising (see safe_is_file)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def ref_path(ref: str, base: Path | None) -> Path:
    """A file reference as a path, relative to `base` (the config's folder) when it is not
    found as given."""
    path = Path(ref)
    if base is not None and not path.is_absolute() and not safe_exists(path):
        path = base / path
    return path


def _read_bytes(p: Path, what: str) -> bytes:
    """At most MAX_FILE_BYTES + 1 bytes of a regular file, opened without blocking (a FIFO
    must not hang) and checked after opening (no race between the check and the read)."""
    _check_path(p, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise SpecError(
            f"{what} {_name(p)} does not exist; check the path", field=what, value=str(p)
        ) from None
    except NotADirectoryError:
        raise SpecError(
            f"{what} {_name(p)} does not exist (a part of the path is a file, not "
            "a folder); check the path",
            field=what,
            value=str(p),
        ) from None
    except PermissionError:
        raise SpecError(
            f"{what} {_name(p)} cannot be opened: permission denied (the file or a "
            "folder above it is not readable); check the permissions",
            field=what,
            value=str(p),
        ) from None
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or exc.__class__.__name__
        raise SpecError(
            f"{what} {_name(p)} cannot be opened ({why}); check the path", field=what, value=str(p)
        ) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise SpecError(
                f"{what} {_name(p)} is a directory; give a file", field=what, value=str(p)
            )
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(
                f"{what} {_name(p)} is not a regular file (a device, FIFO or "
                "socket); give a config file",
                field=what,
                value=str(p),
            )
        if st.st_size > MAX_FILE_BYTES:
            raise _too_big(p, what, st.st_size, exact=True)
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_FILE_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_BYTES:  # it grew (or /proc-like files that report size 0)
            raise _too_big(p, what, size, exact=False)
        return b"".join(chunks)
    except BlockingIOError:
        raise SpecError(
            f"{what} {_name(p)} is not ready to read; give a regular file", field=what, value=str(p)
        ) from None
    except OSError as exc:
        raise SpecError(
            f"{what} {_name(p)} cannot be read ({exc.strerror or 'OSError'}); check the file",
            field=what,
            value=str(p),
        ) from None
    finally:
        os.close(fd)


def _too_big(p: Path, what: str, size: int, *, exact: bool) -> SpecError:
    more = "" if exact else "more than "
    return SpecError(
        f"{what} {_name(p)} is {more}{size / 2**20:.1f} MiB; planner reads files of "
        f"at most {MAX_FILE_BYTES // 2**20} MiB (limit: file size; real configs are "
        "a few KB); check the path",
        field=what,
        value=str(p),
    )


def read_text(
    path: str | Path, *, what: str = "file", empty_hint: str = "give a complete file"
) -> str:
    """A file's text, within the limits above; every failure is one SpecError line (path,
    problem, fix). Every reader of a user file calls this (importers through
    `planner.frameworks.common.read_text`)."""
    p = Path(path)
    data = _read_bytes(p, what)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{what} {_name(p)} cannot be read as UTF-8 text (an invalid byte at "
            f"offset {exc.start}); give a UTF-8 text file",
            field=what,
            value=str(p),
        ) from None
    if "\x00" in text:
        raise SpecError(
            f"{what} {_name(p)} is binary (it contains NUL bytes); give a text file",
            field=what,
            value=str(p),
        )
    if not text.strip():
        raise SpecError(f"{what} {_name(p)} is empty; {empty_hint}", field=what, value=str(p))
    check_text(text, what=what, source=_name(p))
    return text


_NESTING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]')
_LONG_NUMBER = re.compile(rf"\d(?:_?\d){{{MAX_DIGITS},}}|0[xXoObB][0-9a-fA-F_]{{{MAX_DIGITS},}}")


def check_text(text: str, *, what: str, source: str) -> None:
    """Limits any format needs before a parser sees the text: bracket nesting (JSON, YAML
    flow style, TOML arrays and inline tables: quoted strings and # comments skipped) and
    numbers of more than MAX_DIGITS digits."""
    if text.count("[") + text.count("{") > MAX_DEPTH:
        depth = 0
        for found in _NESTING.finditer(text):
            c = found.group()
            if c in "[{":
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep(what, source, text.count("\n", 0, found.start()) + 1)
            elif c in "]}":
                depth = max(0, depth - 1)
    long = _LONG_NUMBER.search(text)
    if long:
        line = text.count("\n", 0, long.start()) + 1
        raise SpecError(
            f"{what} {source} has a number of {len(long.group()):,} digits at line "
            f"{line}; planner reads numbers of at most {MAX_DIGITS:,} digits (limit: "
            "number size); fix the value",
            field=what,
            value=short(long.group()),
        )


def _too_deep(what: str, source: str, line: int | None) -> SpecError:
    at = f" at line {line}" if line else ""
    return SpecError(
        f"{what} {source} nests deeper than {MAX_DEPTH} levels{at}; planner reads "
        f"at most {MAX_DEPTH} (limit: nesting depth; real configs nest fewer than "
        "10); flatten it",
        field=what,
    )


def check_tree(data: Any, *, what: str, source: str) -> None:
    """Parsed data (JSON, TOML) within MAX_DEPTH levels and MAX_NODES values, walked without
    recursion and stopping at the first limit passed."""
    stack, count = [(data, 1)], 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise _too_many(what, source)
        if depth > MAX_DEPTH:
            raise _too_deep(what, source, None)
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)


def _too_many(what: str, source: str) -> SpecError:
    return SpecError(
        f"{what} {source} holds more than {MAX_NODES:,} values (counting every "
        "expansion of a YAML alias); planner reads at most that many (limit: values "
        "per file; a YAML alias bomb?); remove the repetition",
        field=what,
    )


def load_json(text: str, *, what: str, source: str) -> Any:
    """JSON text (already through `check_text`) -> data, within the limits; a syntax error
    says "not valid JSON" with its line and column."""
    import json

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{what} {source} is not valid JSON at line {exc.lineno}, column "
            f"{exc.colno}: {exc.msg}; fix the syntax there",
            field=what,
        ) from None
    except (RecursionError, ValueError) as exc:  # belt and braces: check_text stops these
        raise SpecError(
            f"{what} {source} cannot be read as JSON ({exc.__class__.__name__}); simplify it",
            field=what,
        ) from None
    check_tree(data, what=what, source=source)
    return data


class _Mark(Protocol):
    """A YAML event's position (yaml.error.Mark, or libyaml's yaml._yaml.Mark)."""

    @property
    def line(self) -> int: ...


def _line(mark: _Mark | None) -> int:
    """The 1-based line of a parser event (the parsers put a mark on every event)."""
    assert mark is not None
    return mark.line + 1


def _yaml_loader() -> type[_Loader]:
    loader: type[_Loader] = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    return loader


def _scan_yaml(text: str, *, what: str, source: str) -> None:
    """Walk the YAML events (no objects built) and refuse what would blow up later: nesting
    beyond MAX_DEPTH (libyaml's composer recurses in C), more than MAX_NODES values counting
    alias expansions, an alias that contains itself, integers beyond MAX_DIGITS digits."""
    loader = _yaml_loader()(text)
    sizes: dict[str | None, tuple[int, int]] = {}  # anchor -> (values, height) once closed
    open_anchors: set[str] = set()
    stack: list[list[Any]] = []  # open collections: [values, height, anchor]
    expanded = 0

    def add(values: int, height: int, mark: _Mark | None) -> None:
        nonlocal expanded
        expanded += values
        if expanded > MAX_NODES:
            raise _too_many(what, source)
        if len(stack) + height > MAX_DEPTH:
            raise _too_deep(what, source, mark.line + 1 if mark else None)
        if stack:
            stack[-1][0] += values
            stack[-1][1] = max(stack[-1][1], height + 1)

    try:
        while True:
            ev = loader.get_event()
            if ev is None or isinstance(ev, yaml.StreamEndEvent):
                break
            if isinstance(ev, yaml.ScalarEvent):
                if len(ev.value) > MAX_DIGITS and _is_int(loader, ev):
                    raise SpecError(
                        f"{what} {source} has an integer of {len(ev.value):,} "
                        f"characters at line {_line(ev.start_mark)}; planner reads "
                        f"numbers of at most {MAX_DIGITS:,} digits (limit: number "
                        "size); fix the value",
                        field=what,
                    )
                add(1, 1, ev.start_mark)
                if ev.anchor:
                    sizes[ev.anchor] = (1, 1)
            elif isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                if len(stack) + 1 > MAX_DEPTH:
                    raise _too_deep(what, source, _line(ev.start_mark))
                stack.append([1, 1, ev.anchor])
                if ev.anchor:
                    open_anchors.add(ev.anchor)
            elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                values, height, anchor = stack.pop()
                if anchor:
                    open_anchors.discard(anchor)
                    sizes[anchor] = (values, height)
                add(values, height, ev.start_mark)
            elif isinstance(ev, yaml.AliasEvent):
                if ev.anchor in open_anchors:
                    raise SpecError(
                        f"{what} {source} has an alias *{short(ev.anchor, 40)} inside "
                        f"its own anchor at line {_line(ev.start_mark)} (a value "
                        "that contains itself); remove the alias",
                        field=what,
                    )
                values, height = sizes.get(ev.anchor, (1, 1))  # undefined: the composer says so
                add(values, height, ev.start_mark)
    finally:
        loader.dispose()


def _is_int(loader: _Loader, ev: yaml.ScalarEvent) -> bool:
    # types-PyYAML leaves Resolver.resolve unannotated
    tag = (
        ev.tag
        if ev.tag not in (None, "!")
        else loader.resolve(  # type: ignore[no-untyped-call]
            yaml.ScalarNode, ev.value, ev.implicit
        )
    )
    return tag == "tag:yaml.org,2002:int"


def load_yaml(text: str, *, what: str, source: str, lenient: bool = False) -> Any:
    """YAML (or JSON) text -> data, within the limits (checked before anything is built).
    A syntax error is one SpecError line with its position, or None with `lenient`."""
    try:
        _scan_yaml(text, what=what, source=source)
        loader = _yaml_loader()(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        if lenient:
            return None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(
            f"{what} {source} is not valid YAML{where}: {clip(problem, 120)}; fix the syntax there",
            field=what,
        ) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # a value the YAML constructor cannot build (a date like 2024-13-45, say)
        raise SpecError(
            f"{what} {source} has a value YAML cannot read "
            f"({exc.__class__.__name__}: {clip(str(exc), 80)}); fix the value",
            field=what,
        ) from None


def read_yaml(path: str | Path, *, what: str = "file") -> Any:
    """Read a YAML (or JSON) file; every failure becomes a one-line SpecError."""
    p = Path(path)
    text = read_text(p, what=what, empty_hint="see examples/ for a complete config")
    return load_yaml(text, what=what, source=_name(p))


@contextmanager
def read_budget(source: str, *, seconds: float | None = None) -> Iterator[None]:
    """Stop reading `source` with a one-line SpecError once it has taken `seconds`
    (READ_BUDGET_S): a parser that loops or grows must not hang the command. Uses a
    wall-clock timer signal, so only in the main thread of a POSIX process (elsewhere a
    no-op); nested budgets keep the outer one."""
    seconds = READ_BUDGET_S if seconds is None else seconds
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    )
    if not usable:
        yield
        return

    def expired(signum: int, frame: FrameType | None) -> NoReturn:
        raise SpecError(
            f"reading {short(source, 120)} took more than {seconds:g} s; planner "
            f"gives one file at most {seconds:g} s (limit: reading time); simplify "
            "the file",
            field="file",
            value=source,
        )

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
