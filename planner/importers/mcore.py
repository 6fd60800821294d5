"""Moved to `planner.frameworks.nemo.mcore`; this name stays as its alias for one release."""

from planner._compat import alias

alias(__name__)
