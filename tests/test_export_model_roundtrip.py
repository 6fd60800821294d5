"""Every preset and every Hugging Face config.json of tests/data/hf through every training
export and back: an export either refuses in one line,
or its file reads back (`planner validate`'s readers) with the model the plan priced -- the
shape, the MLP's activation and its GLU offset / clamp, the query / key norm, the norms'
placement (Gemma 3's sandwich), its window layers' RoPE base and logits scale, the MoE layers
and routing, the attention kinds, windows and sinks. A field an export drops trains another
model than the one planned (the Megatron-Bridge export once wrote no window keys, so gpt-oss
and Gemma 3 trained with full attention everywhere).

Three documented differences are asserted as such, not skipped:
- torchtitan names a flavor only where its model definitions have the preset's shape; with
  none the export says so and needs --model to read back (planner/frameworks/torchtitan);
- torchtitan's llama4 has no QK norm (models/llama4/model/args.py has no use_qk_norm): Llama
  4's L2 norm is named in the export's notes and reads back as none;
- NeMo 1 writes an unknown tokenizer's vocabulary as override_vocab_size, padded to a multiple
  of 128 x tp as Megatron pads it (NeMo builds the embedding with exactly that size);
- torchtitan's routers are its flavors' own (MoEArgs, no TOML knob): where they differ from
  the model's (Llama 4: torchtitan balances with an expert bias), the export names both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.config import Job, resolve_hardware
from planner.cost.params import padded_vocab
from planner.errors import InfeasibleError
from planner.frameworks import load_any
from planner.frameworks.export import export
from planner.layout import Layout
from planner.presets import FAMILY_PRESETS, PRESETS, get_preset, model_from_hf_config
from planner.specs import TrainingSpec

EXT = {
    "megatron": ".sh",
    "megatron-bridge": ".yaml",
    "nemo": ".yaml",
    "deepspeed": ".json",
    "torchtitan": ".toml",
}
FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn",
    "num_attention_heads",
    "kv_heads",
    "head_dim",
    "vocab_size",
    "activation",
    "glu_linear_offset",
    "activation_clamp",
    "qk_norm",
    "norm_placement",
    "norm_zero_centered",
    "rotary_base_local",
    "softmax_scale",
    "tied_embeddings",
    "norm",
    "bias",
    "add_qkv_bias",
    "position_embedding",
    "rotary_percent",
    "num_experts",
    "moe_top_k",
    "expert_ffn",
    "num_shared_experts",
    "moe_layers",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_capacity_factor",
    "q_lora_rank",
    "kv_lora_rank",
    "attention_kinds",
    "window_size",
    "attention_chunk_size",
    "attention_sinks",
    "attention_output_gate",
    "moe_router_score",
    "moe_router_scaling",
    "moe_router_expert_bias",
    "moe_router_pre_softmax",
    "moe_shared_expert_gate",
    "mtp_num_layers",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "dsa_index_topk",
    "dsa_index_heads",
    "dsa_index_head_dim",
)


HF = Path(__file__).resolve().parent / "data" / "hf"
SOURCES = [*PRESETS, *FAMILY_PRESETS, *(f"hf:{d.name}" for d in sorted(HF.iterdir()))]


def _model(source: str):
    if source.startswith("hf:"):
        path = HF / source[3:] / "config.json"
        return model_from_hf_config(json.loads(path.read_text()), source=str(path))
    return get_preset(source)


def _job(source: str) -> tuple[Job, Layout]:
    m = _model(source)
    ep = 8 if m.is_moe and (m.num_experts or 0) % 8 == 0 else 1
    lay = Layout(tp=1, pp=1, ep=ep, dp=8)
    job = Job(
        model=m,
        hardware=resolve_hardware("h100-sxm"),
        num_gpus=8,
        training=TrainingSpec(global_batch_size=64, seq_length=4096),
    )
    return job, lay


@pytest.mark.parametrize("fmt", list(EXT))
@pytest.mark.parametrize("source", SOURCES)
def test_an_export_refuses_in_one_line_or_reads_back_the_model_it_priced(tmp_path, source, fmt):
    job, lay = _job(source)
    m = job.model
    try:
        text = export(job, lay, fmt)
    except InfeasibleError as err:
        assert "\n" not in str(err) and str(err).startswith("cannot export")
        return
    if fmt == "torchtitan" and "(not one we can name)" in text:
        assert "[model]\nname" not in text  # no flavor written: the user picks one
        return
    path = tmp_path / f"model{EXT[fmt]}"
    path.write_text(text)
    back = load_any(path, hardware="h100-sxm", gpus=8).job.model
    expected = {f: getattr(m, f) for f in FIELDS}
    if fmt == "torchtitan" and m.qk_norm == "l2":
        assert "trains without it" in text
        expected["qk_norm"] = "none"
    router = (
        "moe_router_score",
        "moe_router_scaling",
        "moe_router_expert_bias",
        "moe_router_pre_softmax",
    )
    if fmt == "torchtitan" and any(getattr(back, f) != getattr(m, f) for f in router):
        assert "Router: the plan's model scores experts" in text  # the flavor's own, named
        expected.update({f: getattr(back, f) for f in router})
    if fmt == "nemo" and "override_vocab_size" in text:
        expected["vocab_size"] = padded_vocab(m.vocab_size, lay.tp)
    got = {f: getattr(back, f) for f in FIELDS}
    assert {f: got[f] for f in FIELDS if got[f] != expected[f]} == {}
