"""NeMo YAML and torchtitan TOML exports: what they write for the production recipe settings,
what they refuse and why, and that every export reads back (planner/frameworks/) to the same
layout and verdict, over every uneven split, vpp and ZeRO/cp combination the search returns.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.config import config_from_data
from planner.errors import InfeasibleError
from planner.frameworks import load_any
from planner.frameworks.export import export
from planner.io import tomllib
from planner.rules import split_options, vpp_options
from planner.validate import validate

COMPARED = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "etp",
    "vpp",
    "micro_batch_size",
    "sequence_parallel",
    "zero_stage",
    "recompute",
    "first_stage_layers",
    "last_stage_layers",
    "recompute_modules",
    "recompute_num_layers",
    "cpu_offloading_num_layers",
    "grad_reduce_in_fp32",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "overlap_moe_expert_parallel_comm",
    "cuda_graphs",
    "pipeline_model_parallel_layout",
)
# torchtitan has no ZeRO-1 (FSDP without resharding reads back as ZeRO-2) and no module-wise
# selective recompute (Megatron's default [core_attn] is written as its op-level
# checkpointing); NeMo 1's one distributed optimizer reads back as ZeRO-1 (all documented by
# the exporters)
LOSSY = {
    ("torchtitan", "zero_stage"): {1: 2},
    ("nemo", "zero_stage"): {2: 1},
    ("torchtitan", "recompute_modules"): {("core_attn",): ["torchtitan_op"]},
}


def _model(num_layers: int, **extra) -> dict:
    """A small Llama-like model of our own (1024 wide, 16 heads, 4 KV heads, 32k vocabulary)."""
    return {
        **dict(
            name=f"test {num_layers}L",
            num_layers=num_layers,
            hidden_size=1024,
            ffn_hidden_size=2816,
            num_attention_heads=16,
            num_kv_heads=4,
            vocab_size=32000,
            activation="swiglu",
            seq_length=4096,
            rotary_base=500000.0,
        ),
        **extra,
    }


def _config(
    model: dict, *, tp=2, pp=1, dp=2, cp=1, vpp=1, zero=1, mbs=1, m=None, training=None, **parallel
) -> dict:
    num_gpus = tp * pp * dp * cp
    m = m or max(4 * pp, 4)
    return dict(
        model=model,
        num_gpus=num_gpus,
        training=dict(dict(seq_length=4096, global_batch_size=m * mbs * dp), **(training or {})),
        parallel=dict(
            dict(tp=tp, pp=pp, cp=cp, vpp=vpp, zero_stage=zero, micro_batch_size=mbs), **parallel
        ),
    )


def _round_trip(tmp_path: Path, data: dict, fmt: str, *, needs_model: bool):
    job, layout = config_from_data(data)
    text = export(job, layout, fmt)
    path = tmp_path / ("job.toml" if fmt == "torchtitan" else "nemo.yaml")
    path.write_text(text)
    model_file = tmp_path / "model.yaml"
    model_file.write_text(yaml.safe_dump(data["model"]))
    imported = load_any(
        path, hardware=job.hardware.name, model=str(model_file) if needs_model else None
    )
    before, after = layout.as_dict(), imported.layout.as_dict()
    for key in COMPARED:
        value = tuple(before[key]) if isinstance(before[key], list) else before[key]
        want = LOSSY.get((fmt, key), {}).get(value, before[key])
        assert after[key] == want, key
    original = validate(job, layout)
    result = validate(imported.job, imported.layout, extra=imported.violations)
    assert result.valid == original.valid
    assert {v.rule for v in result.errors} == {v.rule for v in original.errors}
    assert not [v.message for v in imported.violations if v.severity == "error"]
    return job, imported


# ------------------------------------------- torchtitan: every split the search returns (12)


def _search_splits() -> list[tuple[int, int, int | None, int | None, int]]:
    """(layers, pp, first, last, vpp) for the split_options x vpp_options the search tries
    (planner/rules.py), on layer counts that exercise each shape: even, accounted (L + 2
    divisible by pp) and explicit (the remainder shared by the first and last ranks)."""
    out = []
    for L in (24, 26, 30, 32, 36, 38, 61):
        for pp in (2, 3, 4, 5, 6, 8):
            for first, last in split_options(L, pp):
                for vpp in vpp_options(L, pp, first, last, 8):
                    out.append((L, pp, first, last, vpp))
    return out


SPLITS = _search_splits()


def test_the_split_matrix_covers_every_kind():
    from planner.frameworks.writing import pipeline_split
    from planner.layout import Layout

    kinds = {
        (
            pipeline_split(
                L, Layout(pp=pp, vpp=v, first_stage_layers=f, last_stage_layers=la)
            ).kind,
            v > 1,
        )
        for L, pp, f, la, v in SPLITS
    }
    assert kinds == {(k, v) for k in ("even", "accounted", "explicit") for v in (False, True)}


@pytest.mark.parametrize(
    "L,pp,first,last,vpp", SPLITS, ids=[f"L{s[0]}-pp{s[1]}-{s[2]}-{s[3]}-vpp{s[4]}" for s in SPLITS]
)
@pytest.mark.parametrize("zero", [1, 3])
def test_torchtitan_round_trips_every_split_the_search_returns(
    tmp_path, L, pp, first, last, vpp, zero
):
    data = _config(
        _model(L), pp=pp, vpp=vpp, zero=zero, first_stage_layers=first, last_stage_layers=last
    )
    per = -(-max(first or 0, last or 0, (L - (first or 0) - (last or 0)) // max(1, pp - 2)) // vpp)
    try:
        _round_trip(tmp_path, data, "torchtitan", needs_model=True)
    except InfeasibleError as exc:
        # torchtitan gives every virtual stage `per` layers and takes at most `per` off the
        # first and last one; a smaller first/last rank than that has no torchtitan form
        assert "cannot be expressed" in exc.message, exc.message
        assert first is not None and (vpp * per - min(first, last)) > per, exc.message


@pytest.mark.parametrize(
    "zero,dp,cp", [(z, dp, cp) for z in (0, 1, 2, 3) for dp in (1, 2) for cp in (1, 2)]
)
def test_torchtitan_round_trips_zero_with_cp(tmp_path, zero, dp, cp):
    """FSDP runs over dp_shard * cp: with dp 1 and cp 2 the states shard over the CP ranks
    (a regression: it used to read back as ZeRO-0); zero 0 with cp > 1 does not exist there."""
    data = _config(_model(32), dp=dp, cp=cp, zero=zero)
    if zero == 0 and cp > 1:
        with pytest.raises(InfeasibleError, match="zero_stage 0 with cp 2"):
            export(*config_from_data(data), "torchtitan")
        return
    if dp * cp == 1:  # one replica: nothing to shard, torchtitan runs no FSDP (ZeRO-0)
        _, imported = _round_trip(
            tmp_path,
            dict(data, parallel=dict(data["parallel"], zero_stage=0)),
            "torchtitan",
            needs_model=True,
        )
        job, layout = config_from_data(data)
        text = export(job, layout, "torchtitan")
        assert tomllib.loads(text)["parallelism"]["data_parallel_shard_degree"] == 1
        return
    _round_trip(tmp_path, data, "torchtitan", needs_model=True)


def test_the_issue_12_uneven_vpp_case_writes_layers_per_virtual_stage():
    # 126 layers (Llama 3.1 405B), pp 8 vpp 2, embedding and loss accounted: (126 + 2) / 16 =
    # 8 layers per virtual stage; ranks 15 / 16 x 6 / 15
    data = _config(_model(126), pp=8, vpp=2, first_stage_layers=15, last_stage_layers=15)
    par = tomllib.loads(export(*config_from_data(data), "torchtitan"))["parallelism"]
    assert par["pipeline_parallel_layers_per_stage"] == 8
    assert (
        par["pipeline_parallel_first_stage_less_layers"],
        par["pipeline_parallel_last_stage_less_layers"],
    ) == (1, 1)


# ------------------------------------------------------- torchtitan: recipe settings (8)


def _titan(data: dict, hardware: str = "h100-sxm") -> dict:
    data = dict(data, hardware=hardware)
    return tomllib.loads(export(*config_from_data(data), "torchtitan"))


def test_torchtitan_writes_fp8_as_its_converters():
    data = _config(
        _model(32), training=dict(precision="fp8", fp8_recipe="tensorwise", fp8_param_gather=True)
    )
    toml = _titan(data)
    assert toml["model"]["converters"] == ["quantize.linear.float8"]
    assert toml["quantize"]["linear"]["float8"] == {
        "enable_fsdp_float8_all_gather": True,
        "precompute_float8_dynamic_scale_for_fsdp": True,
    }
    data = _config(_model(32), training=dict(precision="fp8", fp8_recipe="mxfp8"))
    toml = _titan(data, hardware="b200")
    assert toml["model"]["converters"] == ["quantize.linear.mx"]


def test_torchtitan_writes_partial_recompute_as_a_layer_interval():
    # 32 layers, pp 2: 16 per rank; recompute 8 of them = every 2nd layer (floor(16 / 2))
    data = _config(_model(32), pp=2, recompute="full", recompute_num_layers=8)
    ac = _titan(data)["activation_checkpoint"]
    assert ac == {"mode": "selective", "selective_ac_option": "2"}


def test_torchtitan_round_trips_the_settings_it_has(tmp_path):
    moe = _model(16, num_experts=8, moe_top_k=2)
    cases = [
        _config(_model(32), pp=2, recompute="full", recompute_num_layers=5),
        _config(
            _model(32),
            training=dict(precision="fp8", fp8_recipe="tensorwise", fp8_param_gather=True),
        ),
        _config(moe, ep=4, etp=1, moe_token_dispatcher="deepep"),
        _config(
            moe,
            tp=1,
            pp=2,
            vpp=2,
            dp=4,
            ep=4,
            etp=1,
            recompute="none",
            moe_token_dispatcher="alltoall",
            overlap_moe_expert_parallel_comm=True,
        ),
    ]
    for data in cases:
        _, imported = _round_trip(tmp_path, data, "torchtitan", needs_model=True)
        t = config_from_data(data)[0].training
        assert (imported.job.training.precision, imported.job.training.fp8_param_gather) == (
            t.precision,
            t.fp8_param_gather,
        )


REFUSED = [
    (dict(training=dict(precision="fp8", fp8_recipe="delayed")), "fp8_recipe delayed"),
    (dict(training=dict(precision="fp8", fp8_recipe="blockwise")), "fp8_recipe blockwise"),
    (dict(grad_reduce_in_fp32=False), "grad_reduce_in_fp32 false"),
    (dict(exp_avg_dtype="bf16"), "bf16 optimizer moments"),
    (dict(recompute="selective", recompute_modules=["mlp"]), "recompute_modules ['mlp']"),
    (dict(cpu_offloading_num_layers=2), "cpu_offloading_num_layers 2"),
    (dict(cuda_graphs="partial"), "cuda_graphs partial"),
    (dict(pp=2, pipeline_model_parallel_layout="Et*16|t*16L"), "pipeline_model_parallel_layout"),
    (dict(pp=2, recompute="full", recompute_num_layers=7), "no k gives 7"),
]


@pytest.mark.parametrize("parallel,needle", REFUSED, ids=[r[1] for r in REFUSED])
def test_torchtitan_refuses_what_it_lacks_with_the_reason(parallel, needle):
    data = _config(_model(32), **parallel)
    with pytest.raises(InfeasibleError) as err:
        export(*config_from_data(data), "torchtitan")
    assert needle in err.value.message and err.value.message.startswith(
        "cannot export to torchtitan"
    )


def test_torchtitan_names_the_flavor_of_an_inline_shape_and_notes_its_rope_base():
    from planner.frameworks.torchtitan.flavors import flavor

    qwen = flavor("qwen3", "30B-A3B").spec.model_dump(exclude_none=True)
    data = _config(dict(qwen, rotary_base=1e6), tp=2, dp=4, ep=8, etp=1)
    text = export(*config_from_data(data), "torchtitan")
    assert tomllib.loads(text)["model"]["flavor"] == "30B-A3B"
    assert (
        "RoPE base: the plan's model has 1e+06; torchtitan's qwen3 30B-A3B uses 1e+06" not in text
    )
    data = _config(dict(qwen, rotary_base=2e6), tp=2, dp=4, ep=8, etp=1)
    assert "uses 1e+06 (no TOML knob" in export(*config_from_data(data), "torchtitan")


# ------------------------------- NeMo: the RoPE base and the production recipe settings


@pytest.mark.parametrize(
    "preset,tokenizer",
    [
        ("llama3-70b", {"library": "huggingface", "type": "meta-llama/Meta-Llama-3-70B"}),
        ("mixtral-8x7b", {"library": "huggingface", "type": "mistralai/Mixtral-8x7B-v0.1"}),
        ("gpt3-175b", {"library": "megatron", "type": "GPT2BPETokenizer"}),
    ],
)
def test_nemo_export_reads_back_without_model(tmp_path, preset, tokenizer):
    from planner.presets import get_preset

    data = dict(
        model=preset,
        num_gpus=512,
        training=dict(seq_length=4096, global_batch_size=512),
        parallel=dict(tp=8, pp=4, micro_batch_size=1, vpp=1),
    )
    if preset == "mixtral-8x7b":
        data["parallel"].update(pp=1, ep=8, etp=1)
    job, layout = config_from_data(data)
    text = export(job, layout, "nemo")
    assert yaml.safe_load(text)["model"]["tokenizer"] == tokenizer
    path = tmp_path / "nemo.yaml"
    path.write_text(text)
    back = load_any(path).job.model  # no --model
    want = get_preset(preset)
    assert back.name == want.name
    for key in (
        "num_layers",
        "hidden_size",
        "ffn",
        "kv_heads",
        "vocab_size",
        "num_experts",
        "rotary_base",
        "tied_embeddings",
        "bias",
        "norm",
    ):
        assert getattr(back, key) == getattr(want, key), key


def test_nemo_export_writes_the_rope_base():
    # Llama 3: 500000 (meta-llama/Meta-Llama-3-70B config.json rope_theta)
    data = dict(
        model="llama3-70b",
        num_gpus=64,
        training=dict(seq_length=8192, global_batch_size=64),
        parallel=dict(tp=8, pp=1, micro_batch_size=1, vpp=1),
    )
    text = export(*config_from_data(data), "nemo")
    assert yaml.safe_load(text)["model"]["rotary_base"] == 500000.0
    assert "recipe.model.config.rotary_base = 500000.0" in text
    assert "cfg.model.rotary_base = 500000.0" in text


def test_a_custom_vocabulary_goes_as_override_vocab_size_padded_like_megatron(tmp_path):
    # 32000 is not a multiple of 128 x tp 8 = 1024: Megatron pads to 32768
    data = _config(_model(32, vocab_size=32001), tp=8, dp=1)
    text = export(*config_from_data(data), "nemo")
    assert yaml.safe_load(text)["model"]["override_vocab_size"] == 32768
    path = tmp_path / "nemo.yaml"
    path.write_text(text)
    assert load_any(path).job.model.vocab_size == 32768


NEMO_WRITES = [
    (
        dict(training=dict(precision="fp8", fp8_recipe="tensorwise", fp8_param_gather=True)),
        {"fp8": True, "fp8_recipe": "tensorwise", "fp8_params": True},
        [
            "recipe.trainer.plugins = bf16_with_fp8_current_scaling_mixed()",
            "cfg.mixed_precision = 'bf16_with_fp8_current_scaling_mixed'",
        ],
    ),
    (
        dict(training=dict(precision="fp8", fp8_recipe="blockwise", fp8_param_gather=True)),
        {"fp8_recipe": "blockwise", "fp8_params": True},
        ["recipe.trainer.plugins.fp8_param_gather = True"],
    ),
    (
        dict(recompute="selective", recompute_modules=["mlp", "layernorm"]),
        {"recompute_modules": ["mlp", "layernorm"]},
        ["recipe.model.config.recompute_modules = ['mlp', 'layernorm']"],
    ),
    (
        dict(recompute="full", recompute_num_layers=3),
        {"activations_checkpoint_method": "block", "activations_checkpoint_num_layers": 3},
        ["cfg.model.recompute_method = 'block'", "cfg.model.recompute_num_layers = 3"],
    ),
    (
        dict(cpu_offloading_num_layers=4),
        {"cpu_offloading": True, "cpu_offloading_num_layers": 4},
        ["recipe.model.config.cpu_offloading_num_layers = 4"],
    ),
    (
        dict(grad_reduce_in_fp32=False),
        {"optim.grad_sync_dtype": "bf16"},
        [
            "recipe.trainer.strategy.ddp.grad_reduce_in_fp32 = False",
            "cfg.mixed_precision.grad_reduce_in_fp32 = False",
        ],
    ),
    (
        dict(exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"),
        {"optim.dtype": "bf16"},
        [
            "cfg.optimizer.use_precision_aware_optimizer = True",
            "cfg.optimizer.exp_avg_dtype = torch.bfloat16",
        ],
    ),
    (
        dict(cuda_graphs="partial"),
        {"enable_cuda_graph": True, "use_te_rng_tracker": True},
        ["cfg.model.cuda_graph_impl = 'transformer_engine'"],
    ),
    (
        dict(pp=2, pipeline_model_parallel_layout="Et*16|t*16L"),
        {"pipeline_model_parallel_layout": "Et*16|t*16L"},
        ["recipe.trainer.strategy.pipeline_model_parallel_layout = 'Et*16|t*16L'"],
    ),
]


def _get(model: dict, dotted: str):
    node = model
    for key in dotted.split("."):
        node = node[key]
    return node


@pytest.mark.parametrize(
    "parallel,model_keys,lines", NEMO_WRITES, ids=[next(iter(c[1])) for c in NEMO_WRITES]
)
def test_nemo_writes_the_recipe_settings_in_each_frameworks_terms(
    tmp_path, parallel, model_keys, lines
):
    data = _config(_model(32), **parallel)
    text = export(*config_from_data(data), "nemo")
    model = yaml.safe_load(text)["model"]
    for key, value in model_keys.items():
        assert _get(model, key) == value, key
    for line in lines:
        assert line in text, line
    _round_trip(tmp_path, data, "nemo", needs_model=False)


def test_nemo_writes_the_moe_dispatcher_and_mtp(tmp_path):
    moe = _model(16, num_experts=8, moe_top_k=2, mtp_num_layers=1)
    data = _config(
        moe, ep=4, etp=1, moe_token_dispatcher="deepep", overlap_moe_expert_parallel_comm=True
    )
    model = yaml.safe_load(export(*config_from_data(data), "nemo"))["model"]
    assert (
        model["moe_token_dispatcher_type"],
        model["moe_flex_dispatcher_backend"],
        model["overlap_moe_expert_parallel_comm"],
        model["mtp_num_layers"],
    ) == ("flex", "deepep", True, 1)
    _, imported = _round_trip(tmp_path, data, "nemo", needs_model=False)
    assert imported.layout.moe_token_dispatcher == "deepep"
    assert imported.job.model.mtp_num_layers == 1


@pytest.mark.parametrize(
    "parallel,needle",
    [
        (dict(cuda_graphs="full"), "cuda_graphs full"),
        (dict(zero=0, grad_reduce_in_fp32=False), "grad_reduce_in_fp32 false with zero_stage 0"),
        (dict(exp_avg_dtype="bf16"), "exp_avg_dtype bf16 / exp_avg_sq_dtype fp32"),
        (dict(zero=3, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"), "one dtype for both"),
    ],
)
def test_nemo_refuses_what_nemo1_lacks_with_the_reason(parallel, needle):
    data = _config(_model(32), **parallel)
    with pytest.raises(InfeasibleError) as err:
        export(*config_from_data(data), "nemo")
    assert needle in err.value.message


# ------------------------------------------ goldens with the production recipe settings


def _regen():
    import importlib.util

    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("regen_golden", here / "regen_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGEN = _regen()
RECIPE_GOLDEN = [(c, f) for c, formats in REGEN.YAML_RECIPE_CASES for f in formats]


@pytest.mark.parametrize("config,fmt", RECIPE_GOLDEN, ids=[f"{c}-{f}" for c, f in RECIPE_GOLDEN])
def test_recipe_goldens(config, fmt):
    path = REGEN.golden_path(config, fmt)
    assert path.exists(), f"missing {path.name}: run python tests/regen_golden.py"
    assert REGEN.golden_text(config, fmt) == path.read_text(encoding="utf-8"), (
        f"{path.name} differs: review the change, then run python tests/regen_golden.py"
    )


@pytest.mark.parametrize("config,fmt", RECIPE_GOLDEN, ids=[f"{c}-{f}" for c, f in RECIPE_GOLDEN])
def test_recipe_goldens_read_back_to_their_config(tmp_path, config, fmt):
    data = yaml.safe_load(REGEN.config_path(config).read_text())
    needs_model = (
        fmt == "torchtitan"
        and isinstance(data["model"], str)
        and data["model"] not in ("llama3-70b",)
    )
    job, imported = _round_trip(tmp_path, data, fmt, needs_model=needs_model)
    t, back = job.training, imported.job.training
    assert (back.precision, back.recipe, back.fp8_param_gather) == (
        t.precision,
        t.recipe,
        t.fp8_param_gather,
    )
    assert imported.job.model.rotary_base == job.model.rotary_base or fmt == "torchtitan"


def test_recipe_goldens_write_the_settings():
    text = REGEN.golden_path("llama3-8b-fp8-8xh100", "nemo").read_text()
    model = yaml.safe_load(text)["model"]
    # NVIDIA's example: --fp8-param-gather, --grad-reduce-in-bf16, delayed scaling
    assert (model["fp8_recipe"], model["fp8_params"], model["optim"]["grad_sync_dtype"]) == (
        "delayed",
        True,
        "bf16",
    )
    assert "recipe.trainer.plugins = bf16_with_fp8_mixed()" in text
    assert "cfg.mixed_precision = 'bf16_with_fp8_delayed_scaling_mixed'" in text
