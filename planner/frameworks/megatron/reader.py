"""Megatron-LM: a `pretrain_gpt.py` launch script or argument file -> Job + Layout.

The script is read, not run (`shell.py`): it follows the script's control flow and arrays,
`bash -c` and sbatch here-documents; variables set in it, `${VAR:-default}` and `--set` values
resolve, anything else is named where it is needed. The training command is the launch that
runs a training entry point (`pretrain_*.py`, `*train*.py`, `finetune*.py`) with the model
flags; `echo`/`printf` lines and data-preparation steps are not launches. A file without one
is read as an argument file (flags one per line or in any layout). The world size comes from
the launcher (`torchrun/python -m torch.distributed.run --nproc-per-node --nnodes`, `deepspeed
--num_gpus --num_nodes`, `srun --nodes --ntasks-per-node`) or the variables
GPUS_PER_NODE/NPROC_PER_NODE and NNODES/NUM_NODES (or WORLD_SIZE, or SLURM_NNODES from
`#SBATCH --nodes`), else from --gpus/--nodes.

Megatron-LM's own checks, with its severities (docs/reference/framework-rules.md#megatron-lm,
rules R1-R15 there, and Megatron's validate_args / TransformerConfig), come back as Violations;
rules R1-R6 and R8-R11 (docs/reference/framework-rules.md#r1-world-size-divisible-by-tp-pp-and-cp
... #r11-virtual-stages-need-pp-and-micro-batches) are left to planner.rules, which the layout
goes through (same checks, same severity, so they are not reported twice). The
production-recipe flags are read by `recipe.py`.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from planner.errors import SpecError, Violation
from planner.fields import ROUTER_SCORES
from planner.frameworks.common import (
    MAX_GPUS,
    NOT_WRITTEN_KEYS,
    NOT_WRITTEN_MESSAGE,
    UNPRICED_KEYS,
    UNPRICED_MESSAGE,
    Imported,
    Overrides,
    accounted_split,
    hardware_of,
    inline_model,
    make_job,
    model_replaced,
    resolve_world,
    script_reader,
    shell_notes,
    unknown_key,
    vocab_from_tokenizer,
)
from planner.frameworks.megatron.recipe import not_modelled, read_recipe
from planner.layout import Layout
from planner.presets import resolve_model
from planner.readers import bash as shell
from planner.specs import ModelSpec

__all__ = [
    "load",
    "megatron_flags",
    "looks_like_megatron",
    "Flags",
    "Launch",
    "read_launch",
    "world_size",
    "model_from_flags",
    "script_reader",
    "MAX_SUGGESTIONS",
]

MAX_SUGGESTIONS = 20
"""Unknown flags reported one by one (with a did-you-mean); the rest are counted in one line."""


@lru_cache(maxsize=1)
def megatron_flags() -> frozenset[str]:
    """Every flag pretrain_gpt.py accepts (planner/frameworks/megatron/megatron_flags.txt)."""
    text = (
        resources.files("planner.frameworks.megatron")
        .joinpath("megatron_flags.txt")
        .read_text("utf-8")
    )
    return frozenset(line.strip() for line in text.splitlines() if line.strip().startswith("--"))


# store_true / store_false flags: a word after one of these is a stray argument, not a value
_BOOLEAN = frozenset(
    {
        "--sequence-parallel",
        "--use-distributed-optimizer",
        "--bf16",
        "--fp16",
        "--swiglu",
        "--squared-relu",
        "--group-query-attention",
        "--tp-comm-overlap",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--untie-embeddings-and-output-weights",
        "--disable-bias-linear",
        "--use-megatron-fsdp",
        "--use-torch-fsdp2",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--recompute-activations",
        "--checkpoint-activations",
        "--multi-latent-attention",
        "--use-flash-attn",
        "--moe-grouped-gemm",
        "--use-mcore-models",
        "--mock-data",
        "--use-rotary-position-embeddings",
        "--add-qkv-bias",
        "--use-dist-ckpt",
        "--distribute-saved-activations",
        "--no-position-embedding",
        "--fp8-param-gather",
        "--grad-reduce-in-bf16",
        "--accumulate-allreduce-grads-in-fp32",
        "--use-precision-aware-optimizer",
        "--overlap-moe-expert-parallel-comm",
        "--enable-cuda-graph",
        "--external-cuda-graph",
        "--moe-enable-deepep",
        "--moe-layer-recompute",
        "--optimizer-cpu-offload",
        "--torch-fsdp2-no-reshard-after-forward",
        "--no-check-for-nan-in-loss-and-grad",
        "--fsdp-double-buffer",
        "--use-nccl-ub",
        "--keep-fp8-transpose-cache",
        "--moe-shared-expert-overlap",
        "--delay-wgrad-compute",
        "--defer-embedding-wgrad-compute",
        "--moe-pad-expert-input-to-capacity",
        "--first-last-layers-bf16",
        "--init-model-with-meta-device",
        "--fp8-dot-product-attention",
        "--fp8-multi-head-attention",
        "--quick-geglu",
        "--moe-router-enable-expert-bias",
        "--moe-router-pre-softmax",
        "--is-hybrid-model",
        "--enable-mhc-connections",
        "--apply-residual-connection-post-layernorm",
        "--rotary-interleaved",
        "--use-rope-scaling",
        "--apply-layernorm-1p",
        "--moe-shared-expert-gate",
        "--attention-output-gate",
    }
)
# flags taking exactly one value (the ones planner reads): a second word after one is stray
_SINGLE = frozenset(
    {
        "--glu-linear-offset",
        "--activation-func-clamp-value",
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
        "--expert-model-parallel-size",
        "--expert-tensor-parallel-size",
        "--num-layers-per-virtual-pipeline-stage",
        "--num-virtual-stages-per-pipeline-rank",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--micro-batch-size",
        "--global-batch-size",
        "--num-layers",
        "--hidden-size",
        "--ffn-hidden-size",
        "--num-attention-heads",
        "--num-query-groups",
        "--kv-channels",
        "--seq-length",
        "--max-position-embeddings",
        "--normalization",
        "--position-embedding-type",
        "--recompute-granularity",
        "--recompute-method",
        "--recompute-num-layers",
        "--num-experts",
        "--moe-router-topk",
        "--moe-ffn-hidden-size",
        "--data-parallel-sharding-strategy",
        "--vocab-size",
        "--tokenizer-type",
        "--fp8-format",
        "--fp8-recipe",
        "--moe-token-dispatcher-type",
        "--moe-flex-dispatcher-backend",
        "--cuda-graph-impl",
        "--pipeline-model-parallel-layout",
        "--mtp-num-layers",
        "--cpu-offloading-num-layers",
        "--exp-avg-dtype",
        "--exp-avg-sq-dtype",
        "--rotary-base",
        "--moe-expert-capacity-factor",
        "--moe-train-capacity-factor",
        "--attention-backend",
        "--moe-layer-freq",
        "--moe-router-num-groups",
        "--moe-router-group-topk",
        "--moe-router-score-function",
        "--moe-router-topk-scaling-factor",
        "--rotary-percent",
        "--experimental-attention-variant",
        "--linear-attention-freq",
        "--linear-num-key-heads",
        "--linear-num-value-heads",
        "--linear-key-head-dim",
        "--linear-value-head-dim",
        "--linear-conv-kernel-dim",
        "--dsa-indexer-n-heads",
        "--dsa-indexer-head-dim",
        "--dsa-indexer-topk",
    }
)
_SHAPE_REQUIRED = (
    "--num-layers",
    "--hidden-size",
    "--num-attention-heads",
    "--max-position-embeddings",
)
_LAUNCHERS_PER_NODE = (
    "--nproc-per-node",
    "--nproc_per_node",
    "--num_gpus",
    "--num-gpus",
    "--gpus-per-node",
    "--ntasks-per-node",
)
_LAUNCHERS_NODES = ("--nnodes", "--num_nodes", "--num-nodes", "--nodes", "-N")
_VARS_PER_NODE = (
    "GPUS_PER_NODE",
    "NPROC_PER_NODE",
    "NUM_GPUS_PER_NODE",
    "GPUS_PER_NODE_NUM",
    "SLURM_GPUS_PER_NODE",
)
_VARS_NODES = ("NNODES", "NUM_NODES", "N_NODES", "NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
# a total GPU count the script keeps for itself (its own arithmetic, its hostfile): the world
# size when neither the launcher nor a node-count variable gives one
_VARS_WORLD = ("NUM_GPUS", "TOTAL_GPUS", "N_GPUS", "NGPUS", "GPU_NUM", "NUM_GPU", "WORLD_SIZE")
_PRINTERS = frozenset({"echo", "printf", "print", "cat", "tee", "logger", ":", "log", "info"})
_TRAINING_ENTRY = re.compile(r"(^|/)(pretrain\w*|\w*train\w*|finetune\w*|sft\w*)\.py$")


def looks_like_megatron(text: str) -> bool:
    """Content sniffing for detect_format: a pretrain_*.py command or core Megatron flags."""
    return bool(
        re.search(
            r"pretrain_\w+\.py|--tensor-model-parallel-size|"
            r"--pipeline-model-parallel-size|--num-layers\b|--micro-batch-size",
            text,
        )
    )


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

    def _resolved(self, flag: str, value: str, fix: str) -> str:
        names = shell.unresolved_names(value)
        if names:
            raise SpecError(
                f"{self.source}: {flag} {_short(shell.display(value))} {shell.why(names)}; {fix}",
                field=flag,
                value=shell.display(value),
            )
        return value

    def text(self, flag: str, default: str | None = None, *, fix: str) -> str | None:
        if flag not in self.values:
            return default
        vals = self.values[flag]
        if not vals:
            raise SpecError(f"{self.source}: {flag} needs a value; {fix}", field=flag)
        return self._resolved(flag, vals[0], fix)

    def items(self, flag: str, *, fix: str = "set it in the script") -> list[str]:
        """Every value of a flag taking several (`--recompute-modules mlp moe`)."""
        return [self._resolved(flag, v, fix) for v in self.values.get(flag, [])]

    def int(
        self, flag: str, default: int | None = None, *, fix: str = "set it in the script"
    ) -> int | None:
        value = self.text(flag, fix=fix)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise SpecError(
                f"{self.source}: {flag} {_short(value)!r} is not an integer "
                f"(Megatron's argparse rejects it); {fix}",
                field=flag,
                value=value,
            ) from None

    def float(self, flag: str, *, fix: str = "set it in the script") -> float | None:
        value = self.text(flag, fix=fix)
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            raise SpecError(
                f"{self.source}: {flag} {_short(value)!r} is not a number "
                f"(Megatron's argparse rejects it); {fix}",
                field=flag,
                value=value,
            ) from None

    def choice(self, flag: str, choices: tuple[str, ...], default: str | None = None) -> str | None:
        value = self.text(flag, fix="set it in the script")
        if value is not None and value not in choices:
            raise SpecError(
                f"{self.source}: {flag} {_short(value)!r} is not one of "
                f"{', '.join(choices)} (Megatron's argparse rejects it); fix the value",
                field=flag,
                value=value,
            )
        return default if value is None else value


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _is_flag(token: str) -> bool:
    return token.startswith("--") or bool(re.match(r"-[A-Za-z]", token))


def _parse(tokens: list[str], source: str, *, check: bool = True) -> tuple[Flags, list[Violation]]:
    """Megatron's argparse over the tokens: every unknown or stray word reported by name
    (`check=False`: a dialect without a flag list, unknown flags are not judged)."""
    known = megatron_flags()
    flags = Flags(source)
    out: list[Violation] = []
    unknown: dict[str, None] = {}
    current: str | None = None
    for token in tokens:
        if _is_flag(token) and not shell.unresolved_names(token.split("=", 1)[0]):
            name, eq, value = token.partition("=")
            flags.values[name] = [value] if eq else []
            flags.counts[name] = flags.counts.get(name, 0) + 1
            current = None if name in _BOOLEAN else name
            if check and name not in known:
                unknown[name] = None
            continue
        if current is not None and not (current in _SINGLE and flags.values[current]):
            flags.values[current].append(token)
            continue
        names = shell.unresolved_names(token)
        if shell.only_unresolved(token):
            out.append(
                Violation(
                    "megatron-unresolved-variable",
                    f"{shell.display(token)} on the command line {shell.why(names)}: "
                    "the flags it adds (if any) were not checked",
                    "warning",
                )
            )
        else:
            out.append(
                Violation(
                    "megatron-unrecognized-argument",
                    f"stray argument {_short(shell.display(token))!r}: Megatron-LM's "
                    "argparse rejects it (unrecognized arguments); remove it",
                    "error",
                )
            )
    out += _unknown(list(unknown), known)
    for name, count in flags.counts.items():
        if count > 1:
            shown = _short(flags.shown(name)) or "(set)"
            out.append(
                Violation(
                    "megatron-repeated-flag",
                    f"{name} is given {count} times; argparse keeps the last ({shown})",
                    "warning",
                )
            )
    return flags, out


_HINTS = {
    "--cpu-offloading": "Megatron-LM turns activation offloading on with "
    "--cpu-offloading-num-layers N (NeMo's cpu_offloading is not a flag)",
}


def _unknown(names: list[str], known: frozenset[str]) -> list[Violation]:
    """One error per unknown flag with a did-you-mean, for the first MAX_SUGGESTIONS; one line
    counting the rest (the suggestion search is what makes thousands of them slow)."""
    consequence = "Megatron-LM's argparse rejects it and pretrain_gpt.py exits; remove or fix it"
    out = [
        Violation(
            "megatron-unknown-flag",
            f"unknown flag {name!r} ({_HINTS[name]}): {consequence}",
            "error",
        )
        if name in _HINTS
        else unknown_key(
            "megatron-unknown-flag", _short(name), known, severity="error", consequence=consequence
        )
        for name in names[:MAX_SUGGESTIONS]
    ]
    if len(names) > MAX_SUGGESTIONS:
        more = len(names) - MAX_SUGGESTIONS
        out.append(
            Violation(
                "megatron-unknown-flag",
                f"{more:,} more unknown flags (e.g. {_short(names[-1], 40)!r}): "
                "Megatron-LM's argparse rejects them; remove or fix them",
                "error",
            )
        )
    return out


# ------------------------------------------------------------------------------ the script


@dataclass
class Launch:
    launcher: list[str]
    args: list[str]
    script: shell.Script
    is_script: bool
    commands: int


def _runs(cmd: shell.Command, known: frozenset[str]):
    """(launcher words, script, arguments) if the command runs a *.py with Megatron flags."""
    words = list(cmd.prefix) + list(cmd.words)
    if not words or posixpath.basename(words[0]) in _PRINTERS:
        return None
    for k, w in enumerate(words):
        if re.search(r"\.py$", shell.display(w)) and any(
            x.split("=", 1)[0] in known for x in words[k + 1 :]
        ):
            return words[:k], shell.display(w), words[k + 1 :]
    return None


def _rank(run: tuple) -> tuple[bool, bool]:
    """Training launches first: the model flags, then a training entry point's name."""
    _, entry, args = run
    shaped = any(a.split("=", 1)[0] in _SHAPE_REQUIRED[:3] for a in args)
    return shaped, bool(_TRAINING_ENTRY.search(entry))


def _find(script: shell.Script, source: str) -> Launch:
    known = megatron_flags()
    runs = [r for r in (_runs(c, known) for c in script.commands) if r is not None]
    if runs:
        best = max(_rank(r) for r in runs)
        top = [r for r in runs if _rank(r) == best]
        return Launch(top[0][0], top[0][2], script, True, len(top))
    args = [w for cmd in script.commands if cmd.words[0].startswith("-") for w in cmd.words]
    if not any(a.split("=", 1)[0] in known for a in args):
        raise SpecError(
            f"{source}: no Megatron-LM command (torchrun ... pretrain_gpt.py --flags) "
            "and no Megatron flags found; give a launch script or an argument file",
            field="file",
            value=source,
        )
    return Launch([], args, script, False, 0)


def read_launch(
    text: str,
    source: str,
    *,
    check: bool = True,
    prefix: str = "megatron",
    ov: Overrides | None = None,
) -> tuple[Launch, Flags, list[Violation]]:
    """The training command of a script or argument file, its flags, and what was odd about
    them (`check=False` for Megatron-DeepSpeed, whose flag list we do not have)."""
    ov = ov or Overrides()
    script = shell.run(text, env=ov.env, read_file=script_reader(source))
    found = _find(script, source)
    flags, out = _parse(found.args, source, check=check)
    if found.commands > 1:
        out.append(
            Violation(
                f"{prefix}-multiple-commands",
                f"the script runs a training command {found.commands} times; "
                "planner read the first",
                "warning",
            )
        )
    for name in found.script.sourced:
        out.append(
            Violation(
                f"{prefix}-sourced-file",
                f"the script sources {name}; planner does not read it, so variables "
                "set there count as unset",
                "warning",
            )
        )
    return found, flags, out + shell_notes(script, prefix)


def _launcher_value(words: list[str], names: tuple[str, ...]) -> str | None:
    value = None
    for k, w in enumerate(words):
        name, eq, rest = w.partition("=")
        if name in names:
            value = rest if eq else (words[k + 1] if k + 1 < len(words) else None)
    return value


def _is_torchrun(words: list[str]) -> bool:
    return any(
        w.rsplit("/", 1)[-1] == "torchrun"
        or w in ("torch.distributed.run", "torch.distributed.launch")
        for w in words
    )


def world_size(found: Launch, ov: Overrides, hardware, source: str, out: list[Violation]) -> int:
    if ov.gpus is not None and ov.nodes is None:
        return ov.gpus
    fix = "give --gpus N (the total)" if ov.nodes is not None else "give --gpus N or --nodes N"

    def number(label: str, value: str | None) -> int | None:
        if value is None:
            return None
        names = shell.unresolved_names(value)
        if names:
            if ov.nodes is not None:  # --nodes replaces the file's count; per node falls
                return None  # back to the hardware profile
            raise SpecError(
                f"{source}: the world size needs {label}, which is "
                f"{_short(shell.display(value))} and {shell.why(names)}; {fix}",
                field=label,
                value=shell.display(value),
            )
        if label.startswith("GPUs") and value in ("gpu", "auto"):
            return hardware.gpus_per_node
        if ":" in value and label.startswith("nodes"):  # elastic min:max
            top = value.split(":")[-1]
            out.append(
                Violation(
                    "megatron-elastic-nnodes",
                    f"--nnodes {_short(value)} is an elastic range; planner plans "
                    f"for the maximum, {_short(top)} nodes",
                    "warning",
                )
            )
            value = top
        try:
            n = int(value)
        except ValueError:
            raise SpecError(
                f"{source}: {label} {_short(value)!r} is not an integer; {fix}",
                field=label,
                value=value,
            ) from None
        if not 1 <= n <= MAX_GPUS:
            raise SpecError(
                f"{source}: {label} {n:,} must be between 1 and {MAX_GPUS:,} (a "
                f"config's num_gpus cap); {fix}",
                field=label,
                value=n,
            )
        return n

    words = found.launcher
    per_node = number(
        "GPUs per node (--nproc-per-node)", _launcher_value(words, _LAUNCHERS_PER_NODE)
    )
    nodes = number("nodes (--nnodes)", _launcher_value(words, _LAUNCHERS_NODES))
    script = found.script
    if per_node is None:
        names = _VARS_PER_NODE + (() if _is_torchrun(words) else ("SLURM_NTASKS_PER_NODE",))
        var = next((v for v in names if v in script.variables), None)
        per_node = number(f"GPUs per node ({var})", script.var(var)) if var else None
    if nodes is None:
        var = next((v for v in _VARS_NODES if v in script.variables), None)
        nodes = number(f"nodes ({var})", script.var(var)) if var else None
    world = None
    if per_node is None and "WORLD_SIZE" in script.variables:
        world = number("the world size (WORLD_SIZE)", script.var("WORLD_SIZE"))
    if (
        world is None
        and (nodes is None or per_node is None)
        and ov.nodes is None
        and not _is_torchrun(words)
    ):  # torchrun's defaults give its world size
        var = next((v for v in _VARS_WORLD if v in script.variables), None)
        world = number(f"the world size ({var})", script.var(var)) if var else None
        if world is not None:
            out.append(
                Violation(
                    "megatron-world-from-variable",
                    "the launcher does not give the world size; planner took the "
                    f"script's {var}={world} (give --gpus N or --nodes N to plan "
                    "another)",
                    "warning",
                )
            )
            per_node = nodes = None
    if _is_torchrun(words):  # torchrun's defaults: 1 node, 1 process
        per_node = 1 if per_node is None and world is None else per_node
        nodes = 1 if nodes is None else nodes
    return resolve_world(
        ov,
        hardware=hardware,
        source=source,
        gpus_per_node=per_node,
        nodes=nodes,
        world=world,
        missing="no world size (no torchrun --nnodes/--nproc-per-node, no "
        "GPUS_PER_NODE/NNODES variables)",
    )


# ------------------------------------------------------------------------------ test configs

# the top-level keys of Megatron-LM's functional-test model_config.yaml
# (tests/functional_tests/test_cases/*/*/model_config.yaml) that are the test harness's, not
# the training run's
_HARNESS_KEYS = (
    "TEST_TYPE",
    "METRICS",
    "MODE",
    "SPEC",
    "THROUGHPUT_TEST_PARAMS",
    "BASE_MODEL",
    "IS_STABLE",
    "N_REPEAT",
    "ARGUMENTS",
    "GOLDEN_VALUES",
    "EXPECTED_METRICS",
)


def looks_like_model_config(data) -> bool:
    """Megatron-LM's functional-test model_config.yaml: a MODEL_ARGS mapping of flags."""
    return isinstance(data, dict) and isinstance(data.get("MODEL_ARGS"), dict)


def model_config_text(data: dict, source: str) -> tuple[str, list[Violation]]:
    """The model_config.yaml as the argument file it stands for: ENV_VARS exported, then
    MODEL_ARGS as `--flag value` (true: the flag alone; false/null: left out, as the test
    launcher does; a list: its values). Other top-level keys are the harness's: a note."""
    import shlex

    out: list[Violation] = []
    env = data.get("ENV_VARS") or {}
    if not isinstance(env, dict):
        raise SpecError(
            f"{source}: ENV_VARS must be a mapping of NAME: value; fix it", field="ENV_VARS"
        )
    lines = [
        f"export {k}={shlex.quote(_scalar(v))}"
        for k, v in env.items()
        if re.fullmatch(r"[A-Za-z_]\w*", str(k)) and v is not None
    ]
    for flag, value in data["MODEL_ARGS"].items():
        flag = str(flag)
        if not flag.startswith("-") or not re.fullmatch(r"-[-\w.]+", flag):
            out.append(
                Violation(
                    "megatron-test-config-keys",
                    f"MODEL_ARGS key {_short(flag)!r} is not a flag (--name), so "
                    "it is no argument pretrain_gpt.py takes; write it as --name",
                    "error",
                )
            )
            continue
        if value is False or value is None:
            continue
        if value is True:
            lines.append(flag)
        elif isinstance(value, list):
            lines.append(" ".join([flag] + [shlex.quote(_scalar(v)) for v in value]))
        else:
            lines.append(f"{flag} {shlex.quote(_scalar(value))}")
    ignored = [str(k) for k in data if k not in ("ENV_VARS", "MODEL_ARGS")]
    if ignored:
        known = [k for k in ignored if k in _HARNESS_KEYS]
        other = [k for k in ignored if k not in _HARNESS_KEYS]
        said = ", ".join(known + other)
        out.append(
            Violation(
                "megatron-test-config-keys",
                f"{_short(said, 120)}: Megatron-LM's functional-test harness keys "
                "(the test type, golden metrics ...), not training settings; "
                "planner reads ENV_VARS and MODEL_ARGS only",
                "warning",
            )
        )
    return "\n".join(lines) + "\n", out


def _scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        raise SpecError(
            f"a MODEL_ARGS value {_short(str(value))} is a nested structure; a "
            "flag takes plain values",
            field="MODEL_ARGS",
            value=_short(str(value)),
        )
    return str(value)


def load_model_config(path: str | Path, data: dict, ov: Overrides) -> Imported:
    """Megatron-LM's functional-test model_config.yaml, read as the Megatron launch it
    configures; the world size from --gpus/--nodes or a NUM_GPUS-style ENV_VARS entry."""
    text, notes = model_config_text(data, str(path))
    imported = load(path, text, ov)
    imported.violations.extend(notes)
    return imported


# ------------------------------------------------------------------------------ the model

_PATTERN_CHARS = re.compile(r"[^,\d\[\]\(\)\+\*\s]")


def _moe_dense_layers(flags: Flags, num_layers: int, out: list[Violation]) -> int | tuple[int, ...]:
    """Leading dense layers from --moe-layer-freq (1, or a pattern like ([0]*3+[1]*58)), or,
    when the dense layers are not all first, the pattern (a 0/1 tuple; an int step > 1 as
    `-freq`), checked as Megatron's moe_freq_type checks it (only digits, [ ] ( ) + * and
    commas)."""
    text = flags.text("--moe-layer-freq", fix="set it in the script")
    if text is None or text.strip() == "1":
        return 0
    shown = _short(text)
    if _PATTERN_CHARS.search(text):
        raise SpecError(
            f"{flags.source}: --moe-layer-freq {shown!r} is not a pattern Megatron "
            "accepts (an integer, or a list expression of digits, [ ] ( ) + * and "
            "commas such as ([0]*3+[1]*58)); its argparse rejects it",
            field="--moe-layer-freq",
            value=shown,
        )
    if text.strip().isdigit():
        pattern = None
    else:
        try:
            tree = ast.parse(text.strip(), mode="eval").body
            length = _pattern_length(tree)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise SpecError(
                f"{flags.source}: --moe-layer-freq {shown!r} is not a list "
                "expression Megatron can evaluate; write it like ([0]*3+[1]*58)",
                field="--moe-layer-freq",
                value=shown,
            ) from None
        if length != num_layers:
            raise SpecError(
                f"{flags.source}: --moe-layer-freq {shown!r} has {_count(length)} "
                f"entries; Megatron requires one per layer ({num_layers})",
                field="--moe-layer-freq",
                value=shown,
            )
        pattern = _list_expr(tree)
    if pattern and all(x in (0, 1) for x in pattern) and 1 in pattern:
        dense = len(pattern) - len(pattern[pattern.index(1) :])
        if all(x == 1 for x in pattern[dense:]):
            return dense
        return tuple(pattern)  # interleaved: the pattern itself (moe_layer_freq)
    if pattern is None:
        freq = int(text.strip())
        if 1 <= freq <= num_layers:
            # Megatron: layer i is MoE when i % freq == 0
            return tuple(int(i % freq == 0) for i in range(num_layers))
    out.append(
        Violation(
            "megatron-moe-layer-freq",
            f"--moe-layer-freq {shown}: no layer is MoE in it (or the step is not "
            f"between 1 and {num_layers}); planner treats every layer as MoE here",
            "warning",
        )
    )
    return 0


def _window(flags: Flags, num_layers: int, out: list[Violation]) -> dict:
    """--window-size (left, right) and --window-attn-skip-freq as layer_types: every layer a
    sliding window of `left` tokens, but the layers the skip frequency names (an int N: one
    full layer after N-1 window layers; a 0/1 list: 1 a window layer, 0 a full one) full. Megatron's right window is 0 for a
    causal model; left -1 means no window."""
    text = flags.text("--window-size", fix="set it in the script")
    if text is None:
        return {}
    nums = [int(x) for x in re.findall(r"-?\d+", text)[:2]]
    shown = _short(text)
    if not nums or nums[0] == 0 or (len(nums) > 1 and nums[1] not in (0, -1)):
        raise SpecError(
            f"{flags.source}: --window-size {shown!r} must be (left, 0) with left > 0 "
            "(or -1 for no window) for a causal model; fix the value",
            field="--window-size",
            value=shown,
        )
    if nums[0] < 0:
        return {}
    skip = flags.text("--window-attn-skip-freq", fix="set it in the script")
    full = [False] * num_layers
    if skip is not None:  # Megatron: 1 = window, 0 = full
        full = _full_layers(flags, "--window-attn-skip-freq", skip, num_layers, "1 = window")
    return dict(window_size=nums[0], layer_types=tuple("full" if f else "sliding" for f in full))


def _full_layers(flags: Flags, flag: str, text: str, num_layers: int, one: str) -> list[bool]:
    """The full-attention layers of a Megatron layer-pattern flag (--window-attn-skip-freq,
    --linear-attention-freq): an int N makes every Nth one full ((i + 1) % N == 0), a 0/1 list
    expression the 0 entries; anything else is one line naming the flag."""
    if text.strip().isdigit() and int(text) > 0:
        return [(i + 1) % int(text) == 0 for i in range(num_layers)]
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        if _PATTERN_CHARS.search(text) or _pattern_length(tree) != num_layers:
            raise ValueError(text)
        return [x == 0 for x in _list_expr(tree)]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise SpecError(
            f"{flags.source}: {flag} {_short(text)!r} must be an integer or a 0/1 list of "
            f"{num_layers} entries ({one}); fix the value",
            field=flag,
            value=_short(text),
        ) from None


_UNPRICED = {"--" + k.replace("_", "-"): v for k, v in UNPRICED_KEYS.items()}
"""common.UNPRICED_KEYS by their Megatron-LM flags."""
_NOT_WRITTEN = {
    **{"--" + k.replace("_", "-"): v for k, v in NOT_WRITTEN_KEYS.items()},
    "--rope-type": "the RoPE variant",
    "--mrope-section": "multimodal RoPE sections",
    "--use-rope-scaling": "RoPE scaling",
    "--rope-scaling-factor": "RoPE scaling",
    "--rotary-scaling-factor": "RoPE scaling",
}
"""common.NOT_WRITTEN_KEYS by their flags, and Megatron-LM's RoPE-scaling flags
(docs/config.md "Layer pattern": rope_scaling is not read)."""


def _unpriced(flags: Flags, source: str, out: list[Violation]) -> None:
    """Refuse the layer kinds planner cannot price (_UNPRICED); warn of the settings that
    change the model and not the estimate, which the exports drop (_NOT_WRITTEN)."""
    for flag, what in _UNPRICED.items():
        if flags.has(flag):
            raise SpecError(f"{source}: {flag} builds {what}, {UNPRICED_MESSAGE}", field=flag)
    found = [f"{flag} ({what})" for flag, what in _NOT_WRITTEN.items() if flags.has(flag)]
    if found:
        out.append(
            Violation(
                "megatron-not-written", f"{', '.join(found)}: {NOT_WRITTEN_MESSAGE}", "warning"
            )
        )


def _attention_variant(flags: Flags, num_layers: int, fix: str) -> dict:
    """`--experimental-attention-variant` (Megatron-Core's experimental_attention_variant_module
    _specs): gated_delta_net (gdn) makes the layers `--linear-attention-freq` names Gated
    DeltaNet ones (an int N: every Nth layer full attention, the others linear; a 0/1 list: 1
    linear, 0 full; get_linear_attention_pattern) with the `--linear-*` dims (their
    TransformerConfig defaults: conv 4, heads 16 QK / 32 V of 128); dsa makes every layer a
    DSA one, its indexer `--dsa-indexer-n-heads / -head-dim / -topk`. Another variant is one
    line naming it."""
    variant = flags.text("--experimental-attention-variant", fix=fix)
    if variant is None:
        return {}
    if variant in ("gated_delta_net", "gdn"):
        freq = flags.text("--linear-attention-freq", fix=fix)
        if freq is None:
            raise SpecError(
                f"{flags.source}: --experimental-attention-variant {variant} needs "
                "--linear-attention-freq (the linear / full layer pattern); add it",
                field="--linear-attention-freq",
            )
        full = _full_layers(flags, "--linear-attention-freq", freq, num_layers, "1 = linear")
        return dict(
            layer_types=tuple("full" if x else "linear" for x in full),
            linear_num_key_heads=flags.int("--linear-num-key-heads", 16, fix=fix),
            linear_num_value_heads=flags.int("--linear-num-value-heads", 32, fix=fix),
            linear_key_head_dim=flags.int("--linear-key-head-dim", 128, fix=fix),
            linear_value_head_dim=flags.int("--linear-value-head-dim", 128, fix=fix),
            linear_conv_kernel_dim=flags.int("--linear-conv-kernel-dim", 4, fix=fix),
        )
    if variant == "dsa":
        need = {
            "--dsa-indexer-n-heads": "dsa_index_heads",
            "--dsa-indexer-head-dim": "dsa_index_head_dim",
            "--dsa-indexer-topk": "dsa_index_topk",
        }
        out: dict = {"layer_types": ("dsa",) * num_layers}
        for flag, key in need.items():
            value = flags.int(flag, fix=fix)
            if value is None:
                raise SpecError(
                    f"{flags.source}: --experimental-attention-variant dsa needs {flag} "
                    "(the indexer's shape); add it",
                    field=flag,
                )
            out[key] = value
        return out
    raise SpecError(
        f"{flags.source}: --experimental-attention-variant {_short(variant)!r}: planner prices "
        "gated_delta_net (gdn) and dsa only; plan the model from a model YAML",
        field="--experimental-attention-variant",
        value=_short(variant),
    )


def _pattern_length(node) -> int:
    """The length of a list pattern (int literals joined by + and repeated by * int), found
    without building it."""
    if isinstance(node, ast.List):
        if not all(isinstance(n, ast.Constant) and type(n.value) is int for n in node.elts):
            raise ValueError("not a list of integers")
        return len(node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _pattern_length(node.left) + _pattern_length(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        seq, times = _repeat(node)
        return _pattern_length(seq) * max(times, 0)
    raise ValueError("not a list pattern")


def _repeat(node) -> tuple[object, int]:
    seq, times = (
        (node.right, node.left) if isinstance(node.left, ast.Constant) else (node.left, node.right)
    )
    if not (isinstance(times, ast.Constant) and type(times.value) is int):
        raise ValueError("a list repeats an integer number of times")
    return seq, times.value


def _list_expr(node) -> list[int]:
    """The pattern itself (call after _pattern_length has bounded it)."""
    if isinstance(node, ast.List):
        return [n.value for n in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _list_expr(node.left) + _list_expr(node.right)
    seq, times = _repeat(node)
    return _list_expr(seq) * times


def _count(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"about 10^{len(str(n)) - 1}"


def model_from_flags(
    flags: Flags,
    ov: Overrides,
    source: str,
    seq: int | None,
    out: list[Violation],
    *,
    dialect: str = "Megatron-LM",
) -> ModelSpec:
    """The model the shape flags describe (--model replaces it; --vocab-size replaces its
    vocabulary). `dialect` "Megatron-DeepSpeed" reads its spellings: --num-key-value-heads,
    --topk, lower-case --normalization."""
    if ov.model is not None:
        model = resolve_model(ov.model)
        rule = "deepspeed" if dialect == "Megatron-DeepSpeed" else "megatron"
        replaced = model_replaced(_stated_shape(flags, dialect), model, f"{rule}-model-replaced")
        if replaced is not None:
            out.append(replaced)
        return model.model_copy(update={"vocab_size": ov.vocab_size}) if ov.vocab_size else model
    fix = "set it in the script or give --model"
    present = [f for f in _SHAPE_REQUIRED[:3] if flags.has(f)]
    if not present:
        raise SpecError(
            f"{source}: no model shape (--num-layers, --hidden-size, "
            "--num-attention-heads); give --model NAME (a preset such as llama3-70b, "
            "a model YAML or a HF config.json)",
            field="--num-layers",
        )
    for f in _SHAPE_REQUIRED[:3]:
        if not flags.has(f):
            raise SpecError(
                f"{source}: {f} is missing (Megatron-LM requires it); add it to the "
                "script or give --model",
                field=f,
            )
    deepspeed = dialect == "Megatron-DeepSpeed"
    if not deepspeed:
        _unpriced(flags, source, out)
    fields = dict(
        num_layers=flags.int("--num-layers", fix=fix),
        hidden_size=flags.int("--hidden-size", fix=fix),
        ffn_hidden_size=flags.int("--ffn-hidden-size", fix=fix),
        num_attention_heads=flags.int("--num-attention-heads", fix=fix),
        num_kv_heads=(
            flags.int("--num-key-value-heads", fix=fix)
            if deepspeed
            else flags.int("--num-query-groups", fix=fix)
            if flags.has("--group-query-attention")
            else None
        ),
        kv_channels=flags.int("--kv-channels", fix=fix),
        vocab_size=_vocab(flags, ov, source, deepspeed, out),
        # --quick-geglu: gated_linear_unit with quick_gelu, x * sigmoid(1.702 x) (gpt-oss's;
        # megatron/training/arguments.py), with --glu-linear-offset and
        # --activation-func-clamp-value its offset and clamp
        activation=(
            "swiglu"
            if flags.has("--swiglu")
            else "quick_geglu"
            if flags.has("--quick-geglu")
            else "squared_relu"
            if flags.has("--squared-relu")
            else "gelu"
        ),
        qk_norm=(
            "head" if flags.has("--qk-layernorm") else "l2" if flags.has("--qk-l2-norm") else "none"
        ),
        glu_linear_offset=flags.float("--glu-linear-offset") or 0.0,
        activation_clamp=flags.float("--activation-func-clamp-value"),
        tied_embeddings=not flags.has("--untie-embeddings-and-output-weights"),
        normalization=_norm(flags, deepspeed),
        add_bias_linear=not flags.has("--disable-bias-linear"),
        add_qkv_bias=flags.has("--add-qkv-bias") and flags.has("--disable-bias-linear"),
        seq_length=seq,
    )
    fields.update(_position(flags, deepspeed))
    fields.update(_window(flags, fields["num_layers"], out))
    if not deepspeed:
        variant = _attention_variant(flags, fields["num_layers"], fix)
        if variant and "layer_types" in fields:
            raise SpecError(
                f"{source}: --experimental-attention-variant with --window-size: Megatron-Core "
                "builds the variant's layers without windows; drop one of them",
                field="--experimental-attention-variant",
            )
        fields.update(variant)
        fields.update(
            norm_zero_centered=flags.has("--apply-layernorm-1p"),
            attention_output_gate=flags.has("--attention-output-gate"),
        )
    if flags.text("--softmax-type", fix="set it in the script") == "learnable":
        fields["attention_sinks"] = True  # a learned sink logit per head (gpt-oss)
    if not deepspeed:
        fields["mtp_num_layers"] = flags.int("--mtp-num-layers", 0, fix=fix)
    fields.update(_moe_fields(flags, fields, deepspeed, out, fix))
    if flags.has("--multi-latent-attention"):
        fields.update(
            q_lora_rank=flags.int("--q-lora-rank", fix=fix),
            kv_lora_rank=flags.int("--kv-lora-rank", 512, fix=fix),
            qk_head_dim=flags.int("--qk-head-dim", 128, fix=fix),
            qk_pos_emb_head_dim=flags.int("--qk-pos-emb-head-dim", 64, fix=fix),
            v_head_dim=flags.int("--v-head-dim", 128, fix=fix),
        )
    return inline_model(fields, source=source, fmt=f"{dialect} flags")


_MODEL_FLAGS = {
    "--num-layers": "num_layers",
    "--hidden-size": "hidden_size",
    "--ffn-hidden-size": "ffn_hidden_size",
    "--num-attention-heads": "num_attention_heads",
    "--kv-channels": "kv_channels",
    "--num-experts": "num_experts",
    "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
    "--moe-router-num-groups": "moe_router_num_groups",
    "--moe-router-group-topk": "moe_router_group_topk",
}
"""The model-shape flags both dialects spell alike, and the ModelSpec field each sets."""


def _stated_shape(flags: Flags, dialect: str) -> list[tuple[str, str, str]]:
    """(flag, value, ModelSpec field) of the shape flags the script states; --mtp-num-layers
    counts as 0 when absent (Megatron's default), since MTP adds layers."""
    deepspeed = dialect == "Megatron-DeepSpeed"
    spelled = dict(_MODEL_FLAGS)
    spelled["--num-key-value-heads" if deepspeed else "--num-query-groups"] = "num_kv_heads"
    spelled["--topk" if deepspeed else "--moe-router-topk"] = "moe_top_k"
    capacity = "--moe-train-capacity-factor" if deepspeed else "--moe-expert-capacity-factor"
    spelled[capacity] = "moe_capacity_factor"
    stated = [(f, v, name) for f, name in spelled.items() if (v := flags.maybe(f)) is not None]
    if not deepspeed:
        stated.append(
            ("--mtp-num-layers", flags.maybe("--mtp-num-layers") or "0", "mtp_num_layers")
        )
    return stated


GPT2_VOCAB = 50257
"""GPT-2's byte-level BPE: 50,257 tokens (Radford et al. 2019, "Language Models are
Unsupervised Multitask Learners", section 2.3; the `gpt2` vocab.json of openai-community/gpt2)."""


def _vocab(
    flags: Flags,
    ov: Overrides,
    source: str,
    deepspeed: bool = False,
    out: list[Violation] | None = None,
) -> int:
    """--vocab-size (planner's) first; else the tokenizer's, as Megatron builds it (BigScience's
    Megatron-DeepSpeed: --pad-vocab-size-to, the padded vocabulary itself). --vocab-file with
    --merge-file and no --tokenizer-type is the GPT-2 BPE of Megatron-DeepSpeed's scripts:
    GPT-2's 50,257 tokens, with a note."""
    if ov.vocab_size is not None:
        return ov.vocab_size
    if deepspeed and flags.has("--pad-vocab-size-to"):
        return flags.int("--pad-vocab-size-to", fix="set it in the script")
    if (
        not flags.has("--tokenizer-type")
        and flags.has("--vocab-file")
        and flags.has("--merge-file")
        and not flags.has("--vocab-size")
    ):
        if out is not None:
            out.append(
                Violation(
                    f"{'deepspeed' if deepspeed else 'megatron'}-gpt2-vocabulary",
                    f"--vocab-file {_short(flags.shown('--vocab-file'), 40)} with "
                    "--merge-file and no --tokenizer-type is GPT-2's BPE: planner "
                    f"takes GPT-2's vocabulary, {GPT2_VOCAB:,} tokens (give "
                    "--vocab-size V for another)",
                    "warning",
                )
            )
        return GPT2_VOCAB
    fix = "set it in the script, or give --vocab-size V (or --model)"
    tokenizer = (
        flags.maybe("--tokenizer-type"),
        flags.maybe("--tokenizer-model"),
        flags.maybe("--vocab-file"),
    )
    if tokenizer[0] == "NullTokenizer" and flags.has("--vocab-size"):
        return flags.int("--vocab-size", fix=fix) + 1  # NullTokenizer adds an EOD token
    vocab = vocab_from_tokenizer(*tokenizer) or flags.int("--vocab-size", fix=fix)
    if vocab is None:
        shown = (
            " ".join(
                _short(flags.shown(f))
                for f in ("--tokenizer-type", "--tokenizer-model")
                if flags.has(f)
            )
            or "none given"
        )
        raise SpecError(
            f"{source}: the vocabulary size is unknown (tokenizer: {shown}); give "
            "--vocab-size V (the model's vocabulary), use --tokenizer-type "
            "NullTokenizer --vocab-size V-1 in the script, or give --model",
            field="--vocab-size",
        )
    return vocab


def _position(flags: Flags, deepspeed: bool = False) -> dict:
    """The position embedding; Megatron-DeepSpeed's alibi (BLOOM) has no parameters and is
    planned as none (its bias is computed inside the attention kernel)."""
    pos = flags.choice(
        "--position-embedding-type",
        ("learned_absolute", "rope", "mrope", "yarn", "relative", "none")
        + (("alibi",) if deepspeed else ()),
        "rope" if flags.has("--use-rotary-position-embeddings") else "learned_absolute",
    )
    if flags.has("--no-position-embedding") or pos == "alibi":
        pos = "none"
    fields = dict(
        position_embedding_type=pos if pos in ("rope", "learned_absolute", "none") else "rope"
    )
    base = flags.float("--rotary-base")
    if base is not None and fields["position_embedding_type"] == "rope":
        fields["rotary_base"] = base
    share = flags.float("--rotary-percent")
    if share is not None and not 0 < share <= 1:
        raise SpecError(
            f"{flags.source}: --rotary-percent {share:g} is outside (0, 1] (the share "
            "of each head's dimensions RoPE rotates); fix the value",
            field="--rotary-percent",
            value=share,
        )
    if share is not None and fields["position_embedding_type"] == "rope":
        fields["rotary_percent"] = share
    return fields


def _moe_fields(
    flags: Flags, fields: dict, deepspeed: bool, out: list[Violation], fix: str
) -> dict:
    experts = flags.int("--num-experts", fix=fix)
    if not experts:
        return {}
    topk = "--topk" if deepspeed else "--moe-router-topk"
    layers = _moe_dense_layers(flags, fields["num_layers"], out)
    moe = dict(
        num_experts=experts,
        moe_top_k=flags.int(topk, 2, fix=fix),
        moe_ffn_hidden_size=flags.int("--moe-ffn-hidden-size", fix=fix),
        **(
            {"moe_layer_freq": layers}
            if isinstance(layers, tuple)
            else {"num_dense_layers": layers}
        ),
    )
    shared = flags.int("--moe-shared-expert-intermediate-size", fix=fix)
    if shared:
        unit = moe["moe_ffn_hidden_size"] or fields["ffn_hidden_size"] or shared
        moe["num_shared_experts"] = max(1, round(shared / unit))
        moe["moe_shared_expert_gate"] = not deepspeed and flags.has("--moe-shared-expert-gate")
    capacity = flags.float(
        "--moe-train-capacity-factor" if deepspeed else "--moe-expert-capacity-factor", fix=fix
    )
    if capacity is not None:
        moe["moe_capacity_factor"] = capacity
    groups = flags.int("--moe-router-num-groups", fix=fix)
    group_topk = flags.int("--moe-router-group-topk", fix=fix)
    if groups is not None or group_topk is not None:  # ModelSpec checks they go together
        moe.update(moe_router_num_groups=groups, moe_router_group_topk=group_topk)
    if not deepspeed:
        score = flags.text("--moe-router-score-function", "softmax", fix=fix)
        if score not in ROUTER_SCORES:
            raise SpecError(
                f"{flags.source}: --moe-router-score-function {_short(str(score))!r}: planner "
                "reads softmax or sigmoid routers; fix the value or give --model",
                field="--moe-router-score-function",
                value=score,
            )
        moe["moe_router_score"] = score
        scale = flags.float("--moe-router-topk-scaling-factor", fix=fix)
        if scale is not None and scale != 1.0:
            moe["moe_router_scaling"] = scale
        moe["moe_router_expert_bias"] = flags.has("--moe-router-enable-expert-bias")
        moe["moe_router_pre_softmax"] = flags.has("--moe-router-pre-softmax")
    return moe


def _norm(flags: Flags, deepspeed: bool) -> str:
    if not deepspeed:
        return flags.choice("--normalization", ("LayerNorm", "RMSNorm"), "LayerNorm")
    value = (flags.text("--normalization", "layernorm", fix="set it in the script") or "").lower()
    if value not in ("layernorm", "rmsnorm"):
        raise SpecError(
            f"{flags.source}: --normalization {_short(value)!r} is not layernorm or rmsnorm",
            field="--normalization",
            value=value,
        )
    return "RMSNorm" if value == "rmsnorm" else "LayerNorm"


# ------------------------------------------------------------------------------ rules


def _flag_rules(flags: Flags, out: list[Violation]) -> None:
    """Megatron rules about flags alone (docs/reference/framework-rules.md#r7-required-model-flags,
    #r13-overlap-flags, #r15-exclusive-settings, and the recompute checks)."""
    if flags.has("--bf16") and flags.has("--fp16"):
        out.append(
            Violation(
                "megatron-precision-exclusive",
                "--bf16 and --fp16 are exclusive (Megatron asserts it); keep one",
                "error",
            )
        )
    if flags.has("--checkpoint-activations"):
        out.append(
            Violation(
                "megatron-deprecated-flag",
                "--checkpoint-activations is no longer valid (Megatron exits); use "
                "--recompute-activations or --recompute-granularity full "
                "--recompute-method uniform --recompute-num-layers 1",
                "error",
            )
        )
    gran = flags.choice("--recompute-granularity", ("full", "selective"))
    method, layers = flags.has("--recompute-method"), flags.has("--recompute-num-layers")
    if gran == "full" and not (method and layers):
        missing = " and ".join(
            f
            for f, ok in (("--recompute-method", method), ("--recompute-num-layers", layers))
            if not ok
        )
        out.append(
            Violation(
                "megatron-recompute-flags",
                f"--recompute-granularity full also needs {missing} (Megatron's "
                "TransformerConfig raises); e.g. --recompute-method uniform "
                "--recompute-num-layers 1",
                "error",
            )
        )
    if gran == "selective" and (method or layers):
        given = " and ".join(
            f
            for f, ok in (("--recompute-method", method), ("--recompute-num-layers", layers))
            if ok
        )
        out.append(
            Violation(
                "megatron-recompute-flags",
                f"--recompute-granularity selective forbids {given} (Megatron's "
                "TransformerConfig raises); remove it",
                "error",
            )
        )
    if flags.has("--num-query-groups") and not flags.has("--group-query-attention"):
        out.append(
            Violation(
                "megatron-gqa-flag",
                f"--num-query-groups {_short(flags.shown('--num-query-groups'))} has "
                "no effect without --group-query-attention: Megatron builds "
                "multi-head attention (and planner models that); add "
                "--group-query-attention",
                "warning",
            )
        )
    if flags.has("--multi-latent-attention") and flags.has("--group-query-attention"):
        out.append(
            Violation(
                "megatron-mla-excludes-gqa",
                "--multi-latent-attention and --group-query-attention are exclusive "
                "(Megatron asserts it); drop --group-query-attention",
                "error",
            )
        )
    if not (flags.has("--bf16") or flags.has("--fp16")):
        out.append(
            Violation(
                "megatron-fp32",
                "neither --bf16 nor --fp16: Megatron-LM trains in fp32, which "
                "planner does not model (it plans bf16); add --bf16",
                "warning",
            )
        )
    vflags = [
        f
        for f in (
            "--num-layers-per-virtual-pipeline-stage",
            "--num-virtual-stages-per-pipeline-rank",
            "--pipeline-model-parallel-layout",
        )
        if flags.has(f)
    ]
    if len(vflags) > 1:
        out.append(
            Violation(
                "megatron-vpp-flags-exclusive",
                f"{' and '.join(vflags)} are exclusive (Megatron asserts it); keep one",
                "error",
            )
        )


def _required_rules(flags: Flags, seq: int | None, out: list[Violation]) -> None:
    """Megatron R7 (docs/reference/framework-rules.md#r7-required-model-flags): the shape flags
    are required; max_position_embeddings >= seq_length."""
    if not any(flags.has(f) for f in _SHAPE_REQUIRED):
        return  # the shape comes from --model (e.g. a sourced file)
    for f in _SHAPE_REQUIRED:
        if not flags.has(f):
            out.append(
                Violation(
                    "megatron-required-flag", f"{f} is missing; Megatron-LM requires it", "error"
                )
            )
    max_pos = flags.int("--max-position-embeddings")
    if max_pos is not None and seq is not None and max_pos < seq:
        out.append(
            Violation(
                "megatron-max-position-embeddings",
                f"--max-position-embeddings ({max_pos}) must be >= --seq-length "
                f"({seq}) (Megatron asserts it); raise it to {seq}",
                "error",
            )
        )


def _model_rules(flags: Flags, model: ModelSpec, out: list[Violation]) -> None:
    """What Megatron checks about the model flags: MTP needs rope or no position embedding."""
    if model.mtp_num_layers and model.position_embedding not in ("rope", "none"):
        out.append(
            Violation(
                "megatron-mtp-position-embedding",
                f"--mtp-num-layers {model.mtp_num_layers} needs rope or no "
                f"position embedding, not {model.position_embedding} (Megatron "
                "asserts it); use --position-embedding-type rope",
                "error",
            )
        )


def _fsdp_rules(flags: Flags, script: shell.Script | None, out: list[Violation]) -> None:
    """Megatron-FSDP asserts a CUDA_DEVICE_MAX_CONNECTIONS other than 1 and the fsdp_dtensor
    checkpoint format (validate_args)."""
    if not flags.has("--use-megatron-fsdp"):
        return
    if script is not None and script.var("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        out.append(
            Violation(
                "megatron-fsdp-cuda-device-max-connections",
                "Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1, and "
                "the script exports 1; unset it for FSDP",
                "error",
            )
        )
    fmt = flags.text("--ckpt-format", "torch_dist", fix="set it in the script")
    if fmt != "fsdp_dtensor":
        out.append(
            Violation(
                "megatron-fsdp-ckpt-format",
                f"--use-megatron-fsdp needs --ckpt-format fsdp_dtensor, not {fmt} "
                "(Megatron asserts it); add --ckpt-format fsdp_dtensor",
                "error",
            )
        )


# ------------------------------------------------------------------------------ the layout


def _degrees(flags: Flags) -> dict[str, int]:
    names = {
        "tp": "--tensor-model-parallel-size",
        "pp": "--pipeline-model-parallel-size",
        "cp": "--context-parallel-size",
        "ep": "--expert-model-parallel-size",
    }
    deg = {axis: flags.int(flag, 1) for axis, flag in names.items()}
    deg["etp"] = flags.int("--expert-tensor-parallel-size", deg["tp"])
    names["etp"] = "--expert-tensor-parallel-size"
    for axis, value in deg.items():
        if not 1 <= value <= MAX_GPUS:
            raise SpecError(
                f"{flags.source}: {names[axis]} {value:,} must be between 1 and "
                f"{MAX_GPUS:,}; fix the value",
                field=names[axis],
                value=value,
            )
    return deg


def _vpp(flags: Flags, num_layers: int, pp: int, out: list[Violation]) -> int:
    """Virtual stages per rank: given, or layers per rank / layers per virtual stage."""
    if flags.has("--num-virtual-stages-per-pipeline-rank"):
        v = flags.int("--num-virtual-stages-per-pipeline-rank")
        if not 1 <= v <= 100_000:
            raise SpecError(
                f"{flags.source}: --num-virtual-stages-per-pipeline-rank {v:,} must "
                "be at least 1 (and at most 100,000); fix the value",
                field="--num-virtual-stages-per-pipeline-rank",
                value=v,
            )
        return v
    per_stage = flags.int("--num-layers-per-virtual-pipeline-stage")
    if per_stage is None:
        return 1
    per_rank = num_layers // pp
    if per_stage < 1 or per_rank % per_stage:
        out.append(
            Violation(
                "megatron-vpp-layers",
                f"layers per pipeline rank ({per_rank} = {num_layers}/{pp}) must be "
                f"divisible by --num-layers-per-virtual-pipeline-stage "
                f"({per_stage}) (Megatron asserts it)",
                "error",
            )
        )
    return max(1, per_rank // max(1, per_stage))


def _split(
    flags: Flags, num_layers: int, pp: int, vpp: int, out: list[Violation]
) -> tuple[int | None, int | None]:
    """(first, last) stage layers: --decoder-first/last-..., or the accounted split."""
    first = flags.int("--decoder-first-pipeline-num-layers")
    last = flags.int("--decoder-last-pipeline-num-layers")
    emb = flags.has("--account-for-embedding-in-pipeline-split")
    loss = flags.has("--account-for-loss-in-pipeline-split")
    if flags.has("--pipeline-model-parallel-layout"):
        given = [
            f
            for f, on in (
                ("--decoder-first-pipeline-num-layers", first is not None),
                ("--decoder-last-pipeline-num-layers", last is not None),
                ("--account-for-embedding-in-pipeline-split", emb),
                ("--account-for-loss-in-pipeline-split", loss),
            )
            if on
        ]
        if given:
            out.append(
                Violation(
                    "megatron-pipeline-layout",
                    f"--pipeline-model-parallel-layout places every layer itself; "
                    f"planner ignores {' and '.join(given)}",
                    "warning",
                )
            )
        return None, None
    if not (emb or loss):
        return first, last
    if first is not None or last is not None:
        out.append(
            Violation(
                "megatron-pipeline-split",
                "--account-for-embedding/loss-in-pipeline-split cannot be combined "
                "with --decoder-first/last-pipeline-num-layers; keep one way",
                "error",
            )
        )
        return first, last
    first, last, problem = accounted_split(num_layers, pp=pp, vpp=vpp, embedding=emb, loss=loss)
    if problem:
        out.append(
            Violation("megatron-pipeline-split", f"{problem} (Megatron asserts it)", "error")
        )
    return first, last


def _sp_and_overlap(flags: Flags, tp: int, out: list[Violation]) -> bool:
    """Megatron R12 (SP off at TP 1, a warning;
    docs/reference/framework-rules.md#r12-sequence-parallelism-with-tp-1) and R13 (overlap flags,
    errors; docs/reference/framework-rules.md#r13-overlap-flags); SP as run."""
    sp = flags.has("--sequence-parallel")
    if sp and tp == 1:
        out.append(
            Violation(
                "megatron-sp-needs-tp",
                "--sequence-parallel with tensor-model-parallel-size 1: Megatron-LM "
                "turns it off (with a warning); drop the flag",
                "warning",
            )
        )
        sp = False
    if flags.has("--tp-comm-overlap") and not flags.has("--sequence-parallel"):
        out.append(
            Violation(
                "megatron-tp-comm-overlap-needs-sp",
                "--tp-comm-overlap needs --sequence-parallel (Megatron asserts it); "
                "add --sequence-parallel or drop --tp-comm-overlap",
                "error",
            )
        )
    if flags.has("--overlap-param-gather") and not (
        (flags.has("--use-distributed-optimizer") or flags.has("--use-megatron-fsdp"))
        and flags.has("--overlap-grad-reduce")
    ):
        out.append(
            Violation(
                "megatron-overlap-param-gather",
                "--overlap-param-gather needs --use-distributed-optimizer (or "
                "Megatron-FSDP) and --overlap-grad-reduce (Megatron asserts it); "
                "add them",
                "error",
            )
        )
    return sp


def _micro_batch(flags: Flags, out: list[Violation]) -> int:
    if not flags.has("--micro-batch-size"):
        out.append(
            Violation(
                "megatron-required-flag",
                "--micro-batch-size is missing; Megatron-LM needs it (planner uses 1)",
                "error",
            )
        )
        return 1
    mbs = flags.int("--micro-batch-size")
    if not 1 <= mbs <= 100_000_000:
        raise SpecError(
            f"{flags.source}: --micro-batch-size {mbs:,} must be at least 1 (and "
            "at most 100,000,000); fix the value",
            field="--micro-batch-size",
            value=mbs,
        )
    return mbs


_FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _zero(flags: Flags) -> int:
    """0 plain DDP; 1 --use-distributed-optimizer; Megatron FSDP by sharding strategy;
    torch FSDP2 = 3 (2 without resharding after forward)."""
    if flags.has("--use-megatron-fsdp"):
        return _FSDP_ZERO[
            flags.choice("--data-parallel-sharding-strategy", tuple(_FSDP_ZERO), "no_shard")
        ]
    if flags.has("--use-torch-fsdp2"):
        return 2 if flags.has("--torch-fsdp2-no-reshard-after-forward") else 3
    return 1 if flags.has("--use-distributed-optimizer") else 0


def _layout(
    flags: Flags, model: ModelSpec, num_gpus: int, out: list[Violation]
) -> tuple[Layout, dict]:
    """The layout, and the training keys the flags set (precision, fp8 recipe, ...)."""
    d = _degrees(flags)
    tp, pp, cp = d["tp"], d["pp"], d["cp"]
    layout_str = flags.has("--pipeline-model-parallel-layout")
    vpp = 1 if layout_str else _vpp(flags, model.num_layers, pp, out)
    first, last = _split(flags, model.num_layers, pp, vpp, out)
    cp_comm = flags.text("--cp-comm-type", "p2p", fix="set it in the script")
    if cp_comm not in ("p2p", "a2a", "allgather", "a2a+p2p"):
        raise SpecError(
            f"{flags.source}: --cp-comm-type {_short(cp_comm)!r} is not one of p2p, "
            "a2a, allgather, a2a+p2p; fix the value",
            field="--cp-comm-type",
            value=cp_comm,
        )
    zero = _zero(flags)
    recipe = read_recipe(
        flags,
        num_layers=model.num_layers,
        layers_per_chunk=max(1, model.num_layers // (pp * vpp)),
        pp=pp,
        zero=zero,
        is_moe=model.is_moe,
        out=out,
    )
    layout = Layout(
        tp=tp,
        cp=cp,
        ep=d["ep"],
        dp=max(1, num_gpus // (tp * pp * cp)),
        pp=pp,
        vpp=vpp,
        etp=d["etp"],
        sp=_sp_and_overlap(flags, tp, out),
        zero=zero,
        micro_batch_size=_micro_batch(flags, out),
        first_stage_layers=first,
        last_stage_layers=last,
        cp_comm_type=cp_comm,
        overlap_grad_reduce=flags.has("--overlap-grad-reduce"),
        overlap_param_gather=flags.has("--overlap-param-gather"),
        tp_comm_overlap=flags.has("--tp-comm-overlap"),
        **recipe.layout_fields(),
    )
    return layout, recipe.training


# ------------------------------------------------------------------------------ entry


def _connections_rule(
    found: Launch, flags: Flags, layout: Layout, hardware, out: list[Violation]
) -> None:
    """Megatron asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 before Blackwell,
    except with FSDP or EP-communication overlap (validate_args)."""
    if (
        not found.is_script
        or not (layout.tp > 1 or layout.cp > 1)
        or flags.has("--use-megatron-fsdp")
        or flags.has("--use-torch-fsdp2")
        or layout.overlap_moe_expert_parallel_comm
        or hardware.architecture not in ("ampere", "hopper", "cdna3")
        or found.script.var("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    ):
        return
    out.append(
        Violation(
            "megatron-cuda-device-max-connections",
            "Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 "
            f"on {hardware.name}; the script does not export it (fine if the "
            "job's environment does)",
            "warning",
        )
    )


def load(path: str | Path, text: str, ov: Overrides) -> Imported:
    """Read a Megatron-LM launch script or argument file (text already read)."""
    source = str(path)
    found, flags, out = read_launch(text, source, ov=ov)
    seq = (
        flags.int("--seq-length")
        or flags.int("--encoder-seq-length")
        or flags.int("--decoder-seq-length")
    )
    _flag_rules(flags, out)
    _required_rules(flags, seq, out)
    hardware = hardware_of(ov)
    model = model_from_flags(flags, ov, source, seq, out)
    _model_rules(flags, model, out)
    _fsdp_rules(flags, found.script if found.is_script else None, out)
    num_gpus = world_size(found, ov, hardware, source, out)
    layout, training = _layout(flags, model, num_gpus, out)
    not_modelled(flags, out)
    _connections_rule(found, flags, layout, hardware, out)
    gbs = flags.int("--global-batch-size") or layout.micro_batch_size * layout.dp
    job = make_job(
        model=model,
        hardware=hardware,
        num_gpus=num_gpus,
        seq_length=seq or model.seq_length or flags.int("--max-position-embeddings"),
        global_batch_size=gbs,
        source=source,
        **training,
    )
    return Imported(job, layout, out, "megatron", source)
