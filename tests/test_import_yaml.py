"""NeMo 1 / NeMo 2 / Megatron-Bridge YAML and torchtitan TOML read the way the frameworks read
them: the keys they know (planner/data/nemo_keys.yaml), OmegaConf interpolations, the
production recipe settings, torchtitan's model flavors, and one clear line for bad input.

Every fixture is written here (small, our own); numbers come from the frameworks' code named
next to each case or from a derivation written out in the test.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from planner.cli import app
from planner.errors import SpecError
from planner.importers import load_any
from planner.importers.interpolation import Unresolved, resolve
from planner.importers.mcore import key_list
from planner.validate import validate


def _run(path, **opts):
    imported = load_any(path, **opts)
    return imported, validate(imported.job, imported.layout, extra=imported.violations)


def _rules(result, severity=None) -> set[str]:
    return {v.rule for v in result.errors + result.warnings
            if severity is None or v.severity == severity}


def _messages(result, rule: str) -> list[str]:
    return [v.message for v in result.errors + result.warnings if v.rule == rule]


# A small NeMo 1 launcher-style file: 8 layers of width 1024, GPT-2 tokenizer (50257 tokens),
# 2 nodes x 8 GPUs with TP 2 PP 2 (DP 4), micro-batch 2, global batch 64, seq 2048.
def _nemo1(**model) -> dict:
    base = {
        "micro_batch_size": 2, "global_batch_size": 64, "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 2, "encoder_seq_length": 2048,
        "max_position_embeddings": 2048, "num_layers": 8, "hidden_size": 1024,
        "ffn_hidden_size": 4096, "num_attention_heads": 16,
        "tokenizer": {"library": "megatron", "type": "GPT2BPETokenizer"},
        "sequence_parallel": True, "optim": {"name": "distributed_fused_adam"},
    }
    base.update(model)
    return {"trainer": {"num_nodes": 2, "devices": 8, "precision": "bf16"}, "model": base}


def _write(tmp_path: Path, data, name: str = "nemo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


# ----------------------------------------------------------------- keys NeMo reads (issue 9.6)

# Keys NeMo 1 reads itself (megatron_gpt_model.py / megatron_base_model.py, nemo_toolkit 2.4.0)
# or passes to Megatron-Core's TransformerConfig / ModelParallelConfig (megatron-core 0.13.1 and
# 0.19.2), each set to its neutral value, as NeMo's own megatron_gpt_config.yaml sets them.
NEMO_READS = {
    "sharp": False, "drop_layers": [], "cpu_offloading": False,
    "cpu_offloading_num_layers": 7, "cpu_offloading_activations": True,
    "cpu_offloading_weights": True, "moe_expert_capacity_factor": None,
    "layernorm_zero_centered_gamma": False, "skip_train": False, "reset_lr": False,
    "reset_lr_steps": False, "restore_from_ckpt": None, "restore_from_path": None,
    "enable_megatron_timers": False, "megatron_timer_kwargs": {"log_every_n_steps": 10},
    "nccl_communicator_config_path": None, "validation_param_sync_overlap": False,
    "apply_rope_fusion": False, "tp_only_amax_red": False, "attention_backend": "auto",
}


def test_keys_nemo_reads_are_not_unknown(tmp_path):
    data = _nemo1(**NEMO_READS)
    data["s3_checkpointing"] = {"max_write_concurrency": 10}  # NeMo's MegatronTrainerBuilder
    _, result = _run(_write(tmp_path, data))
    assert _rules(result) & {"nemo-unknown-key", "nemo-not-modelled"} == set()


def test_a_misspelt_key_is_still_unknown_and_named_with_the_closest(tmp_path):
    _, result = _run(_write(tmp_path, _nemo1(cpu_offloading_num_layer=3)))
    message = _messages(result, "nemo-unknown-key")[0]
    assert "'model.cpu_offloading_num_layer'" in message
    assert "'model.cpu_offloading_num_layers'" in message


@pytest.mark.parametrize("key,value", [
    ("drop_layers", [0, 3]), ("sharp", True), ("fp8_dot_product_attention", True),
    ("num_micro_batches_with_partial_activation_checkpoints", 2),
    ("rampup_batch_size", [16, 16, 1000]), ("megatron_amp_O2", False),
])
def test_known_keys_that_change_memory_or_time_but_are_not_modelled_warn(tmp_path, key, value):
    _, result = _run(_write(tmp_path, _nemo1(**{key: value})))
    assert any(f"model.{key}" in m for m in _messages(result, "nemo-not-modelled"))


def test_the_key_lists_name_their_source_and_hold_the_fields_planner_reads():
    text = (Path(__file__).resolve().parent.parent / "planner" / "data"
            / "nemo_keys.yaml").read_text()
    data = yaml.safe_load(text)
    assert data["sources"] == {"megatron_core": ["0.13.1", "0.19.2"], "nemo_toolkit": "2.4.0",
                               "megatron_bridge": "0.6.2"}
    # fields of Megatron-Core TransformerConfig that the importers read (transformer_config.py)
    for name in ("recompute_modules", "fp8_recipe", "cuda_graph_impl", "mtp_num_layers",
                 "moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
                 "pipeline_model_parallel_layout"):
        assert name in key_list("transformer_config"), name
    assert {"cpu_offloading_num_layers", "overlap_moe_expert_parallel_comm"} \
        <= key_list("model_parallel_config")
    assert {"grad_reduce_in_fp32", "use_megatron_fsdp", "data_parallel_sharding_strategy"} \
        <= key_list("ddp_config")
    assert {"exp_avg_dtype", "exp_avg_sq_dtype", "use_precision_aware_optimizer"} \
        <= key_list("optimizer_config")
    assert {"override_vocab_size", "rotary_base", "fp8_params"} <= key_list("nemo1_model")


# ------------------------------------------------------- OmegaConf interpolations (issue 9.7)

def test_interpolations_resolve_as_omegaconf_does_with_nemos_resolvers():
    data = {
        "run": {"name": "gpt", "results_dir": "${base_results_dir}/${.name}"},
        "model": {
            "hidden_size": 1536, "num_layers": 24,
            "ffn_hidden_size": "${multiply:4, ${.hidden_size}}",   # NeMo: x * y
            "cpu_offloading_num_layers": "${sum:${.num_layers},-1}",  # NeMo: x + y
            "heads": "${divide_floor:${.hidden_size}, 128}",        # launcher: floor(x / y)
            "chunks": "${divide_ceil:${.num_layers}, 5}",           # launcher: ceil(x / y)
            "data": {"seq_length": "${..encoder_seq_length}", "path": "${model.name}/x"},
            "encoder_seq_length": 4096, "name": "m",
            "tp": "${oc.env:TP,4}", "gpu": "${gpu_name:}", "literal": "\\${not.this}",
        },
    }
    m = resolve(data, architecture="hopper")["model"]
    assert m["ffn_hidden_size"] == 4 * 1536 and isinstance(m["ffn_hidden_size"], int)
    assert m["cpu_offloading_num_layers"] == 23
    assert m["heads"] == 12 and m["chunks"] == 5          # 1536 // 128; ceil(24 / 5)
    assert m["data"] == {"seq_length": 4096, "path": "m/x"}
    assert m["tp"] == 4            # oc.env: the default (planner does not read the environment)
    assert m["gpu"] == "h100"      # NeMo's gpu_name: compute capability 9 -> "h100"
    assert m["literal"] == "${not.this}"
    assert resolve({"g": "${gpu_name:}"}, architecture="blackwell")["g"] is None


def test_a_nemo_file_with_interpolations_reads_their_values(tmp_path):
    data = _nemo1(ffn_hidden_size="${multiply:4, ${.hidden_size}}",
                  max_position_embeddings="${.encoder_seq_length}",
                  data={"seq_length": "${model.encoder_seq_length}"})
    imported, result = _run(_write(tmp_path, data))
    assert imported.job.model.ffn == 4 * 1024
    assert imported.job.training.seq_length == 2048
    assert "nemo-seq-length-mismatch" not in _rules(result)


def test_launcher_files_mounted_at_training_resolve_their_own_keys():
    data = {"model": {"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 8},
            "exp": {"mp": "${multiply:${training.model.tensor_model_parallel_size}, "
                          "${training.model.pipeline_model_parallel_size}}"}}
    assert resolve(data)["exp"]["mp"] == 32


def test_unresolvable_values_fail_only_where_they_are_read(tmp_path):
    data = _nemo1(num_layers="${.layers}")
    data["exp_manager"] = {"explicit_log_dir": "${training.run.results_dir}/results"}
    with pytest.raises(SpecError) as err:
        load_any(_write(tmp_path, data))
    assert "model.num_layers = '${.layers}' cannot be resolved" in err.value.message
    assert "${model.layers} is not in the file" in err.value.message
    ok = _nemo1()
    ok["exp_manager"] = data["exp_manager"]      # never read: no error
    assert load_any(_write(tmp_path, ok)).job.num_gpus == 16


@pytest.mark.parametrize("text,reason", [
    ("${a}", "cycle"),
    ("${multiply:${a},2}", "cycle"),
    ("${oc.env:HOME}", "environment variable"),
    ("${add:1,2}", "resolver 'add' is not one NeMo registers"),
    ("${multiply:'four',2}", "multiply needs numbers"),
    ("${" * 40 + "x" + "}" * 40, "nested more than 32"),
    ("???", "missing value"),
])
def test_bad_interpolations_are_one_line_errors_naming_the_reason(text, reason):
    value = resolve({"a": text})["a"]
    assert isinstance(value, Unresolved) and reason in value.reason
    with pytest.raises(SpecError) as err:
        int(value)
    assert err.value.message.startswith("a = ")


def test_interpolation_chains_that_double_are_bounded():
    # 60 keys, each joining (or multiplying) the one before twice: OmegaConf evaluates key i
    # 2**i times; resolved once per key, a_i is 2**i characters (x doubled i times) and the
    # number 2**(2**i), so the text stops at a17 (2**17 > 100,000 characters) and the number
    # at a6 (2**64 > 2**63).
    joined = {"a0": "x", **{f"a{i}": f"${{a{i - 1}}}${{a{i - 1}}}" for i in range(1, 61)}}
    squared = {"a0": 2, **{f"a{i}": f"${{multiply:${{a{i - 1}}},${{a{i - 1}}}}}"
                           for i in range(1, 61)}}
    start = time.perf_counter()
    text, number = resolve(joined), resolve(squared)
    assert time.perf_counter() - start < 1.0
    assert len(text["a16"]) == 2 ** 16 and "longer than 100000" in text["a17"].reason
    assert number["a5"] == 2 ** 32 and "beyond 2**63" in number["a6"].reason
    assert isinstance(text["a60"], Unresolved) and isinstance(number["a60"], Unresolved)


# ------------------------------------------------------------------ malformed NeMo (issue 12)

@pytest.mark.parametrize("text,needle", [
    ("trainer: {devices: 8}\nmodel:\n  1: 2\n  num_layers: 2\n", "the key 1 (int)"),
    ("trainer: {devices: 8}\nmodel:\n  num_layers: 2\n  data: {true: 2}\n",
     "model.data has the key True (bool)"),
    ("trainer: {devices: 8}\nmodel: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16,"
     " num_moe_experts: '8', tokenizer: {type: GPT2BPETokenizer}}\n",
     "model.num_moe_experts = '8' must be an integer (a number, not a quoted string)"),
])
def test_malformed_nemo_yaml_is_exit_2_with_one_line(runner, tmp_path, text, needle):
    path = _write(tmp_path, text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output
