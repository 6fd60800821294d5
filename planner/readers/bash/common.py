"""What every stage of the bash reader shares: the *unresolved* marker (how a value
that depends on something planner does not run is written, found and shown), the limit error,
and the key a file path is kept under."""

from __future__ import annotations

import posixpath
import re

from planner.errors import SpecError

_MARK = "\x00"
_MARK_RE = re.compile(r"\x00([^\x00]*)\x00")
_CHUNK_RE = re.compile(r"(?:\x00[^\x00]*\x00|[^\s\x00])+")
_NAME_RE = re.compile(r"[A-Za-z_]\w*")


def unresolved(name: str) -> str:
    """The marker for a value planner cannot know without running something."""
    return f"{_MARK}{name.replace(_MARK, '')}{_MARK}"


def unresolved_names(text: str) -> list[str]:
    """What a value depends on that the script does not set, e.g. ['$NNODES']."""
    return list(dict.fromkeys(_MARK_RE.findall(text)))


def only_unresolved(text: str) -> bool:
    """True if the value is nothing but unresolved parts (e.g. an unset `$EXTRA_ARGS`)."""
    return bool(unresolved_names(text)) and not _MARK_RE.sub("", text).strip()


def display(text: str) -> str:
    """A value as the user would read it: markers shown by name."""
    return _MARK_RE.sub(lambda m: m.group(1), text)


def why(names: list[str]) -> str:
    """'depends on $X, which the script never sets' (and the like), for error messages."""
    sets = [n for n in names if not n.startswith(("$(", "`", "$((", "${"))]
    subs = [n for n in names if n not in sets]
    parts = []
    if sets:
        parts.append(f"{', '.join(sets)}, which the script never sets (and gives no default)")
    if subs:
        parts.append(f"{', '.join(subs)}, which planner does not run or evaluate")
    return "depends on " + "; and on ".join(parts)


def _is_unset_marker(name: str) -> bool:
    """A marker for a variable or positional parameter that is not set (not a substitution)."""
    return bool(re.fullmatch(r"\$(?:[A-Za-z_]\w*|[0-9]+|[@*#])", name))


def _limit(what: str, line: int) -> SpecError:
    where = f"line {line}: " if line else ""
    return SpecError(
        f"{where}{what}; a launch script never needs that, so planner stops "
        "reading it; fix the script"
    )


def _path_key(name: str) -> str:
    return posixpath.normpath(name) if name else name
