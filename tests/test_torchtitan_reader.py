"""torchtitan's Python configs (config_registry.py functions returning Trainer.Config, or
default_config = JobConfig(...)) read with ast into the TOML reader's sections
(planner/frameworks/torchtitan/pyconfig.py). Fixtures: tests/data/import/torchtitan/ (written
for these tests). Each Python config is checked against the same config written as TOML."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.frameworks import detect_format, load_any

DATA = Path(__file__).resolve().parent / "data" / "import" / "torchtitan"
REGISTRY = DATA / "llama3" / "config_registry.py"

# the TOML each Python config stands for (torchtitan's TOML job config, the same values)
TOML = {
    "llama3_8b_fsdp": """\
        [model]
        name = "llama3"
        flavor = "8B"
        [training]
        local_batch_size = 2
        global_batch_size = -1
        seq_len = 8192
        [parallelism]
        data_parallel_shard_degree = -1
        tensor_parallel_degree = 1
        [activation_checkpoint]
        mode = "full"
        """,
    "llama3_70b_tp8_pp2": """\
        [model]
        name = "llama3"
        flavor = "70B"
        [training]
        local_batch_size = 4
        seq_len = 8192
        [parallelism]
        data_parallel_shard_degree = -1
        tensor_parallel_degree = 8
        pipeline_parallel_degree = 2
        pipeline_parallel_microbatch_size = 1
        pipeline_parallel_schedule = "1F1B"
        [activation_checkpoint]
        mode = "selective"
        selective_ac_option = "op"
        [compile]
        enable = true
        components = ["model", "loss"]
        """,
}


def _rules(imported) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in imported.violations:
        out.setdefault(v.rule, []).append(v.message)
    return out


@pytest.mark.parametrize("name", list(TOML))
def test_a_registry_function_reads_as_its_toml(tmp_path, name):
    assert detect_format(REGISTRY) == "torchtitan"
    toml = tmp_path / "job.toml"
    toml.write_text(textwrap.dedent(TOML[name]))
    from_py = load_any(REGISTRY, gpus=64, sets=(("config", name),))
    from_toml = load_any(toml, gpus=64)
    assert from_py.format == "torchtitan"
    assert from_py.layout.as_dict() == from_toml.layout.as_dict()
    assert from_py.job.model.name == from_toml.job.model.name
    assert from_py.job.training == from_toml.job.training
    assert "torchtitan-python-model" in _rules(from_py)


def test_the_8b_layout_numbers():
    imported = load_any(REGISTRY, gpus=64, sets=(("config", "llama3_8b_fsdp"),))
    lay = imported.layout
    # dp_shard -1 takes the rest: 64 / tp 1 = 64, FSDP = zero 3; gbs -1 = 2 x 64 = 128
    assert (lay.dp, lay.zero, lay.micro_batch_size, lay.recompute) == (64, 3, 2, "full")
    assert imported.job.training.global_batch_size == 128
    assert imported.job.model.name == "Llama 3 8B"
    (note,) = _rules(imported)["torchtitan-python-not-literal"]
    assert "training.steps = STEPS" in note  # a name, not a literal


def test_several_configs_need_set_config():
    with pytest.raises(
        SpecError,
        match=r"2 configs \(llama3_8b_fsdp, llama3_70b_tp8_pp2\); "
        "pick one with --set config=NAME",
    ):
        load_any(REGISTRY, gpus=64)
    with pytest.raises(SpecError, match="no such config"):
        load_any(REGISTRY, gpus=64, sets=(("config", "llama3_405b"),))
    with pytest.raises(SpecError, match="takes only --set config=NAME"):
        load_any(REGISTRY, gpus=64, sets=(("NNODES", "2"),))


def test_a_module_level_default_config_is_the_only_one():
    imported = load_any(DATA / "default_config_job.py")
    # no --gpus: the product of the degrees, dp_shard 4 x tp 2 = 8
    assert imported.job.num_gpus == 8
    assert (imported.layout.tp, imported.layout.dp) == (2, 4)
    assert imported.job.model.name == "Llama 3 8B"


def test_the_file_is_read_not_run(tmp_path):
    marker = tmp_path / "RAN"
    path = tmp_path / "config_registry.py"
    path.write_text(
        textwrap.dedent(f"""\
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("ran")
        from torchtitan.config import JobConfig, Model, Parallelism
        default_config = JobConfig(model=Model(name="llama3", flavor="8B"),
                                   parallelism=Parallelism(tensor_parallel_degree=2,
                                                           data_parallel_shard_degree=2))
        """)
    )
    assert load_any(path).job.num_gpus == 4
    assert not marker.exists()


@pytest.mark.parametrize(
    "text,message",
    [
        ("def f(:\n", "is not valid Python at line 1"),
        ("x = 1\n", "no torchtitan config in this Python file"),
    ],
    ids=["syntax", "no-config"],
)
def test_bad_python_is_one_line(tmp_path, text, message):
    path = tmp_path / "c.py"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        load_any(path, gpus=8)
