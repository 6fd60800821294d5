"""Inference planning: `planner serve` and `planner validate SERVE.yaml`.

specs (the serving config) -> layout (Instance, ServeLayout) -> engines (defaults, KV sizing)
-> memory, time -> estimate -> rules -> validate | search (+ reasoning, the chapter's trace)
-> export (launch commands) | importer (reading them back) | report (rich and JSON).
The rest of planner is reused, not copied: specs, presets, hardware profiles, parameter counts
(cost/params.py, cost/shape.py) and the collectives (cost/comm.py).
"""

from planner.serve.estimate import ServeEstimate, estimate
from planner.serve.layout import Instance, ServeLayout
from planner.serve.search import ServeOptions, ServeSearchResult, search
from planner.serve.specs import ServeJob, ServingSpec, load_serve_config, serve_config_from_data
from planner.serve.validate import ServeValidation, validate

__all__ = [
    "ServeEstimate",
    "estimate",
    "Instance",
    "ServeLayout",
    "ServeOptions",
    "ServeSearchResult",
    "search",
    "ServeJob",
    "ServingSpec",
    "load_serve_config",
    "serve_config_from_data",
    "ServeValidation",
    "validate",
]
