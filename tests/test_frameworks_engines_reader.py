"""Serving launch commands (vLLM, SGLang, TensorRT-LLM) are read by the same bash reader as
training scripts (planner/frameworks/engines/reader.py): variables, arrays, `\\` continuations,
loops and here-documents resolve as bash would. The fixtures are small scripts of our own."""

from __future__ import annotations

import json

import pytest

from planner.cli import app

HEAD = "# planner serve: isl=2048 osl=512 hardware=h100-sxm\n"


def _validate(runner, tmp_path, text: str, *args: str):
    path = tmp_path / "serve.sh"
    path.write_text(text)
    return runner.invoke(app, ["validate", str(path), "--json", *args])


def _ok(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_vllm_command_reads_its_tp_from_a_variable(runner, tmp_path):
    out = _ok(
        _validate(
            runner,
            tmp_path,
            HEAD + "TP=8; vllm serve meta-llama/Meta-Llama-3-70B-Instruct "
            "--tensor-parallel-size $TP\n",
        )
    )
    assert out["format"] == "vllm"
    assert out["layout"]["tp"] == 8 and out["job"]["model"] == "Llama 3 70B"
    assert out["warnings"] == []


def test_a_vllm_command_with_defaults_continuations_and_a_loop(runner, tmp_path):
    # ${VAR:-default}, the model in a variable, `\` continuations and one replica per loop turn
    text = HEAD + (
        "MODEL=${MODEL:-meta-llama/Meta-Llama-3-70B-Instruct}\n"
        "TP=${TP:-4}\n"
        "for i in 0 1; do\n"
        '  vllm serve "$MODEL" \\\n'
        '    --tensor-parallel-size "$TP" \\\n'
        "    --port $((8000 + i)) &\n"
        "done\n"
        "wait\n"
    )
    out = _ok(_validate(runner, tmp_path, text))
    assert out["layout"]["tp"] == 4 and out["layout"]["replicas"] == 2
    # --set gives the environment, as for training scripts
    out = _ok(_validate(runner, tmp_path, text, "--set", "TP=2"))
    assert out["layout"]["tp"] == 2


def test_an_sglang_command_with_an_array_of_args(runner, tmp_path):
    text = (
        "# planner serve: isl=1000 osl=1000 hardware=h200\n"
        "ARGS=(\n"
        "  --model-path Qwen/Qwen3-235B-A22B\n"
        "  --tp 8 --dp 8 --enable-dp-attention   # attention DP\n"
        "  --ep 8 --quantization fp8\n"
        ")\n"
        "ARGS+=(--kv-cache-dtype fp8_e4m3)\n"
        'python -m sglang.launch_server "${ARGS[@]}" --port 30000\n'
    )
    out = _ok(_validate(runner, tmp_path, text))
    assert out["format"] == "sglang"
    assert {k: out["layout"][k] for k in ("tp", "dp", "ep", "dp_attention")} == {
        "tp": 1,
        "dp": 8,
        "ep": 8,
        "dp_attention": True,
    }
    assert out["job"]["model"] == "Qwen3-235B-A22B" and out["job"]["kv_cache_dtype"] == "fp8"


def test_a_trtllm_command_with_a_variable_and_a_here_document(runner, tmp_path):
    text = (
        HEAD
        + "TP=4\n"
        + "EXTRA=extra.yaml\n"
        + "cat > $EXTRA <<EOF\n"
        + "kv_cache_config:\n"
        + "  dtype: ${KV_DTYPE:-fp8}\n"
        + "EOF\n"
        + "trtllm-serve meta-llama/Meta-Llama-3-70B-Instruct --tp_size $TP \\\n"
        + "  --extra_llm_api_options $EXTRA --port 8000\n"
    )
    out = _ok(_validate(runner, tmp_path, text))
    assert out["format"] == "trtllm"
    assert out["layout"]["tp"] == 4 and out["job"]["kv_cache_dtype"] == "fp8"
    assert out["warnings"] == []


def test_an_unset_variable_is_named_not_read_as_a_number(runner, tmp_path):
    result = _validate(
        runner,
        tmp_path,
        HEAD + "vllm serve meta-llama/Meta-Llama-3-70B-Instruct --tensor-parallel-size $TP\n",
    )
    assert result.exit_code == 2, result.output
    err = json.loads(result.stdout)["error"] if result.stdout.strip() else None
    text = result.stderr + result.stdout
    assert "$TP, which the script never sets" in text and "--set" in text
    assert "\x00" not in text and "Traceback" not in text
    if err is not None:
        assert err["field"] == "--tensor-parallel-size" and err["value"] == "$TP"
    # given with --set, it reads
    out = _ok(
        _validate(
            runner,
            tmp_path,
            HEAD + "vllm serve meta-llama/Meta-Llama-3-70B-Instruct --tensor-parallel-size $TP\n",
            "--set",
            "TP=2",
        )
    )
    assert out["layout"]["tp"] == 2


def test_unset_extra_args_and_echo_lines_are_not_launches(runner, tmp_path):
    text = HEAD + (
        'echo "starting: vllm serve with tp 2"\n'
        "echo vllm serve x --tensor-parallel-size 2\n"
        "vllm serve meta-llama/Meta-Llama-3-70B-Instruct --tensor-parallel-size 8 "
        "$EXTRA_ARGS\n"
    )
    out = _ok(_validate(runner, tmp_path, text))
    assert out["layout"]["tp"] == 8 and out["layout"]["replicas"] == 1
    assert [w["rule"] for w in out["warnings"]] == ["vllm-unresolved-argument"]
    assert "$EXTRA_ARGS" in out["warnings"][0]["message"]


@pytest.mark.parametrize("quoted", [True, False])
def test_the_roles_come_from_the_comments_above_each_command(runner, tmp_path, quoted):
    q = '"' if quoted else ""
    text = HEAD + (
        f"M={q}meta-llama/Meta-Llama-3-70B-Instruct{q}\n"
        "# 2 prefill worker(s) of tp2 (2 GPUs each)\n"
        "for p in 0 1; do vllm serve $M --tensor-parallel-size 2 & done\n"
        "# 1 decode worker(s) of tp4 (4 GPUs each)\n"
        "vllm serve $M --tensor-parallel-size 4 &\n"
        "wait\n"
    )
    out = _ok(_validate(runner, tmp_path, text))
    assert out["layout"]["prefill"]["tp"] == 2 and out["layout"]["prefill"]["workers"] == 2
    assert out["layout"]["decode"]["tp"] == 4 and out["layout"]["decode"]["workers"] == 1
