"""The training frameworks, each in its room (megatron, nemo, deepspeed, torchtitan; engines
for serving), and reading any config `validate` knows (`load_any`, `detect_format`: they live
in planner/frameworks/loading.py).

The names below are loaded on first use (module `__getattr__`): `planner plan` imports
`planner.frameworks.runnable` and the writers' refusals, and does not pay for the readers
(the bash reader, the four framework readers) that only reading a config needs."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = ["Imported", "Overrides", "FORMATS", "detect_format", "load_any"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module("planner.frameworks.loading"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the names as if imported eagerly
    from planner.frameworks.loading import FORMATS, Imported, Overrides, detect_format, load_any
