"""The DeepEP-on-Hopper caveat (planner/caveats.py `dispatcher_caveats`): where it applies, and
that its premise still holds in the calibration data. When the model comes to predict these
runs at or above their measured step time, `test_the_premise_holds` fails and the caveat
must be revisited, not left standing."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy import load_cases  # noqa: E402
from planner.caveats import caveats, dispatcher_caveats  # noqa: E402
from planner.config import config_from_data  # noqa: E402
from planner.cost import estimate  # noqa: E402

MODERN = ROOT / "benchmarks" / "data" / "calibration-modern.yaml"


def _cfg(hardware: str, num_gpus: int, **parallel):
    data = {
        "model": "qwen3-235b-a22b",
        "hardware": hardware,
        "num_gpus": num_gpus,
        "training": {"seq_length": 4096, "global_batch_size": 512, "precision": "bf16"},
        "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, **parallel},
    }
    job, layout = config_from_data(data)
    return job, layout


def test_deepep_across_nodes_on_hopper_carries_it():
    # EP 16 on 8-GPU H100 nodes: the all-to-all leaves the node
    job, lay = _cfg("h100-sxm", 16, ep=16, moe_token_dispatcher="deepep")
    (line,) = dispatcher_caveats(job, lay)
    assert "DeepEP across nodes on Hopper" in line and "DeepEP#59" in line
    assert line in caveats(job, lay)


def test_not_inside_a_node_nor_for_other_dispatchers_nor_on_blackwell():
    job, lay = _cfg("h100-sxm", 8, ep=8, moe_token_dispatcher="deepep")  # one node
    assert dispatcher_caveats(job, lay) == []
    for kind in ("alltoall", "hybridep"):
        job, lay = _cfg("h100-sxm", 16, ep=16, moe_token_dispatcher=kind)
        assert dispatcher_caveats(job, lay) == []
    job, lay = _cfg("b200", 16, ep=16, moe_token_dispatcher="deepep")
    assert dispatcher_caveats(job, lay) == []
    assert dispatcher_caveats(job, None) == []


@cache
def _cited() -> tuple:
    return tuple(c for c in load_cases(paths=[MODERN]) if dispatcher_caveats(c.job, c.layout))


def test_the_caveat_covers_exactly_the_deepep_runs_across_hopper_nodes():
    # the calibration runs it stands on: Kimi K2 on 256 H100 (NeMo AutoModel, DeepEP) and
    # Qwen3-235B-A22B on 256 H100 (Megatron-Bridge 26.02.01, DeepEP with the 1F1B overlap)
    assert {c.id for c in _cited()} == {
        "am-kimi-k2-h100-256g",
        "mb-26.02.01-qwen3-235b-a22b-h100-256g-fp8cs-gbs8192-mbs1-tp2pp8ep32",
    }


def test_the_premise_holds():
    # each of them measured slower than the model estimates ("may be optimistic")
    for c in _cited():
        assert estimate(c.job, c.layout).time.step_time_s < c.measured_s, c.id
