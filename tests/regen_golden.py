"""Regenerate the exporter golden files: `PYTHONPATH=. python tests/regen_golden.py` (from the
repo root, so that it imports this checkout's planner).

Goldens live in tests/golden/, one file per (example config, format) that the format can
express: `<config>.<format>.<ext>`. They are written without an estimate (the time model is
still being calibrated) and with the planner version replaced by `<version>`, so neither a
model change nor a release moves them; only a change to what an exporter writes does.
tests/test_frameworks_writers.py compares against these files with the same `golden_text`.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "golden"
EXAMPLES = ROOT / "examples"
RECIPE_DIRS = (
    ROOT / "tests" / "data" / "recipes",  # the script exporters' recipe configs
    ROOT / "tests" / "data" / "export",
)  # the NeMo / torchtitan exporters'
EXTENSIONS = {
    "megatron": "sh",
    "deepspeed": "txt",
    "torchtitan": "toml",
    "nemo": "yaml",
    "megatron-bridge": "yaml",
}

# (example config, formats it is exported to); a format missing here refuses that config
# (tests/test_frameworks_writers.py checks the refusals).
CASES = [
    ("llama3-70b-2048xh100", ("megatron", "deepspeed", "torchtitan", "nemo", "megatron-bridge")),
    ("mixtral-8x7b-64xh100", ("megatron", "deepspeed", "torchtitan", "nemo", "megatron-bridge")),
    ("llama3-8b-128k-64xh100", ("megatron", "deepspeed", "torchtitan", "nemo", "megatron-bridge")),
    ("deepseek-v3-1024xb200", ("megatron", "torchtitan", "megatron-bridge")),
]

# Configs under tests/data/recipes/ with the production-recipe keys, exported by the
# script exporters (tests/test_frameworks_megatron_deepspeed_writers.py checks them and their refusals).
SCRIPT_RECIPE_CASES = [
    ("recipe-llama3-8b-fp8-8xh100", ("megatron",)),
    ("recipe-mixtral-8x7b-64xh100", ("megatron",)),
    ("recipe-llama3-8b-offload-8xh100", ("megatron",)),
    ("recipe-70layers-pp12-96xh100", ("megatron", "deepspeed")),
]


# (tests/data/export config, formats): the recipe settings in each framework's terms
# (tests/test_frameworks_torchtitan_nemo_writers.py checks them and their round trips)
YAML_RECIPE_CASES = [
    ("llama3-8b-fp8-8xh100", ("nemo",)),
    ("llama3-70b-fp8-recompute-256xh100", ("nemo", "torchtitan")),
    ("qwen3-30b-a3b-mxfp8-64xb200", ("nemo", "torchtitan")),
    ("mixtral-8x7b-recipe-64xh100", ("nemo",)),
]


RECIPE_CASES = SCRIPT_RECIPE_CASES + YAML_RECIPE_CASES


def config_path(config: str) -> Path:
    """examples/<config>.yaml, else the recipe config of that name."""
    for folder in (EXAMPLES,) + RECIPE_DIRS:
        path = folder / f"{config}.yaml"
        if path.exists():
            return path
    return EXAMPLES / f"{config}.yaml"


def golden_path(config: str, fmt: str) -> Path:
    return GOLDEN_DIR / f"{config}.{fmt}.{EXTENSIONS[fmt]}"


def golden_text(config: str, fmt: str) -> str:
    """The export of examples/<config>.yaml in `fmt`, as a golden file holds it."""
    from planner import __version__
    from planner.config import load_config
    from planner.frameworks.export import export

    job, layout = load_config(config_path(config))
    text = export(job, layout, fmt, estimate=None)
    return text.replace(f"planner {__version__}", "planner <version>")


def main() -> int:
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for config, formats in CASES + RECIPE_CASES:
        for fmt in formats:
            path = golden_path(config, fmt)
            path.write_text(golden_text(config, fmt), encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
