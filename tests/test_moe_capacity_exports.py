"""A MoE capacity factor (token dropping) is a setting every export carries or refuses, never
drops: Megatron-LM `--moe-expert-capacity-factor` (Megatron-Core: unset is dropless),
Megatron-DeepSpeed `--moe-train-capacity-factor` (DeepSpeed-MoE's training capacity, default
1.0), NeMo / Megatron-Bridge `moe_expert_capacity_factor`; torchtitan's MoE is dropless (its
MoEArgs have no capacity factor), so its export refuses one. Each is read back."""

from __future__ import annotations

import pytest

from planner.config import Job, default_training, resolve_hardware
from planner.frameworks import load_any, runnable
from planner.frameworks.export import export
from planner.presets import resolve_model
from planner.search import SearchOptions, search

EXT = {"megatron": ".sh", "deepspeed": ".json", "nemo": ".yaml", "megatron-bridge": ".yaml"}


def _job(capacity: float) -> Job:
    m = resolve_model("mixtral-8x7b").model_copy(update={"moe_capacity_factor": capacity})
    return Job(
        model=m,
        hardware=resolve_hardware("h100-sxm"),
        num_gpus=64,
        training=default_training(m, num_gpus=64),
    )


@pytest.mark.parametrize("fw", sorted(EXT))
def test_the_capacity_factor_is_exported_and_read_back(tmp_path, fw):
    job = runnable.job_for(_job(1.25), fw)
    plan = search(job, SearchOptions(top=1, runs_as=runnable.allow(fw))).best
    text = export(job, plan.layout, fw)
    path = tmp_path / f"plan{EXT[fw]}"
    path.write_text(text)
    back = load_any(path, hardware="h100-sxm", gpus=64)
    assert back.job.model.moe_capacity_factor == 1.25


@pytest.mark.parametrize("fw", ["megatron", "deepspeed"])
def test_the_default_capacity_writes_no_flag(fw):
    job = runnable.job_for(_job(1.0), fw)
    plan = search(job, SearchOptions(top=1, runs_as=runnable.allow(fw))).best
    assert "capacity-factor" not in export(job, plan.layout, fw)


def test_torchtitan_refuses_a_capacity_factor():
    job = _job(1.25)
    plan = search(job, SearchOptions(top=1)).best
    why = runnable.refusals(runnable.job_for(job, "torchtitan"), plan.layout, "torchtitan")
    assert any("moe_capacity_factor 1.25" in w and "dropless" in w for w in why)
    assert not any(
        "moe_capacity_factor" in w
        for w in runnable.refusals(
            runnable.job_for(_job(1.0), "torchtitan"), plan.layout, "torchtitan"
        )
    )
