"""Gemma 3's layer: the sandwich norms (transformers Gemma3DecoderLayer: input_layernorm,
post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm), the window
layers' own RoPE base (rope_local_base_freq) and the logits scale 1/sqrt(query_pre_attn_scalar).

Megatron-Bridge builds that layer with its Gemma3ModelProvider
(megatron/bridge/models/gemma/gemma3_provider.py: gemma3_layer_spec's
TERowParallelLinearLayerNorm, `rotary_base: (local, global)` unpacked in provide(),
`window_size` an int that Gemma3TEDotProductAttention makes (window, 0) on the layers
`_is_local_attn_layer` picks, `softmax_scale` 1/sqrt(256) by default; the 27B class sets
1/sqrt(168)). Before these fields the Bridge export of Gemma 3 wrote `rotary_base: 1e6` (which
provide() cannot unpack) and `window_size: [1024, 0]` (which the attention wraps again), and
NeMo 1 wrote a pre-norm GPT: another model, or none.
"""

from __future__ import annotations

import json

import pytest
import yaml

from planner.config import Job, resolve_hardware
from planner.cost.memory import layer_activation_bytes
from planner.cost.shape import model_shape
from planner.errors import InfeasibleError, SpecError
from planner.frameworks import load_any
from planner.frameworks.export import export
from planner.frameworks.writing import gemma3_local_run
from planner.layout import Layout
from planner.presets import get_preset, model_from_hf_config
from planner.specs import ModelSpec, TrainingSpec


def _job(m: ModelSpec, *, tp: int = 2) -> tuple[Job, Layout]:
    lay = Layout(tp=tp, pp=1, dp=8 // tp, sp=tp > 1)
    job = Job(
        model=m,
        hardware=resolve_hardware("h100-sxm"),
        num_gpus=8,
        training=TrainingSpec(global_batch_size=64, seq_length=4096),
    )
    return job, lay


def _variant(key: str, **update) -> ModelSpec:
    p = get_preset(key)
    return type(p)(**{**p.model_dump(exclude_unset=True), **update})


def test_the_presets_and_the_config_json_carry_gemma3s_layer():
    # google/gemma-3-27b-it's text_config: 62 layers of 5376, 32 heads of 128, 16 KV heads,
    # query_pre_attn_scalar 168 (= 5376 / 32, not the head dim), rope_local_base_freq 10,000
    text = {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "query_pre_attn_scalar": 168,
        "sliding_window": 1024,
        "rope_local_base_freq": 10000.0,
    }
    m = model_from_hf_config(text, source="gemma-3-27b-it/config.json")
    p = get_preset("gemma-3-27b")
    for f in ("norm_placement", "rotary_base_local", "softmax_scale", "rotary_base"):
        assert getattr(m, f) == getattr(p, f), f
    assert (m.norm_placement, m.rotary_base_local) == ("sandwich", 10000.0)
    assert m.softmax_scale == pytest.approx(1 / 168**0.5)
    # 12B: query_pre_attn_scalar left to Gemma3TextConfig's 256, its head dim: the default
    twelve = get_preset("gemma-3-12b")
    assert twelve.head_dim == 256 and twelve.softmax_scale is None


def test_a_window_base_needs_window_layers():
    with pytest.raises(ValueError, match="rotary_base_local"):
        _variant("gemma-3-12b", layer_types=None, window_size=None)


def test_the_sandwich_norms_keep_their_inputs():
    # the two extra norms keep the attention and MLP outputs they normalize, h each in bf16,
    # after the row-parallel GEMM's reduce-scatter (÷ tp with SP): 4h bytes a token and layer.
    # Gemma-3-12B, 4,096 tokens, tp 2 with SP: 4,096 x 4 x 3,840 / 2 = 31,457,280 bytes
    sandwich = model_shape(get_preset("gemma-3-12b"))
    pre = model_shape(_variant("gemma-3-12b", norm_placement="pre"))
    kw = dict(tokens=4096, seq=4096, t=2, sp=True, recompute="none", flash=True, moe=False)
    extra = layer_activation_bytes(sandwich, **kw) - layer_activation_bytes(pre, **kw)
    assert extra == 4096 * 4 * 3840 / 2 == 31_457_280
    # full recompute keeps the layer input only, whatever the norms
    kw["recompute"] = "full"
    assert layer_activation_bytes(sandwich, **kw) == layer_activation_bytes(pre, **kw)


@pytest.mark.parametrize(
    "kinds, n",
    [
        ((["sliding"] * 5 + ["full"]) * 10 + ["sliding"] * 2, 5),  # Gemma 3 27B's 62 layers
        (["full"] * 8, 0),
        (["sliding", "full"] * 4, 1),
        (["full"] + ["sliding"] * 5, None),  # a global first: not the provider's rule
        (["sliding"] * 8, None),  # windows only: the pattern always has a global layer
        ((["sliding"] * 5 + ["full"]) + (["sliding"] * 3 + ["full"]), None),
    ],
)
def test_the_provider_pattern_is_found_only_where_it_is_the_rule(kinds, n):
    local = 10000.0 if "sliding" in kinds else None
    m = _variant("gemma-3-12b", num_layers=len(kinds), layer_types=kinds, rotary_base_local=local)
    assert gemma3_local_run(m) == n


@pytest.mark.parametrize("fmt", ["megatron", "nemo", "deepspeed"])
def test_exports_without_the_layer_refuse_it_in_one_line(fmt):
    job, lay = _job(get_preset("gemma-3-12b"))
    with pytest.raises(InfeasibleError) as err:
        export(job, lay, fmt)
    msg = str(err.value)
    assert "\n" not in msg and "norm_placement sandwich" in msg and "megatron-bridge" in msg


def test_the_bridge_export_names_the_size_class_and_reads_back(tmp_path):
    job, lay = _job(get_preset("gemma-3-27b"))
    text = export(job, lay, "megatron-bridge")
    model = yaml.safe_load(text)["model"]
    assert model["_target_"] == "megatron.bridge.models.Gemma3ModelProvider27B"
    assert model["rotary_base"] == [10000.0, 1000000.0]  # (local, global), as provide() unpacks
    assert model["interleaved_attn_pattern"] == [5, 1] and model["window_size"] == 1024
    assert model["softmax_scale"] == pytest.approx(1 / 168**0.5)
    assert "window_attn_skip_freq" not in model  # the provider's pattern, not Megatron-Core's
    path = tmp_path / "gemma.yaml"
    path.write_text(text)
    assert load_any(path, hardware="h100-sxm", gpus=8).job.model == get_preset("gemma-3-27b")


def test_a_gemma3_that_is_no_preset_goes_to_the_base_provider(tmp_path):
    m = _variant(
        "gemma-3-12b",
        name="gemma-3-12b-36",
        num_layers=36,
        layer_types="(['sliding']*5+['full'])*6",
    )
    job, lay = _job(m)
    text = export(job, lay, "megatron-bridge")
    model = yaml.safe_load(text)["model"]
    assert model["_target_"] == "megatron.bridge.models.Gemma3ModelProvider"
    assert model["num_layers"] == 36 and model["kv_channels"] == 256
    assert model["softmax_scale"] == 1 / 16  # 1/sqrt(256), written: the class default is 12B's
    path = tmp_path / "gemma.yaml"
    path.write_text(text)
    back = load_any(path, hardware="h100-sxm", gpus=8).job.model
    for f in (
        "num_layers",
        "attention_kinds",
        "window_size",
        "norm_placement",
        "rotary_base",
        "rotary_base_local",
        "softmax_scale",
        "activation",
        "qk_norm",
    ):
        assert getattr(back, f) == getattr(m, f), f


@pytest.mark.parametrize(
    "update, needle",
    [
        (dict(num_experts=8, moe_top_k=2, moe_ffn_hidden_size=2048), "dense MLP"),
        (dict(layer_types=["full"] + ["sliding"] * 47), "(n, 1)"),
        (dict(qk_norm="none"), "qk_norm head"),
    ],
)
def test_the_bridge_export_refuses_what_the_provider_cannot_build(update, needle):
    job, lay = _job(_variant("gemma-3-12b", **update))
    with pytest.raises(InfeasibleError) as err:
        export(job, lay, "megatron-bridge")
    assert needle in str(err.value) and "\n" not in str(err.value)


def _bridge_file(tmp_path, **model) -> str:
    data = {
        "model": {
            "_target_": "megatron.bridge.models.gemma.gemma3_provider.Gemma3ModelProvider",
            "num_layers": 12,
            "hidden_size": 1152,
            "ffn_hidden_size": 6912,
            "num_attention_heads": 4,
            "num_query_groups": 1,
            "kv_channels": 256,
            "vocab_size": 262144,
            "gated_linear_unit": True,
            "seq_length": 4096,
            **model,
        },
        "train": {"micro_batch_size": 1, "global_batch_size": 8},
    }
    path = tmp_path / "gemma3.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_bridge_gemma3_file_in_its_own_form_reads_as_written(tmp_path):
    # Gemma3ModelProvider1B's shape (26 layers cut to 12), as Bridge's to_yaml writes the class
    path = _bridge_file(
        tmp_path,
        window_size=512,
        interleaved_attn_pattern=[5, 1],
        rotary_base=[10000, 1000000],
        softmax_scale=0.0625,
    )
    m = load_any(path, hardware="h100-sxm", gpus=8).job.model
    assert m.norm_placement == "sandwich" and m.window_size == 512
    assert m.attention_kinds == tuple((["sliding"] * 5 + ["full"]) * 2)
    assert (m.rotary_base_local, m.rotary_base, m.softmax_scale) == (10000.0, 1e6, None)


def test_a_bridge_gemma3_file_that_leaves_keys_out_takes_the_class_defaults(tmp_path):
    # window 512, pattern (5, 1), bases (10,000, 1,000,000), softmax_scale 1/16: with 128-wide
    # heads that scale is not 1/sqrt(128) and is carried
    m = load_any(_bridge_file(tmp_path, kv_channels=128), hardware="h100-sxm", gpus=8).job.model
    assert (m.window_size, m.rotary_base_local, m.rotary_base) == (512, 10000.0, 1e6)
    assert m.softmax_scale == 1 / 16 and m.attention_kinds[5] == "full"
    assert m.norm_zero_centered  # the class's layernorm_zero_centered_gamma


@pytest.mark.parametrize(
    "update, field",
    [
        (dict(rotary_base=1000000), "model.rotary_base"),
        (dict(window_size=[512, 0]), "model.window_size"),
        (dict(interleaved_attn_pattern=[5]), "model.interleaved_attn_pattern"),
    ],
)
def test_a_bridge_gemma3_file_the_provider_cannot_take_is_one_line(tmp_path, update, field):
    with pytest.raises(SpecError) as err:
        load_any(_bridge_file(tmp_path, **update), hardware="h100-sxm", gpus=8)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_the_hf_fixture_reads_as_the_preset_layer():
    from pathlib import Path

    path = Path(__file__).resolve().parent / "data" / "hf" / "gemma-3-12b-it" / "config.json"
    m = model_from_hf_config(json.loads(path.read_text()), source=str(path))
    p = get_preset("gemma-3-12b")
    assert (m.norm_placement, m.rotary_base_local, m.softmax_scale) == (
        p.norm_placement,
        p.rotary_base_local,
        p.softmax_scale,
    )
