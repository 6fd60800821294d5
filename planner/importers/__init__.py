"""Moved to `planner.frameworks`; this package stays as its alias for one release."""

from planner.frameworks import *  # noqa: F403
from planner.frameworks import __all__  # noqa: F401
