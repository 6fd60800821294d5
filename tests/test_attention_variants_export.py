"""Megatron-Core's experimental attention variants, (1 + w) norm weights and the gated shared
expert, through the Megatron-LM flags and the Megatron-Bridge keys (both ways).

Megatron-LM's pretrain_gpt.py builds Qwen3-Next's Gated DeltaNet layers and DeepSeek-V3.2's
DSA layers (megatron/core/models/gpt/experimental_attention_variant_module_specs.py:
`--experimental-attention-variant gated_delta_net | dsa`; `get_linear_attention_pattern`:
an int N puts full attention on every Nth layer, a 0/1 list names the linear ones with 1; DSA
on every layer, MLA only), the gated attention output (`--attention-output-gate`), the (1 + w)
norms (`--apply-layernorm-1p`) and the shared expert's gate (`--moe-shared-expert-gate`), all
in tests/data/megatron_flags.txt. planner refused the first two outright ("pretrain_gpt.py
builds none"), so `planner plan --framework megatron` found no layout for Qwen3-Next, Qwen3.5,
DeepSeek-V3.2 or GLM-5; and it read such a script as full attention, the variant ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.config import Job, resolve_hardware
from planner.errors import InfeasibleError, SpecError
from planner.frameworks import load_any
from planner.frameworks.export import export
from planner.frameworks.runnable import refusals
from planner.layout import Layout
from planner.presets import get_preset, model_from_hf_config
from planner.specs import ModelSpec, TrainingSpec

HF = Path(__file__).resolve().parent / "data" / "hf"


def _job(m: ModelSpec, **lay) -> tuple[Job, Layout]:
    layout = Layout(**{**dict(tp=1, pp=1, ep=8 if m.is_moe else 1, dp=8), **lay})
    job = Job(
        model=m,
        hardware=resolve_hardware("h100-sxm"),
        num_gpus=layout.tp * layout.pp * layout.cp * layout.dp,
        training=TrainingSpec(global_batch_size=64, seq_length=4096),
    )
    return job, layout


def _variant(key: str, **update) -> ModelSpec:
    p = get_preset(key)
    return type(p)(**{**p.model_dump(exclude_unset=True), **update})


def _flags(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def test_megatron_writes_qwen3_next_as_pretrain_gpt_builds_it(tmp_path):
    job, lay = _job(get_preset("qwen3-next-80b-a3b"))
    text = export(job, lay, "megatron")
    flags = _flags(text)
    # 48 layers: three Gated DeltaNet ones, then a gated full-attention one, twelve times
    for expected in (
        "--experimental-attention-variant gated_delta_net",
        "--linear-attention-freq '([1]*3+[0]*1)*12'",
        "--linear-num-key-heads 16 --linear-num-value-heads 32",
        "--linear-key-head-dim 128 --linear-value-head-dim 128 --linear-conv-kernel-dim 4",
        "--attention-output-gate",
        "--apply-layernorm-1p",
        "--moe-shared-expert-gate",
    ):
        assert expected in flags, expected
    path = tmp_path / "train.sh"
    path.write_text(text)
    back = load_any(path).job.model
    p = get_preset("qwen3-next-80b-a3b")
    for f in (
        "attention_kinds",
        "linear_num_value_heads",
        "attention_output_gate",
        "norm_zero_centered",
        "moe_shared_expert_gate",
    ):
        assert getattr(back, f) == getattr(p, f), f


def test_megatron_writes_dsa_on_every_layer(tmp_path):
    job, lay = _job(get_preset("deepseek-v3.2"))
    text = export(job, lay, "megatron")
    flags = _flags(text)
    # DeepSeek-V3.2's indexer: 64 heads of 128, top 2,048 keys (its config.json)
    assert "--experimental-attention-variant dsa" in flags
    assert "--dsa-indexer-n-heads 64 --dsa-indexer-head-dim 128 --dsa-indexer-topk 2048" in flags
    path = tmp_path / "train.sh"
    path.write_text(text)
    back = load_any(path).job.model
    assert set(back.attention_kinds) == {"dsa"} and back.dsa_index_topk == 2048


def _script(tmp_path, *extra: str) -> Path:
    text = (
        "torchrun pretrain_gpt.py --num-layers 8 --hidden-size 512 --ffn-hidden-size 1024 "
        "--num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
        "--micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 "
        "--position-embedding-type rope --normalization RMSNorm --swiglu " + " ".join(extra)
    )
    path = tmp_path / "train.sh"
    path.write_text(text + "\n")
    return path


def test_an_int_linear_attention_freq_puts_full_attention_on_every_nth_layer(tmp_path):
    # get_linear_attention_pattern: 0 if (i + 1) % N == 0 else 1 -> N = 4 over 8 layers:
    # linear, linear, linear, full, linear, linear, linear, full
    path = _script(
        tmp_path, "--experimental-attention-variant gated_delta_net --linear-attention-freq 4"
    )
    m = load_any(path, gpus=8).job.model
    assert m.attention_kinds == ("linear",) * 3 + ("full",) + ("linear",) * 3 + ("full",)
    # the Gated DeltaNet dims left to TransformerConfig's defaults
    assert (m.linear_num_key_heads, m.linear_num_value_heads) == (16, 32)
    assert (m.linear_key_head_dim, m.linear_value_head_dim, m.linear_conv_kernel_dim) == (
        128,
        128,
        4,
    )


@pytest.mark.parametrize(
    "extra, field",
    [
        (["--experimental-attention-variant gated_delta_net"], "--linear-attention-freq"),
        (["--experimental-attention-variant dsv4_hybrid"], "--experimental-attention-variant"),
        (
            ["--experimental-attention-variant dsa", "--dsa-indexer-n-heads 8"],
            "--dsa-indexer-head-dim",
        ),
        (
            [
                "--experimental-attention-variant gated_delta_net",
                "--linear-attention-freq 2",
                "--window-size 128,0",
            ],
            "--experimental-attention-variant",
        ),
    ],
)
def test_a_variant_planner_cannot_price_is_one_line(tmp_path, extra, field):
    with pytest.raises(SpecError) as err:
        load_any(_script(tmp_path, *extra), gpus=8)
    assert field in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "model, lay, needle",
    [
        # Megatron-Core splits the Gated DeltaNet heads over tp x cp: 12 key heads, tp 8
        (
            lambda: _variant(
                "qwen3-next-80b-a3b", linear_num_key_heads=12, linear_num_value_heads=24
            ),
            dict(tp=8, dp=1),
            "tp x cp = 8",
        ),
        # DSA beside full attention: the variant runs on every layer
        (lambda: _variant("deepseek-v3.2", layer_types="['full']+['dsa']*60"), {}, "every layer"),
    ],
)
def test_megatron_refuses_what_the_variant_specs_cannot_build(model, lay, needle):
    job, layout = _job(model(), **lay)
    found = refusals(job, layout, "megatron")
    assert any(needle in r for r in found), found
    with pytest.raises(InfeasibleError):
        export(job, layout, "megatron")


def test_the_search_filter_lets_megatron_plan_qwen3_next():
    # before: every layout refused ("pretrain_gpt.py builds none")
    job, lay = _job(get_preset("qwen3-next-80b-a3b"))
    assert refusals(job, lay, "megatron") == []
    assert refusals(job, lay, "megatron-bridge") == []


def test_bridge_writes_the_variant_with_its_block_spec(tmp_path):
    job, lay = _job(get_preset("qwen3.5-35b-a3b"))
    text = export(job, lay, "megatron-bridge")
    model = yaml.safe_load(text)["model"]
    # a GPTModelProvider's default_layer_spec would build standard attention on every layer
    assert model["transformer_layer_spec"] == {
        "_target_": "megatron.core.models.gpt.experimental_attention_variant_module_specs."
        "get_transformer_block_with_experimental_attention_variant_spec",
        "_call_": False,
    }
    assert model["experimental_attention_variant"] == "gated_delta_net"
    assert model["linear_attention_freq"] == [1, 1, 1, 0] * 10
    assert model["layernorm_zero_centered_gamma"] is True
    assert model["moe_shared_expert_gate"] is True and model["attention_output_gate"] is True
    path = tmp_path / "bridge.yaml"
    path.write_text(text)
    back = load_any(path, hardware="h100-sxm", gpus=8).job.model
    assert back.attention_kinds == get_preset("qwen3.5-35b-a3b").attention_kinds


def test_bridge_reads_an_int_linear_attention_freq(tmp_path):
    # Bridge's Qwen3-Next bridge sets linear_attention_freq = full_attention_interval (4)
    data = yaml.safe_load(export(*_job(get_preset("qwen3.5-35b-a3b")), "megatron-bridge"))
    data["model"]["linear_attention_freq"] = 4
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(data))
    back = load_any(path, hardware="h100-sxm", gpus=8).job.model
    assert back.attention_kinds == get_preset("qwen3.5-35b-a3b").attention_kinds


def test_zero_centred_norms_in_nemo_1_are_its_layernorm1p(tmp_path):
    # NeMo 1's normalization layernorm1p: a LayerNorm with (1 + w) weights; it has no RMSNorm
    # of that kind
    ln = _variant("llama3-8b", normalization="LayerNorm", norm_zero_centered=True, name="ln1p")
    text = export(*_job(ln), "nemo")
    assert yaml.safe_load(text)["model"]["normalization"] == "layernorm1p"
    path = tmp_path / "nemo.yaml"
    path.write_text(text)
    back = load_any(path, hardware="h100-sxm").job.model
    assert back.norm == "LayerNorm" and back.norm_zero_centered
    rms = _variant("llama3-8b", norm_zero_centered=True, name="rms1p")
    assert any("layernorm1p is a LayerNorm" in r for r in refusals(*_job(rms), "nemo"))


def test_qwen2_moe_gates_its_shared_expert():
    cfg = {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 151936,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
    }
    m = model_from_hf_config(cfg, source="Qwen1.5-MoE-A2.7B/config.json")
    assert m.moe_shared_expert_gate and m.num_shared_experts == 4  # 5632 / 1408
    # Qwen2MoeConfig's norm_topk_prob defaults to false: the softmax over all 60 experts, the
    # top 4 not renormalised, Megatron's --moe-router-pre-softmax
    assert m.moe_router_pre_softmax
    text = export(*_job(m, ep=4, dp=8), "megatron")
    flags = _flags(text)
    assert "--moe-shared-expert-intermediate-size 5632 --moe-shared-expert-gate" in flags
    assert "--moe-router-pre-softmax" in flags
    bridge = yaml.safe_load(export(*_job(m, ep=4, dp=8), "megatron-bridge"))["model"]
    assert bridge["moe_router_pre_softmax"] is True
    assert any("DeepSpeed MoE's gate" in r for r in refusals(*_job(m, ep=4, dp=8), "deepspeed"))


def test_a_sigmoid_router_without_renormalised_weights_is_one_line():
    # Megatron-Core renormalises a sigmoid router's top-k weights (topk_routing_with_score_
    # function): DeepSeek-V3's architecture with norm_topk_prob false has no export
    path = HF / "DeepSeek-V3" / "config.json"
    cfg = dict(json.loads(path.read_text()), norm_topk_prob=False)
    with pytest.raises(SpecError) as err:
        model_from_hf_config(cfg, source=str(path))
    assert "norm_topk_prob = False" in str(err.value) and "\n" not in str(err.value)


def test_a_gate_needs_shared_experts():
    with pytest.raises(ValueError, match="moe_shared_expert_gate"):
        _variant("qwen3-30b-a3b", moe_shared_expert_gate=True)


@pytest.mark.parametrize("name", ["Qwen3-Next-80B-A3B-Instruct", "Qwen3.5-35B-A3B"])
def test_the_qwen_hybrids_config_json_carry_both(name):
    path = HF / name / "config.json"
    m = model_from_hf_config(json.loads(path.read_text()), source=str(path))
    assert m.norm_zero_centered and m.moe_shared_expert_gate


def test_bridge_says_an_mla_model_without_a_provider_needs_an_mla_recipe():
    # Kimi K2's config.json is DeepSeek-V3's architecture but no preset: the file carries the
    # MLA keys, which only an MLATransformerConfig provider (DeepSeek's, Moonlight's) takes
    path = HF / "Kimi-K2-Instruct" / "config.json"
    m = model_from_hf_config(json.loads(path.read_text()), source=str(path))
    text = export(*_job(m), "megatron-bridge")
    assert "_target_" not in yaml.safe_load(text)["model"]
    assert "# Multi-latent attention: merge over an MLA recipe" in text
    # a preset with its own provider class says nothing of the kind
    assert "MLA recipe" not in export(*_job(get_preset("deepseek-v3")), "megatron-bridge")


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--is-hybrid-model", "--hybrid-override-pattern 'M-M*M-M-'"], "--is-hybrid-model"),
        (["--heterogeneous-layers-config-path layers.json"], "--heterogeneous-layers-config-path"),
        (["--enable-mhc-connections"], "--enable-mhc-connections"),
    ],
)
def test_megatron_layers_planner_cannot_price_are_one_line(tmp_path, extra, flag):
    # read as a GPT, a hybrid Mamba stack (pretrain_mamba.py --is-hybrid-model) was costed as
    # eight attention + MLP layers and called VALID
    with pytest.raises(SpecError) as err:
        load_any(_script(tmp_path, *extra), gpus=8)
    assert flag in str(err.value) and "no price" in str(err.value)
    assert "\n" not in str(err.value)


def test_megatron_settings_the_exports_drop_are_a_warning(tmp_path):
    path = _script(tmp_path, "--apply-residual-connection-post-layernorm", "--no-rope-freq 4")
    found = [v for v in load_any(path, gpus=8).violations if v.rule == "megatron-not-written"]
    assert len(found) == 1 and found[0].severity == "warning"
    assert "--apply-residual-connection-post-layernorm" in found[0].message
    assert "--no-rope-freq" in found[0].message


@pytest.mark.parametrize(
    "update, field",
    [
        ({"hybrid_override_pattern": "M-M*M-M-"}, "model.hybrid_override_pattern"),
        ({"_target_": "megatron.bridge.models.NemotronHModelProvider"}, "model._target_"),
    ],
)
def test_a_bridge_mamba_stack_is_one_line(tmp_path, update, field):
    data = yaml.safe_load(export(*_job(get_preset("qwen3-30b-a3b")), "megatron-bridge"))
    data["model"].update(update)
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        load_any(path, hardware="h100-sxm", gpus=8)
    assert field in str(err.value) and "no price" in str(err.value)


def test_a_bridge_override_file_naming_a_mamba_provider_is_that_line(tmp_path):
    # a recipe override with the class and no shape keys: the Mamba line, not "give --model"
    path = tmp_path / "bridge.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": {"_target_": "megatron.bridge.models.NemotronHModelProvider8B"},
                "train": {"micro_batch_size": 1, "global_batch_size": 8},
            }
        )
    )
    with pytest.raises(SpecError) as err:
        load_any(path, hardware="h100-sxm", gpus=8)
    assert "Mamba layers" in str(err.value)


def test_a_bridge_setting_the_exports_drop_is_a_warning(tmp_path):
    data = yaml.safe_load(export(*_job(get_preset("qwen3-30b-a3b")), "megatron-bridge"))
    data["model"]["rotary_interleaved"] = True
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(data))
    found = [v for v in load_any(path, hardware="h100-sxm", gpus=8).violations]
    assert [v.severity for v in found if v.rule == "bridge-not-written"] == ["warning"]


def test_the_search_proposes_no_ring_cp_for_dsa_layers():
    # Megatron-Core's DSAttention asserts cp_comm_type allgather under CP (dsa.py); the
    # search's CP is the p2p ring, so a DSA model gets cp 1 (docs/reference/framework-rules.md
    # R18), where the same shape with full attention may take cp > 1
    from planner.rules import Context, cp_dsa
    from planner.search import SearchOptions, search

    m = get_preset("deepseek-v3.2")
    tr = TrainingSpec(global_batch_size=64, seq_length=32768)
    hw = resolve_hardware("h100-sxm")
    lay = Layout(tp=8, cp=2, ep=8, dp=64)
    ctx = Context(model=m, hardware=hw, training=tr, num_gpus=1024, layout=lay)
    assert "all-gather exchange only" in cp_dsa(ctx)
    assert (
        cp_dsa(Context(**{**ctx.__dict__, "layout": lay.with_(cp_comm_type="allgather")})) is None
    )
    job = Job(model=m, hardware=hw, num_gpus=1024, training=tr)
    result = search(job, SearchOptions(top=5))
    assert result.plans and all(p.layout.cp == 1 for p in result.plans)
    assert result.pruned.get("cp-dsa", 0) > 0


def test_a_bridge_variant_without_its_block_spec_is_a_warning(tmp_path):
    # a GPTModelProvider's default_layer_spec builds standard attention on every layer
    data = yaml.safe_load(export(*_job(get_preset("qwen3.5-35b-a3b")), "megatron-bridge"))
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(data))
    rules = [v.rule for v in load_any(path, hardware="h100-sxm", gpus=8).violations]
    assert "bridge-variant-spec" not in rules  # the export writes the spec
    del data["model"]["transformer_layer_spec"]
    path.write_text(yaml.safe_dump(data))
    found = [
        v
        for v in load_any(path, hardware="h100-sxm", gpus=8).violations
        if v.rule == "bridge-variant-spec"
    ]
    assert len(found) == 1 and found[0].severity == "warning"
