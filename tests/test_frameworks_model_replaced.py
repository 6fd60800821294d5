"""`validate FILE --model M` replaces the file's whole model; every shape setting the file
states that M does not share is named in one warning (planner/frameworks/common.py
model_replaced), so a capacity factor or a layer count the file says is never dropped
silently. The fixtures are tests/data/import's own Llama 3 70B files (80 layers, h 8192,
f 28672, 64 heads: Llama 3 70B's config.json) and small scripts written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.frameworks import load_any

DATA = Path(__file__).parent / "data" / "import"

LLAMA3_70B_FILES = [
    ("megatron-model-replaced", "megatron_llama3_70b_128nodes.sh"),
    ("nemo-model-replaced", "nemo_llama3_70b_128nodes.yaml"),
    ("nemo-model-replaced", "nemo2_llama3_70b_recipe.yaml"),
    ("torchtitan-model-replaced", "torchtitan_llama3_70b_128nodes.toml"),
]


def _warnings(imported, rule: str) -> list[str]:
    return [v.message for v in imported.violations if v.rule == rule]


@pytest.mark.parametrize(("rule", "name"), LLAMA3_70B_FILES, ids=[n for _, n in LLAMA3_70B_FILES])
def test_the_files_own_model_given_again_is_not_a_replacement(rule, name):
    assert _warnings(load_any(DATA / name, model="llama3-70b", gpus=1024), rule) == []


@pytest.mark.parametrize(("rule", "name"), LLAMA3_70B_FILES, ids=[n for _, n in LLAMA3_70B_FILES])
def test_another_model_names_what_it_replaces(rule, name):
    # Llama 3.1 405B: 126 layers, h 16384 (its config.json) against the file's 80 and 8192
    imported = load_any(DATA / name, model="llama3.1-405b", gpus=1024)
    (message,) = _warnings(imported, rule)
    assert "80" in message and "num_layers 126" in message
    assert "8192" in message and "hidden_size 16384" in message
    assert message.endswith("planner uses --model's")
    assert imported.job.model.num_layers == 126


def _script(tmp_path: Path, moe: str) -> Path:
    path = tmp_path / "train.sh"
    path.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
        "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
        "--num-query-groups 8 --seq-length 4096 --max-position-embeddings 32768 --swiglu "
        "--normalization RMSNorm --position-embedding-type rope --disable-bias-linear "
        "--untie-embeddings-and-output-weights --micro-batch-size 1 --global-batch-size 64 "
        f"--bf16 --tokenizer-type NullTokenizer --vocab-size 31999 {moe}\n"
    )
    return path


def test_a_capacity_factor_the_script_states_is_named_when_the_preset_replaces_it(tmp_path):
    # Mixtral 8x7B's shape (32 layers, h 4096, f 14336, 32 heads, 8 KV groups, 8 experts,
    # top-2: its config.json), dropless (the preset's capacity factor 1.0); the script asks
    # for drop-and-pad at 1.25, which --model replaces
    path = _script(
        tmp_path, "--num-experts 8 --moe-router-topk 2 --moe-expert-capacity-factor 1.25"
    )
    imported = load_any(path, model="mixtral-8x7b")
    (message,) = _warnings(imported, "megatron-model-replaced")
    assert "--moe-expert-capacity-factor 1.25" in message
    assert "moe_capacity_factor 1" in message
    assert "--num-layers" not in message  # the shapes agree: only what differs is named
    assert imported.job.model.moe_capacity_factor == 1.0


def test_a_script_that_agrees_with_the_preset_gets_no_warning(tmp_path):
    path = _script(tmp_path, "--num-experts 8 --moe-router-topk 2")
    assert _warnings(load_any(path, model="mixtral-8x7b"), "megatron-model-replaced") == []
