"""planner: how to split a large model across a GPU cluster, with numbers you can check.

The public names below are loaded on first use (module `__getattr__`), so `import planner`
(and `planner --version`) does not pay for pydantic, the cost model or the search."""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_PUBLIC = {
    "Job": "planner.config",
    "load_config": "planner.config",
    "Estimate": "planner.cost",
    "estimate": "planner.cost",
    "PlannerError": "planner.errors",
    "SpecError": "planner.errors",
    "InfeasibleError": "planner.errors",
    "Violation": "planner.errors",
    "Layout": "planner.layout",
    "get_preset": "planner.presets",
    "resolve_model": "planner.presets",
    "ValidationResult": "planner.validate",
    "validate": "planner.validate",
}
"""Public name -> the module that defines it."""

__all__ = [
    "Job",
    "load_config",
    "Estimate",
    "estimate",
    "PlannerError",
    "SpecError",
    "InfeasibleError",
    "Violation",
    "Layout",
    "get_preset",
    "resolve_model",
    "ValidationResult",
    "validate",
    "__version__",
]  # _PUBLIC and the version


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


class _Package(ModuleType):
    """`planner.validate` is the function, as when this file imported it eagerly: the import
    system binds a submodule to its parent's attribute when it first loads it, and for the
    submodule `planner.validate` that would hide the function of the same name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and _PUBLIC.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:  # for type checkers and IDEs: the names as if imported eagerly
    from planner.config import Job, load_config
    from planner.cost import Estimate, estimate
    from planner.errors import InfeasibleError, PlannerError, SpecError, Violation
    from planner.layout import Layout
    from planner.presets import get_preset, resolve_model
    from planner.validate import ValidationResult, validate
