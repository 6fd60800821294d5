"""Error types, and the one vocabulary for rule results.

`PlannerError` is the root. `SpecError` means the input cannot be used (exit code 2);
`InfeasibleError` means the input is usable but nothing fits or a rule is broken (exit code 1).
`Violation` is what a rule returns: a kebab-case rule id, a message that names the values and
the fix, and a severity. Only `cli.py` turns these into exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["PlannerError", "SpecError", "InfeasibleError", "Violation", "Severity"]

Severity = Literal["error", "warning"]


class PlannerError(Exception):
    """Base class of every error planner reports to a user."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class SpecError(PlannerError):
    """Unusable input: missing file, malformed YAML, unknown key, bad value (exit 2)."""

    exit_code = 2


class InfeasibleError(PlannerError):
    """The input is usable but breaks a rule or nothing fits (exit 1)."""

    exit_code = 1


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: `rule` is a kebab id such as `heads-divisible-by-tp`."""

    rule: str
    message: str
    severity: Severity = "error"

    def as_dict(self) -> dict:
        return {"rule": self.rule, "message": self.message}
