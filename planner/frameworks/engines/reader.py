"""Read a serving deployment back for `planner validate`: a serving YAML (a `serving:`
section), or the launch commands of vLLM (`vllm serve`), SGLang
(`python -m sglang.launch_server`) and TensorRT-LLM (`trtllm-serve`), as planner's exports
write them or as people do.

The script is read, not run, by the same bash reader as training scripts
(planner.readers.bash): variables, `${VAR:-default}`, arrays, `\\` continuations, functions,
loops and here-documents resolve as bash would, `--set NAME=VALUE` gives the environment, and
a value the script does not set is named where it is needed. Each command that runs the
engine's server (`echo`/`printf` lines are not launches) is one instance; a TRT-LLM extra
options file is read from the here-document (or echo/printf) the script writes it with.

A command line says the layout and the engine's knobs but not the request shape: planner's
exports carry it in a `# planner serve: model=... isl=... osl=...` line, and validate's
--isl/--osl/--concurrency/--acceptance-rate give (or override) it; a command with neither is
one line naming the options. The checkpoint's precision comes from its id or config.json
(engines/checkpoint.py) unless a flag says it; vLLM flags read in either spelling (`_` or `-`)
and from `--config FILE.yaml`. Comments `# N prefill worker(s) ...`
and `# N decode worker(s) ...` (planner's exports) or SGLang's --disaggregation-mode say
which instances are prefill and decode workers. Flags planner does not model are reported by
name as warnings, never dropped silently. `--model/--hardware/--gpus/--nodes` fill or replace
what the file says.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import SpecError, Violation
from planner.frameworks.common import shell_notes
from planner.io import load_yaml, read_text, safe_is_file
from planner.readers import bash as shell

__all__ = [
    "SERVE_FORMATS",
    "ServeImported",
    "looks_like_serve_yaml",
    "command_engine",
    "load_serve_yaml",
    "load_serve_command",
]

SERVE_FORMATS = ("serve", "vllm", "sglang", "trtllm")


@dataclass(frozen=True)
class ServeImported:
    job: Any
    layout: Any
    violations: list[Violation] = field(default_factory=list)
    format: str = "serve"
    source: str = ""
    notes: list[str] = field(default_factory=list)  # where values came from (the verdict's)


def looks_like_serve_yaml(data) -> bool:
    return isinstance(data, dict) and "serving" in data


def command_engine(text: str) -> str | None:
    """vllm | sglang | trtllm when the text launches that engine's server."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    if re.search(r"(^|[\s/])vllm\s+serve\b|vllm\.entrypoints\.openai\.api_server", body, re.M):
        return "vllm"
    if re.search(r"sglang\.launch_server", body):
        return "sglang"
    if re.search(r"(^|[\s/])trtllm-serve\b", body, re.M):
        return "trtllm"
    return None


# ------------------------------------------------------------------------------ YAML


def load_serve_yaml(path: Path, data: dict, ov) -> ServeImported:
    from planner.frameworks.common import apply_overrides
    from planner.serve.specs import serve_config_from_data

    if "num_gpus" not in data and ov.gpus is None and ov.nodes is None:
        raise SpecError(
            f"config {str(path)!r} has no num_gpus; add num_gpus: N or give --gpus N or --nodes N",
            field="num_gpus",
        )
    data = apply_overrides(data, ov, base=path.parent, source=str(path))
    if ov.workload and isinstance(data.get("serving"), dict):  # --isl/--osl/... replace
        names = {"--isl": "input_length", "--osl": "output_length", "--concurrency": "concurrency"}
        serving = dict(data["serving"])
        for flag, value in ov.workload:
            if flag == "--acceptance-rate":
                if not isinstance(serving.get("speculative"), dict):
                    raise SpecError(
                        f"{path}: --acceptance-rate is for speculative decoding; "
                        "the config has no serving.speculative: remove it",
                        field=flag,
                        value=value,
                    )
                serving["speculative"] = {**serving["speculative"], "acceptance_rate": value}
            else:
                serving[names[flag]] = value
        data = {**data, "serving": serving}
    job, layout = serve_config_from_data(data, base=path.parent, source=str(path))
    return ServeImported(job, layout, [], "serve", str(path))


# -------------------------------------------------------------------------- commands

_HEADER = re.compile(r"^#\s*planner serve:\s*(.*)$", re.M)
_ROLE = re.compile(r"^#\s*\d+\s+(prefill|decode) worker", re.M)

# flag -> (meaning, takes a value); aliases map to the same meaning
_FLAGS = {
    "vllm": {
        "--tensor-parallel-size": ("tp", True),
        "-tp": ("tp", True),
        "--pipeline-parallel-size": ("pp", True),
        "-pp": ("pp", True),
        "--data-parallel-size": ("dp", True),
        "-dp": ("dp", True),
        "--enable-expert-parallel": ("ep_all", False),
        "--max-num-seqs": ("max_batch_size", True),
        "--max-model-len": ("max_len", True),
        "--max-num-batched-tokens": ("max_num_tokens", True),
        "--enable-chunked-prefill": ("chunked_on", False),
        "--no-enable-chunked-prefill": ("chunked_off", False),
        "--kv-cache-dtype": ("kv", True),
        "--gpu-memory-utilization": ("memory_fraction", True),
        "--quantization": ("quant", True),
        "-q": ("quant", True),
        "--speculative-config": ("spec_json", True),
        "--kv-transfer-config": ("kv_transfer", True),
        "--port": ("port", True),
        "--host": ("host", True),
        "--model": ("model", True),
        "--distributed-executor-backend": ("backend", True),
        "--decode-context-parallel-size": ("dcp", True),
        "-dcp": ("dcp", True),
    },
    "sglang": {
        "--model-path": ("model", True),
        "--model": ("model", True),
        "--tensor-parallel-size": ("tp", True),
        "--tp-size": ("tp", True),
        "--tp": ("tp", True),
        "--pipeline-parallel-size": ("pp", True),
        "--pp-size": ("pp", True),
        "--data-parallel-size": ("dp", True),
        "--dp-size": ("dp", True),
        "--dp": ("dp", True),
        "--expert-parallel-size": ("ep", True),
        "--ep-size": ("ep", True),
        "--ep": ("ep", True),
        "--enable-dp-attention": ("adp", False),
        "--mem-fraction-static": ("memory_fraction", True),
        "--max-running-requests": ("max_batch_size", True),
        "--context-length": ("max_len", True),
        "--chunked-prefill-size": ("chunk", True),
        "--max-prefill-tokens": ("max_prefill", True),
        "--kv-cache-dtype": ("kv", True),
        "--quantization": ("quant", True),
        "--speculative-algorithm": ("spec_alg", True),
        "--speculative-num-steps": ("spec_k", True),
        "--speculative-eagle-topk": ("spec_topk", True),
        "--speculative-num-draft-tokens": ("spec_draft_tokens", True),
        "--speculative-draft-model-path": ("spec_draft", True),
        "--disaggregation-mode": ("role", True),
        "--port": ("port", True),
        "--host": ("host", True),
    },
    "trtllm": {
        "--tp_size": ("tp", True),
        "--tensor_parallel_size": ("tp", True),
        "--pp_size": ("pp", True),
        "--pipeline_parallel_size": ("pp", True),
        "--cp_size": ("cp", True),
        "--context_parallel_size": ("cp", True),
        "--ep_size": ("ep", True),
        "--moe_expert_parallel_size": ("ep", True),
        "--max_batch_size": ("max_batch_size", True),
        "--max_num_tokens": ("max_num_tokens", True),
        "--max_seq_len": ("max_len", True),
        "--kv_cache_free_gpu_memory_fraction": ("memory_fraction", True),
        "--free_gpu_memory_fraction": ("memory_fraction", True),
        "--extra_llm_api_options": ("extra", True),
        "--config": ("extra", True),
        "--backend": ("backend", True),
        "--port": ("port", True),
        "--host": ("host", True),
        "--server_role": ("role", True),
    },
}
_LAUNCH = {
    "vllm": ("vllm serve", "vllm.entrypoints.openai.api_server"),
    "sglang": ("sglang.launch_server",),
    "trtllm": ("trtllm-serve",),
}
_PRINTERS = frozenset({"echo", "printf", "print", "cat", "tee", "logger", ":", "log", "info"})
# values planner does not read (or reads with its own message): unresolved, they do no harm
_NOT_READ = frozenset(
    {"port", "host", "backend", "model", "max_len", "kv_transfer", "extra", "dcp"}
)
_FIX = "set it in the script or give --set NAME=VALUE"
# flags that change neither memory nor time (names, logging, trust, the tokenizer's source):
# read past without a warning
_NO_EFFECT = {
    "vllm": frozenset(
        {
            "--trust-remote-code",
            "--served-model-name",
            "--disable-log-requests",
            "--disable-log-stats",
            "--api-key",
            "--uvicorn-log-level",
            "--revision",
            "--tokenizer",
            "--download-dir",
            "--seed",
        }
    ),
    "sglang": frozenset(
        {
            "--trust-remote-code",
            "--served-model-name",
            "--log-level",
            "--api-key",
            "--revision",
            "--tokenizer-path",
            "--random-seed",
            "--log-requests",
        }
    ),
    "trtllm": frozenset({"--trust_remote_code", "--log_level", "--tokenizer"}),
}


@dataclass
class _Launch:
    """One launch command: the role the comments above it give, the values of the flags planner
    reads (meaning -> value), its positional words, the flags planner does not model, and the
    words the script leaves unresolved (an unset `$EXTRA_ARGS`)."""

    line: int
    role: str | None
    vals: dict[str, Any]
    positional: list[str]
    unknown: list[str]
    unresolved: list[str]


def _header(text: str) -> dict:
    m = _HEADER.search(text)
    if not m:
        return {}
    out = {}
    for item in m.group(1).split():
        if "=" in item:
            k, v = item.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _launcher_end(words: list[str], engine: str) -> int | None:
    """Where the server's arguments start, if the words run `engine`'s server."""
    for i, word in enumerate(words):
        for launcher in _LAUNCH[engine]:
            if launcher == "vllm serve":
                if posixpath.basename(word) == "vllm" and words[i + 1 : i + 2] == ["serve"]:
                    return i + 2
            elif word.endswith(launcher):
                return i + 1
    return None


def _commands(
    script: shell.Script, text: str, engine: str
) -> list[tuple[int, str | None, list[str]]]:
    """(line, role from the comments above, the words after the launcher) of each launch
    command the script runs. A command run through `bash -c` or a fed here-document has no
    line in the file, so no role from comments (its flags may still say one)."""
    marks = [
        (k, m.group(1))
        for k, line in enumerate(text.splitlines(), 1)
        if (m := _ROLE.match(line.strip()))
    ]
    out = []
    for cmd in script.commands:
        words = list(cmd.prefix) + list(cmd.words)
        if not words or posixpath.basename(words[0]) in _PRINTERS:
            continue
        end = _launcher_end(words, engine)
        if end is None:
            continue
        role = None if cmd.prefix else next((r for k, r in reversed(marks) if k < cmd.line), None)
        out.append((cmd.line, role, words[end:]))
    return out


def _vllm_config(
    tokens: list[str], script: shell.Script, source: str, notes: list[Violation]
) -> list[str]:
    """vLLM's `--config FILE.yaml`: the file's keys as flags, before the command line's (which
    override them, as vLLM's parser does). The file is the one the script writes, else the
    one beside the script (read through planner.io); one it cannot read is a warning."""
    out, cli, i = [], [], 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--config" or tok.startswith("--config="):
            name = (
                tok.partition("=")[2]
                if "=" in tok
                else (tokens[i + 1] if i + 1 < len(tokens) else None)
            )
            i += 1 if "=" in tok else 2
            if name is None:
                raise SpecError(
                    f"{source}: --config needs a value (a YAML file of flags)", field="--config"
                )
            out += _config_tokens(name, script, source, notes)
            continue
        cli.append(tok)
        i += 1
    return out + cli


def _config_tokens(
    name: str, script: shell.Script, source: str, notes: list[Violation]
) -> list[str]:
    shown = shell.display(name)
    written, body = script.file(name)
    if body is None and not written and not shell.unresolved_names(name):
        path = Path(name) if Path(name).is_absolute() else Path(source).parent / name
        if safe_is_file(path):
            body = read_text(path, what="vLLM --config file")
    if body is None:
        notes.append(
            Violation(
                "vllm-config-not-read",
                f"--config {shown}: not beside the script nor written by it; "
                "its flags are not modelled (put the file beside the script)",
                "warning",
            )
        )
        return []
    data = load_yaml(body, what="vLLM --config file", source=f"{source}: {shown}")
    if data is None:
        return []
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: --config {shown} is not a YAML mapping of flags to values "
            "(tensor-parallel-size: 8, ...); fix the file",
            field="--config",
            value=shown,
        )
    out = []
    for key, value in data.items():
        flag = "--" + str(key).lstrip("-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def _parse_flags(
    line: int, role: str | None, tokens: list[str], engine: str, source: str
) -> _Launch:
    known = _FLAGS[engine]
    out = _Launch(line, role, {}, [], [], [])
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if shell.only_unresolved(tok):
            out.unresolved.append(shell.display(tok))
            i += 1
            continue
        if not tok.startswith("-"):
            out.positional.append(tok)
            i += 1
            continue
        flag, _, inline = tok.partition("=")
        if engine == "vllm" and flag.startswith("--"):
            flag = "--" + flag[2:].replace("_", "-")  # vLLM's parser: _ and - are one flag
        if flag in known:
            key, takes = known[flag]
            if takes:
                value = inline if inline else (tokens[i + 1] if i + 1 < len(tokens) else None)
                if value is None:
                    raise SpecError(f"{source}: {flag} needs a value", field=flag)
                names = shell.unresolved_names(value)
                if names and key not in _NOT_READ:
                    raise SpecError(
                        f"{source}: {flag} {shell.display(value)} {shell.why(names)}; {_FIX}",
                        field=flag,
                        value=shell.display(value),
                    )
                out.vals[key] = value
                i += 1 if inline else 2
            else:
                out.vals[key] = True
                i += 1
            continue
        if flag not in _NO_EFFECT[engine]:
            out.unknown.append(flag)
        i += 2 if (not inline and i + 1 < len(tokens) and not tokens[i + 1].startswith("-")) else 1
    return out


def _int(vals: dict, key: str, flag: str, source: str, default: int = 1) -> int:
    v = vals.get(key)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise SpecError(
            f"{source}: {flag} = {v!r}: must be a whole number", field=flag, value=v
        ) from None
    if n < 1:
        raise SpecError(f"{source}: {flag} = {n}: must be at least 1", field=flag, value=n)
    return n


def _extra(script: shell.Script, name: str, source: str) -> tuple[dict, str | None]:
    """A TRT-LLM extra options file the script writes (a here-document, echo or printf), and
    why planner could not read it (None: read)."""
    written, body = script.file(name)
    if body is None:
        return {}, (
            "not written in this script (planner reads the file only from what the "
            "script writes: a here-document, echo or printf)"
            if not written
            else "written by a command planner does not follow"
        )
    names = shell.unresolved_names(body)
    if names:
        raise SpecError(
            f"{source}: the extra options file {name} the script writes {shell.why(names)}; {_FIX}",
            field="--extra_llm_api_options",
            value=name,
        )
    data = load_yaml(
        body, what="TRT-LLM extra options file", source=f"{source}: {name}", lenient=True
    )
    if not isinstance(data, dict):
        return {}, "not a YAML mapping planner can read"
    return data, None


def _instance(engine: str, vals: dict, script: shell.Script, model, source: str):
    from planner.serve.layout import Instance

    tp = _int(vals, "tp", "tp", source)
    pp = _int(vals, "pp", "pp", source)
    dp = _int(vals, "dp", "dp", source)
    if engine == "vllm":
        adp = dp > 1 and model.is_moe
        ep = tp * (dp if adp else 1) if vals.get("ep_all") else 1
        return Instance(tp=tp, pp=pp, ep=ep, dp=dp, dp_attention=adp)
    if engine == "sglang":
        adp = bool(vals.get("adp"))
        ep = _int(vals, "ep", "--expert-parallel-size", source)
        if adp:
            if tp % dp:
                raise SpecError(
                    f"{source}: --enable-dp-attention needs --tp ({tp}) divisible by --dp ({dp})",
                    field="--enable-dp-attention",
                )
            return Instance(tp=tp // dp, pp=pp, ep=ep, dp=dp, dp_attention=True)
        return Instance(tp=tp, pp=pp, ep=ep, dp=dp, dp_attention=False)
    extra = _extra(script, vals["extra"], source)[0] if vals.get("extra") else {}
    ep = _int(vals, "ep", "--ep_size", source)
    if "cp" not in vals and extra.get("context_parallel_size") is not None:
        vals = {**vals, "cp": str(extra["context_parallel_size"])}
    cp = _int(vals, "cp", "--cp_size", source)
    if extra.get("enable_attention_dp"):
        return Instance(tp=1, pp=pp, ep=ep, dp=tp, dp_attention=True, cp=cp)
    return Instance(tp=tp, pp=pp, ep=ep, dp=1, dp_attention=False, cp=cp)


def _serving(
    engine: str,
    vals: dict,
    script: shell.Script,
    head: dict,
    work: dict,
    checkpoint,
    notes: list[str],
    source: str,
) -> dict:
    """The `serving:` mapping of the decode side's flags; `notes` gets where the precision
    came from when the checkpoint (not a flag) says it."""
    sv: dict[str, Any] = {}
    quant = str(vals.get("quant", "")).lower()
    if quant in ("fp8", "modelopt", "modelopt_fp8", "fbgemm_fp8", "w8a8_fp8"):
        sv["precision"] = "fp8"
    elif quant in ("modelopt_fp4", "nvfp4", "mxfp4", "petit_nvfp4"):
        sv["precision"] = "fp4"
    elif "precision" in head:
        sv["precision"] = head["precision"]
    elif checkpoint is not None and checkpoint.precision is not None:
        sv["precision"] = checkpoint.precision
        notes.append(f"weights {checkpoint.precision}: read from {checkpoint.where}")
    if (
        "precision" in sv
        and quant
        and checkpoint is not None
        and checkpoint.precision
        and checkpoint.precision != sv["precision"]
    ):
        notes.append(
            f"weights {sv['precision']}: the command's quantization flag ({quant}) wins "
            f"over the checkpoint's {checkpoint.precision} ({checkpoint.where})"
        )
    extra = (
        _extra(script, vals["extra"], source)[0] if engine == "trtllm" and vals.get("extra") else {}
    )
    if engine == "trtllm":  # kv_cache_config.dtype auto: the checkpoint's KV quantization
        kv = str((extra.get("kv_cache_config") or {}).get("dtype", "")).lower()
    else:  # vLLM and SGLang: auto (the default) is the model's dtype
        kv = str(vals.get("kv", "auto")).lower()
    if kv.startswith("fp8"):
        sv["kv_cache_dtype"] = "fp8"
    elif kv in ("bf16", "bfloat16") or (kv == "auto" and engine != "trtllm"):
        sv["kv_cache_dtype"] = "bf16"
    elif "kv_cache_dtype" in head:
        sv["kv_cache_dtype"] = head["kv_cache_dtype"]
    keys = [
        ("memory_fraction", "memory_fraction"),
        ("max_batch_size", "max_batch_size"),
        ("max_num_tokens", "max_num_tokens"),
    ]
    chunked = _chunked_prefill(engine, vals, extra, source)
    if chunked is not None:
        sv["chunked_prefill"] = chunked
    if engine == "sglang":
        keys += [("chunk", "chunk"), ("max_prefill", "max_prefill")]
    for key, name in keys:
        if key in vals:
            try:
                sv[name] = float(vals[key]) if key == "memory_fraction" else int(vals[key])
            except ValueError:
                shown = key.replace("_", "-")
                raise SpecError(
                    f"{source}: {shown} = {vals[key]!r}: must be a number",
                    field=shown,
                    value=vals[key],
                ) from None
    if engine == "sglang":
        sv.update(_sglang_budget(sv.pop("chunk", None), sv.pop("max_prefill", None), chunked))
    spec = _speculative(engine, vals, extra, head, work, source)
    if spec is not None:
        sv["speculative"] = spec
    return sv


SGLANG_MAX_PREFILL_TOKENS = 16384
"""SGLang's default --max-prefill-tokens (python/sglang/srt/server_args.py)."""


def _sglang_budget(chunk: int | None, max_prefill: int | None, chunked: bool | None) -> dict:
    """serving.max_num_tokens of an SGLang command: a prefill batch takes at most
    --chunked-prefill-size tokens and at most --max-prefill-tokens (its PrefillAdder counts
    both); with chunking off (-1) whole prompts up to --max-prefill-tokens (default 16,384).
    Empty when the command sets no chunk size (the engine's defaults, engines.engine_settings;
    a --max-prefill-tokens alone is named in an sglang-max-prefill-not-modelled warning)."""
    if chunked is False:
        return {"max_num_tokens": max_prefill or SGLANG_MAX_PREFILL_TOKENS}
    if chunk is None:  # the engine's chunk size stands (a lone --max-prefill-tokens: a warning)
        return {}
    return {"max_num_tokens": min(chunk, max_prefill) if max_prefill is not None else chunk}


def _chunked_prefill(engine: str, vals: dict, extra: dict, source: str) -> bool | None:
    """serving.chunked_prefill from the command: vLLM's --enable-chunked-prefill /
    --no-enable-chunked-prefill, SGLang's --chunked-prefill-size -1 (off), TensorRT-LLM's
    enable_chunked_prefill in its options file; None where the command does not say."""
    if engine == "vllm":
        if vals.get("chunked_off") is not None and vals.get("chunked_on") is not None:
            raise SpecError(
                f"{source}: both --enable-chunked-prefill and --no-enable-chunked-prefill; "
                "keep one",
                field="--enable-chunked-prefill",
            )
        if vals.get("chunked_off") is not None:
            return False
        return True if vals.get("chunked_on") is not None else None
    if engine == "sglang":
        return False if str(vals.get("chunk", "")).strip() == "-1" else None
    value = extra.get("enable_chunked_prefill")
    if value is None:
        return None
    if not isinstance(value, bool):
        raise SpecError(
            f"{source}: enable_chunked_prefill in the extra options is {value!r}: true or false",
            field="enable_chunked_prefill",
            value=str(value),
        )
    return value


def _speculative(engine: str, vals: dict, extra: dict, head: dict, work: dict, source: str):
    method = k = None
    if engine == "vllm" and "spec_json" in vals:
        try:
            cfg = json.loads(vals["spec_json"])
        except json.JSONDecodeError:
            raise SpecError(
                f"{source}: --speculative-config is not valid JSON",
                field="--speculative-config",
                value=vals["spec_json"],
            ) from None
        if not isinstance(cfg, dict):
            raise SpecError(
                f"{source}: --speculative-config is not a JSON object",
                field="--speculative-config",
                value=vals["spec_json"],
            )
        method = "mtp" if "mtp" in str(cfg.get("method", "")) else "draft"
        k = _whole(cfg.get("num_speculative_tokens", 1), "--speculative-config", source)
    elif engine == "sglang" and "spec_alg" in vals:
        method = "mtp" if vals["spec_alg"].upper() in ("NEXTN", "EAGLE") else "draft"
        k = _whole(vals.get("spec_k", 1), "--speculative-num-steps", source)
    elif engine == "trtllm" and extra.get("speculative_config"):
        cfg = extra["speculative_config"]
        if not isinstance(cfg, dict):
            raise SpecError(
                f"{source}: speculative_config in the extra options is not a mapping",
                field="speculative_config",
                value=str(cfg),
            )
        method = "mtp" if str(cfg.get("decoding_type", "")).upper() == "MTP" else "draft"
        k = _whole(
            cfg.get("num_nextn_predict_layers", cfg.get("max_draft_len", 1)),
            "speculative_config",
            source,
        )
    if method is None:
        return None
    if "acceptance_rate" not in work:
        raise SpecError(
            f"{source}: the command decodes speculatively but does not say the "
            "acceptance rate; give --acceptance-rate 0.7 (your measured rate) or add "
            "'acceptance_rate=0.7' to its '# planner serve:' line",
            field="acceptance_rate",
        )
    out = {"method": method, "num_tokens": k, "acceptance_rate": work["acceptance_rate"]}
    if method == "draft":
        out["draft_model"] = head.get("draft_model") or vals.get("spec_draft")
    return out


def _whole(value, flag: str, source: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SpecError(
            f"{source}: {flag}: the number of speculative tokens {value!r} must be a whole number",
            field=flag,
            value=str(value),
        ) from None


def _model(ov, head: dict, parsed: list[_Launch], script: shell.Script, source: str):
    """(model, checkpoint): --model, else the '# planner serve:' line's preset, else a
    Hugging Face id planner knows (on the command line or in $MODEL); the checkpoint
    (engines/checkpoint.py) says the precision its weights ship in, when the id or the
    config.json says one."""
    from planner.frameworks.engines import checkpoint as ckpt
    from planner.frameworks.engines.writer import HF_IDS
    from planner.presets import PRESETS, get_preset, model_from_hf_config, resolve_model

    named = [p for launch in parsed for p in launch.positional + [launch.vals.get("model", "")]]
    named.append(script.var("MODEL") or "")
    named = [n for n in named if isinstance(n, str) and n and not shell.unresolved_names(n)]
    by_id = next((c for n in named if (c := ckpt.from_id(n)) is not None), None)
    if ov.model is not None:
        model = resolve_model(ov.model)
        found = ckpt.config_beside(ov.model, None)
        if found is not None:
            cfg, quant, where = found
            return model, ckpt.from_config(cfg, where, quant) or by_id
        return model, by_id
    if head.get("model"):
        try:
            return resolve_model(head["model"]), by_id
        except SpecError:
            raise SpecError(
                f"{source}: the '# planner serve:' line names model "
                f"{head['model']!r}, which is not a preset; give --model NAME (a "
                "preset, model YAML or HF config.json)",
                field="model",
                value=head["model"],
            ) from None
    ids = {v: k for k, v in HF_IDS.items()}
    hit = next((ids[n] for n in named if n in ids), None)
    if hit is not None:
        model = get_preset(next(k for k in PRESETS if get_preset(k).name == hit))
    elif by_id is not None and by_id.preset is not None:
        model = get_preset(by_id.preset)
    elif (
        local := next(
            (f for n in named if (f := ckpt.config_beside(n, Path(source).parent)) is not None),
            None,
        )
    ) is not None:
        cfg, quant, where = local  # a checkpoint folder beside the script
        return model_from_hf_config(cfg, source=where), ckpt.from_config(cfg, where, quant)
    else:
        raise SpecError(
            f"{source}: the command does not name a model planner knows; give "
            "--model NAME (a preset, model YAML or HF config.json)",
            field="model",
        )
    if by_id is not None and by_id.model_update:
        model = model.model_copy(update=dict(by_id.model_update))
    return model, by_id


def _hf_ids() -> frozenset[str]:
    from planner.frameworks.engines.writer import HF_IDS

    return frozenset(HF_IDS.values())


def _warnings(
    engine: str, parsed: list[_Launch], script: shell.Script, source: str
) -> list[Violation]:
    """Flags planner does not model, words the script leaves unresolved, and TRT-LLM options
    files it cannot read, by name; then what reading the script left to say."""
    out = []
    unknown = sorted({f for launch in parsed for f in launch.unknown})
    if unknown:
        out.append(
            Violation(
                f"{engine}-flag-not-modelled",
                f"{', '.join(unknown)}: not modelled by planner (the estimate does "
                "not reflect them)",
                "warning",
            )
        )
    unresolved = list(dict.fromkeys(w for launch in parsed for w in launch.unresolved))
    if unresolved:
        out.append(
            Violation(
                f"{engine}-unresolved-argument",
                f"{', '.join(unresolved)} on the command line "
                f"{shell.why(unresolved)}: planner read the command without it "
                "(the flags it may hold are not modelled); give --set NAME=VALUE",
                "warning",
            )
        )
    dcp = sorted(
        {
            shell.display(launch.vals["dcp"])
            for launch in parsed
            if launch.vals.get("dcp") not in (None, "1")
        }
    )
    if engine == "vllm" and dcp:
        out.append(
            Violation(
                "vllm-dcp-not-modelled",
                f"--decode-context-parallel-size {dcp[0]}: vLLM's decode context parallel splits the "
                "KV cache tp duplicates inside the TP group; planner does not model it (the "
                "estimate keeps the duplicated KV cache: fewer requests than vLLM holds)",
                "warning",
            )
        )
    if engine == "sglang" and any(
        "max_prefill" in launch.vals and "chunk" not in launch.vals for launch in parsed
    ):
        out.append(
            Violation(
                "sglang-max-prefill-not-modelled",
                "--max-prefill-tokens without --chunked-prefill-size: planner keeps SGLang's "
                "default chunk size as the step budget (the smaller of the two bounds a "
                "prefill batch); give --chunked-prefill-size to pin it",
                "warning",
            )
        )
    if engine == "trtllm":
        for name in sorted({launch.vals["extra"] for launch in parsed if launch.vals.get("extra")}):
            shown = shell.display(name)
            why = (
                f"{shell.why(shell.unresolved_names(name))}, so planner cannot tell which file"
                if shell.unresolved_names(name)
                else _extra(script, name, source)[1]
            )
            if why is not None:
                out.append(
                    Violation(
                        "trtllm-extra-options-not-read",
                        f"--extra_llm_api_options {shown}: {why}; its settings (attention DP, KV "
                        "dtype, speculative decoding) are not modelled",
                        "warning",
                    )
                )
                continue
            ignored = _extra_not_modelled(_extra(script, name, source)[0])
            if ignored:
                out.append(
                    Violation(
                        "trtllm-extra-option-not-modelled",
                        f"--extra_llm_api_options {shown}: {', '.join(ignored)}: not modelled by "
                        "planner (the estimate does not reflect them)",
                        "warning",
                    )
                )
    return out + shell_notes(script, engine)


_EXTRA_READ = {
    "enable_attention_dp": (),
    "context_parallel_size": (),
    "speculative_config": None,
    "cache_transceiver_config": None,
    "cp_config": None,
    "cuda_graph_config": None,
    "print_iter_log": None,
    "enable_chunked_prefill": (),
    "kv_cache_config": ("dtype", "tokens_per_block"),
}
"""The TRT-LLM options-file keys planner reads or assumes (None: the whole section; a tuple:
those sub-keys of it): attention DP, CP, speculative decoding and the KV dtype are read; CUDA
graphs, the KV transfer of P/D workers and Helix's cp_config are what the cost model assumes
(docs/serving.md); iteration logging changes nothing."""


def _extra_not_modelled(extra: dict) -> list[str]:
    """The keys of a TRT-LLM options file that change memory or time and planner does not
    apply (everything `_EXTRA_READ` does not name), as `section.key`."""
    out = []
    for key, value in extra.items():
        if key not in _EXTRA_READ:
            out.append(str(key))
        elif isinstance(_EXTRA_READ[key], tuple) and isinstance(value, dict):
            out += [f"{key}.{sub}" for sub in value if sub not in _EXTRA_READ[key]]
    return out


def _roles(engine: str, parsed: list[_Launch], script: shell.Script, model, source: str) -> dict:
    """{role (None, prefill, decode): (instance, how many, the flags)}; one shape per role."""
    roles: dict = {}
    for launch in parsed:
        role = launch.vals.get("role", launch.role)
        role = {"context": "prefill", "generation": "decode"}.get(str(role).lower(), role)
        inst = _instance(engine, launch.vals, script, model, source)
        prev = roles.get(role)
        if prev is not None and prev[0] != inst:
            raise SpecError(
                f"{source}: the {role or 'aggregated'} instances differ ({prev[0].name} "
                f"and {inst.name}); planner validates one shape per kind of worker",
                field="parallel",
            )
        roles[role] = (inst, (prev[1] + 1) if prev else 1, launch.vals)
    return roles


def _parallel(roles: dict, source: str) -> tuple[dict, int]:
    """The `parallel:` mapping of the roles found, and the GPUs the commands shown use."""
    if set(roles) == {"prefill", "decode"}:
        (p, pn, _), (d, dn, _) = roles["prefill"], roles["decode"]
        return (
            {"prefill": {**p.as_dict(), "workers": pn}, "decode": {**d.as_dict(), "workers": dn}},
            p.gpus * pn + d.gpus * dn,
        )
    if None in roles and len(roles) == 1:
        inst, n, _ = roles[None]
        return {**inst.as_dict(), "replicas": n}, inst.gpus * n
    raise SpecError(
        f"{source}: found {', '.join(str(r) for r in roles)} instances; a "
        "disaggregated deployment needs both prefill and decode workers",
        field="parallel",
    )


def _whole_header(head: dict, key: str, source: str) -> int:
    try:
        return int(head[key])
    except ValueError:
        raise SpecError(
            f"{source}: the '# planner serve:' line's {key} = {head[key]!r}: must "
            "be a whole number",
            field=key,
            value=head[key],
        ) from None


_WORKLOAD = (
    ("isl", "--isl"),
    ("osl", "--osl"),
    ("concurrency", "--concurrency"),
    ("acceptance_rate", "--acceptance-rate"),
)


def _workload(head: dict, ov, source: str) -> dict:
    """isl, osl and (when given) concurrency and acceptance_rate: validate's options, else the
    '# planner serve:' line; a command with neither names the options to give."""
    given = dict(ov.workload)
    out: dict[str, Any] = {}
    for key, flag in _WORKLOAD:
        if flag in given:
            value, where, field_ = given[flag], flag, flag
        elif key in head:
            value, where, field_ = head[key], f"the '# planner serve:' line's {key}", key
        else:
            continue
        if key == "concurrency" and value == "max":
            out[key] = value
            continue
        want = {
            "concurrency": 'a whole number of requests or "max"',
            "acceptance_rate": "a number between 0 and 1",
        }.get(key, "a whole number of tokens, at least 1")
        try:
            n = float(value) if key == "acceptance_rate" else int(value)
        except ValueError:
            n = None
        if (
            n is None
            or (key == "acceptance_rate" and not 0 < n < 1)
            or (key != "acceptance_rate" and n < 1)
        ):
            raise SpecError(
                f"{source}: {where} = {value!r}: must be {want}", field=field_, value=value
            )
        out[key] = n
    missing = [flag for key, flag in _WORKLOAD[:2] if key not in out]
    if missing:
        raise SpecError(
            f"{source}: the command lines do not say the request lengths; give "
            f"{' and '.join(f + ' N' for f in missing)} (input and output tokens per "
            "request), or add a line '# planner serve: isl=2048 osl=512'",
            field=missing[0],
        )
    return out


def load_serve_command(path: Path, text: str, engine: str, ov) -> ServeImported:
    """A shell script or command file that launches `engine` (module docstring)."""
    from planner.config import resolve_hardware
    from planner.frameworks.common import DEFAULT_HARDWARE, resolve_world, script_reader
    from planner.serve.specs import serve_config_from_data

    source = str(path)
    head = _header(text)
    script = shell.run(text, env=ov.env, read_file=script_reader(source))
    cmds = _commands(script, text, engine)
    if not cmds:
        raise SpecError(
            f"{source}: no {engine} launch command found; see README, 'Inference'",
            field="file",
            value=source,
        )
    notes: list[Violation] = []
    if engine == "vllm":
        cmds = [
            (line, role, _vllm_config(tokens, script, source, notes)) for line, role, tokens in cmds
        ]
    parsed = [_parse_flags(line, role, tokens, engine, source) for line, role, tokens in cmds]
    model, checkpoint = _model(ov, head, parsed, script, source)
    work = _workload(head, ov, source)
    roles = _roles(engine, parsed, script, model, source)
    knobs = (roles.get("decode") or next(iter(roles.values())))[2]  # the decode side sets TPOT
    said: list[str] = []
    from_id = (
        checkpoint is not None
        and checkpoint.preset is not None
        and ov.model is None
        and not head.get("model")
    )
    if from_id and checkpoint.model_id not in _hf_ids():
        said.append(
            f"{checkpoint.model_id}: read as the {checkpoint.preset} preset (the same architecture)"
        )
    if from_id and checkpoint.model_update:
        said.append(
            f"{model.name} as its published checkpoint: "
            + ", ".join(f"{k} {v}" for k, v in checkpoint.model_update)
            + " (its config.json's "
            "num_nextn_predict_layers)"
        )
    serving = _serving(engine, knobs, script, head, work, checkpoint, said, source)
    if checkpoint is not None and checkpoint.unknown is not None and "precision" not in serving:
        notes.append(
            Violation(
                f"{engine}-checkpoint-quantization-not-modelled",
                f"the checkpoint's {checkpoint.unknown}: not modelled (planner "
                "reads fp8 and fp4 checkpoints); the estimate takes bf16 weights; "
                "give --quantization on the command line if it is one of those",
                "warning",
            )
        )
    if "speculative" not in serving and "--acceptance-rate" in dict(ov.workload):
        raise SpecError(
            f"{source}: --acceptance-rate is for speculative decoding; the command "
            "does not decode speculatively: remove it",
            field="--acceptance-rate",
            value=dict(ov.workload)["--acceptance-rate"],
        )
    serving.update(input_length=work["isl"], output_length=work["osl"], engine=engine)
    if "concurrency" in work:
        serving["concurrency"] = work["concurrency"]
    parallel, shown = _parallel(roles, source)
    hw = resolve_hardware(ov.hardware or head.get("hardware") or DEFAULT_HARDWARE)
    if ov.gpus is not None or ov.nodes is not None:
        num = resolve_world(ov, hardware=hw, source=source)
    else:
        num = _whole_header(head, "num_gpus", source) if "num_gpus" in head else shown
    if "replicas" in parallel and num != shown and num % (shown // parallel["replicas"]) == 0:
        parallel["replicas"] = num // (shown // parallel["replicas"])  # "the same on each node"
    data = {
        "model": model.model_dump(exclude_none=True),
        "hardware": hw.model_dump(),
        "num_gpus": num,
        "serving": serving,
        "parallel": parallel,
    }
    job, layout = serve_config_from_data(data, source=source)
    warnings = notes + _warnings(engine, parsed, script, source)
    return ServeImported(job, layout, warnings, engine, source, said)
