"""Megatron-LM: a `pretrain_gpt.py` launch script or argument file -> Job + Layout.

The script is read, not run (`shell.py`): variables set in it and `${VAR:-default}` resolve,
anything else is named where it is needed. The training command is the first one that runs a
`*.py` with Megatron flags (`torchrun ... pretrain_gpt.py ...`); a file without one is read as
an argument file (flags one per line or in any layout). The world size comes from the launcher
(`torchrun/python -m torch.distributed.run --nproc-per-node --nnodes`, `deepspeed --num_gpus
--num_nodes`) or the variables GPUS_PER_NODE/NPROC_PER_NODE and NNODES/NUM_NODES (or
WORLD_SIZE), else from --gpus/--nodes.

Megatron-LM's own checks, with its severities (../shared/reference/frameworks.md, rule numbers
there), come back as Violations; rules 1-6 and 8-11 are left to planner.rules, which the layout
goes through (same checks, same severity, so they are not reported twice).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from planner.errors import SpecError, Violation
from planner.importers import shell
from planner.importers.common import (Imported, Overrides, accounted_split, hardware_of,
                                      inline_model, make_job, resolve_world, unknown_key,
                                      vocab_from_tokenizer)
from planner.layout import Layout
from planner.presets import resolve_model
from planner.specs import ModelSpec

__all__ = ["load", "megatron_flags", "looks_like_megatron", "Flags", "Launch", "read_launch",
           "world_size", "model_from_flags"]


@lru_cache(maxsize=1)
def megatron_flags() -> frozenset[str]:
    """Every flag pretrain_gpt.py accepts (planner/data/megatron_flags.txt)."""
    text = resources.files("planner").joinpath("data/megatron_flags.txt").read_text("utf-8")
    return frozenset(line.strip() for line in text.splitlines()
                     if line.strip().startswith("--"))


# store_true / store_false flags: a word after one of these is a stray argument, not a value
_BOOLEAN = frozenset({
    "--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--fp16", "--swiglu",
    "--squared-relu", "--group-query-attention", "--tp-comm-overlap", "--overlap-grad-reduce",
    "--overlap-param-gather", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--use-megatron-fsdp", "--use-torch-fsdp2", "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split", "--recompute-activations", "--checkpoint-activations",
    "--multi-latent-attention", "--use-flash-attn", "--moe-grouped-gemm", "--use-mcore-models",
    "--mock-data", "--use-rotary-position-embeddings", "--add-qkv-bias", "--use-dist-ckpt",
    "--distribute-saved-activations", "--no-position-embedding",
})
# flags taking exactly one value (the ones planner reads): a second word after one is stray
_SINGLE = frozenset({
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--micro-batch-size", "--global-batch-size", "--num-layers", "--hidden-size",
    "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups", "--kv-channels",
    "--seq-length", "--max-position-embeddings", "--normalization", "--position-embedding-type",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--num-experts",
    "--moe-router-topk", "--moe-ffn-hidden-size", "--data-parallel-sharding-strategy",
    "--vocab-size", "--tokenizer-type", "--fp8-format",
})
_SHAPE_REQUIRED = ("--num-layers", "--hidden-size", "--num-attention-heads",
                   "--max-position-embeddings")
_LAUNCHERS_PER_NODE = ("--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num-gpus",
                       "--gpus-per-node")
_LAUNCHERS_NODES = ("--nnodes", "--num_nodes", "--num-nodes", "--nodes", "-N")
_VARS_PER_NODE = ("GPUS_PER_NODE", "NPROC_PER_NODE", "NUM_GPUS_PER_NODE", "GPUS_PER_NODE_NUM")
_VARS_NODES = ("NNODES", "NUM_NODES", "N_NODES", "NODES")


def looks_like_megatron(text: str) -> bool:
    """Content sniffing for detect_format: a pretrain_*.py command or core Megatron flags."""
    return bool(re.search(r"pretrain_\w+\.py|--tensor-model-parallel-size|"
                          r"--pipeline-model-parallel-size|--num-layers\b|--micro-batch-size",
                          text))


# ------------------------------------------------------------------------------ arguments

@dataclass
class Flags:
    """Parsed flags: the last occurrence's values (argparse keeps the last)."""

    source: str
    values: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def has(self, flag: str) -> bool:
        return flag in self.values

    def maybe(self, flag: str) -> str | None:
        """The value if given and resolved, else None (for values that only help)."""
        vals = self.values.get(flag) or [None]
        return None if vals[0] is None or shell.unresolved_names(vals[0]) else vals[0]

    def shown(self, flag: str) -> str:
        return " ".join(shell.display(v) for v in self.values.get(flag, []))

    def text(self, flag: str, default: str | None = None, *, fix: str) -> str | None:
        if flag not in self.values:
            return default
        vals = self.values[flag]
        if not vals:
            raise SpecError(f"{self.source}: {flag} needs a value; {fix}")
        value = vals[0]
        names = shell.unresolved_names(value)
        if names:
            raise SpecError(f"{self.source}: {flag} {shell.display(value)} {shell.why(names)}; "
                            f"{fix}")
        return value

    def int(self, flag: str, default: int | None = None, *,
            fix: str = "set it in the script") -> int | None:
        value = self.text(flag, fix=fix)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise SpecError(f"{self.source}: {flag} {value!r} is not an integer (Megatron's "
                            f"argparse rejects it); {fix}") from None

    def choice(self, flag: str, choices: tuple[str, ...], default: str | None = None) -> str | None:
        value = self.text(flag, fix="set it in the script")
        if value is not None and value not in choices:
            raise SpecError(f"{self.source}: {flag} {value!r} is not one of "
                            f"{', '.join(choices)} (Megatron's argparse rejects it); fix the value")
        return default if value is None else value


def _is_flag(token: str) -> bool:
    return token.startswith("--") or bool(re.match(r"-[A-Za-z]", token))


def _parse(tokens: list[str], source: str, *,
           check: bool = True) -> tuple[Flags, list[Violation]]:
    """Megatron's argparse over the tokens: every unknown or stray word reported by name
    (`check=False`: a dialect without a flag list, unknown flags are not judged)."""
    known = megatron_flags()
    flags = Flags(source)
    out: list[Violation] = []
    current: str | None = None
    for token in tokens:
        if _is_flag(token) and not shell.unresolved_names(token.split("=", 1)[0]):
            name, eq, value = token.partition("=")
            flags.values[name] = [value] if eq else []
            flags.counts[name] = flags.counts.get(name, 0) + 1
            current = None if name in _BOOLEAN else name
            if check and name not in known:
                out.append(unknown_key("megatron-unknown-flag", name, known, severity="error",
                                       consequence="Megatron-LM's argparse rejects it and "
                                                   "pretrain_gpt.py exits; remove or fix it"))
            continue
        if current is not None and not (current in _SINGLE and flags.values[current]):
            flags.values[current].append(token)
            continue
        names = shell.unresolved_names(token)
        if shell.only_unresolved(token):
            out.append(Violation("megatron-unresolved-variable",
                                 f"{shell.display(token)} on the command line {shell.why(names)}: "
                                 "the flags it adds (if any) were not checked", "warning"))
        else:
            out.append(Violation("megatron-unrecognized-argument",
                                 f"stray argument {shell.display(token)!r}: Megatron-LM's argparse "
                                 "rejects it (unrecognized arguments); remove it", "error"))
    for name, count in flags.counts.items():
        if count > 1:
            shown = flags.shown(name) or "(set)"
            out.append(Violation("megatron-repeated-flag",
                                 f"{name} is given {count} times; argparse keeps the last "
                                 f"({shown})", "warning"))
    return flags, out


# ------------------------------------------------------------------------------ the script

@dataclass
class Launch:
    launcher: list[str]
    args: list[str]
    script: shell.Script
    is_script: bool
    commands: int


def _find(text: str, source: str) -> Launch:
    script = shell.run(text)
    known = megatron_flags()
    runs = []
    for cmd in script.commands:
        words = list(cmd.words)
        for k, w in enumerate(words):
            if re.search(r"\.py$", shell.display(w)) and any(
                    x.split("=", 1)[0] in known for x in words[k + 1:]):
                runs.append((words[:k], words[k + 1:]))
                break
    if runs:
        return Launch(runs[0][0], runs[0][1], script, True, len(runs))
    args = [w for cmd in script.commands if cmd.words[0].startswith("-") for w in cmd.words]
    if not any(a.split("=", 1)[0] in known for a in args):
        raise SpecError(f"{source}: no Megatron-LM command (torchrun ... pretrain_gpt.py --flags) "
                        "and no Megatron flags found; give a launch script or an argument file")
    return Launch([], args, script, False, 0)


def _launcher_value(words: list[str], names: tuple[str, ...]) -> str | None:
    value = None
    for k, w in enumerate(words):
        name, eq, rest = w.partition("=")
        if name in names:
            value = rest if eq else (words[k + 1] if k + 1 < len(words) else None)
    return value


def _is_torchrun(words: list[str]) -> bool:
    return any(w.rsplit("/", 1)[-1] == "torchrun" or w in ("torch.distributed.run",
                                                          "torch.distributed.launch")
               for w in words)


def world_size(found: Launch, ov: Overrides, hardware, source: str,
           out: list[Violation]) -> int:
    if ov.gpus is not None and ov.nodes is None:
        return ov.gpus
    fix = "give --gpus N or --nodes N"

    def number(label: str, value: str | None) -> int | None:
        if value is None:
            return None
        names = shell.unresolved_names(value)
        if names:
            if ov.nodes is not None:      # --nodes replaces the file's count; per node falls
                return None               # back to the hardware profile
            raise SpecError(f"{source}: the world size needs {label}, which is "
                            f"{shell.display(value)} and {shell.why(names)}; {fix}")
        if label.startswith("GPUs") and value in ("gpu", "auto"):
            return hardware.gpus_per_node
        if ":" in value and label.startswith("nodes"):      # elastic min:max
            top = value.split(":")[-1]
            out.append(Violation("megatron-elastic-nnodes",
                                 f"--nnodes {value} is an elastic range; planner plans for the "
                                 f"maximum, {top} nodes", "warning"))
            value = top
        try:
            return int(value)
        except ValueError:
            raise SpecError(f"{source}: {label} {value!r} is not an integer; {fix}") from None

    words = found.launcher
    per_node = number("GPUs per node (--nproc-per-node)",
                      _launcher_value(words, _LAUNCHERS_PER_NODE))
    nodes = number("nodes (--nnodes)", _launcher_value(words, _LAUNCHERS_NODES))
    script = found.script
    if per_node is None:
        var = next((v for v in _VARS_PER_NODE if v in script.variables), None)
        per_node = number(f"GPUs per node ({var})", script.var(var)) if var else None
    if nodes is None:
        var = next((v for v in _VARS_NODES if v in script.variables), None)
        nodes = number(f"nodes ({var})", script.var(var)) if var else None
    world = None
    if per_node is None and "WORLD_SIZE" in script.variables:
        world = number("the world size (WORLD_SIZE)", script.var("WORLD_SIZE"))
    if _is_torchrun(words):                        # torchrun's defaults: 1 node, 1 process
        per_node = 1 if per_node is None and world is None else per_node
        nodes = 1 if nodes is None else nodes
    return resolve_world(ov, hardware=hardware, source=source, gpus_per_node=per_node,
                         nodes=nodes, world=world,
                         missing="no world size (no torchrun --nnodes/--nproc-per-node, no "
                                 "GPUS_PER_NODE/NNODES variables)")


# ------------------------------------------------------------------------------ the model

def _moe_dense_layers(flags: Flags, out: list[Violation]) -> int:
    """Leading dense layers from --moe-layer-freq (1, or a pattern like ([0]*3+[1]*58))."""
    text = flags.text("--moe-layer-freq", fix="set it in the script")
    if text is None or text.strip() == "1":
        return 0
    try:
        pattern = _list_expr(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError):
        pattern = None
    if pattern and all(x in (0, 1) for x in pattern):
        dense = len(pattern) - len(pattern[pattern.index(1):]) if 1 in pattern else len(pattern)
        if all(x == 1 for x in pattern[dense:]):
            return dense
    out.append(Violation("megatron-moe-layer-freq",
                         f"--moe-layer-freq {text}: planner models leading dense layers then MoE "
                         "layers only; it treats every layer as MoE here", "warning"))
    return 0


def _list_expr(node) -> list[int]:
    if isinstance(node, ast.List):
        return [n.value for n in node.elts if isinstance(n, ast.Constant)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _list_expr(node.left) + _list_expr(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _list_expr(node.left) * int(node.right.value)
    raise ValueError("not a list pattern")


def model_from_flags(flags: Flags, ov: Overrides, source: str, seq: int | None,
                     out: list[Violation], *, dialect: str = "Megatron-LM") -> ModelSpec:
    """The model the shape flags describe (--model replaces it). `dialect` "Megatron-DeepSpeed"
    reads its spellings: --num-key-value-heads, --topk, lower-case --normalization."""
    if ov.model is not None:
        return resolve_model(ov.model)
    fix = "set it in the script or give --model"
    present = [f for f in _SHAPE_REQUIRED[:3] if flags.has(f)]
    if not present:
        raise SpecError(f"{source}: no model shape (--num-layers, --hidden-size, "
                        "--num-attention-heads); give --model NAME (a preset such as llama3-70b, "
                        "a model YAML or a HF config.json)")
    for f in _SHAPE_REQUIRED[:3]:
        if not flags.has(f):
            raise SpecError(f"{source}: {f} is missing (Megatron-LM requires it); add it to the "
                            "script or give --model")
    tokenizer = (flags.maybe("--tokenizer-type"), flags.maybe("--tokenizer-model"),
                 flags.maybe("--vocab-file"))
    if tokenizer[0] == "NullTokenizer" and flags.has("--vocab-size"):
        vocab = flags.int("--vocab-size", fix=fix) + 1     # NullTokenizer adds an EOD token
    else:
        vocab = vocab_from_tokenizer(*tokenizer) or flags.int("--vocab-size", fix=fix)
    if vocab is None:
        shown = " ".join(flags.shown(f) for f in ("--tokenizer-type", "--tokenizer-model")
                         if flags.has(f)) or "none given"
        raise SpecError(f"{source}: the vocabulary size is unknown (tokenizer: {shown}); use "
                        "--tokenizer-type NullTokenizer --vocab-size V-1 in the script, or give "
                        "--model")
    act = "swiglu" if flags.has("--swiglu") else ("squared_relu" if flags.has("--squared-relu")
                                                  else "gelu")
    pos = flags.choice("--position-embedding-type", ("learned_absolute", "rope", "mrope",
                                                     "yarn", "relative", "none"),
                       "rope" if flags.has("--use-rotary-position-embeddings")
                       else "learned_absolute")
    if flags.has("--no-position-embedding"):
        pos = "none"
    experts = flags.int("--num-experts", fix=fix)
    deepspeed = dialect == "Megatron-DeepSpeed"
    fields = dict(
        num_layers=flags.int("--num-layers", fix=fix),
        hidden_size=flags.int("--hidden-size", fix=fix),
        ffn_hidden_size=flags.int("--ffn-hidden-size", fix=fix),
        num_attention_heads=flags.int("--num-attention-heads", fix=fix),
        num_kv_heads=(flags.int("--num-key-value-heads", fix=fix) if deepspeed else
                      flags.int("--num-query-groups", fix=fix)
                      if flags.has("--group-query-attention") else None),
        kv_channels=flags.int("--kv-channels", fix=fix), vocab_size=vocab, activation=act,
        tied_embeddings=not flags.has("--untie-embeddings-and-output-weights"),
        normalization=_norm(flags, deepspeed),
        add_bias_linear=not flags.has("--disable-bias-linear"),
        position_embedding_type=pos if pos in ("rope", "learned_absolute", "none") else "rope",
        seq_length=seq,
    )
    if experts:
        topk = "--topk" if deepspeed else "--moe-router-topk"
        fields.update(num_experts=experts, moe_top_k=flags.int(topk, 2, fix=fix),
                      moe_ffn_hidden_size=flags.int("--moe-ffn-hidden-size", fix=fix),
                      num_dense_layers=_moe_dense_layers(flags, out))
        shared = flags.int("--moe-shared-expert-intermediate-size", fix=fix)
        if shared:
            unit = fields["moe_ffn_hidden_size"] or fields["ffn_hidden_size"] or shared
            fields["num_shared_experts"] = max(1, round(shared / unit))
    if flags.has("--multi-latent-attention"):
        fields.update(q_lora_rank=flags.int("--q-lora-rank", fix=fix),
                      kv_lora_rank=flags.int("--kv-lora-rank", 512, fix=fix),
                      qk_head_dim=flags.int("--qk-head-dim", 128, fix=fix),
                      qk_pos_emb_head_dim=flags.int("--qk-pos-emb-head-dim", 64, fix=fix),
                      v_head_dim=flags.int("--v-head-dim", 128, fix=fix))
    return inline_model(fields, source=source, fmt=f"{dialect} flags")


def _norm(flags: Flags, deepspeed: bool) -> str:
    if not deepspeed:
        return flags.choice("--normalization", ("LayerNorm", "RMSNorm"), "LayerNorm")
    value = (flags.text("--normalization", "layernorm", fix="set it in the script") or "").lower()
    if value not in ("layernorm", "rmsnorm"):
        raise SpecError(f"{flags.source}: --normalization {value!r} is not layernorm or rmsnorm")
    return "RMSNorm" if value == "rmsnorm" else "LayerNorm"


# ------------------------------------------------------------------------------ rules

def _flag_rules(flags: Flags, out: list[Violation]) -> None:
    """Megatron rules about flags alone (frameworks.md 7, 13, 15 and the recompute checks)."""
    if flags.has("--bf16") and flags.has("--fp16"):
        out.append(Violation("megatron-precision-exclusive",
                             "--bf16 and --fp16 are exclusive (Megatron asserts it); keep one",
                             "error"))
    if flags.has("--checkpoint-activations"):
        out.append(Violation("megatron-deprecated-flag",
                             "--checkpoint-activations is no longer valid (Megatron exits); use "
                             "--recompute-activations or --recompute-granularity full "
                             "--recompute-method uniform --recompute-num-layers 1", "error"))
    gran = flags.choice("--recompute-granularity", ("full", "selective"))
    method, layers = flags.has("--recompute-method"), flags.has("--recompute-num-layers")
    if gran == "full" and not (method and layers):
        missing = " and ".join(f for f, ok in (("--recompute-method", method),
                                               ("--recompute-num-layers", layers)) if not ok)
        out.append(Violation("megatron-recompute-flags",
                             f"--recompute-granularity full also needs {missing} (Megatron's "
                             "TransformerConfig raises); e.g. --recompute-method uniform "
                             "--recompute-num-layers 1", "error"))
    if gran == "selective" and (method or layers):
        given = " and ".join(f for f, ok in (("--recompute-method", method),
                                             ("--recompute-num-layers", layers)) if ok)
        out.append(Violation("megatron-recompute-flags",
                             f"--recompute-granularity selective forbids {given} (Megatron's "
                             "TransformerConfig raises); remove it", "error"))
    if flags.has("--num-query-groups") and not flags.has("--group-query-attention"):
        out.append(Violation("megatron-gqa-flag",
                             f"--num-query-groups {flags.shown('--num-query-groups')} has "
                             "no effect without --group-query-attention: Megatron builds "
                             "multi-head attention (and planner models that); add "
                             "--group-query-attention", "warning"))
    if flags.has("--multi-latent-attention") and flags.has("--group-query-attention"):
        out.append(Violation("megatron-mla-excludes-gqa",
                             "--multi-latent-attention and --group-query-attention are exclusive "
                             "(Megatron asserts it); drop --group-query-attention", "error"))
    if not (flags.has("--bf16") or flags.has("--fp16")):
        out.append(Violation("megatron-fp32",
                             "neither --bf16 nor --fp16: Megatron-LM trains in fp32, which "
                             "planner does not model (it plans bf16); add --bf16", "warning"))
    vflags = [f for f in ("--num-layers-per-virtual-pipeline-stage",
                          "--num-virtual-stages-per-pipeline-rank",
                          "--pipeline-model-parallel-layout") if flags.has(f)]
    if len(vflags) > 1:
        out.append(Violation("megatron-vpp-flags-exclusive",
                             f"{' and '.join(vflags)} are exclusive (Megatron asserts it); keep "
                             "one", "error"))
    if flags.has("--pipeline-model-parallel-layout"):
        out.append(Violation("megatron-pipeline-layout",
                             "--pipeline-model-parallel-layout is not modelled: planner assumes "
                             "an even split of the layers", "warning"))


def _required_rules(flags: Flags, seq: int | None, out: list[Violation]) -> None:
    """Megatron 7: the shape flags are required; max_position_embeddings >= seq_length."""
    if not any(flags.has(f) for f in _SHAPE_REQUIRED):
        return                      # the shape comes from --model (e.g. a sourced file)
    for f in _SHAPE_REQUIRED:
        if not flags.has(f):
            out.append(Violation("megatron-required-flag",
                                 f"{f} is missing; Megatron-LM requires it", "error"))
    max_pos = flags.int("--max-position-embeddings")
    if max_pos is not None and seq is not None and max_pos < seq:
        out.append(Violation("megatron-max-position-embeddings",
                             f"--max-position-embeddings ({max_pos}) must be >= --seq-length "
                             f"({seq}) (Megatron asserts it); raise it to {seq}", "error"))


# ------------------------------------------------------------------------------ the layout

def _degrees(flags: Flags) -> dict[str, int]:
    names = {"tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size",
             "cp": "--context-parallel-size", "ep": "--expert-model-parallel-size"}
    deg = {axis: flags.int(flag, 1) for axis, flag in names.items()}
    deg["etp"] = flags.int("--expert-tensor-parallel-size", deg["tp"])
    names["etp"] = "--expert-tensor-parallel-size"
    for axis, value in deg.items():
        if value < 1:
            raise SpecError(f"{flags.source}: {names[axis]} {value} must be at least 1; "
                            "fix the value")
    return deg


def _vpp(flags: Flags, num_layers: int, pp: int, out: list[Violation]) -> int:
    """Virtual stages per rank: given, or layers per rank / layers per virtual stage."""
    if flags.has("--num-virtual-stages-per-pipeline-rank"):
        v = flags.int("--num-virtual-stages-per-pipeline-rank")
        if v < 1:
            raise SpecError(f"{flags.source}: --num-virtual-stages-per-pipeline-rank {v} must be "
                            "at least 1; fix the value")
        return v
    per_stage = flags.int("--num-layers-per-virtual-pipeline-stage")
    if per_stage is None:
        return 1
    per_rank = num_layers // pp
    if per_stage < 1 or per_rank % per_stage:
        out.append(Violation("megatron-vpp-layers",
                             f"layers per pipeline rank ({per_rank} = {num_layers}/{pp}) must be "
                             f"divisible by --num-layers-per-virtual-pipeline-stage "
                             f"({per_stage}) (Megatron asserts it)", "error"))
    return max(1, per_rank // max(1, per_stage))


def _split(flags: Flags, num_layers: int, pp: int, vpp: int,
           out: list[Violation]) -> tuple[int | None, int | None]:
    """(first, last) stage layers: --decoder-first/last-..., or the accounted split."""
    first = flags.int("--decoder-first-pipeline-num-layers")
    last = flags.int("--decoder-last-pipeline-num-layers")
    emb = flags.has("--account-for-embedding-in-pipeline-split")
    loss = flags.has("--account-for-loss-in-pipeline-split")
    if not (emb or loss):
        return first, last
    if first is not None or last is not None:
        out.append(Violation("megatron-pipeline-split",
                             "--account-for-embedding/loss-in-pipeline-split cannot be combined "
                             "with --decoder-first/last-pipeline-num-layers; keep one way",
                             "error"))
        return first, last
    first, last, problem = accounted_split(num_layers, pp=pp, vpp=vpp, embedding=emb, loss=loss)
    if problem:
        out.append(Violation("megatron-pipeline-split", f"{problem} (Megatron asserts it)",
                             "error"))
    return first, last


def _sp_and_overlap(flags: Flags, tp: int, out: list[Violation]) -> bool:
    """Megatron 12 (SP off at TP 1, a warning) and 13 (overlap flags, errors); SP as run."""
    sp = flags.has("--sequence-parallel")
    if sp and tp == 1:
        out.append(Violation("megatron-sp-needs-tp",
                             "--sequence-parallel with tensor-model-parallel-size 1: Megatron-LM "
                             "turns it off (with a warning); drop the flag", "warning"))
        sp = False
    if flags.has("--tp-comm-overlap") and not flags.has("--sequence-parallel"):
        out.append(Violation("megatron-tp-comm-overlap-needs-sp",
                             "--tp-comm-overlap needs --sequence-parallel (Megatron asserts it); "
                             "add --sequence-parallel or drop --tp-comm-overlap", "error"))
    if flags.has("--overlap-param-gather") and not (
            flags.has("--use-distributed-optimizer") and flags.has("--overlap-grad-reduce")):
        out.append(Violation("megatron-overlap-param-gather",
                             "--overlap-param-gather needs --use-distributed-optimizer and "
                             "--overlap-grad-reduce (Megatron asserts it); add them", "error"))
    return sp


def _recompute(flags: Flags, layers_per_chunk: int, out: list[Violation]) -> str:
    gran = flags.choice("--recompute-granularity", ("full", "selective"))
    if gran is None and flags.has("--recompute-activations"):
        gran = "selective"
    if gran is None and flags.has("--checkpoint-activations"):
        gran = "full"
    if gran == "full" and flags.choice("--recompute-method", ("uniform", "block")) == "block":
        n = flags.int("--recompute-num-layers", 1)
        if n < layers_per_chunk:
            out.append(Violation("megatron-partial-recompute",
                                 f"--recompute-method block --recompute-num-layers {n} recomputes "
                                 f"{n} of the {layers_per_chunk} layers per stage; planner models "
                                 "every layer recomputed, so it underestimates activation memory",
                                 "warning"))
    return gran or "none"


def _micro_batch(flags: Flags, out: list[Violation]) -> int:
    if not flags.has("--micro-batch-size"):
        out.append(Violation("megatron-required-flag",
                             "--micro-batch-size is missing; Megatron-LM needs it (planner uses 1)",
                             "error"))
        return 1
    mbs = flags.int("--micro-batch-size")
    if mbs < 1:
        raise SpecError(f"{flags.source}: --micro-batch-size {mbs} must be at least 1")
    return mbs


def _layout(flags: Flags, model: ModelSpec, num_gpus: int, out: list[Violation]) -> Layout:
    d = _degrees(flags)
    tp, pp, cp = d["tp"], d["pp"], d["cp"]
    vpp = _vpp(flags, model.num_layers, pp, out)
    first, last = _split(flags, model.num_layers, pp, vpp, out)
    cp_comm = flags.text("--cp-comm-type", "p2p", fix="set it in the script")
    if cp_comm not in ("p2p", "a2a", "allgather", "a2a+p2p"):
        raise SpecError(f"{flags.source}: --cp-comm-type {cp_comm!r} is not one of p2p, a2a, "
                        "allgather, a2a+p2p; fix the value")
    return Layout(tp=tp, cp=cp, ep=d["ep"], dp=max(1, num_gpus // (tp * pp * cp)), pp=pp,
                  vpp=vpp, etp=d["etp"], sp=_sp_and_overlap(flags, tp, out), zero=_zero(flags),
                  micro_batch_size=_micro_batch(flags, out),
                  recompute=_recompute(flags, model.num_layers // (pp * vpp), out),
                  first_stage_layers=first, last_stage_layers=last, cp_comm_type=cp_comm,
                  overlap_grad_reduce=flags.has("--overlap-grad-reduce"),
                  overlap_param_gather=flags.has("--overlap-param-gather"),
                  tp_comm_overlap=flags.has("--tp-comm-overlap"))


_FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _zero(flags: Flags) -> int:
    """0 plain DDP; 1 --use-distributed-optimizer; Megatron FSDP by sharding strategy;
    torch FSDP2 = 3."""
    if flags.has("--use-megatron-fsdp"):
        return _FSDP_ZERO[flags.choice("--data-parallel-sharding-strategy", tuple(_FSDP_ZERO),
                                       "no_shard")]
    if flags.has("--use-torch-fsdp2"):
        return 3
    return 1 if flags.has("--use-distributed-optimizer") else 0


def _precision(flags: Flags) -> str:
    if flags.has("--fp8-format"):
        return "fp8"
    return "fp16" if flags.has("--fp16") and not flags.has("--bf16") else "bf16"


# ------------------------------------------------------------------------------ entry

def read_launch(text: str, source: str, *, check: bool = True,
                prefix: str = "megatron") -> tuple[Launch, Flags, list[Violation]]:
    """The training command of a script or argument file, its flags, and what was odd about
    them (`check=False` for Megatron-DeepSpeed, whose flag list we do not have)."""
    found = _find(text, source)
    flags, out = _parse(found.args, source, check=check)
    if found.commands > 1:
        out.append(Violation(f"{prefix}-multiple-commands",
                             f"the script runs a training command {found.commands} times; "
                             "planner read the first", "warning"))
    for name in found.script.sourced:
        out.append(Violation(f"{prefix}-sourced-file",
                             f"the script sources {name}; planner does not read it, so variables "
                             "set there count as unset", "warning"))
    return found, flags, out


def load(path: str | Path, text: str, ov: Overrides) -> Imported:
    """Read a Megatron-LM launch script or argument file (text already read)."""
    source = str(path)
    found, flags, out = read_launch(text, source)
    seq = flags.int("--seq-length") or flags.int("--encoder-seq-length") \
        or flags.int("--decoder-seq-length")
    _flag_rules(flags, out)
    _required_rules(flags, seq, out)
    hardware = hardware_of(ov)
    model = model_from_flags(flags, ov, source, seq, out)
    num_gpus = world_size(found, ov, hardware, source, out)
    layout = _layout(flags, model, num_gpus, out)
    if found.is_script and (layout.tp > 1 or layout.cp > 1) \
            and not flags.has("--use-megatron-fsdp") \
            and hardware.name.lower().startswith(("a100", "h100", "h200")) \
            and found.script.var("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        out.append(Violation("megatron-cuda-device-max-connections",
                             "Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 "
                             f"on {hardware.name}; the script does not export it (fine if the "
                             "job's environment does)", "warning"))
    gbs = flags.int("--global-batch-size") or layout.micro_batch_size * layout.dp
    job = make_job(model=model, hardware=hardware, num_gpus=num_gpus,
                   seq_length=seq or model.seq_length or flags.int("--max-position-embeddings"),
                   global_batch_size=gbs, precision=_precision(flags), source=source)
    return Imported(job, layout, out, "megatron", source)
