"""The activation-storage layout fields in the exports: `activation_func_fp8_input_store` is
Megatron-Core's TransformerConfig field, which the exports that write TransformerConfig fields
write (NeMo 1 model.*, NeMo 2 model.config.*, Megatron-Bridge model.*) and read back, and the
others refuse with the reason (Megatron-LM's pretrain_gpt.py has no flag for it; Megatron-
DeepSpeed and torchtitan lack it); `activation_cache: deepseek` is DeepSeek-V3's own
framework's (arXiv:2412.19437 sec. 3.3.3), which every export refuses."""

from __future__ import annotations

import pytest

from planner.config import config_from_data
from planner.frameworks import load_any
from planner.frameworks.export import export
from planner.frameworks.runnable import TRAIN_FRAMEWORKS, refusals

TINY = dict(
    name="tiny",
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=256,
    num_attention_heads=4,
    num_kv_heads=2,
    vocab_size=1024,
    activation="swiglu",
)
WRITES_CONFIG_FIELDS = ("megatron-bridge", "nemo")


def _job_layout(**parallel):
    data = dict(
        model=TINY,
        hardware="h100-sxm",
        num_gpus=8,
        training=dict(seq_length=256, global_batch_size=32),
        parallel=dict(dict(micro_batch_size=1), **parallel),
    )
    job, layout = config_from_data(data)[:2]
    return job, layout


def _refused(fw, field, **parallel) -> bool:
    job, lay = _job_layout(**parallel)
    return any(
        m.removeprefix("cannot export to DeepSpeed: ").startswith(field)
        for m in refusals(job, lay, fw)
    )


@pytest.mark.parametrize("fw", TRAIN_FRAMEWORKS)
def test_every_export_refuses_deepseeks_caching(fw):
    assert not _refused(fw, "activation_cache")
    assert _refused(fw, "activation_cache", activation_cache="deepseek")


@pytest.mark.parametrize("fw", TRAIN_FRAMEWORKS)
def test_the_fp8_input_store_is_refused_where_no_setting_holds_it(fw):
    refused = _refused(fw, "activation_func_fp8_input_store", activation_func_fp8_input_store=True)
    assert refused == (fw not in WRITES_CONFIG_FIELDS)


@pytest.mark.parametrize("fmt,ext", [("megatron-bridge", ".yaml"), ("nemo", ".yaml")])
def test_the_fp8_input_store_is_written_and_read_back(tmp_path, fmt, ext):
    job, lay = _job_layout(activation_func_fp8_input_store=True)
    text = export(job, lay, fmt)
    assert "activation_func_fp8_input_store: true" in text
    path = tmp_path / f"tiny{ext}"
    path.write_text(text)
    back = load_any(
        path,
        hardware="h100-sxm",
        model=None if fmt == "megatron-bridge" else TINY,
        gpus=8 if fmt == "megatron-bridge" else None,
    )
    assert back.layout.activation_func_fp8_input_store
