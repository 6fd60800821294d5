"""The hardware profiles (hardware_profiles/*.yaml): every one loads and documents its numbers;
the new ones (h800, b300, gb300-nvl72, h100-96g) carry what their sources publish, derived in
the test from the source's own figures; and all of them are physically consistent."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from planner.config import profile_dir, profile_names, resolve_hardware

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"
NEW = ["h800", "b300", "gb300-nvl72", "h100-96g"]
Gbit = 1e9 / 8  # bytes/s in one Gb/s
PCIE5_X16_RAW = 32e9 * 16 * 128 / 130 / 8 / 1e9  # GB/s one direction: 32 GT/s x 16 lanes, 128b/130b


def _hw(name: str):
    return resolve_hardware(name)


# ---------------------------------------------------------------------------- every profile


@pytest.mark.parametrize("name", profile_names())
def test_profile_loads_under_its_file_name(name):
    hw = _hw(name)
    assert hw.name == name
    assert hw.architecture is not None, f"{name}: architecture unset"


def test_the_new_profiles_exist():
    assert set(NEW) <= set(profile_names())


@pytest.mark.parametrize("name", profile_names())
def test_every_number_has_a_comment_above_it(name):
    # "every number with its source in a comment": each key outside the calibration block is
    # directly preceded by a comment line (peak_tflops' entries each by their own); the
    # calibration blocks (training and serving) are commented as blocks.
    lines = (profile_dir() / f"{name}.yaml").read_text().splitlines()
    in_calibration = False
    for i, line in enumerate(lines):
        key = re.match(r"^(\s*)([a-z0-9_]+):\s*(\S.*)?$", line)
        if not key:
            continue
        if not key.group(1):
            in_calibration = key.group(2) in ("calibration", "serving_calibration")
        if in_calibration or key.group(2) in ("name", "description") or key.group(3) is None:
            continue
        assert lines[i - 1].lstrip().startswith("#"), (
            f"{name}: {key.group(2)} has no source comment"
        )


@pytest.mark.parametrize("name", profile_names())
def test_borrowed_calibration_says_so(name):
    # fitted_on empty means the efficiency parameters are another GPU's: the file must say so
    # in words, and the caveat machinery reads the empty tuple.
    hw = _hw(name)
    if hw.calibration.fitted_on:
        return
    assert "not fitted" in (profile_dir() / f"{name}.yaml").read_text().lower(), name


@pytest.mark.parametrize("name", profile_names())
def test_peaks_are_ordered(name):
    # lower precision never runs slower on the tensor cores: fp4 >= fp8 >= bf16 where present
    p = _hw(name).peak_tflops
    assert p.fp16 == pytest.approx(p.bf16), name
    if p.fp8 is not None:
        assert p.fp8 >= p.bf16, name
    if p.fp4 is not None:
        assert p.fp8 is not None and p.fp4 >= p.fp8, name


@pytest.mark.parametrize("name", profile_names())
def test_node_sits_inside_its_nvlink_domain(name):
    hw = _hw(name)
    assert hw.nvlink_domain_size >= hw.gpus_per_node
    assert hw.nvlink_domain_size % hw.gpus_per_node == 0, (
        "a domain is whole nodes (8, or 18 trays of 4)"
    )
    assert hw.nvlink_bandwidth_gb_per_s > hw.network_bandwidth_gb_per_s, "scale-up is the fast link"


# Marketed HBM per GPU, in the vendor's "GB". HBM marketing GB are binary: an "80GB" H100 shows
# 79.11 GiB to torch (84.9e9 bytes, more than 80e9), so the torch-visible GiB must be below the
# marketed number read as GiB, and (no decimal/binary slip, nothing left out) within 10% of it.
MARKETED_GB = {
    "a100-40g": 40,
    "a100-80g": 80,
    "h100-sxm": 80,  # H100 SXM datasheet: 80 GB HBM3
    "h800": 80,  # "NVIDIA H800 80GB HBM3"
    "h100-96g": 96,  # torchtitan benchmarks/llama3_h100_202412_torchtitan.md: "96GB HBM2e"
    "h200": 141,
    "b200": 180,  # DGX B200: 1,440 GB / 8
    "b300": 270,  # NVIDIA Blackwell Ultra datasheet, HGX B300: "270 GB HBM3e" (DGX: 288)
    "gb200-nvl72": 186,  # GB200 NVL72: 13.4 TB / 72
    "gb300-nvl72": 279,  # NVIDIA Blackwell Ultra datasheet, GB300: "up to 279 GB HBM3e"
    "mi300x": 192,
    "rtx-pro-6000": 96,  # NVIDIA RTX PRO 6000 Blackwell Server Edition: 96 GB GDDR7
}


def test_every_profile_has_a_marketed_capacity():
    assert set(MARKETED_GB) == set(profile_names())


@pytest.mark.parametrize("name", sorted(MARKETED_GB))
def test_memory_below_the_marketed_capacity(name):
    gib = _hw(name).memory_gib
    assert 0.9 * MARKETED_GB[name] <= gib < MARKETED_GB[name], name


# ------------------------------------------------------------------------- h800 (DeepSeek-V3)


def test_h800_is_h100_compute_with_cut_nvlink():
    h800, h100 = _hw("h800"), _hw("h100-sxm")
    # deepseek-ai/FlashMLA docs/20250422-new-kernel-deep-dive.md: "An NVIDIA H800 SXM5 GPU has a
    # peak memory bandwidth of 3.35 TB/s and peak FLOPs of 990 TFlops"
    assert h800.peak_tflops.bf16 == pytest.approx(990, abs=1)
    assert h800.hbm_bandwidth_gb_per_s == pytest.approx(3350)
    # the same GH100 SXM5: H100 SXM's dense peaks and HBM3 (datasheet 989.4 / 1,978.9)
    assert h800.peak_tflops == h100.peak_tflops
    assert h800.memory_gib == h100.memory_gib
    assert h800.architecture == "hopper"
    # DeepSeek, "Insights into DeepSeek-V3" (ISCA 2025, arXiv:2505.09343) section 4.1: "the
    # NVLink bandwidth in H800 SXM nodes is reduced from 900 GB/s to 400 GB/s" (bidirectional)
    assert h800.nvlink_bandwidth_gb_per_s == pytest.approx(400 / 2)
    assert h800.nvlink_bandwidth_gb_per_s == pytest.approx(
        h100.nvlink_bandwidth_gb_per_s * 400 / 900
    )
    # ... "each node is equipped with eight 400G Infiniband (IB) CX7 NICs": 8 GPUs, 8 NICs
    assert h800.gpus_per_node == h800.nvlink_domain_size == 8
    assert h800.network_bandwidth_gb_per_s * 1e9 == pytest.approx(400 * Gbit)


def test_h800_nominal_nvlink_is_above_what_deepseek_measured():
    # DeepSeek-V3 report (arXiv:2412.19437) section 3.2.2: "NVLink offers a bandwidth of 160 GB/s,
    # roughly 3.2 times that of IB (50 GB/s)" -- achieved figures, so the nominal one-direction
    # bandwidth must exceed them, and the H100 fit's 0.75 NVLink efficiency lands near 160.
    h800 = _hw("h800")
    assert h800.nvlink_bandwidth_gb_per_s > 160
    assert 160 / h800.nvlink_bandwidth_gb_per_s == pytest.approx(0.8)
    assert h800.nvlink_bandwidth_gb_per_s * h800.calibration.nvlink_efficiency == pytest.approx(
        160, rel=0.1
    )


# ------------------------------------------------------------------------- b300 / gb300-nvl72

# (profile, precision, expected dense TFLOP/s per GPU, source arithmetic)
PUBLISHED_PEAKS = [
    # NVIDIA HGX page, HGX B300 (8 GPUs): FP16/BF16 36 PFLOPS sparse, dense = 1/2
    pytest.param("b300", "bf16", 36_000 / 8 / 2, id="b300-bf16"),
    pytest.param("b300", "fp16", 36_000 / 8 / 2, id="b300-fp16"),
    # HGX B300: FP8/FP6 72 PFLOPS sparse, dense = 1/2
    pytest.param("b300", "fp8", 72_000 / 8 / 2, id="b300-fp8"),
    # HGX B300 and DGX B300: FP4 "144 PFLOPS | 108 PFLOPS" (sparse | dense)
    pytest.param("b300", "fp4", 108_000 / 8, id="b300-fp4"),
    # NVIDIA GB300 NVL72 (72 GPUs): FP16/BF16 360 PFLOPS sparse, dense = 1/2
    pytest.param("gb300-nvl72", "bf16", 360_000 / 72 / 2, id="gb300-bf16"),
    pytest.param("gb300-nvl72", "fp16", 360_000 / 72 / 2, id="gb300-fp16"),
    # GB300 NVL72: FP8/FP6 720 PFLOPS sparse
    pytest.param("gb300-nvl72", "fp8", 720_000 / 72 / 2, id="gb300-fp8"),
    # GB300 NVL72: FP4 "1,440 PFLOPS | 1,080 PFLOPS" (sparse | dense)
    pytest.param("gb300-nvl72", "fp4", 1_080_000 / 72, id="gb300-fp4"),
]


@pytest.mark.parametrize("name, precision, tflops", PUBLISHED_PEAKS)
def test_blackwell_ultra_peaks_are_nvidias(name, precision, tflops):
    assert getattr(_hw(name).peak_tflops, precision) == pytest.approx(tflops)


def test_blackwell_ultra_trades_for_fp4():
    # Blackwell Ultra keeps Blackwell's BF16/FP8 rates and runs dense FP4 at 3x FP8 (Blackwell:
    # 2x), the "1.5x more dense FP4" NVIDIA advertises: GB300 15 vs GB200's 10 PFLOPS.
    for name in ("b300", "gb300-nvl72"):
        p = _hw(name).peak_tflops
        assert p.fp4 == pytest.approx(3 * p.fp8), name
        assert p.fp8 == pytest.approx(2 * p.bf16), name
    assert _hw("b300").peak_tflops.bf16 == _hw("b200").peak_tflops.bf16
    assert _hw("gb300-nvl72").peak_tflops.bf16 == _hw("gb200-nvl72").peak_tflops.bf16


def test_blackwell_ultra_links_and_memory():
    b300, gb300 = _hw("b300"), _hw("gb300-nvl72")
    for hw in (b300, gb300):
        assert hw.architecture == "blackwell"
        # HGX B300 "NVSwitch GPU-to-GPU Bandwidth 1.8 TB/s"; GB300 NVL72 "130 TB/s" / 72
        assert hw.nvlink_bandwidth_gb_per_s == pytest.approx(1800 / 2)
        # ConnectX-8 SuperNIC, 800 Gb/s per GPU (DGX B300 datasheet; GB300 NVL72 page)
        assert hw.network_bandwidth_gb_per_s * 1e9 == pytest.approx(800 * Gbit)
    # NVIDIA GB300 NVL72: "up to 576 TB/s" HBM3e per 72 GPUs
    assert gb300.hbm_bandwidth_gb_per_s == pytest.approx(576_000 / 72)
    # Blackwell Ultra datasheet, HGX B300: "270 GB HBM3e @ 7.7 TB/s"
    assert b300.hbm_bandwidth_gb_per_s == pytest.approx(7700)
    # 8 GPUs per HGX board; GB300 NVL72: 18 compute trays of 4 GPUs, one 72-GPU NVLink domain
    assert (b300.gpus_per_node, b300.nvlink_domain_size) == (8, 8)
    assert (gb300.gpus_per_node, gb300.nvlink_domain_size) == (4, 72)
    assert gb300.nvlink_domain_size // gb300.gpus_per_node == 18
    # measured torch totals: "GPU 7 has a total capacity of 267.69 GiB" (8x B300 nodes),
    # "GPU 0 has a total capacity of 276.50 GiB" (16x4 GB300 torchtitan job; DGX Station GB300)
    assert b300.memory_gib == pytest.approx(287428771840 / 2**30, abs=0.005)
    assert gb300.memory_gib == pytest.approx(276.50)
    # NVLink-C2C to Grace is faster than PCIe Gen5 x16; a PCIe host is below its raw rate
    assert gb300.host_bandwidth_gb_per_s > PCIE5_X16_RAW > b300.host_bandwidth_gb_per_s


# ------------------------------------------------------------------------ h100-96g (500 W)


def test_h100_96g_published_figures():
    hw = _hw("h100-96g")
    # torchtitan benchmarks/llama3_h100_202412_torchtitan.md: "Each host has 8 NVIDIA H100 GPUs
    # fully connected with NVLink ... 96GB HBM2e with 2.4 TB/sec peak memory bandwidth ...
    # backend RDMA network with 400 Gb/s per GPU"
    assert hw.gpus_per_node == hw.nvlink_domain_size == 8
    assert hw.hbm_bandwidth_gb_per_s == pytest.approx(2400)
    assert hw.network_bandwidth_gb_per_s * 1e9 == pytest.approx(400 * Gbit)
    assert hw.architecture == "hopper"
    # the same benchmark reports up to 84.9 GiB reserved (Table 6): the capacity is above it
    assert hw.memory_gib > 84.9


def test_h100_96g_peak_is_the_derived_500w_estimate():
    # Not published: torchtitan's footnote says "the actual peak TFLOPs number is between SXM and
    # NVL, and we don't know its exact value". Derivation (hardware_profiles/h100-96g.yaml):
    # NVIDIA's datasheet points for the same 132-SM GH100 are H100 SXM 989.4 dense BF16 at 700 W
    # and H100 NVL 1,671/2 = 835.5 at 400 W. Sustained clock ~ P^a through both points, and a
    # straight line through both, evaluated at 500 W.
    sxm, sxm_w, nvl, nvl_w, cap = 989.4, 700, 1671 / 2, 400, 500
    a = math.log(nvl / sxm) / math.log(nvl_w / sxm_w)
    power_law = sxm * (cap / sxm_w) ** a
    linear = nvl + (sxm - nvl) * (cap - nvl_w) / (sxm_w - nvl_w)
    assert a == pytest.approx(0.302, abs=0.001)
    assert power_law == pytest.approx(893.8, abs=0.1)
    assert linear == pytest.approx(886.8, abs=0.1)
    p = _hw("h100-96g").peak_tflops
    assert nvl < p.bf16 < sxm
    assert min(linear, power_law) * 0.99 <= p.bf16 <= max(linear, power_law) * 1.01
    # Hopper's FP8 tensor rate is twice BF16 on every SKU (SXM 1,978.9; NVL 3,341/2 = 1,670.5)
    assert p.fp8 == pytest.approx(2 * p.bf16)
    # and the clock it implies lies between the two datasheet tensor clocks (1,545 and 1,830 MHz)
    mhz = p.bf16 * 1e12 / (132 * 4096) / 1e6
    assert 1545 < mhz < 1830


# ------------------------------------------------------------------ the data files' hardware


@pytest.mark.parametrize("data", ["calibration.yaml", "calibration-modern.yaml"])
def test_every_hardware_name_in_the_calibration_data_is_a_profile(data):
    path = DATA / data
    names = {c["hardware"] for c in yaml.safe_load(path.read_text())["cases"]}
    assert names <= set(profile_names()), names - set(profile_names())
