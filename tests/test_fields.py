"""The layout table (planner/fields.py, the rows of planner/layout.py): the config keys, the
JSON and the cost model's cache keys are derived from it, and a cache key cannot leave out a
field its part reads without this file failing.

How the cache-key check works: for each cached part of the cost model and each field its key
leaves out, the part is computed afresh (a new CostModel: no cache) for a layout and for the
same layout with that field changed; the two must be equal. A field whose row says too little
(a part reads it but the row does not say so) changes the part and fails here."""

from __future__ import annotations

import typing
from dataclasses import replace

import pytest

from planner.config import config_from_data
from planner.cost.model import CostModel
from planner.fields import PARTS, config_name, info, key_fields
from planner.layout import LAYOUT_FIELDS, Layout
from planner.specs import ConfigSpec, ParallelSpec


def _job(model: str, gpus: int, seq: int = 4096, gbs: int = 64):
    data = {
        "model": model,
        "num_gpus": gpus,
        "training": {"seq_length": seq, "global_batch_size": gbs},
    }
    return config_from_data(data)[0]


# (job, layout) pairs that exercise every part: dense with pp, vpp, cp and selective recompute;
# MoE with ep, etp and a dispatcher; a third with full recompute, offloading and ZeRO-3
CASES = {
    "dense-pp-cp": (
        _job("llama3-8b", 64),
        Layout(tp=2, pp=2, cp=2, dp=8, vpp=2, sp=True, recompute="selective", micro_batch_size=1),
    ),
    "moe-ep": (
        _job("mixtral-8x7b", 64),
        Layout(tp=2, pp=2, ep=4, etp=1, dp=16, sp=True, moe_token_dispatcher="alltoall"),
    ),
    "dense-full": (
        _job("llama3-8b", 32),
        Layout(
            tp=4,
            pp=1,
            dp=8,
            zero=3,
            recompute="full",
            recompute_num_layers=2,
            cpu_offloading_num_layers=1,
        ),
    ),
}

# alternative values of the integer and free-text fields; booleans and the config's Literal
# choices are taken from the table itself. A new row without alternatives fails
# test_every_field_has_alternatives: give it some here.
INT_ALTS = {
    "tp": [1, 4],
    "pp": [1, 4],
    "cp": [1, 4],
    "ep": [1, 2, 8],
    "etp": [2],
    "dp": [4, 32],
    "vpp": [1, 4],
    "micro_batch_size": [2],
    "zero": [0, 1, 2],
    "first_stage_layers": [None, 14],
    "last_stage_layers": [None, 14],
    "recompute_num_layers": [None, 1],
    "cpu_offloading_num_layers": [0, 2],
    "recompute_modules": [(), ("core_attn", "mlp")],
    "pipeline_model_parallel_layout": [None, "Et*16|t*16L"],
    "auto": [()],
}


def _alternatives(name: str) -> list:
    f = next(f for f in LAYOUT_FIELDS if f.name == name)
    if name in INT_ALTS:
        return INT_ALTS[name]
    if f.type in ("bool", bool):
        return [True, False]
    choices = typing.get_args(info(f).spec_type)
    return [c for c in choices if isinstance(c, str)]


def test_every_field_has_alternatives():
    assert all(_alternatives(f.name) for f in LAYOUT_FIELDS), [
        f.name for f in LAYOUT_FIELDS if not _alternatives(f.name)
    ]


def _part(part: str, job, lay: Layout, base: Layout):
    """The part computed afresh; for the DP part, with the base layout's compute windows
    (what its cache key holds beside the fields)."""
    cm = CostModel(job)
    if part == "dtypes":
        return cm.dtypes(lay)
    if part == "acts":
        return cm.act_costs(lay)
    if part == "layer_base":
        return cm._layer_base(lay)
    if part == "moe_layer":
        return cm._moe_layer(lay, cm._layer_base(lay)) if cm.shape.E else None
    if part == "layer":
        return cm.layer_costs(lay)
    if part == "stages":
        return cm.stages(lay)
    if part == "states":
        return cm.stage_states(lay, 1)
    if part == "act_vector":
        return cm.act_vector(lay)
    if part == "first_params":
        return cm._first_rank_params(lay, cm.stages(lay)[0])
    if part == "pipeline":
        return cm._pipeline(lay)
    if part == "dp":
        m, _, _, _, _, first, fwd, bwd = CostModel(job)._pipeline(base)
        return cm._dp_and_optimizer(lay, m, first, fwd, bwd)
    raise AssertionError(part)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("part", sorted(PARTS))
def test_a_field_left_out_of_a_cache_key_does_not_change_that_part(part, case):
    job, base = CASES[case]
    reference = _part(part, job, base, base)
    keyed = set(key_fields(Layout, part))
    checked = 0
    for f in LAYOUT_FIELDS:
        if f.name in keyed:
            continue
        for value in _alternatives(f.name):
            other = replace(base, **{f.name: value})
            if part == "act_vector" and other.num_microbatches(
                job.training.global_batch_size
            ) != base.num_microbatches(job.training.global_batch_size):
                continue  # its key holds the micro-batch count beside the fields
            try:
                got = _part(part, job, other, base)
            except (ValueError, ZeroDivisionError, IndexError, KeyError):
                continue  # a layout the part cannot price (the rules refuse it first)
            assert got == reference, (
                f"cost part {part!r} changes with {f.name}={value!r} "
                f"but its cache key leaves {f.name} out: add the part "
                f"to the field's `reads` in planner/layout.py"
            )
            checked += 1
    assert checked or not (set(f.name for f in LAYOUT_FIELDS) - keyed)


def test_a_field_in_a_key_can_change_its_part():
    # the check above is not vacuous: a field a part does read changes it
    job, base = CASES["dense-pp-cp"]
    assert _part("acts", job, replace(base, micro_batch_size=2), base) != _part(
        "acts", job, base, base
    )
    assert _part("states", job, replace(base, tp=4), base) != _part("states", job, base, base)


def test_the_config_keys_are_the_table_rows():
    names = [config_name(f) for f in LAYOUT_FIELDS if config_name(f)]
    assert list(ParallelSpec.model_fields) == names
    assert ConfigSpec.model_fields["parallel"].annotation is ParallelSpec
    # the spec's defaults: the layout's, or the row's own where the config derives it
    spec = ParallelSpec()
    assert (spec.tp, spec.etp, spec.dp, spec.sequence_parallel, spec.zero_stage) == (
        1,
        None,
        None,
        None,
        1,
    )


def test_the_json_layout_is_the_table_rows():
    d = Layout(tp=2, recompute="selective").as_dict(global_batch_size=8)
    names = [config_name(f) for f in LAYOUT_FIELDS if config_name(f)]
    assert [k for k in d if k != "num_microbatches"] == names
    # resolved values where the row says so: selective recompute's default module
    assert d["recompute_modules"] == ["core_attn"]
    assert list(d).index("num_microbatches") == list(d).index("micro_batch_size") + 1


def test_rows_name_real_cost_parts():
    from planner.fields import row

    with pytest.raises(ValueError, match="unknown cost parts"):
        row(1, "x", reads={"pipelin"})


def test_the_megatron_names_are_real_flags():
    # planner/frameworks/megatron/megatron_flags.txt: every flag Megatron-LM's pretrain_gpt.py
    # parser accepts (megatron/training/arguments.py)
    from planner.fields import framework_names
    from planner.frameworks.megatron.reader import megatron_flags

    names = framework_names(Layout, "megatron")
    assert set(names.values()) <= megatron_flags(), set(names.values()) - megatron_flags()
    assert names["tp"] == "--tensor-model-parallel-size"


def test_the_nemo_names_are_keys_nemo_reads():
    # planner/frameworks/nemo/nemo_keys.yaml: the keys of NeMo's model config and of
    # Megatron-Core's TransformerConfig / ModelParallelConfig / DDP config, each list with its
    # source and version
    from pathlib import Path

    import yaml

    from planner.fields import framework_names

    data = yaml.safe_load(
        (
            Path(__file__).resolve().parent.parent
            / "planner"
            / "frameworks"
            / "nemo"
            / "nemo_keys.yaml"
        ).read_text()
    )
    known = {k for v in data.values() if isinstance(v, list) for k in v if isinstance(k, str)}
    names = set(framework_names(Layout, "nemo").values())
    assert names <= known, sorted(names - known)
