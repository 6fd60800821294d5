"""Plans you can run (issue 19): `plan --framework F` keeps only what F's exporter runs, by the
same predicates the exporter refuses with (each writer's `refusals`), ranked as F runs it
(`runs_as`: what reading the export back gives); every plan row says which frameworks run it
and shows the savers it relies on; rows that differ only in a setting that changes nothing
collapse.

The done-when cases of the issue are checked end to end: the export of the top plan, read
back by the framework's reader and validated, gives the plan's verdict, memory and step time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.config import Job, default_training, resolve_hardware
from planner.cost import Estimate
from planner.frameworks import load_any, runnable
from planner.frameworks.export import export
from planner.presets import resolve_model
from planner.search import SearchOptions, search
from planner.validate import validate

EXT = {
    "megatron": ".sh",
    "deepspeed": ".json",
    "torchtitan": ".toml",
    "nemo": ".yaml",
    "megatron-bridge": ".yaml",
}


def _job(model: str, gpus: int, hardware: str = "h100-sxm", **training) -> Job:
    m = resolve_model(model)
    return Job(
        model=m,
        hardware=resolve_hardware(hardware),
        num_gpus=gpus,
        training=default_training(m, num_gpus=gpus, **training),
    )


def _read_back(tmp_path: Path, job: Job, plan, fw: str):
    text = export(job, plan.layout, fw, estimate=Estimate(memory=plan.memory, time=plan.time))
    path = tmp_path / f"plan-{fw}{EXT[fw]}"
    path.write_text(text)
    imported = load_any(path, hardware=job.hardware.name, gpus=job.num_gpus, model=_preset(job))
    return imported, validate(imported.job, imported.layout, extra=imported.violations)


def _preset(job: Job) -> str:
    from planner.frameworks.engines.writer import preset_key

    return preset_key(job.model)


# the done-when: (model, GPUs) on H100, and which frameworks cannot train the model
DONE_WHEN = [
    ("llama3-70b", 2048, ()),
    ("llama3-405b", 16384, ()),
    ("deepseek-v3", 1024, ("nemo", "deepspeed")),
]


@pytest.mark.parametrize("fw", runnable.TRAIN_FRAMEWORKS)
@pytest.mark.parametrize("model,gpus,cannot", DONE_WHEN, ids=[f"{m}@{g}" for m, g, _ in DONE_WHEN])
def test_framework_plan_exports_and_reads_back_the_same(tmp_path, model, gpus, cannot, fw):
    job = _job(model, gpus)
    why = runnable.model_refusal(job, fw)
    if fw in cannot:
        assert why is not None and "\n" not in why and job.model.name in why
        return
    assert why is None
    job = runnable.job_for(job, fw)
    result = search(job, SearchOptions(top=3, runs_as=runnable.allow(fw)))
    assert result.plans
    for p in result.plans:
        assert runnable.refusals(job, p.layout, fw) == []
        assert runnable.runs_as(job, p.layout, fw) == p.layout  # ranked as it runs
    best = result.best
    imported, checked = _read_back(tmp_path, job, best, fw)
    assert imported.format == fw
    assert checked.valid, [v.message for v in checked.errors]
    assert checked.estimate.time.step_time_s == pytest.approx(best.time.step_time_s, rel=1e-6)
    assert checked.estimate.memory.total == pytest.approx(best.memory.total, rel=1e-6)


def test_405b_torchtitan_no_longer_reads_back_at_twice_the_plan(tmp_path):
    """Why it did: torchtitan has no ZeRO-1 (FSDP2 without resharding is ZeRO-2), and ZeRO-2
    reduce-scatters the gradients every micro-batch (cost.step.dp_exposed): on pp 32 with 32
    micro-batches that doubled the step. Ranked as torchtitan runs it, the pick is another.
    The issue's case: the default batch then, 512 sequences (about 4M tokens)."""
    job = _job("llama3-405b", 16384, global_batch_size=512)
    plain = search(job, SearchOptions(top=1)).best
    as_run = runnable.runs_as(runnable.job_for(job, "torchtitan"), plain.layout, "torchtitan")
    assert (plain.layout.zero, as_run.zero) == (1, 2)
    from planner.cost import cost_model

    tt_job = runnable.job_for(job, "torchtitan")
    assert cost_model(tt_job).step_seconds(as_run) > 1.5 * plain.time.step_time_s
    fw_best = search(tt_job, SearchOptions(top=1, runs_as=runnable.allow("torchtitan"))).best
    _, checked = _read_back(tmp_path, tt_job, fw_best, "torchtitan")
    assert checked.estimate.time.step_time_s == pytest.approx(fw_best.time.step_time_s, rel=1e-6)


def test_without_framework_each_plan_says_who_runs_it():
    import contextlib
    import io
    import json

    from planner.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main(["plan", "--model", "llama3-70b", "--gpus", "2048", "--top", "5", "--json"])
    assert exit_.value.code == 0
    plans = json.loads(out.getvalue())["plans"]
    for p in plans:
        assert set(p["frameworks"]) <= set(runnable.TRAIN_FRAMEWORKS)
        assert isinstance(p["savers"], list)
    # the first plan offloads 40 layers, which torchtitan and DeepSpeed cannot run
    first = plans[0]
    if first["layout"]["cpu_offloading_num_layers"]:
        assert f"off{first['layout']['cpu_offloading_num_layers']}" in first["savers"]
        assert "torchtitan" not in first["frameworks"]
        assert "deepspeed" not in first["frameworks"]


@pytest.mark.parametrize(
    "argv,code,text",
    [
        (
            ["--model", "deepseek-v3", "--gpus", "1024", "--export", "nemo"],
            1,
            "NeMo 1 cannot train",
        ),
        (
            ["--model", "deepseek-v3", "--gpus", "1024", "--framework", "deepspeed"],
            1,
            "Megatron-DeepSpeed cannot train",
        ),
        (["--model", "llama3-8b", "--gpus", "8", "--framework", "jax"], 2, "--framework"),
        (
            ["--model", "llama3-8b", "--gpus", "8", "--framework", "nemo", "--export", "megatron"],
            2,
            "--export",
        ),
    ],
    ids=["dsv3-nemo", "dsv3-deepspeed", "unknown", "disagree"],
)
def test_framework_refusals_are_one_line(capsys, argv, code, text):
    from planner.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["plan"] + argv)
    assert exit_.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and text in err[0]


# ------------------------------------------------------------------ every setting in view

SEARCHES = [
    ("llama3-70b", 2048, {}),
    ("llama3-8b", 8, {"fix": "tp=4,pp=2,cp=1", "global_batch_size": 64}),
    ("mixtral-8x7b", 64, {}),
    ("llama3-70b", 64, {}),
]


def _searched(model, gpus, kw):
    from planner.search import parse_fix

    kw = dict(kw)
    fix = parse_fix(kw.pop("fix", None))
    job = _job(model, gpus, **kw)
    result = search(job, SearchOptions(top=10, fix=fix))
    result.plans = [
        p.__class__(
            p.rank, p.layout, p.memory, p.time, p.warnings, tuple(runnable.runnable(job, p.layout))
        )
        for p in result.plans
    ]
    return result


@pytest.mark.parametrize("model,gpus,kw", SEARCHES, ids=[f"{m}@{g}" for m, g, _ in SEARCHES])
def test_rows_that_print_the_same_have_the_same_settings(model, gpus, kw):
    from planner.views.report import _plan_rows

    result = _searched(model, gpus, kw)
    rows, _ = _plan_rows(result)
    seen: dict[tuple, object] = {}
    for row, plan in zip(rows, result.plans):
        printed = tuple(v for k, v in sorted(row.items()) if k != "#")
        if printed in seen:
            other = seen[printed]
            assert (other.memory.total, other.time.step_time_s) == (
                plan.memory.total,
                plan.time.step_time_s,
            ), printed
            assert other.layout == plan.layout, printed
        seen[printed] = plan


@pytest.mark.parametrize("model,gpus,kw", SEARCHES, ids=[f"{m}@{g}" for m, g, _ in SEARCHES])
def test_zero_stage_at_dp_cp_1_collapses(model, gpus, kw):
    result = _searched(model, gpus, kw)
    for i, a in enumerate(result.plans):
        for b in result.plans[i + 1 :]:
            if a.layout.dp * a.layout.cp == 1 and a.layout.with_(zero=b.layout.zero) == b.layout:
                assert (a.memory.total, a.time.step_time_s) != (b.memory.total, b.time.step_time_s)


def test_savers_column_shows_offload_and_bf16_states():
    from planner.layout import Layout
    from planner.savers import in_use

    job = _job("llama3-70b", 64)
    lay = Layout(
        tp=8,
        dp=8,
        cpu_offloading_num_layers=40,
        grad_reduce_in_fp32=False,
        exp_avg_dtype="bf16",
        exp_avg_sq_dtype="bf16",
    )
    assert in_use(lay, job.training) == ["off40", "bf16gm"]
    assert in_use(Layout(tp=8, dp=8, recompute="full", recompute_num_layers=2)) == ["full2"]
    assert in_use(
        Layout(tp=8, dp=8, recompute="selective", recompute_modules=("core_attn", "layernorm"))
    ) == ["sel+"]
    assert in_use(Layout(tp=8, dp=8)) == []


# the filter's look-ups, cached for speed (the search asks for every layout it ranks), give
# what the plain computations give
def test_cached_flavor_lookup_is_the_first_flavor_of_the_same_shape():
    from planner.frameworks.torchtitan import flavors
    from planner.presets import FAMILY_PRESETS, PRESETS, get_preset

    models = [get_preset(k) for k in [*PRESETS, *FAMILY_PRESETS]]
    models += [f.spec for f in flavors.all_flavors()]
    found = 0
    for m in models:
        key = flavors._shape(m)
        plain = next((f for f in flavors.all_flavors() if flavors._shape(f.spec) == key), None)
        assert flavors.find_flavor(m) is plain, m.name
        found += plain is not None
    assert found > len(flavors.all_flavors())  # both outcomes are exercised


@pytest.mark.parametrize("layers", [1, 7, 61, 126])
@pytest.mark.parametrize("method", ["type:transformer", "type:transformer|embedding"])
@pytest.mark.parametrize("tied", [False, True])
def test_cached_deepspeed_partition_is_the_computed_one(layers, method, tied):
    from planner.frameworks.deepspeed.writer import partition_split

    for pp in range(1, min(layers, 16) + 1):
        args = dict(method=method, tied=tied)
        assert partition_split(layers, pp, **args) == partition_split.__wrapped__(
            layers, pp, **args
        )
