"""Accuracy, calibration and speed benchmarks. The measured runs they read live in
benchmarks/data/ (each file names its sources; benchmarks/data/README.md)."""

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
"""benchmarks/data/: the calibration files."""
