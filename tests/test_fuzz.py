"""Fuzzing the command line with generated hostile input, with hypothesis.

Families: planner configs (random and mutated), Megatron-LM scripts, NeMo YAML, DeepSpeed
ds_configs, torchtitan TOML, Hugging Face config.json (each a real fixture of tests/data
mutated), raw bytes, YAML alias bombs and deep nesting, plus random small jobs for the round
trips. Invariants, for every input:

- the exit code is 0, 1 or 2: never 3 (an internal error) and never an escaped exception;
- an exit 2 is exactly one `error: ` line on stderr;
- with --json, stdout is exactly one JSON object (on 2: `{"error": {...}}` with the same code);
- bounded work (each command within CPU_SECONDS of CPU time) and memory (run under an
  address-space limit of the process's size + 1 GiB: a MemoryError would surface as exit 3);
- plan -> validate: the top plan of a random job, written as a config, validates with the
  same memory and step time; export -> validate: its export in each format reads back to the
  same layout and verdict (the two documented lossy ZeRO mappings aside).

The default run is short (a few examples per family, fixed seed: seconds); `-m fuzz_long`
runs the long profile (many examples, random seeds, hypothesis's example database).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from work_budget import cpu_seconds

from planner.cli import main

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data" / "import"
# CPU seconds per command (this process's and its reaped children's: the search forks one),
# not wall-clock, which machine load stretches (tests/work_budget.py). Idle: at most 0.21 s
# in the short profile and 0.84 s over 6,000 commands of the long one; an input that made
# planner's work blow up (an expanded alias bomb, an unbounded search) would cost minutes.
CPU_SECONDS = 10.0
HEADROOM_BYTES = 2**30

SHORT = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
LONG = settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))


def fuzz(strategy):
    """Two tests from one property: the short profile (default run) and the long one
    (`-m fuzz_long`)."""

    def make(fn):
        short = SHORT(given(strategy)(fn))
        long = pytest.mark.fuzz_long(LONG(given(strategy)(fn)))
        return short, long

    return make


# ------------------------------------------------------------------------ running planner


def run(argv: list[str]) -> tuple[int, str, str]:
    """planner's main() in this process, under a memory limit, checked for the invariants."""
    out, err = io.StringIO(), io.StringIO()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = size + HEADROOM_BYTES
    resource.setrlimit(
        resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard)
    )
    c0 = cpu_seconds()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    cpu = cpu_seconds() - c0
    stdout, stderr = out.getvalue(), err.getvalue()
    assert code in (0, 1, 2), (argv, code, stderr[-2000:])
    assert cpu < CPU_SECONDS, (argv, cpu)
    assert "Traceback" not in stderr
    if code == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-2000:]
    if "--json" in argv:
        obj = json.loads(stdout)  # exactly one JSON value, and nothing else
        assert isinstance(obj, dict), stdout[:200]
        if code == 2:
            assert obj["error"]["code"] == 2 and obj["error"]["message"], obj
    return code, stdout, stderr


@contextlib.contextmanager
def written(name: str, content: str | bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
        yield path


def validate_file(name: str, content, *extra: str) -> int:
    with written(name, content) as path:
        return run(["validate", str(path), "--json", *extra])[0]


# ------------------------------------------------------------------------------ strategies

HOSTILE_TOKENS = [
    "[/x]",
    "[bold]",
    "&a [*a, *a]",
    "*a",
    "{",
    "}",
    "[",
    "]",
    "'",
    '"',
    "\\",
    "#",
    ":",
    "- ",
    "\n",
    "\t",
    "\x00",
    "${X:-8}",
    "$((2*3))",
    "0",
    "-1",
    "1e999",
    ".nan",
    "9" * 4400,
    "true",
    "null",
    "~",
    "!!binary x",
    "<<: *a",
    "é",
    "\u202e",
]
NUMBERS = st.one_of(
    st.integers(-10, 10**6),
    st.sampled_from([0, -1, 2**63, 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
)


def _numbers_as_text() -> st.SearchStrategy[str]:
    return NUMBERS.map(lambda v: repr(v) if isinstance(v, float) else str(v))


@st.composite
def mutated(draw, base: str) -> str:
    """A text with a few edits: cut, insert a hostile token, replace a number, repeat a line,
    truncate."""
    text = base
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cut", "insert", "number", "repeat", "truncate"]))
        i = draw(st.integers(0, max(0, len(text) - 1)))
        if kind == "cut":
            text = text[:i] + text[i + draw(st.integers(1, 20)) :]
        elif kind == "insert":
            text = text[:i] + draw(st.sampled_from(HOSTILE_TOKENS)) + text[i:]
        elif kind == "number":
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            text = text[:i] + draw(_numbers_as_text()) + text[j:]
        elif kind == "repeat":
            lines = text.splitlines(True)
            k = draw(st.integers(0, max(0, len(lines) - 1)))
            text = "".join(lines[:k] + lines[k : k + 1] * draw(st.integers(2, 50)) + lines[k:])
        else:
            text = text[:i]
    return text


def _fixture(name: str) -> str:
    return (DATA / name).read_text()


JSONISH = st.recursive(
    st.one_of(
        st.none(), st.booleans(), NUMBERS, st.text(max_size=20), st.sampled_from(HOSTILE_TOKENS)
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)

CONFIG_KEYS = {
    "": ["model", "hardware", "num_gpus", "training", "parallel", "num_gpu"],
    "training": [
        "seq_length",
        "global_batch_size",
        "precision",
        "flash_attention",
        "accounting",
        "fp8_recipe",
    ],
    "parallel": [
        "tp",
        "pp",
        "cp",
        "ep",
        "etp",
        "dp",
        "vpp",
        "micro_batch_size",
        "zero_stage",
        "recompute",
        "first_stage_layers",
        "last_stage_layers",
        "sequence_parallel",
        "recompute_modules",
        "pipeline_model_parallel_layout",
    ],
}


@st.composite
def random_config(draw) -> dict:
    def section(keys):
        return draw(
            st.dictionaries(st.sampled_from(keys), JSONISH | st.integers(1, 64), max_size=len(keys))
        )

    cfg = section(CONFIG_KEYS[""])
    cfg.setdefault(
        "model",
        draw(
            st.sampled_from(
                [
                    "llama3-8b",
                    "mixtral-8x7b",
                    "deepseek-v3",
                    {
                        "num_layers": 4,
                        "hidden_size": 256,
                        "num_attention_heads": 4,
                        "vocab_size": 1000,
                    },
                ]
            )
        ),
    )
    for name in ("training", "parallel"):
        if draw(st.booleans()):
            cfg[name] = section(CONFIG_KEYS[name])
    return cfg


def alias_bomb(levels: int, fanout: int) -> str:
    lines = [f"  a0: &a0 [{', '.join(['lol'] * fanout)}]"]
    for i in range(1, levels):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fanout) + "]")
    return "\n".join(lines) + "\n"


DEEP = st.tuples(
    st.sampled_from(["json-list", "json-dict", "yaml-flow", "yaml-block", "toml", "hf"]),
    st.integers(1, 3000),
)


def deep_file(kind: str, n: int) -> tuple[str, str]:
    if kind == "json-list":
        return "deep.json", "[" * n + "]" * n
    if kind == "json-dict":
        return "ds.json", '{"train_batch_size": 8, "x": ' + '{"a": ' * n + "1" + "}" * (n + 1)
    if kind == "yaml-flow":
        return "c.yaml", "model: llama3-8b\nnum_gpus: 8\nparallel: " + "[" * n + "]" * n + "\n"
    if kind == "yaml-block":
        return "c.yaml", "model: llama3-8b\nnum_gpus: 8\nx:\n" + "".join(
            " " * (i + 1) + "- \n" for i in range(min(n, 600))
        ) + " " * 602 + "1\n"
    if kind == "toml":
        return "t.toml", "[parallelism]\nx = " + "[" * n + "]" * n + "\n"
    return "config.json", '{"model_type": "llama", "x": ' + "[" * n + "]" * n + "}"


HF_BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "head_dim": 128,
}
HF_TYPES = [
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "qwen2_moe",
    "deepseek_v3",
    "gpt2",
    5,
    None,
]
HF_KEYS = list(HF_BASE) + [
    "num_local_experts",
    "num_experts_per_tok",
    "num_experts",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_routed_experts",
    "n_shared_experts",
    "first_k_dense_replace",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "_name_or_path",
]


@st.composite
def hf_config(draw) -> dict:
    cfg = dict(HF_BASE, model_type=draw(st.sampled_from(HF_TYPES)))
    for key in draw(st.lists(st.sampled_from(HF_KEYS), max_size=5)):
        cfg[key] = draw(JSONISH | st.integers(0, 512))
    return cfg


DS_KEYS = [
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "zero_optimization",
    "bf16",
    "fp16",
    "activation_checkpointing",
    "steps_per_print",
]


@st.composite
def ds_config(draw) -> dict:
    cfg = {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 1},
        "bf16": {"enabled": True},
    }
    for key in draw(st.lists(st.sampled_from(DS_KEYS), max_size=4)):
        cfg[key] = draw(JSONISH | st.integers(0, 4))
    return cfg


# ------------------------------------------------------------------- the families, fuzzed


def _random_planner_config(cfg):
    validate_file("config.yaml", json.dumps(cfg))


test_random_planner_configs, test_random_planner_configs_long = fuzz(random_config())(
    _random_planner_config
)


def _mutated_example(text):
    validate_file("config.yaml", text)


EXAMPLE = (TESTS.parent / "examples" / "llama3-70b-2048xh100.yaml").read_text()
test_mutated_planner_config, test_mutated_planner_config_long = fuzz(mutated(EXAMPLE))(
    _mutated_example
)


def _megatron(text):
    validate_file("train.sh", text, "--gpus", "64")


test_mutated_megatron_script, test_mutated_megatron_script_long = fuzz(
    st.sampled_from(
        [
            "megatron_llama3_70b_1node.sh",
            "megatron_llama3_70b_128nodes.sh",
            "megatron_llama3_8b_args.txt",
        ]
    )
    .map(_fixture)
    .flatmap(mutated)
)(_megatron)


def _nemo(text):
    validate_file("nemo.yaml", text)


test_mutated_nemo_yaml, test_mutated_nemo_yaml_long = fuzz(
    st.sampled_from(
        [
            "nemo_llama3_70b_128nodes.yaml",
            "nemo2_llama3_70b_recipe.yaml",
            "nemo_llama31_405b_576nodes.yaml",
        ]
    )
    .map(_fixture)
    .flatmap(mutated)
)(_nemo)


def _torchtitan(text):
    validate_file("job.toml", text)


test_mutated_torchtitan_toml, test_mutated_torchtitan_toml_long = fuzz(
    st.sampled_from(["torchtitan_llama3_70b_1node.toml", "torchtitan_llama3_70b_128nodes.toml"])
    .map(_fixture)
    .flatmap(mutated)
)(_torchtitan)


def _ds(cfg):
    validate_file("ds_config.json", json.dumps(cfg), "--model", "llama3-8b", "--gpus", "64")


test_random_ds_config, test_random_ds_config_long = fuzz(ds_config())(_ds)


def _ds_text(text):
    validate_file("ds_config.json", text, "--model", "llama3-8b", "--gpus", "64")


test_mutated_ds_config, test_mutated_ds_config_long = fuzz(
    st.just(_fixture("ds_config_llama3_70b.json")).flatmap(mutated)
)(_ds_text)


def _hf(cfg):
    with written("m/config.json", json.dumps(cfg)) as path:
        run(["plan", "--model", str(path.parent), "--gpus", "64", "--top", "2", "--json"])


test_random_hf_config, test_random_hf_config_long = fuzz(hf_config())(_hf)


def _raw(args):
    name, data = args
    validate_file(name, data)


test_raw_bytes, test_raw_bytes_long = fuzz(
    st.tuples(
        st.sampled_from(["c.yaml", "c.json", "c.toml", "c.sh", "c.txt", "c"]),
        st.binary(max_size=400),
    )
)(_raw)


def _bomb(args):
    levels, fanout, where = args
    body = alias_bomb(levels, fanout)
    if where == "config":
        validate_file("c.yaml", "model: llama3-8b\nnum_gpus: 8\nparallel:\n" + body)
    elif where == "nemo":
        validate_file("n.yaml", "trainer:\n  devices: 8\nmodel:\n" + body)
    else:
        with written(
            "m.yaml",
            "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 8\nvocab_size: 1000\nx:\n" + body,
        ) as path:
            run(["plan", "--model", str(path), "--gpus", "8", "--json"])


test_yaml_bombs, test_yaml_bombs_long = fuzz(
    st.tuples(st.integers(1, 12), st.integers(1, 30), st.sampled_from(["config", "nemo", "model"]))
)(_bomb)


def _deep(args):
    kind, n = args
    name, text = deep_file(kind, n)
    if kind == "hf":
        with written("m/config.json", text) as path:
            run(["plan", "--model", str(path.parent), "--gpus", "8", "--json"])
    else:
        validate_file(name, text, "--model", "llama3-8b", "--gpus", "8")


test_deep_nesting, test_deep_nesting_long = fuzz(DEEP)(_deep)


def _cli(argv):
    run(argv + ["--json"])


CLI_VALUES = st.one_of(
    st.sampled_from(
        [
            "8",
            "0",
            "-1",
            "1e18",
            str(10**18),
            "[/x]",
            "",
            "tp=8,pp=2",
            "tp=3",
            "zero=9",
            "recompute=full",
            "15T",
            "nan",
            "h100-sxm",
            "llama3-8b",
            "x" * 300,
        ]
    ),
    st.text(max_size=12),
)
CLI_FLAGS = [
    "--gpus",
    "--nodes",
    "--fix",
    "--top",
    "--seq-length",
    "--global-batch-size",
    "--precision",
    "--sort-by",
    "--headroom",
    "--tokens",
    "--max-tp",
    "--hardware",
    "--export",
]
test_random_plan_options, test_random_plan_options_long = fuzz(
    st.lists(st.tuples(st.sampled_from(CLI_FLAGS), CLI_VALUES), max_size=4).map(
        lambda pairs: ["plan", "--model", "8b", "--gpus", "8"] + [x for p in pairs for x in p]
    )
)(_cli)


# ------------------------------------------- structured: real keys, hostile values

HOSTILE_VALUES = st.one_of(
    JSONISH,
    st.sampled_from(
        [
            "[1]*x",
            "[0]*1e9",
            "[1]*4+[0]*4",
            "([1]*3+[0])*2",
            "8",
            "'8'",
            "-1",
            "0",
            "1.5",
            "1e20",
            "150000000000000000000",
            "auto",
            "",
            "$((2**10))",
            "${UNSET}",
            "$1",
            "true",
            "[/x]",
        ]
    ),
)
MEGATRON_FLAGS = [
    "--num-layers",
    "--hidden-size",
    "--num-attention-heads",
    "--num-query-groups",
    "--ffn-hidden-size",
    "--seq-length",
    "--micro-batch-size",
    "--global-batch-size",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--expert-model-parallel-size",
    "--num-experts",
    "--moe-layer-freq",
    "--moe-router-topk",
    "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers",
    "--recompute-granularity",
    "--recompute-num-layers",
    "--vocab-size",
    "--kv-channels",
    "--nnodes",
    "--nproc-per-node",
    "--pipeline-model-parallel-layout",
    "--x[/x]",
]


@st.composite
def megatron_with_flags(draw) -> str:
    base = _fixture("megatron_llama3_70b_1node.sh").rstrip() + " \\\n"
    pairs = draw(
        st.lists(
            st.tuples(st.sampled_from(MEGATRON_FLAGS), HOSTILE_VALUES.map(str)),
            min_size=1,
            max_size=4,
        )
    )
    import shlex

    return base + " \\\n".join(f"    {flag} {shlex.quote(value)}" for flag, value in pairs) + "\n"


def _megatron_flags(text):
    validate_file("train.sh", text, "--gpus", "64")


test_megatron_hostile_flags, test_megatron_hostile_flags_long = fuzz(megatron_with_flags())(
    _megatron_flags
)

NEMO_KEYS = [
    ("trainer", "devices"),
    ("trainer", "num_nodes"),
    ("trainer", "precision"),
    ("model", "num_layers"),
    ("model", "hidden_size"),
    ("model", "num_attention_heads"),
    ("model", "num_moe_experts"),
    ("model", "tensor_model_parallel_size"),
    ("model", "pipeline_model_parallel_size"),
    ("model", "micro_batch_size"),
    ("model", "global_batch_size"),
    ("model", "encoder_seq_length"),
    ("model", "virtual_pipeline_model_parallel_size"),
    ("model", 1),
    ("model", True),
    ("model", "activations_checkpoint_granularity"),
    ("model", "sequence_parallel"),
]


@st.composite
def nemo_with_values(draw) -> str:
    import yaml

    data = yaml.safe_load(_fixture("nemo_llama3_70b_128nodes.yaml"))
    for section, key in draw(st.lists(st.sampled_from(NEMO_KEYS), min_size=1, max_size=4)):
        if isinstance(data.get(section), dict):
            data[section][key] = draw(HOSTILE_VALUES)
    return yaml.safe_dump(data, allow_unicode=True)


test_nemo_hostile_values, test_nemo_hostile_values_long = fuzz(nemo_with_values())(_nemo)

TITAN_KEYS = (
    [
        ("parallelism", k)
        for k in (
            "data_parallel_replicate_degree",
            "data_parallel_shard_degree",
            "tensor_parallel_degree",
            "pipeline_parallel_degree",
            "context_parallel_degree",
            "expert_parallel_degree",
            "pipeline_parallel_layers_per_stage",
            "pipeline_parallel_first_stage_less_layers",
            "pipeline_parallel_last_stage_less_layers",
            "pipeline_parallel_microbatch_size",
            "pipeline_parallel_schedule",
        )
    ]
    + [
        ("training", k)
        for k in ("local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param")
    ]
    + [("model", "flavor"), ("model", "name"), ("activation_checkpoint", "mode")]
)


def _toml_value(value) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(
            value, "nan" if value != value else repr(value)
        )
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        items = [_toml_value(v) for v in value]
        return None if None in items else "[" + ", ".join(items) + "]"
    return None


@st.composite
def torchtitan_with_values(draw) -> str:
    from planner.io import tomllib

    data = tomllib.loads(_fixture("torchtitan_llama3_70b_128nodes.toml"))
    for section, key in draw(st.lists(st.sampled_from(TITAN_KEYS), min_size=1, max_size=4)):
        data.setdefault(section, {})[key] = draw(HOSTILE_VALUES)
    lines = []
    for section, table in data.items():
        lines.append(f"[{section}]")
        for key, value in table.items():
            text = _toml_value(value)
            if text is not None:
                lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


test_torchtitan_hostile_values, test_torchtitan_hostile_values_long = fuzz(
    torchtitan_with_values()
)(_torchtitan)


# -------------------------------------------------------------------------- round trips


@st.composite
def small_job(draw) -> tuple[dict, int]:
    heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kv = draw(st.sampled_from([g for g in (1, 2, 4, 8, 16) if heads % g == 0]))
    model = {
        "name": "fuzz",
        "num_layers": draw(st.integers(1, 12)),
        "hidden_size": heads * draw(st.sampled_from([16, 32, 64, 128])),
        "num_attention_heads": heads,
        "num_kv_heads": kv,
        "vocab_size": draw(st.integers(100, 50000)),
        "activation": draw(st.sampled_from(["swiglu", "gelu"])),
        "seq_length": draw(st.sampled_from([128, 256, 512, 1024])),
    }
    if draw(st.booleans()):
        e = draw(st.sampled_from([2, 4, 8]))
        model.update(num_experts=e, moe_top_k=draw(st.integers(1, e)))
    return model, draw(st.sampled_from([1, 2, 4, 8, 16, 32]))


COMPARED = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "micro_batch_size",
    "sequence_parallel",
    "zero_stage",
    "recompute",
    "first_stage_layers",
    "last_stage_layers",
)
LOSSY = {
    ("torchtitan", "zero_stage"): {1: 2},
    ("nemo", "zero_stage"): {2: 1},
    ("deepspeed", "zero_stage"): {0: 1},
}  # bf16 with ZeRO 0: DeepSpeed's BF16 optimizer
EXTENSIONS = {"megatron": ".sh", "deepspeed": ".json", "torchtitan": ".toml", "nemo": ".yaml"}
PARALLEL_KEYS = (
    "tp",
    "pp",
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
    "moe_token_dispatcher",
    "overlap_moe_expert_parallel_comm",
    "cuda_graphs",
    "tp_comm_overlap",
)


def _round_trip(args):
    model, gpus = args
    with tempfile.TemporaryDirectory() as d:
        model_path = Path(d) / "model.yaml"
        model_path.write_text(json.dumps(model))
        code, out, _ = run(
            ["plan", "--model", str(model_path), "--gpus", str(gpus), "--top", "1", "--json"]
        )
        assume(code == 0)
        best = json.loads(out)["plans"][0]
        layout = best["layout"]
        config = Path(d) / "config.yaml"
        config.write_text(
            json.dumps(
                {
                    "model": str(model_path),
                    "num_gpus": gpus,
                    "training": {
                        "seq_length": model["seq_length"],
                        "global_batch_size": json.loads(out)["job"]["global_batch_size"],
                    },
                    "parallel": {k: layout[k] for k in PARALLEL_KEYS if layout.get(k) is not None},
                }
            )
        )
        code, out, _ = run(["validate", str(config), "--json"])
        checked = json.loads(out)
        assert code == 0 and checked["valid"], checked["errors"]
        assert checked["memory"]["total_bytes"] == best["memory"]["total_bytes"]
        assert checked["time"]["step_time_s"] == pytest.approx(best["time"]["step_time_s"])
        for fmt in EXTENSIONS:
            target = Path(d) / f"export{EXTENSIONS[fmt]}"
            code, _, err = run(["export", str(config), "--format", fmt, "-o", str(target)])
            if code == 1:  # the exporter refuses, and says why
                assert err.startswith("error: cannot export") or "error:" in err
                continue
            assert code == 0, err
            code, out, err = run(["validate", str(target), "--json", "--model", str(model_path)])
            back = json.loads(out)
            assert code in (0, 1), err
            for key in COMPARED:
                want = LOSSY.get((fmt, key), {}).get(layout[key], layout[key])
                assert back["layout"][key] == want, (fmt, key, back["layout"][key], want)
            assert back["valid"] == checked["valid"], (fmt, back["errors"])


test_plan_validate_export_round_trip, test_plan_validate_export_round_trip_long = fuzz(small_job())(
    _round_trip
)
