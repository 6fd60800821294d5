"""planner: how to split a large model across a GPU cluster, with numbers you can check."""

from planner.config import Job, load_config
from planner.cost import Estimate, estimate
from planner.errors import InfeasibleError, PlannerError, SpecError, Violation
from planner.layout import Layout
from planner.presets import get_preset, resolve_model
from planner.validate import ValidationResult, validate

__all__ = ["Job", "load_config", "Estimate", "estimate", "PlannerError", "SpecError",
           "InfeasibleError", "Violation", "Layout", "get_preset", "resolve_model",
           "ValidationResult", "validate", "__version__"]

__version__ = "0.1.0"
