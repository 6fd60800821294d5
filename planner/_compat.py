"""Old import paths kept for one release: each old module is the new module under its old
name (the same module object, so attributes and monkeypatching behave as before)."""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType

__all__ = ["alias", "MOVED"]

MOVED = {
    "planner.importers": "planner.frameworks",
    "planner.importers.shell": "planner.readers.bash",
    "planner.importers.interpolation": "planner.readers.omegaconf",
    "planner.importers.common": "planner.frameworks.common",
    "planner.importers.recipe": "planner.frameworks.megatron.recipe",
    "planner.importers.megatron": "planner.frameworks.megatron.reader",
    "planner.importers.nemo": "planner.frameworks.nemo.reader",
    "planner.importers.bridge": "planner.frameworks.nemo.bridge",
    "planner.importers.mcore": "planner.frameworks.nemo.mcore",
    "planner.importers.deepspeed": "planner.frameworks.deepspeed.reader",
    "planner.importers.torchtitan": "planner.frameworks.torchtitan.reader",
    "planner.export": "planner.frameworks.export",
    "planner.export.common": "planner.frameworks.writing",
    "planner.export.megatron": "planner.frameworks.megatron.writer",
    "planner.export.nemo": "planner.frameworks.nemo.writer",
    "planner.export.deepspeed": "planner.frameworks.deepspeed.writer",
    "planner.export.torchtitan": "planner.frameworks.torchtitan.writer",
    "planner.torchtitan_flavors": "planner.frameworks.torchtitan.flavors",
    "planner.serve.importer": "planner.frameworks.engines.reader",
    "planner.serve.export": "planner.frameworks.engines.writer",
    "planner.serve.report": "planner.views.serve_report",
    "planner.report": "planner.views.report",
    "planner.pictures": "planner.views.pictures",
    "planner.html": "planner.views.html",
}
"""Old module path -> new module path (docs/architecture.md)."""


def alias(old: str) -> ModuleType:
    """Make `old` the module it moved to (called from the old module's file)."""
    module = import_module(MOVED[old])
    sys.modules[old] = module
    return module
