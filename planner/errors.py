"""Error types, and the one vocabulary for rule results.

`PlannerError` is the root. `SpecError` means the input cannot be used (exit code 2);
`InfeasibleError` means the input is usable but nothing fits or a rule is broken (exit code 1).
`Violation` is what a rule returns: a kebab-case rule id, a message that names the values and
the fix, and a severity. Only `cli.py` turns these into exit codes.

An error's message is one line. Where the code knows which field and value it is about, the
error carries them too (`field`, `value`), so `--json` can report them as data; `short()` is
how any user-supplied value enters a message: a bounded form, never the whole `repr`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "PlannerError",
    "SpecError",
    "InfeasibleError",
    "InternalError",
    "Violation",
    "Severity",
    "short",
    "clip",
    "MAX_MESSAGE_CHARS",
]

Severity = Literal["error", "warning"]

MAX_MESSAGE_CHARS = 1000
"""An error line longer than this is cut in the middle (its start names the field, its end
the fix): user data can be long, the line a user reads should not be."""

_UNSET: Any = object()


def _one_line(message: str) -> str:
    text = " ".join(str(message).splitlines())
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:700] + " ... " + text[-(MAX_MESSAGE_CHARS - 705) :]
    return text


class PlannerError(Exception):
    """Base class of every error planner reports to a user.

    `field` (e.g. `parallel.tp`, `--gpus`) and `value` are the input the error is about,
    when known; `message` is always the complete one-line explanation.
    """

    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None, value: Any = _UNSET):
        message = _one_line(message)
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = value

    @property
    def has_value(self) -> bool:
        return self.value is not _UNSET

    def prefixed(self, prefix: str, suffix: str = "") -> PlannerError:
        """The same error (field, value) with `prefix: ` in front of the message (a file
        name, say) and `suffix` after it."""
        kw = {"field": self.field}
        if self.has_value:
            kw["value"] = self.value
        return type(self)(f"{prefix}: {self.message}{suffix}", **kw)

    def as_json(self) -> dict[str, Any]:
        """{"code", "field", "value", "message"}: `value` as JSON data (a number, bool, null or
        a string at most 200 characters long)."""
        field, value = self.field, (self.value if self.has_value else None)
        if field is None:  # the messages' own `field = value: problem; fix` form
            found = re.match(r"(?:error: )?([-\w.\[\]]+) = (.{1,200}?): ", self.message)
            if found:
                field = found.group(1)
                if not self.has_value:
                    value = _literal(found.group(2))
        return {
            "code": self.exit_code,
            "field": field,
            "value": _json_value(value),
            "message": self.message,
        }


class SpecError(PlannerError):
    """Unusable input: missing file, malformed YAML, unknown key, bad value (exit 2)."""

    exit_code = 2


class InfeasibleError(PlannerError):
    """The input is usable but breaks a rule or nothing fits (exit 1)."""

    exit_code = 1


class InternalError(PlannerError):
    """A bug in planner (exit 3): only cli.py makes one, from an unexpected exception, to
    report it in the same one-line (and --json) form as every other error."""

    exit_code = 3


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: `rule` is a kebab id such as `heads-divisible-by-tp`."""

    rule: str
    message: str
    severity: Severity = "error"

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


# ------------------------------------------------------------------------- short forms


def _literal(text: str) -> Any:
    """A value as a message wrote it (`8`, `0.5`, `'eight'`) back as data."""
    if re.fullmatch(r"-?\d{1,18}", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", text):
        return float(text)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= 63 else short(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:197] + "..."
    return short(value, limit=200)


def clip(text: str, limit: int = 200) -> str:
    """Plain text (a parser's message, say) cut to `limit` characters, unquoted."""
    text = " ".join(str(text).splitlines())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short(value: Any, limit: int = 60) -> str:
    """A bounded, readable form of any value for an error message (`repr`-like).

    Never builds the whole `repr` of a large value: strings are cut before quoting,
    containers show their first items, integers beyond 60 digits their size (Python cannot
    even print one beyond 4,300 digits), other objects their type.
    """
    text = _short(value, limit, depth=0)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any, limit: int, depth: int) -> str:
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 200:
            return f"<an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
        return repr(value)
    if isinstance(value, (str, bytes)):
        return repr(value[:limit])
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        if depth >= 3:
            return "[...]" if not isinstance(value, dict) else "{...}"
        brackets = {dict: "{}", tuple: "()"}.get(type(value), "[]")
        opening, closing = brackets[0], brackets[1]
        items = value.items() if isinstance(value, dict) else value
        parts, used = [], 2
        for i, item in enumerate(items):
            if used > limit or i >= 10:
                parts.append("...")
                break
            if isinstance(value, dict):
                part = f"{_short(item[0], limit, depth + 1)}: {_short(item[1], limit, depth + 1)}"
            else:
                part = _short(item, limit, depth + 1)
            parts.append(part)
            used += len(part) + 2
        return opening + ", ".join(parts) + closing
    return f"<{type(value).__name__}>"
