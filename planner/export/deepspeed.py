"""Moved to `planner.frameworks.deepspeed.writer`; this name stays as its alias for one release."""

from planner._compat import alias

alias(__name__)
