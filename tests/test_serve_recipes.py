"""Serving launch commands as the engines' own recipes write them (issue 21): the workload from
validate's options, the checkpoint's precision from its id or config.json, vLLM's two flag
spellings and --config file, TRT-LLM options files written in any redirection order, MTP from
the config.json, and four recipes in their published shape (tests/data/serve/, our own files).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import app
from planner.frameworks.engines import checkpoint as ckpt
from planner.presets import resolve_model

SERVE = Path(__file__).resolve().parent / "data" / "serve"
HF = Path(__file__).resolve().parent / "data" / "hf"
LLAMA = "vllm serve meta-llama/Meta-Llama-3-70B-Instruct --tensor-parallel-size 8\n"
WORK = ["--isl", "1000", "--osl", "200"]


def _run(runner, path: Path, *args: str):
    return runner.invoke(app, ["validate", str(path), "--json", *args])


def _script(tmp_path: Path, text: str, name: str = "serve.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _ok(result) -> dict:
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def _error(result) -> dict:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return json.loads(result.stdout)["error"]


# ------------------------------------------------------------------------------- workload


def test_the_workload_comes_from_the_options(runner, tmp_path):
    out = _ok(_run(runner, _script(tmp_path, LLAMA), *WORK, "--concurrency", "16"))
    assert (out["job"]["input_length"], out["job"]["output_length"]) == (1000, 200)
    assert out["job"]["concurrency"] == 16


def test_the_options_override_the_comment(runner, tmp_path):
    path = _script(tmp_path, "# planner serve: isl=2048 osl=512 concurrency=4\n" + LLAMA)
    out = _ok(_run(runner, path))
    assert (out["job"]["input_length"], out["job"]["output_length"]) == (2048, 512)
    out = _ok(_run(runner, path, "--osl", "64", "--concurrency", "max"))
    assert (out["job"]["input_length"], out["job"]["output_length"]) == (2048, 64)
    assert out["job"]["concurrency"] == "max"


@pytest.mark.parametrize(
    "args, field, said",
    [
        pytest.param([], "--isl", "give --isl N and --osl N", id="neither"),
        pytest.param(["--isl", "100"], "--osl", "give --osl N", id="no-osl"),
        pytest.param(
            [*WORK, "--concurrency", "lots"], "--concurrency", 'or "max"', id="bad-concurrency"
        ),
        pytest.param([*WORK, "--isl", "0"], "--isl", "must be a whole number", id="zero-isl"),
    ],
)
def test_a_command_without_the_workload_names_the_option(runner, tmp_path, args, field, said):
    err = _error(_run(runner, _script(tmp_path, LLAMA), *args))
    assert err["field"] == field and said in err["message"]


def test_an_acceptance_rate_without_speculative_decoding_is_refused(runner, tmp_path):
    err = _error(_run(runner, _script(tmp_path, LLAMA), *WORK, "--acceptance-rate", "0.7"))
    assert err["field"] == "--acceptance-rate" and "remove it" in err["message"]


def test_the_workload_options_override_a_serving_yaml(runner):
    path = Path(__file__).resolve().parent.parent / "examples" / "serve" / "llama3-70b-8xh100.yaml"
    out = _ok(_run(runner, path, "--isl", "999", "--osl", "77", "--concurrency", "3"))
    assert {k: out["job"][k] for k in ("input_length", "output_length", "concurrency")} == {
        "input_length": 999,
        "output_length": 77,
        "concurrency": 3,
    }


def test_the_workload_options_are_refused_for_a_training_file(runner, tmp_path):
    path = _script(tmp_path, "torchrun pretrain_gpt.py --tensor-model-parallel-size 2\n")
    err = _error(_run(runner, path, "--isl", "100"))
    assert err["field"] == "--isl" and "remove --isl" in err["message"]


# ------------------------------------------------------------------ checkpoint precision


@pytest.mark.parametrize(
    "model_id, preset, precision",
    [
        # DeepSeek-V3/R1 ship FP8 weights: tests/data/hf/DeepSeek-V3/config.json (the published
        # one) has quantization_config quant_method fp8
        pytest.param("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3", "fp8", id="r1-0528"),
        pytest.param("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3", "fp8", id="v3-0324"),
        pytest.param("deepseek-ai/DeepSeek-V3", "deepseek-v3", "fp8", id="v3"),
        # NVIDIA ModelOpt exports name their precision in the id
        pytest.param("nvidia/DeepSeek-R1-FP4", "deepseek-v3", "fp4", id="nvidia-r1-fp4"),
        pytest.param("nvidia/Llama-3.3-70B-Instruct-FP8", "llama3-70b", "fp8", id="llama3.3-fp8"),
        pytest.param(
            "nvidia/Llama-3.3-70B-Instruct-NVFP4", "llama3-70b", "fp4", id="llama3.3-nvfp4"
        ),
        pytest.param(
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "llama3-8b", "fp8", id="fp8-dynamic"
        ),
        pytest.param("meta-llama/Llama-3.3-70B-Instruct", "llama3-70b", None, id="llama3.3-bf16"),
        # the distilled R1s are Llama / Qwen models in bf16, not DeepSeek-V3
        pytest.param("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", None, None, id="r1-distill"),
        pytest.param("Qwen/Qwen3-8B-FP8", None, "fp8", id="unknown-model-fp8"),
        # the Qwen3 presets and their 2507 revisions (the same config.json shapes)
        pytest.param("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b", None, id="qwen3-30b"),
        pytest.param(
            "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8", "qwen3-30b-a3b", "fp8", id="qwen3-30b-2507"
        ),
        pytest.param("nvidia/Qwen3-32B-FP4", "qwen3-32b", "fp4", id="qwen3-32b-nvfp4"),
        pytest.param(
            "Qwen/Qwen3-235B-A22B-Thinking-2507", "qwen3-235b-a22b", None, id="qwen3-235b-2507"
        ),
    ],
)
def test_the_checkpoint_id_says_its_preset_and_precision(model_id, preset, precision):
    got = ckpt.from_id(model_id)
    assert (got.preset if got else None, got.precision if got else None) == (preset, precision)


@pytest.mark.parametrize(
    "qc, quant, precision",
    [
        pytest.param({"quant_method": "fp8", "fmt": "e4m3"}, None, "fp8", id="fp8"),
        pytest.param(
            {"quant_method": "modelopt", "quant_algo": "FP8"}, None, "fp8", id="modelopt-fp8"
        ),
        pytest.param(
            {"quant_method": "modelopt", "quant_algo": "NVFP4"}, None, "fp4", id="modelopt-nvfp4"
        ),
        pytest.param({"quant_method": "mxfp4"}, None, "fp4", id="mxfp4"),
        pytest.param(
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            None,
            "fp8",
            id="compressed-tensors-fp8",
        ),
        pytest.param(None, {"quantization": {"quant_algo": "NVFP4"}}, "fp4", id="hf-quant-config"),
        pytest.param({"quant_method": "awq", "bits": 4}, None, "unknown", id="awq-not-modelled"),
        pytest.param(None, None, None, id="not-quantized"),
    ],
)
def test_a_config_json_says_its_precision(qc, quant, precision):
    cfg = {"model_type": "llama"} | ({"quantization_config": qc} if qc else {})
    got = ckpt.from_config(cfg, "config.json", quant)
    said = None if got is None else ("unknown" if got.unknown else got.precision)
    assert said == precision


def _llama_checkpoint(tmp_path: Path, qc: dict | None, quant: dict | None = None) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    cfg = json.loads((HF / "Meta-Llama-3-70B" / "config.json").read_text())
    if qc is not None:
        cfg["quantization_config"] = qc
    (folder / "config.json").write_text(json.dumps(cfg))
    if quant is not None:
        (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    return folder


@pytest.mark.parametrize(
    "qc, quant, precision",
    [
        pytest.param({"quant_method": "modelopt", "quant_algo": "FP8"}, None, "fp8", id="config"),
        pytest.param(None, {"quantization": {"quant_algo": "FP8"}}, "fp8", id="hf-quant-config"),
    ],
)
def test_the_model_folder_says_the_precision_and_the_verdict_says_where(
    runner, tmp_path, qc, quant, precision
):
    folder = _llama_checkpoint(tmp_path, qc, quant)
    path = _script(tmp_path, "vllm serve /models/llama --tensor-parallel-size 8\n")
    out = _ok(_run(runner, path, *WORK, "--model", str(folder)))
    assert out["job"]["precision"] == precision
    assert any("read from" in c and "config.json" in c for c in out["caveats"])


def test_a_checkpoint_folder_beside_the_script_is_the_model_and_says_its_precision(
    runner, tmp_path
):
    folder = _llama_checkpoint(tmp_path, {"quant_method": "fp8", "fmt": "e4m3"})
    path = _script(tmp_path, f"vllm serve ./{folder.name} --tensor-parallel-size 8\n")
    out = _ok(_run(runner, path, *WORK))
    # the folder's config.json is Meta-Llama-3-70B's: 70.6B params (its model card)
    assert out["job"]["parameters"] == pytest.approx(70.6e9, rel=0.01)
    assert out["job"]["precision"] == "fp8"


def test_an_integer_quantized_checkpoint_is_named_as_not_modelled(runner, tmp_path):
    folder = _llama_checkpoint(tmp_path, {"quant_method": "gptq", "bits": 4})
    path = _script(tmp_path, "vllm serve /models/llama --tensor-parallel-size 8\n")
    out = _ok(_run(runner, path, *WORK, "--model", str(folder)))
    assert out["job"]["precision"] == "bf16"
    assert [w["rule"] for w in out["warnings"]] == ["vllm-checkpoint-quantization-not-modelled"]
    assert "quant_method gptq" in out["warnings"][0]["message"]


@pytest.mark.parametrize(
    "flags, precision, kv",
    [
        pytest.param("", "fp8", "bf16", id="checkpoint"),  # vLLM's kv auto: the model's dtype
        pytest.param("--kv-cache-dtype fp8", "fp8", "fp8", id="kv-flag"),
        pytest.param("--quantization modelopt_fp4", "fp4", "bf16", id="quantization-flag-wins"),
    ],
)
def test_an_engine_flag_wins_over_the_checkpoint(runner, tmp_path, flags, precision, kv):
    path = _script(tmp_path, f"vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8 {flags}\n")
    out = _ok(_run(runner, path, *WORK, "--hardware", "b200"))
    assert (out["job"]["precision"], out["job"]["kv_cache_dtype"]) == (precision, kv)
    if flags.startswith("--quantization"):
        assert any("wins over the checkpoint's fp8" in c for c in out["caveats"])


# ------------------------------------------------------------------ vLLM spellings, --config


@pytest.mark.parametrize("spelling", ["dashes", "underscores", "inline"])
def test_vllm_flags_in_either_spelling(runner, tmp_path, spelling):
    flags = {
        "dashes": "--tensor-parallel-size 4 --data-parallel-size 2 --enable-expert-parallel "
        "--max-num-seqs 64 --kv-cache-dtype fp8",
        "underscores": "--tensor_parallel_size 4 --data_parallel_size 2 "
        "--enable_expert_parallel --max_num_seqs 64 --kv_cache_dtype fp8",
        "inline": "--tensor_parallel_size=4 --data-parallel_size=2 --enable_expert-parallel "
        "--max_num_seqs=64 --kv_cache_dtype=fp8",
    }[spelling]
    path = _script(tmp_path, f"vllm serve Qwen/Qwen3-235B-A22B {flags}\n")
    out = _ok(_run(runner, path, *WORK, "--hardware", "h200"))
    # MoE with dp 2: attention DP, experts over tp * dp = 8 ranks
    assert {k: out["layout"][k] for k in ("tp", "dp", "ep", "dp_attention")} == {
        "tp": 4,
        "dp": 2,
        "ep": 8,
        "dp_attention": True,
    }
    assert out["job"]["kv_cache_dtype"] == "fp8" and out["warnings"] == []


def test_vllm_config_file_beside_the_script_and_the_command_line_overrides_it(runner, tmp_path):
    (tmp_path / "cfg.yaml").write_text(
        "tensor-parallel-size: 2\n"
        "enable_expert_parallel: true\n"
        "kv-cache-dtype: fp8\n"
        "max-num-seqs: 32\n"
    )
    path = _script(
        tmp_path, "vllm serve Qwen/Qwen3-235B-A22B --config cfg.yaml --tensor-parallel-size 8\n"
    )
    out = _ok(_run(runner, path, *WORK, "--hardware", "h200"))
    assert (out["layout"]["tp"], out["layout"]["ep"]) == (8, 8)  # the CLI's tp, the file's EP
    assert out["job"]["kv_cache_dtype"] == "fp8" and out["warnings"] == []


def test_a_vllm_config_file_written_by_the_script_is_read(runner, tmp_path):
    text = (
        "cat > cfg.yaml <<'EOF'\ntensor_parallel_size: 4\nEOF\n"
        "vllm serve meta-llama/Meta-Llama-3-70B-Instruct --config=cfg.yaml\n"
    )
    out = _ok(_run(runner, _script(tmp_path, text), *WORK))
    assert out["layout"]["tp"] == 4


def test_a_missing_vllm_config_file_is_a_warning(runner, tmp_path):
    path = _script(
        tmp_path, "vllm serve meta-llama/Meta-Llama-3-70B-Instruct -tp 8 --config nowhere.yaml\n"
    )
    out = _ok(_run(runner, path, *WORK))
    assert [w["rule"] for w in out["warnings"]] == ["vllm-config-not-read"]


def test_a_vllm_config_file_that_is_not_a_mapping_is_refused(runner, tmp_path):
    (tmp_path / "cfg.yaml").write_text("- 8\n")
    path = _script(tmp_path, "vllm serve meta-llama/Meta-Llama-3-70B-Instruct --config cfg.yaml\n")
    err = _error(_run(runner, path, *WORK))
    assert err["field"] == "--config"


# --------------------------------------------------------------- TRT-LLM options file orders

OPTIONS = (
    "enable_attention_dp: true\n"
    "kv_cache_config:\n  dtype: fp8\n"
    "speculative_config:\n  decoding_type: MTP\n  num_nextn_predict_layers: 1\n"
)


@pytest.mark.parametrize(
    "write",
    [
        pytest.param("cat > ${FILE} <<'EOF'", id="cat-redirect-first"),
        pytest.param("cat << EOF > ${FILE}", id="heredoc-first"),
        pytest.param('cat <<EOF >"$FILE"', id="heredoc-first-quoted"),
        pytest.param("cat <<EOF | tee $FILE", id="tee-in-a-pipe"),
        pytest.param("tee ${FILE} <<EOF >/dev/null", id="tee-heredoc"),
    ],
)
def test_a_trtllm_options_file_in_any_redirection_order(runner, tmp_path, write):
    text = (
        f"FILE=/tmp/extra.yml\n{write}\n{OPTIONS}EOF\n"
        "trtllm-serve deepseek-ai/DeepSeek-R1-0528 --tp_size 8 --ep_size 8 "
        "--extra_llm_api_options ${FILE}\n"
    )
    out = _ok(
        _run(
            runner, _script(tmp_path, text), *WORK, "--hardware", "h200", "--acceptance-rate", "0.7"
        )
    )
    assert {k: out["layout"][k] for k in ("tp", "dp", "ep", "dp_attention")} == {
        "tp": 1,
        "dp": 8,
        "ep": 8,
        "dp_attention": True,
    }
    assert out["job"]["kv_cache_dtype"] == "fp8"
    assert out["warnings"] == []


# ------------------------------------------------------------------------------------ MTP


def test_the_hf_import_reads_the_mtp_layers():
    # DeepSeek-V3 config.json (tests/data/hf, the published file): num_nextn_predict_layers 1
    assert resolve_model(str(HF / "DeepSeek-V3" / "config.json")).mtp_num_layers == 1


@pytest.mark.parametrize(
    "strip, ok",
    [
        pytest.param(False, True, id="config-with-mtp"),
        pytest.param(True, False, id="config-without-mtp"),
    ],
)
def test_sglang_mtp_validates_with_the_config_json_mtp_layer(runner, tmp_path, strip, ok):
    cfg = json.loads((HF / "DeepSeek-V3" / "config.json").read_text())
    if strip:
        cfg.pop("num_nextn_predict_layers")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    path = _script(
        tmp_path,
        "python -m sglang.launch_server --model-path /m --tp 8 "
        "--speculative-algorithm NEXTN --speculative-num-steps 1\n",
    )
    out = _ok(
        _run(
            runner,
            path,
            *WORK,
            "--hardware",
            "h200",
            "--acceptance-rate",
            "0.7",
            "--model",
            str(tmp_path / "config.json"),
        )
    )
    assert out["job"]["precision"] == "fp8"  # the config's quantization_config
    if ok:
        assert out["valid"] is True, out["errors"]
    else:
        assert [e["rule"] for e in out["errors"]] == ["speculative-mtp-needs-layers"]
        assert "mtp_num_layers 0" in out["errors"][0]["message"]


def test_speculative_decoding_without_an_acceptance_rate_names_the_option(runner, tmp_path):
    path = _script(
        tmp_path,
        "python -m sglang.launch_server --model-path "
        "deepseek-ai/DeepSeek-V3 --tp 8 --speculative-algorithm EAGLE\n",
    )
    err = _error(_run(runner, path, *WORK, "--hardware", "h200"))
    assert err["field"] == "acceptance_rate" and "--acceptance-rate" in err["message"]


# ----------------------------------------------------------------- recipes, published shape

RECIPES = [
    # vllm-project/recipes DeepSeek-V3.md: FP8 on 8xH200, TP 8 + expert parallel (ep = tp)
    pytest.param(
        "vllm-deepseek-r1-8xh200.sh",
        "h200",
        [],
        dict(tp=8, dp=1, ep=8, dp_attention=False),
        "fp8",
        "bf16",
        None,
        id="vllm-r1",
    ),
    # SGLang deepseek.md MTP: --tp 8, experts TP-sharded (SGLang's ep_size default 1), EAGLE
    # with 1 step over the model's own MTP layer
    pytest.param(
        "sglang-deepseek-v3-mtp-8xh200.sh",
        "h200",
        ["--acceptance-rate", "0.7"],
        dict(tp=8, dp=1, ep=1, dp_attention=False),
        "fp8",
        "bf16",
        ("mtp", 1),
        id="sglang-v3-mtp",
    ),
    # TRT-LLM DeepSeek R1 quick start: --tp_size 8 with enable_attention_dp is 8 attention
    # ranks of tp 1, experts over --ep_size 8; kv_cache_config.dtype fp8; MTP of 1 layer
    pytest.param(
        "trtllm-deepseek-r1-adp-8gpu.sh",
        "h200",
        ["--acceptance-rate", "0.7"],
        dict(tp=1, dp=8, ep=8, dp_attention=True),
        "fp8",
        "fp8",
        ("mtp", 1),
        id="trtllm-r1-adp",
    ),
    # nvidia/Llama-3.3-70B-Instruct-FP8 on one H100, --kv-cache-dtype fp8
    pytest.param(
        "vllm-llama3.3-70b-fp8-1xh100.sh",
        "h100-sxm",
        [],
        dict(tp=1, dp=1, ep=1, dp_attention=False),
        "fp8",
        "fp8",
        None,
        id="vllm-llama3.3-70b-fp8",
    ),
]


@pytest.mark.parametrize("name, hardware, extra, layout, precision, kv, spec", RECIPES)
def test_a_published_recipe_validates(runner, name, hardware, extra, layout, precision, kv, spec):
    out = _ok(
        _run(runner, SERVE / name, "--isl", "1000", "--osl", "1000", "--hardware", hardware, *extra)
    )
    assert out["valid"] is True, out["errors"]
    assert {k: out["layout"][k] for k in layout} == layout
    assert (out["job"]["precision"], out["job"]["kv_cache_dtype"]) == (precision, kv)
    assert out["warnings"] == []
    assert any(
        c.startswith(f"weights {precision}: read from the checkpoint id") for c in out["caveats"]
    )
    if spec is not None:
        got = out["job"].get("speculative") or {}
        assert (got.get("method"), got.get("num_tokens")) == spec


# ------------------------------------------------- training exports carry their hardware


@pytest.mark.parametrize(
    "fmt, ext",
    [("megatron", ".sh"), ("nemo", ".yaml"), ("deepspeed", ".json"), ("torchtitan", ".toml")],
)
def test_a_training_export_reads_back_the_hardware_it_was_planned_for(tmp_path, fmt, ext):
    from planner.config import config_from_data
    from planner.frameworks import load_any
    from planner.frameworks.export import export

    job, layout = config_from_data(
        dict(
            model="llama3-8b",
            hardware="b200",
            num_gpus=16,
            training=dict(seq_length=4096, global_batch_size=64),
            parallel=dict(tp=2, micro_batch_size=1),
        )
    )
    text = export(job, layout, fmt)
    assert "planner: hardware=b200 num_gpus=16" in text
    path = tmp_path / f"plan{ext}"
    path.write_text(text)
    model = "llama3-8b" if fmt in ("nemo", "deepspeed") else None
    back = load_any(path, model=model)
    assert (back.job.hardware.name, back.job.num_gpus) == ("b200", 16)
    # an explicit --hardware still wins
    assert load_any(path, model=model, hardware="h100-sxm").job.hardware.name == "h100-sxm"


def test_a_header_naming_an_unknown_profile_says_to_give_hardware(tmp_path):
    from planner.errors import SpecError
    from planner.frameworks import load_any

    path = tmp_path / "train.sh"
    path.write_text(
        "# planner: hardware=my-gpu num_gpus=8\n"
        "torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
        "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
        "--global-batch-size 32\n"
    )
    with pytest.raises(SpecError) as exc:
        load_any(path, model="llama3-8b")
    assert exc.value.field == "--hardware" and "'my-gpu'" in exc.value.message


def test_a_trtllm_option_planner_does_not_apply_is_named(runner, tmp_path):
    # moe_config (the MoE backend) and kv_cache_config.free_gpu_memory_fraction change memory
    # or time; planner reads neither from the options file, so the verdict says so by name
    options = OPTIONS.replace(
        "kv_cache_config:\n  dtype: fp8\n",
        "kv_cache_config:\n  dtype: fp8\n  free_gpu_memory_fraction: 0.8\n",
    )
    text = (
        f"FILE=/tmp/extra.yml\ncat > $FILE <<'EOF'\n{options}moe_config:\n"
        "  backend: DEEPGEMM\nEOF\n"
        "trtllm-serve deepseek-ai/DeepSeek-R1-0528 --tp_size 8 --ep_size 8 "
        "--extra_llm_api_options $FILE\n"
    )
    out = _ok(
        _run(
            runner, _script(tmp_path, text), *WORK, "--hardware", "h200", "--acceptance-rate", "0.7"
        )
    )
    [w] = [w for w in out["warnings"] if w["rule"] == "trtllm-extra-option-not-modelled"]
    assert "kv_cache_config.free_gpu_memory_fraction, moe_config" in w["message"]
