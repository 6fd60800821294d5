"""What a served checkpoint is: the preset its Hugging Face id names, and the precision its
weights ship in (read from the id, or from a config.json's `quantization_config`).

A launch command names a checkpoint, not a precision: `vllm serve deepseek-ai/DeepSeek-R1-0528`
loads FP8 weights because the checkpoint is FP8 (DeepSeek-V3/R1 ship FP8: their config.json has
`quantization_config: {quant_method: fp8, fmt: e4m3, weight_block_size: [128, 128]}`), and
`nvidia/Llama-3.3-70B-Instruct-FP8` / `nvidia/DeepSeek-R1-FP4` are NVIDIA ModelOpt's FP8 and
NVFP4 exports. Read here:

- the id: a `-FP8` (`-FP8-dynamic`) suffix is fp8, `-FP4` / `-NVFP4` / `-MXFP4` fp4; the
  DeepSeek-V3/R1 checkpoints of deepseek-ai are fp8 (their published config.json);
- a config.json's `quantization_config` (and ModelOpt's `hf_quant_config.json` beside it):
  quant_method fp8 / fbgemm_fp8 -> fp8; modelopt with quant_algo FP8 -> fp8, NVFP4 -> fp4;
  mxfp4 -> fp4; compressed-tensors with float weights of 8 / 4 bits -> fp8 / fp4. Any other
  method (awq, gptq, bitsandbytes: integer weights) is named as not modelled.

The ids also name the preset: DeepSeek-V3/R1 (and their -0528/-0324/-Base revisions, V3.1)
are the deepseek-v3 architecture with the 1 MTP layer their config.json publishes
(num_nextn_predict_layers 1); Llama 3.1 / 3.3 70B, 8B and 405B are the Llama 3 presets'
architectures (same config.json shapes; only the context length differs, which serving does
not read from the preset); Qwen3-30B-A3B, Qwen3-32B and Qwen3-235B-A22B (with their -2507
instruct / thinking revisions) are the Qwen3 presets. An explicit engine flag (--quantization, --kv-cache-dtype) wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.io import load_json, read_text, safe_is_dir, safe_is_file

__all__ = ["Checkpoint", "from_id", "from_config", "config_beside"]


@dataclass(frozen=True)
class Checkpoint:
    """What the id or config says: the preset (None: not one planner knows), model fields the
    published checkpoint has beyond the preset, the precision (None: not said) and where it
    came from; `unknown`: a quantization method planner does not model."""

    preset: str | None = None
    model_update: tuple[tuple[str, Any], ...] = ()
    precision: str | None = None
    where: str = ""
    unknown: str | None = None
    model_id: str = ""


_QUANT_SUFFIX = re.compile(r"[-_](?P<q>fp8(?:[-_]dynamic|[-_]block)?|nvfp4|mxfp4|fp4)$", re.I)

_DEEPSEEK = "deepseek-ai/DeepSeek-V3 and -R1 config.json: quantization_config quant_method fp8"
# (repo name without its quantization suffix, preset, fields beyond the preset, native precision)
_FAMILIES: tuple[tuple[re.Pattern[str], str, tuple[tuple[str, Any], ...], str | None], ...] = (
    (
        re.compile(r"deepseek-(?:v3(?:\.1)?|r1)(?:-base|-\d{4}|-terminus)?", re.I),
        "deepseek-v3",
        (("mtp_num_layers", 1),),
        "fp8",
    ),
    (re.compile(r"(?:meta-)?llama-3(?:\.[13])?-70b(?:-instruct)?", re.I), "llama3-70b", (), None),
    (re.compile(r"(?:meta-)?llama-3(?:\.1)?-8b(?:-instruct)?", re.I), "llama3-8b", (), None),
    (re.compile(r"(?:meta-)?llama-3\.1-405b(?:-instruct)?", re.I), "llama3-405b", (), None),
    # Qwen3: the 2507 instruct / thinking revisions keep the shapes of their config.json
    (
        re.compile(r"qwen3-30b-a3b(?:-base|-(?:instruct|thinking)-2507)?", re.I),
        "qwen3-30b-a3b",
        (),
        None,
    ),
    (re.compile(r"qwen3-32b", re.I), "qwen3-32b", (), None),
    (
        re.compile(r"qwen3-235b-a22b(?:-(?:instruct|thinking)-2507)?", re.I),
        "qwen3-235b-a22b",
        (),
        None,
    ),
)


def from_id(model_id: str) -> Checkpoint | None:
    """The checkpoint a Hugging Face id (org/name) names, if planner knows it."""
    name = model_id.rstrip("/").rsplit("/", 1)[-1]
    org = model_id.rsplit("/", 1)[0].lower() if "/" in model_id else ""
    m = _QUANT_SUFFIX.search(name)
    precision = where = None
    if m:
        q = m.group("q").lower()
        precision = "fp8" if q.startswith("fp8") else "fp4"
        where = f"the checkpoint id {model_id} (its -{m.group('q')} suffix)"
        name = name[: m.start()]
    for rx, preset, update, native in _FAMILIES:
        if rx.fullmatch(name):
            if precision is None and native is not None and org in ("deepseek-ai", ""):
                precision, where = native, f"the checkpoint id {model_id} ({_DEEPSEEK})"
            return Checkpoint(preset, update, precision, where or "", model_id=model_id)
    if precision is not None:
        return Checkpoint(None, (), precision, where or "", model_id=model_id)
    return None


def _modelopt(algo: Any) -> str | None:
    a = str(algo or "").upper()
    if a.startswith("FP8"):
        return "fp8"
    if a in ("NVFP4", "FP4", "MXFP4") or a.startswith("NVFP4"):
        return "fp4"
    return None


def from_config(cfg: dict, source: str, quant: dict | None = None) -> Checkpoint | None:
    """The precision a config.json's quantization_config says (`quant`: ModelOpt's
    hf_quant_config.json beside it); None when the weights are not quantized."""
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict):
        qc = None
    if qc is None and isinstance(quant, dict) and isinstance(quant.get("quantization"), dict):
        algo = quant["quantization"].get("quant_algo")
        prec = _modelopt(algo)
        if prec is None:
            return Checkpoint(unknown=f"ModelOpt quant_algo {algo}")
        return Checkpoint(precision=prec, where=f"{source}: hf_quant_config.json quant_algo {algo}")
    if qc is None:
        return None
    method = str(qc.get("quant_method", "")).lower()
    prec = None
    said = f"quant_method {method}"
    if method in ("fp8", "fbgemm_fp8"):
        prec = "fp8"
    elif method == "mxfp4":
        prec = "fp4"
    elif method == "modelopt":
        prec = _modelopt(qc.get("quant_algo"))
        said += f", quant_algo {qc.get('quant_algo')}"
    elif method == "compressed-tensors":
        groups = qc.get("config_groups")
        weights = (
            [g.get("weights") for g in groups.values() if isinstance(g, dict)]
            if isinstance(groups, dict)
            else []
        )
        kinds = {(w.get("type"), w.get("num_bits")) for w in weights if isinstance(w, dict)}
        if kinds == {("float", 8)}:
            prec = "fp8"
        elif kinds == {("float", 4)}:
            prec = "fp4"
        said += f", weights {', '.join(f'{t} {b}-bit' for t, b in sorted(kinds, key=str))}"
    if prec is None:
        return Checkpoint(unknown=f"quantization_config {said}")
    return Checkpoint(precision=prec, where=f"{source}: quantization_config {said}")


def config_beside(ref: str, base: Path | None) -> tuple[dict, dict | None, str] | None:
    """(config.json, hf_quant_config.json or None, its path) of a --model given as a
    config.json or a checkpoint folder; None for a preset or a model YAML."""
    path = Path(ref) if base is None or Path(ref).is_absolute() else base / ref
    if safe_is_dir(path):
        path = path / "config.json"
    if path.suffix.lower() != ".json" or not safe_is_file(path):
        return None
    cfg = load_json(read_text(path, what="model file"), what="model file", source=str(path))
    if not isinstance(cfg, dict):
        return None
    quant = None
    beside = path.parent / "hf_quant_config.json"
    if safe_is_file(beside):
        quant = load_json(
            read_text(beside, what="ModelOpt quantization file"),
            what="ModelOpt quantization file",
            source=str(beside),
        )
    return cfg, quant, str(path)
