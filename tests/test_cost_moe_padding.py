"""Drop-and-pad MoE (`moe_pad_expert_input_to_capacity`, Megatron-Core's
`--moe-pad-expert-input-to-capacity` with `--moe-expert-capacity-factor`): static dispatch
shapes, so no host sync per MoE layer (the host runs ahead), per-layer CUDA graphs that take
the whole MoE layer, and expert GEMMs on exactly the capacity's rows.

Source of the mechanism: Megatron-Core megatron/core/transformer/moe/token_dispatcher.py,
MoEAlltoAllTokenDispatcher.preprocess (in drop-and-pad mode it returns
`torch.full((num_local_experts,), capacity * tp * ep)`, a host tensor, before any count is
computed on the device) and `_maybe_dtoh_and_synchronize` (does nothing when drop_and_pad);
`get_capacity` = ceil(tokens * k / E * capacity_factor). Every number below is derived in the
test."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from planner.cost.launch import host_mode, host_parts, layer_wall
from planner.cost.moe import GEMM_TILE_M, tile_padded_tokens

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.mark.parametrize(
    "graphs, overlap, padded, expected",
    [
        ("none", False, False, "sync"),  # dropless: the token counts come to the host
        ("none", False, True, "ahead"),  # padded: nothing to wait for
        ("partial", False, True, "ahead"),
        ("none", True, True, "serial"),  # the all-to-all overlap keeps its boundaries
        ("full", False, False, "ahead"),
    ],
    ids=["dropless", "padded", "padded-graphs", "padded-overlap", "full-graph"],
)
def test_host_mode(graphs, overlap, padded, expected):
    assert host_mode(moe=True, cuda_graphs=graphs, ep_overlap=overlap, padded=padded) == expected


def test_a_padded_layer_hides_the_host_behind_the_device_across_its_parts():
    """Device (attention, experts) = (4, 1) ms, host (1, 4) ms, launch 0.01 ms. Dropless (one
    sync): max(4, 1) + max(1, 4) + 1 sync x 2 launches = 8.02 ms. Padded (ahead):
    max(4 + 1, 1 + 4) = 5 ms."""
    dev, host, c = (4e-3, 1e-3), (1e-3, 4e-3), 1e-5
    assert layer_wall(dev, host, mode="sync", launch_s=c) == pytest.approx(8.02e-3)
    assert layer_wall(dev, host, mode="ahead", launch_s=c) == pytest.approx(5e-3)


def test_per_layer_graphs_take_a_padded_expert_block_whole():
    """Qwen3-30B-A3B on EP 8: 16 local experts; launch 20 us, tensorwise FP8 (2 kernels per GEMM
    input, launched from C++ at CPP_LAUNCH_US = 5 us). Partial graphs, dropless: the expert
    block keeps 30 + 2*16 - 4 = 58 op launches (router and preprocessing graphed) and
    2*16*2 = 64 quantization launches, 58*20 + 64*5 = 1,480 us; padded: the whole MoE layer is
    in the layer's graph, 1 launch. The attention block is 1 launch either way."""
    kw = dict(moe=True, cuda_graphs="partial", launch_us=20.0, local_experts=16)
    assert host_parts(**kw, recipe="tensorwise") == pytest.approx((20e-6, 1480e-6))
    assert host_parts(**kw, recipe="tensorwise", padded=True) == pytest.approx((20e-6, 20e-6))
    # without graphs padding changes no launch count
    eager = dict(kw, cuda_graphs="none")
    assert host_parts(**eager, recipe="tensorwise", padded=True) == host_parts(
        **eager, recipe="tensorwise"
    )


@pytest.mark.parametrize(
    "n, expected",
    [(2048, 2048), (2049, 2176), (100, 128), (1, 128)],
    ids=["whole-tiles", "one-over", "under-a-tile", "one-row"],
)
def test_padded_experts_compute_whole_tiles_of_their_exact_rows(n, expected):
    """Padded, every expert holds exactly n rows: ceil(n / 128) * 128 computed."""
    assert GEMM_TILE_M == 128
    assert tile_padded_tokens(n, padded=True) == expected


def _qwen3_b200_case(padded: bool):
    from benchmarks.accuracy import load_all

    case = next(
        c
        for c in load_all()
        if c.id == "mb-26.02-qwen3-30b-a3b-b200-8g-fp8mx-gbs512-mbs1-tp1pp1ep8"
    )
    return case.job, case.layout.with_(moe_pad_expert_input_to_capacity=padded)


def test_padding_qwen3_30b_at_capacity_one_computes_whole_tiles():
    """Qwen3-30B-A3B, 4,096 tokens a micro-batch on each of 8 B200 (EP 8, capacity factor 1.0):
    capacity C = ceil(4096 * 8 / 128 * 1.0) = 256 rows per expert from each rank, so a local
    expert computes 8 * 256 = 2,048 rows, 16 whole tiles: the expert rate is the unpadded
    size law's with no tile loss, 2111.5 / 2048 of the dropless rate (whose mean 2,048 rows
    cost 2,048 + 127/2 = 2,111.5 in tiles)."""
    from planner.cost.model import CostModel

    job, padded = _qwen3_b200_case(True)
    _, dropless = _qwen3_b200_case(False)
    assert math.ceil(4096 * 8 / 128 * 1.0) * 8 == 2048
    cm = CostModel(job)
    _, x_pad, _ = cm._rates(padded, 4096.0)
    _, x_drop, _ = cm._rates(dropless, 4096.0)
    assert x_pad / x_drop == pytest.approx(2111.5 / 2048)


def test_padding_removes_the_moe_layers_host_sync_from_a_step():
    """The same run padded: the same FLOPs, no sync per MoE layer and the expert block inside
    the per-layer graphs: the step is faster, and no slower than its device time."""
    from planner.cost import estimate

    job, padded = _qwen3_b200_case(True)
    _, dropless = _qwen3_b200_case(False)
    t_pad, t_drop = estimate(job, padded).time, estimate(job, dropless).time
    assert t_pad.model_flops == t_drop.model_flops
    assert t_pad.step_time_s < t_drop.step_time_s


def test_the_megatron_export_writes_padding_with_its_capacity_factor():
    """Megatron-Core raises without a capacity factor: the export writes 1.0 explicitly."""
    from planner.frameworks.megatron.writer import moe_flags

    job, padded = _qwen3_b200_case(True)
    flags = dict(moe_flags(job.model, padded))
    assert flags["--moe-expert-capacity-factor"] == "1"
    assert "--moe-pad-expert-input-to-capacity" in flags
    _, dropless = _qwen3_b200_case(False)
    assert "--moe-pad-expert-input-to-capacity" not in dict(moe_flags(job.model, dropless))
