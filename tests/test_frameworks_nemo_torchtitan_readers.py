"""NeMo 1 / NeMo 2 / Megatron-Bridge YAML and torchtitan TOML read the way the frameworks read
them: the keys they know (planner/frameworks/nemo/nemo_keys.yaml), OmegaConf interpolations, the
production recipe settings, torchtitan's model flavors, and one clear line for bad input.

Every fixture is written here (small, our own); numbers come from the frameworks' code named
next to each case or from a derivation written out in the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from work_budget import cpu_budget

from planner.cli import app
from planner.errors import SpecError
from planner.frameworks import load_any
from planner.frameworks.nemo.mcore import key_list
from planner.readers.omegaconf import Unresolved, resolve
from planner.validate import validate


def _run(path, **opts):
    imported = load_any(path, **opts)
    return imported, validate(imported.job, imported.layout, extra=imported.violations)


def _rules(result, severity=None) -> set[str]:
    return {
        v.rule
        for v in result.errors + result.warnings
        if severity is None or v.severity == severity
    }


def _messages(result, rule: str) -> list[str]:
    return [v.message for v in result.errors + result.warnings if v.rule == rule]


# A small NeMo 1 launcher-style file: 8 layers of width 1024, GPT-2 tokenizer (50257 tokens),
# 2 nodes x 8 GPUs with TP 2 PP 2 (DP 4), micro-batch 2, global batch 64, seq 2048.
def _nemo1(**model) -> dict:
    base = {
        "micro_batch_size": 2,
        "global_batch_size": 64,
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 2,
        "encoder_seq_length": 2048,
        "max_position_embeddings": 2048,
        "num_layers": 8,
        "hidden_size": 1024,
        "ffn_hidden_size": 4096,
        "num_attention_heads": 16,
        "tokenizer": {"library": "megatron", "type": "GPT2BPETokenizer"},
        "sequence_parallel": True,
        "optim": {"name": "distributed_fused_adam"},
    }
    base.update(model)
    return {"trainer": {"num_nodes": 2, "devices": 8, "precision": "bf16"}, "model": base}


def _write(tmp_path: Path, data, name: str = "nemo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


# ------------------------------------------------------------------------------ keys NeMo reads

# Keys NeMo 1 reads itself (megatron_gpt_model.py / megatron_base_model.py, nemo_toolkit 2.4.0)
# or passes to Megatron-Core's TransformerConfig / ModelParallelConfig (megatron-core 0.13.1 and
# 0.19.2), each set to its neutral value, as NeMo's own megatron_gpt_config.yaml sets them.
NEMO_READS = {
    "sharp": False,
    "drop_layers": [],
    "cpu_offloading": False,
    "cpu_offloading_num_layers": 7,
    "cpu_offloading_activations": True,
    "cpu_offloading_weights": True,
    "moe_expert_capacity_factor": None,
    "layernorm_zero_centered_gamma": False,
    "skip_train": False,
    "reset_lr": False,
    "reset_lr_steps": False,
    "restore_from_ckpt": None,
    "restore_from_path": None,
    "enable_megatron_timers": False,
    "megatron_timer_kwargs": {"log_every_n_steps": 10},
    "nccl_communicator_config_path": None,
    "validation_param_sync_overlap": False,
    "apply_rope_fusion": False,
    "tp_only_amax_red": False,
    "attention_backend": "auto",
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


@pytest.mark.parametrize(
    "key,value",
    [
        ("drop_layers", [0, 3]),
        ("sharp", True),
        ("fp8_dot_product_attention", True),
        ("num_micro_batches_with_partial_activation_checkpoints", 2),
        ("rampup_batch_size", [16, 16, 1000]),
        ("megatron_amp_O2", False),
        ("cross_entropy_fusion_impl", "te"),
    ],
)
def test_known_keys_that_change_memory_or_time_but_are_not_modelled_warn(tmp_path, key, value):
    _, result = _run(_write(tmp_path, _nemo1(**{key: value})))
    assert any(f"model.{key}" in m for m in _messages(result, "nemo-not-modelled"))


def test_the_key_lists_name_their_source_and_hold_the_fields_planner_reads():
    text = (
        Path(__file__).resolve().parent.parent
        / "planner"
        / "frameworks"
        / "nemo"
        / "nemo_keys.yaml"
    ).read_text()
    data = yaml.safe_load(text)
    assert data["sources"] == {
        "megatron_core": ["0.13.1", "0.19.2"],
        "nemo_toolkit": "2.4.0",
        "megatron_bridge": "0.6.2",
    }
    # fields of Megatron-Core TransformerConfig that the importers read (transformer_config.py)
    for name in (
        "recompute_modules",
        "fp8_recipe",
        "cuda_graph_impl",
        "mtp_num_layers",
        "moe_token_dispatcher_type",
        "moe_flex_dispatcher_backend",
        "pipeline_model_parallel_layout",
    ):
        assert name in key_list("transformer_config"), name
    assert {"cpu_offloading_num_layers", "overlap_moe_expert_parallel_comm"} <= key_list(
        "model_parallel_config"
    )
    assert {
        "grad_reduce_in_fp32",
        "use_megatron_fsdp",
        "data_parallel_sharding_strategy",
    } <= key_list("ddp_config")
    assert {"exp_avg_dtype", "exp_avg_sq_dtype", "use_precision_aware_optimizer"} <= key_list(
        "optimizer_config"
    )
    assert {"override_vocab_size", "rotary_base", "fp8_params"} <= key_list("nemo1_model")


# --------------------------------------------------------------------- OmegaConf interpolations


def test_interpolations_resolve_as_omegaconf_does_with_nemos_resolvers():
    data = {
        "run": {"name": "gpt", "results_dir": "${base_results_dir}/${.name}"},
        "model": {
            "hidden_size": 1536,
            "num_layers": 24,
            "ffn_hidden_size": "${multiply:4, ${.hidden_size}}",  # NeMo: x * y
            "cpu_offloading_num_layers": "${sum:${.num_layers},-1}",  # NeMo: x + y
            "heads": "${divide_floor:${.hidden_size}, 128}",  # launcher: floor(x / y)
            "chunks": "${divide_ceil:${.num_layers}, 5}",  # launcher: ceil(x / y)
            "data": {"seq_length": "${..encoder_seq_length}", "path": "${model.name}/x"},
            "encoder_seq_length": 4096,
            "name": "m",
            "tp": "${oc.env:TP,4}",
            "gpu": "${gpu_name:}",
            "literal": "\\${not.this}",
        },
    }
    m = resolve(data, architecture="hopper")["model"]
    assert m["ffn_hidden_size"] == 4 * 1536 and isinstance(m["ffn_hidden_size"], int)
    assert m["cpu_offloading_num_layers"] == 23
    assert m["heads"] == 12 and m["chunks"] == 5  # 1536 // 128; ceil(24 / 5)
    assert m["data"] == {"seq_length": 4096, "path": "m/x"}
    assert m["tp"] == 4  # oc.env: the default (planner does not read the environment)
    assert m["gpu"] == "h100"  # NeMo's gpu_name: compute capability 9 -> "h100"
    assert m["literal"] == "${not.this}"
    assert resolve({"g": "${gpu_name:}"}, architecture="blackwell")["g"] is None


def test_a_nemo_file_with_interpolations_reads_their_values(tmp_path):
    data = _nemo1(
        ffn_hidden_size="${multiply:4, ${.hidden_size}}",
        max_position_embeddings="${.encoder_seq_length}",
        data={"seq_length": "${model.encoder_seq_length}"},
    )
    imported, result = _run(_write(tmp_path, data))
    assert imported.job.model.ffn == 4 * 1024
    assert imported.job.training.seq_length == 2048
    assert "nemo-seq-length-mismatch" not in _rules(result)


def test_launcher_files_mounted_at_training_resolve_their_own_keys():
    data = {
        "model": {"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 8},
        "exp": {
            "mp": "${multiply:${training.model.tensor_model_parallel_size}, "
            "${training.model.pipeline_model_parallel_size}}"
        },
    }
    assert resolve(data)["exp"]["mp"] == 32


def test_unresolvable_values_fail_only_where_they_are_read(tmp_path):
    data = _nemo1(num_layers="${.layers}")
    data["exp_manager"] = {"explicit_log_dir": "${training.run.results_dir}/results"}
    with pytest.raises(SpecError) as err:
        load_any(_write(tmp_path, data))
    assert "model.num_layers = '${.layers}' cannot be resolved" in err.value.message
    assert "${model.layers} is not in the file" in err.value.message
    ok = _nemo1()
    ok["exp_manager"] = data["exp_manager"]  # never read: no error
    assert load_any(_write(tmp_path, ok)).job.num_gpus == 16


@pytest.mark.parametrize(
    "text,reason",
    [
        ("${a}", "cycle"),
        ("${multiply:${a},2}", "cycle"),
        ("${oc.env:HOME}", "environment variable"),
        ("${add:1,2}", "resolver 'add' is not one NeMo registers"),
        ("${multiply:'four',2}", "multiply needs numbers"),
        ("${" * 40 + "x" + "}" * 40, "nested more than 32"),
        ("???", "missing value"),
    ],
)
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
    squared = {
        "a0": 2,
        **{f"a{i}": f"${{multiply:${{a{i - 1}}},${{a{i - 1}}}}}" for i in range(1, 61)},
    }
    # bounded work, not speed: both take ~0.02 CPU s; evaluating key i 2**i times would not
    # finish (2**60), and even 2**20 evaluations cost seconds (tests/work_budget.py)
    with cpu_budget(1.0, "resolving the doubling chains"):
        text, number = resolve(joined), resolve(squared)
    assert len(text["a16"]) == 2**16 and "longer than 100000" in text["a17"].reason
    assert number["a5"] == 2**32 and "beyond 2**63" in number["a6"].reason
    assert isinstance(text["a60"], Unresolved) and isinstance(number["a60"], Unresolved)


# --------------------------------------------------------- malformed NeMo files (hostile input)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("trainer: {devices: 8}\nmodel:\n  1: 2\n  num_layers: 2\n", "the key 1 (int)"),
        (
            "trainer: {devices: 8}\nmodel:\n  num_layers: 2\n  data: {true: 2}\n",
            "model.data has the key True (bool)",
        ),
        (
            "trainer: {devices: 8}\nmodel: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16,"
            " num_moe_experts: '8', tokenizer: {type: GPT2BPETokenizer}}\n",
            "model.num_moe_experts = '8' must be an integer (a number, not a quoted string)",
        ),
    ],
)
def test_malformed_nemo_yaml_is_exit_2_with_one_line(runner, tmp_path, text, needle):
    path = _write(tmp_path, text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output


# ------------------------------------------------------------------- production recipe settings

_LAYOUT_DEFAULTS = dict(
    recompute_modules=[],
    recompute_num_layers=None,
    cpu_offloading_num_layers=0,
    grad_reduce_in_fp32=True,
    exp_avg_dtype="fp32",
    exp_avg_sq_dtype="fp32",
    moe_token_dispatcher="allgather",
    overlap_moe_expert_parallel_comm=False,
    cuda_graphs="none",
    pipeline_model_parallel_layout=None,
)

NEMO1_SETTINGS = [
    # model keys, expected layout fields, expected training fields
    (
        {
            "activations_checkpoint_granularity": "selective",
            "recompute_modules": ["mlp", "layernorm", "core_attn"],
        },
        {"recompute": "selective", "recompute_modules": ["mlp", "layernorm", "core_attn"]},
        {},
    ),
    (
        {
            "activations_checkpoint_granularity": "full",
            "activations_checkpoint_method": "block",
            "activations_checkpoint_num_layers": 2,
        },
        {"recompute": "full", "recompute_num_layers": 2},
        {},
    ),
    (
        {
            "activations_checkpoint_granularity": "full",
            "activations_checkpoint_method": "uniform",
            "activations_checkpoint_num_layers": 1,
        },
        {"recompute": "full", "recompute_num_layers": None},
        {},
    ),
    (
        {
            "pipeline_model_parallel_size": 1,
            "cpu_offloading": True,
            "cpu_offloading_num_layers": 3,
            "cpu_offloading_weights": False,
        },
        {"cpu_offloading_num_layers": 3},
        {},
    ),
    (
        {"optim": {"name": "distributed_fused_adam", "grad_sync_dtype": "bf16"}},
        {"grad_reduce_in_fp32": False},
        {},
    ),
    (
        {"optim": {"name": "distributed_fused_adam", "dtype": "bf16"}},
        {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
        {},
    ),
    (
        {"fp8": True, "fp8_hybrid": True, "fp8_recipe": "tensorwise", "fp8_params": True},
        {},
        {"precision": "fp8", "fp8_recipe": "tensorwise", "fp8_param_gather": True},
    ),
    (
        {
            "num_moe_experts": 8,
            "moe_router_topk": 2,
            "expert_model_parallel_size": 2,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "overlap_moe_expert_parallel_comm": True,
        },
        {"moe_token_dispatcher": "hybridep", "overlap_moe_expert_parallel_comm": True},
        {},
    ),
    (
        {"num_moe_experts": 8, "moe_token_dispatcher_type": "alltoall"},
        {"moe_token_dispatcher": "alltoall"},
        {},
    ),
    ({"enable_cuda_graph": True, "use_te_rng_tracker": True}, {"cuda_graphs": "partial"}, {}),
    ({"cuda_graph_impl": "full_iteration"}, {"cuda_graphs": "full"}, {}),
    (
        {"cuda_graph_impl": "local", "cuda_graph_scope": "full_iteration"},
        {"cuda_graphs": "full"},
        {},
    ),
    (
        {"pipeline_model_parallel_layout": "Et*3|t*3|t*2L"},
        {"pipeline_model_parallel_layout": "Et*3|t*3|t*2L"},
        {},
    ),
]


@pytest.mark.parametrize(
    "model,layout,training", NEMO1_SETTINGS, ids=[next(iter(c[0])) for c in NEMO1_SETTINGS]
)
def test_nemo1_reads_the_recipe_settings(tmp_path, model, layout, training):
    imported = load_any(_write(tmp_path, _nemo1(**model)))
    got = imported.layout.as_dict()
    for key, value in {**_LAYOUT_DEFAULTS, **layout}.items():
        assert got[key] == value, key
    t = imported.job.training
    for key, value in training.items():
        assert getattr(t, key) == value, key
    assert not [v for v in imported.violations if v.severity == "error"]


def test_nemo1_mtp_and_rope_base_and_vocab_override_reach_the_model(tmp_path):
    m = load_any(
        _write(
            tmp_path,
            _nemo1(
                mtp_num_layers=1,
                rotary_base=500000,
                position_embedding_type="rope",
                override_vocab_size=32000,
            ),
        )
    ).job.model
    assert (m.mtp_num_layers, m.rotary_base, m.vocab_size) == (1, 500000.0, 32000)


@pytest.mark.parametrize(
    "model,rule,needle",
    [
        (
            {"cpu_offloading": True, "cpu_offloading_num_layers": 3},
            "nemo-cpu-offloading",
            "no CPU offloading with pipeline parallelism",
        ),
        (
            {
                "pipeline_model_parallel_size": 1,
                "cpu_offloading": True,
                "cpu_offloading_num_layers": 8,
            },
            "nemo-cpu-offloading",
            "between 0 and num_layers - 1 (7)",
        ),
        (
            {"activations_checkpoint_granularity": "selective", "recompute_modules": ["attention"]},
            "nemo-recompute-flags",
            "'attention' is not a module Megatron-Core recomputes",
        ),
        (
            {
                "pipeline_model_parallel_size": 1,
                "cpu_offloading": True,
                "cpu_offloading_num_layers": 2,
                "cpu_offloading_weights": True,
            },
            "nemo-not-modelled",
            "cpu_offloading_weights",
        ),
    ],
)
def test_megatron_core_rules_on_the_recipe_settings(tmp_path, model, rule, needle):
    _, result = _run(_write(tmp_path, _nemo1(**model)))
    assert any(needle in m for m in _messages(result, rule)), _messages(result, rule)


# NeMo 2: llm.pretrain recipe dumped to YAML (a small model of our own, on 16 GPUs)
def _nemo2(*, strategy=None, config=None, plugins=None, optim=None) -> dict:
    return {
        "trainer": {
            "devices": 8,
            "num_nodes": 2,
            "strategy": {
                "tensor_model_parallel_size": 2,
                "pipeline_model_parallel_size": 2,
                "sequence_parallel": True,
                **(strategy or {}),
            },
            "plugins": plugins
            if plugins is not None
            else {
                "_target_": "nemo.lightning.pytorch.plugins.MegatronMixedPrecision",
                "precision": "bf16-mixed",
            },
        },
        "model": {
            "config": {
                "num_layers": 8,
                "hidden_size": 1024,
                "ffn_hidden_size": 2816,
                "num_attention_heads": 16,
                "num_query_groups": 4,
                "gated_linear_unit": True,
                "vocab_size": 32000,
                "normalization": "RMSNorm",
                "add_bias_linear": False,
                "seq_length": 4096,
                **(config or {}),
            }
        },
        "data": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
        "optim": {"config": {"use_distributed_optimizer": True, **(optim or {})}},
    }


def test_nemo2_reads_plugins_strategy_ddp_fsdp_and_optimizer(tmp_path):
    data = _nemo2(
        strategy={
            "fsdp": "megatron",
            "ddp": {"grad_reduce_in_fp32": False, "data_parallel_sharding_strategy": "optim_grads"},
        },
        config={
            "recompute_granularity": "selective",
            "recompute_modules": ["moe_act"],
            "mtp_num_layers": 2,
            "cuda_graph_impl": "transformer_engine",
        },
        plugins={
            "_target_": "nemo.lightning.pytorch.plugins.MegatronMixedPrecision",
            "precision": "bf16-mixed",
            "fp8": "hybrid",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
        },
        optim={
            "use_precision_aware_optimizer": True,
            "exp_avg_dtype": "torch.bfloat16",
            "exp_avg_sq_dtype": "torch.float32",
        },
    )
    imported = load_any(_write(tmp_path, data), hardware="b200")
    lay, t = imported.layout, imported.job.training
    assert imported.format == "nemo2"
    assert (lay.zero, lay.grad_reduce_in_fp32, lay.recompute_modules, lay.cuda_graphs) == (
        2,
        False,
        ("moe_act",),
        "partial",
    )
    assert (lay.exp_avg_dtype, lay.exp_avg_sq_dtype) == ("bf16", "fp32")
    assert (t.precision, t.fp8_recipe, t.fp8_param_gather) == ("fp8", "mxfp8", True)
    assert imported.job.model.mtp_num_layers == 2


@pytest.mark.parametrize(
    "aware, remainders, warned", [(True, True, True), (True, False, False), (False, True, False)]
)
def test_nemo2_reports_the_optimizers_parameter_remainders_as_not_modelled(
    tmp_path, aware, remainders, warned
):
    # Megatron-Core OptimizerConfig.store_param_remainders: with the precision-aware optimizer
    # the fp32 master weight takes 2 bytes a parameter, not the 4 planner counts (True by
    # default: None leaves the key out); without that optimizer the key does nothing
    optim = {"use_precision_aware_optimizer": aware}
    if remainders is not None:
        optim["store_param_remainders"] = remainders
    if aware:
        optim.update(exp_avg_dtype="torch.bfloat16", exp_avg_sq_dtype="torch.bfloat16")
    imported = load_any(_write(tmp_path, _nemo2(optim=optim)), hardware="h100-sxm")
    found = [
        v.message
        for v in imported.violations
        if v.severity == "warning" and "store_param_remainders" in v.message
    ]
    assert bool(found) == warned
    if warned:
        assert "planner does not model it" in found[0] and "2 bytes a parameter" in found[0]


@pytest.mark.parametrize(
    "recipe,precision,fp8_recipe,gather",
    [
        # nemo/collections/llm/recipes/precision/mixed_precision.py (NeMo 2.4.0)
        ("bf16_with_fp8_mixed", "fp8", "delayed", True),
        ("bf16_with_fp8_current_scaling_mixed", "fp8", "tensorwise", True),
        ("bf16_with_fp8_subchannel_scaling_mixed", "fp8", "blockwise", False),
        ("bf16_mixed", "bf16", None, False),
    ],
)
def test_nemo2_precision_recipes_by_name(tmp_path, recipe, precision, fp8_recipe, gather):
    data = _nemo2(
        plugins={"_target_": f"nemo.collections.llm.recipes.precision.mixed_precision.{recipe}"}
    )
    t = load_any(_write(tmp_path, data)).job.training
    assert (t.precision, t.fp8_recipe, t.fp8_param_gather) == (precision, fp8_recipe, gather)


def test_bf16_moments_need_the_precision_aware_optimizer(tmp_path):
    data = _nemo2(optim={"exp_avg_dtype": "bf16"})
    _, result = _run(_write(tmp_path, data))
    assert "nemo-precision-aware-optimizer" in _rules(result, "error")


# Megatron-Bridge ConfigContainer YAML (Megatron-Bridge 0.6.2 training/config.py sections)
def _bridge(**sections) -> dict:
    data = {
        "model": {
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 1,
            "sequence_parallel": True,
            "num_layers": 8,
            "hidden_size": 1024,
            "ffn_hidden_size": 2816,
            "num_attention_heads": 16,
            "num_query_groups": 4,
            "gated_linear_unit": True,
            "vocab_size": 32000,
            "normalization": "RMSNorm",
            "add_bias_linear": False,
            "seq_length": 4096,
            "rotary_base": 500000.0,
        },
        "train": {"micro_batch_size": 2, "global_batch_size": 64, "train_iters": 100},
        "dataset": {"seq_length": 4096},
        "ddp": {"use_distributed_optimizer": True, "overlap_grad_reduce": True},
        "optimizer": {"use_distributed_optimizer": True, "lr": 3e-4},
        "mixed_precision": "bf16_with_fp8_current_scaling_mixed",
    }
    for name, value in sections.items():
        data[name] = {**data[name], **value} if isinstance(value, dict) else value
    return data


@pytest.mark.parametrize(
    "key,value",
    [
        ("fp8_dot_product_attention", True),
        ("cross_entropy_fusion_impl", "te"),
        ("moe_shared_expert_overlap", True),
    ],
)
@pytest.mark.parametrize("fmt", ["nemo2", "bridge"])
def test_transformer_config_fields_that_are_not_modelled_warn_in_every_format(
    tmp_path, fmt, key, value
):
    data = _nemo2(config={key: value}) if fmt == "nemo2" else _bridge(model={key: value})
    _, result = (
        _run(_write(tmp_path, data), gpus=16) if fmt == "bridge" else _run(_write(tmp_path, data))
    )
    rule = "nemo-not-modelled" if fmt == "nemo2" else "bridge-not-modelled"
    assert any(f".{key} = " in m for m in _messages(result, rule)), _messages(result, rule)


def test_megatron_bridge_config_reads_every_section(tmp_path):
    imported, result = _run(
        _write(
            tmp_path,
            _bridge(
                model={
                    "recompute_granularity": "full",
                    "recompute_method": "block",
                    "recompute_num_layers": 3,
                    "moe_token_dispatcher_type": "flex",
                    "num_moe_experts": 8,
                    "expert_model_parallel_size": 4,
                },
                ddp={
                    "use_megatron_fsdp": True,
                    "data_parallel_sharding_strategy": "optim_grads_params",
                    "grad_reduce_in_fp32": True,
                },
            ),
        ),
        gpus=16,
    )
    lay, t = imported.layout, imported.job.training
    assert imported.format == "megatron-bridge"
    assert (lay.tp, lay.dp, lay.ep, lay.micro_batch_size, lay.zero) == (2, 8, 4, 2, 3)
    assert (lay.recompute, lay.recompute_num_layers, lay.moe_token_dispatcher) == (
        "full",
        3,
        "deepep",
    )
    # bf16_with_fp8_current_scaling_mixed (Megatron-Bridge mixed_precision.py): tensorwise,
    # fp8 parameter gather, and it sets grad_reduce_in_fp32 (True) over the ddp section's
    assert (t.precision, t.fp8_recipe, t.fp8_param_gather, lay.grad_reduce_in_fp32) == (
        "fp8",
        "tensorwise",
        True,
        True,
    )
    assert imported.job.model.rotary_base == 500000.0
    assert "bridge-unknown-key" not in _rules(result)
    assert any(
        "first and last layer in bf16" in m for m in _messages(result, "bridge-not-modelled")
    )


def test_megatron_bridge_checks_its_keys_and_needs_the_world_size(tmp_path):
    path = _write(tmp_path, _bridge(train={"micro_batchsize": 2}, dataset={"seq_length": 2048}))
    with pytest.raises(SpecError) as err:
        load_any(path)
    assert "no world size" in err.value.message and "--gpus" in err.value.message
    _, result = _run(path, gpus=16)
    assert "'train.micro_batchsize'" in _messages(result, "bridge-unknown-key")[0]
    assert "bridge-seq-length-mismatch" in _rules(result, "error")


# ---------------------------------------- torchtitan: degrees, recipe settings, malformed files


def _titan(
    tmp_path: Path,
    *,
    model='name = "llama3"\nflavor = "8B"',
    training="",
    parallelism="",
    ac='mode = "full"',
    extra="",
) -> Path:
    text = (
        f"[model]\n{model}\n\n[training]\nlocal_batch_size = 2\nseq_len = 8192\n{training}\n"
        f"[parallelism]\n{parallelism}\n\n[activation_checkpoint]\n{ac}\n{extra}"
    )
    return _write(tmp_path, text, "job.toml")


# Published totals: Qwen3 technical report (arXiv:2505.09388) Tables 1-2; DeepSeek-V2
# (arXiv:2405.04434): V2 236B, V2-Lite 15.7B (torchtitan's deepseek_v3 16B and 236B flavors);
# DeepSeek-V3 671B; Meta's Llama 4 model cards: Scout 109B, Maverick 400B total parameters.
FLAVORS = [
    ("qwen3", "0.6B", 0.6e9),
    ("qwen3", "1.7B", 1.7e9),
    ("qwen3", "4B", 4.0e9),
    ("qwen3", "8B", 8.2e9),
    ("qwen3", "14B", 14.8e9),
    ("qwen3", "32B", 32.8e9),
    ("qwen3", "30B-A3B", 30.5e9),
    ("qwen3", "235B-A22B", 235e9),
    ("deepseek_v3", "16B", 15.7e9),
    ("deepseek_v3", "236B", 236e9),
    ("deepseek_v3", "671B", 671e9),
    ("llama4", "17bx16e", 109e9),
    ("llama4", "17bx128e", 400e9),
    ("llama3", "8B", 8.03e9),
    ("llama3", "405B", 405.9e9),
]


@pytest.mark.parametrize("name,flavor,published", FLAVORS, ids=[f"{n}-{f}" for n, f, _ in FLAVORS])
def test_torchtitan_flavors_are_known_with_their_published_size(tmp_path, name, flavor, published):
    from planner.cost.params import total_params

    path = _titan(tmp_path, model=f'name = "{name}"\nflavor = "{flavor}"', ac='mode = "none"')
    model = load_any(path, gpus=8).job.model
    assert total_params(model) == pytest.approx(published, rel=0.03)


def test_torchtitan_flavor_shapes_follow_its_formulas(tmp_path):
    def model(name, flavor):
        return load_any(
            _titan(tmp_path, model=f'name = "{name}"\nflavor = "{flavor}"'), gpus=8
        ).job.model

    # llama4 17bx16e: experts int(1.2 * int(2*4*5120/3)) / (top_k 1 + 1 shared) = 8191,
    # rounded up to multiple_of 2048 -> 8192; MoE on every layer (interleave step 1)
    scout = model("llama4", "17bx16e")
    assert (scout.expert_ffn, scout.num_shared_experts, scout.num_dense_layers) == (8192, 1, 0)
    # 17bx128e: interleave_moe_layer_step 2 -> layers 1, 3, ... 47 are MoE: 24 dense;
    # dense MLP 2048 * ceil(int(1.2 * 13653) / 2048) = 16384
    maverick = model("llama4", "17bx128e")
    assert (maverick.num_moe_layers, maverick.ffn, maverick.num_experts) == (24, 16384, 128)
    assert maverick.moe_layers[:4] == (False, True, False, True) and maverick.moe_layers[-1]
    # qwen3 small flavors tie the embeddings; 235B-A22B keeps torchtitan's rope_theta 5e6
    assert model("qwen3", "0.6B").tied_embeddings and not model("qwen3", "8B").tied_embeddings
    assert model("qwen3", "235B-A22B").rotary_base == 5e6
    # deepseek_v3 16B: q_lora_rank 0 = uncompressed queries, 2 shared experts, 1 dense layer
    lite = model("deepseek_v3", "16B")
    assert (lite.q_lora_rank, lite.kv_lora_rank, lite.num_shared_experts) == (None, 512, 2)


def test_torchtitan_flavor_rules(tmp_path):
    # deepseek_v3 flavors use flex attention, which torchtitan's CP does not take
    path = _titan(
        tmp_path,
        model='name = "deepseek_v3"\nflavor = "16B"',
        parallelism="context_parallel_degree = 2",
    )
    _, result = _run(path, gpus=8)
    assert "torchtitan-cp-attention" in _rules(result, "error")
    # Maverick's alternating dense/MoE layers and iRoPE's chunks are modelled layer by layer
    # (moe_layer_freq, layer_types): nothing left to call approximate
    path = _titan(
        tmp_path,
        model='name = "llama4"\nflavor = "17bx128e_irope"',
        parallelism="pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 1",
    )
    imported, result = _run(path, gpus=8)
    assert not _messages(result, "torchtitan-approximated")
    assert imported.job.model.attention_kinds[:4] == ("chunked", "chunked", "chunked", "full")


TITAN_SETTINGS = [
    # ([activation_checkpoint], other tables, expected layout fields, expected training fields)
    ('mode = "selective"\nselective_ac_option = "op"', "", {"recompute": "selective"}, {}),
    # 32 layers on one rank, every 2nd checkpointed: floor(32 / 2) = 16
    (
        'mode = "selective"\nselective_ac_option = "2"',
        "",
        {"recompute": "full", "recompute_num_layers": 16},
        {},
    ),
    (
        'mode = "selective"\nselective_ac_option = "1"',
        "",
        {"recompute": "full", "recompute_num_layers": None},
        {},
    ),
    (
        'mode = "none"',
        '[model]\nconverters = ["quantize.linear.float8"]\n'
        "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n",
        {},
        {"precision": "fp8", "fp8_recipe": "tensorwise", "fp8_param_gather": True},
    ),
    (
        'mode = "none"',
        '[model]\nconverters = ["float8"]\n[float8]\nrecipe_name = "rowwise"\n',
        {},
        {"precision": "fp8", "fp8_recipe": "blockwise", "fp8_param_gather": False},
    ),
    (
        'mode = "none"',
        '[model]\nconverters = ["quantize.linear.mx"]\n',
        {},
        {"precision": "fp8", "fp8_recipe": "mxfp8"},
    ),
    (
        'mode = "none"',
        '[training]\ndtype = "bfloat16"\n',
        {"grad_reduce_in_fp32": False, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
        {},
    ),
]


def _merge_toml(base: Path, extra: str) -> Path:
    from planner.io import tomllib

    data = tomllib.loads(base.read_text())
    for name, table in tomllib.loads(extra).items():
        data.setdefault(name, {}).update(table)
    lines = []

    def emit(prefix, table):
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        lines.append(f"[{prefix}]")
        for k, v in scalars.items():
            lines.append(f"{k} = {_toml(v)}")
        for k, v in table.items():
            if isinstance(v, dict):
                emit(f"{prefix}.{k}", v)

    for name, table in data.items():
        emit(name, table)
    base.write_text("\n".join(lines) + "\n")
    return base


def _toml(v) -> str:
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(v) if isinstance(v, str) else str(v)


@pytest.mark.parametrize(
    "ac,extra,layout,training", TITAN_SETTINGS, ids=[f"{i}" for i in range(len(TITAN_SETTINGS))]
)
def test_torchtitan_reads_the_recipe_settings(tmp_path, ac, extra, layout, training):
    path = _merge_toml(_titan(tmp_path, ac=ac), extra)
    imported = load_any(path, gpus=8, hardware="b200")
    for key, value in layout.items():
        assert getattr(imported.layout, key) == value, key
    for key, value in training.items():
        assert getattr(imported.job.training, key) == value, key


def test_torchtitan_moe_backends_and_dualpipe_overlap(tmp_path):
    model = 'name = "qwen3"\nflavor = "30B-A3B"'
    path = _titan(
        tmp_path,
        model=model,
        ac='mode = "none"',
        parallelism='expert_parallel_degree = 4\nexpert_parallel_comm_backend = "deepep"'
        "\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 1"
        '\npipeline_parallel_schedule = "DualPipeV"',
    )
    lay = load_any(path, gpus=8).layout
    assert (lay.moe_token_dispatcher, lay.overlap_moe_expert_parallel_comm, lay.vpp) == (
        "deepep",
        True,
        2,
    )


@pytest.mark.parametrize(
    "parallelism,needle",
    [
        (
            "pipeline_parallel_degree = 2\npipeline_parallel_first_stage_less_layers = "
            "9223372036854775808",
            "is larger than planner takes",
        ),
        (
            "pipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 99999999999",
            "is larger than planner takes",
        ),
        ("tensor_parallel_degree = 100000000000", "is larger than planner takes"),
        # torchtitan: (32 + 40 + 1) // 2 = 36 layers per stage < first_stage_less_layers 40
        (
            "pipeline_parallel_degree = 2\npipeline_parallel_first_stage_less_layers = 40",
            "exceeds the layers per stage",
        ),
    ],
)
def test_absurd_torchtitan_values_end_fast_with_one_line(runner, tmp_path, parallelism, needle):
    path = _titan(tmp_path, parallelism=parallelism)
    # bounded work: 0.02-0.11 CPU s (the first one imports); a loop over 10**11 ranks or
    # layers would not finish (tests/work_budget.py)
    with cpu_budget(2.0, "validate"):
        result = runner.invoke(app, ["validate", str(path), "--gpus", "8"])
    assert result.exit_code in (1, 2) and needle in result.output, result.output
    assert "Traceback" not in result.output
