"""The activation-storage layout fields no exporter writes: each training framework's export
refuses them with the reason (attention_output_store e5m6 is DeepSeek-V3's own framework's,
arXiv:2412.19437 sec. 3.3.3; activation_func_fp8_input_store is Megatron-Core's
TransformerConfig field, which pretrain_gpt.py has no flag for), and takes the layout without
them."""

from __future__ import annotations

import pytest

from planner.config import config_from_data
from planner.frameworks.runnable import TRAIN_FRAMEWORKS, refusals

TINY = dict(name="tiny", num_layers=2, hidden_size=64, ffn_hidden_size=256,
            num_attention_heads=4, num_kv_heads=2, vocab_size=1024, activation="swiglu")


def _job_layout(**parallel):
    data = dict(model=TINY, hardware="h100-sxm", num_gpus=8,
                training=dict(seq_length=256, global_batch_size=32),
                parallel=dict(dict(micro_batch_size=1), **parallel))
    job, layout = config_from_data(data)[:2]
    return job, layout


@pytest.mark.parametrize("fw", TRAIN_FRAMEWORKS)
@pytest.mark.parametrize("field,value", [("attention_output_store", "e5m6"),
                                         ("activation_func_fp8_input_store", True)])
def test_every_export_refuses_the_storage_fields(fw, field, value):
    job, plain = _job_layout()
    assert not [m for m in refusals(job, plain, fw) if field in m]
    job, lay = _job_layout(**{field: value})
    found = refusals(job, lay, fw)
    assert any(m.removeprefix("cannot export to DeepSpeed: ").startswith(field) for m in found), found
