"""Moved to `planner.frameworks.export`; this package stays as its alias for one release."""

from planner.frameworks.export import *  # noqa: F403
from planner.frameworks.export import __all__  # noqa: F401
