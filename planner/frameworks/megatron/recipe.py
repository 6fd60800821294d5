"""The production-recipe flags of a Megatron-LM launch, read into our Layout and training keys.

Each flag maps to the field of the same name (README "Framework configs"), with Megatron-LM's
own checks at its own severity (megatron/training/arguments.py `validate_args`,
core/transformer/transformer_config.py, core/optimizer/optimizer_config.py):

| flags | field |
|---|---|
| `--fp8-format`, `--fp8-recipe`, `--fp8-param-gather` | training.precision fp8, fp8_recipe, fp8_param_gather |
| `--recompute-granularity selective --recompute-modules ...`, `--moe-layer-recompute` | recompute_modules |
| `--recompute-granularity full --recompute-method block --recompute-num-layers N` | recompute_num_layers |
| `--cpu-offloading-num-layers N` | cpu_offloading_num_layers |
| `--grad-reduce-in-bf16` (bf16), `--accumulate-allreduce-grads-in-fp32` (fp16) | grad_reduce_in_fp32 |
| `--use-precision-aware-optimizer --exp-avg-dtype/--exp-avg-sq-dtype` | exp_avg_dtype, exp_avg_sq_dtype |
| `--moe-token-dispatcher-type`, `--moe-flex-dispatcher-backend`, `--moe-enable-deepep` | moe_token_dispatcher |
| `--overlap-moe-expert-parallel-comm` | overlap_moe_expert_parallel_comm |
| `--moe-pad-expert-input-to-capacity` (with `--moe-expert-capacity-factor`) | moe_pad_expert_input_to_capacity |
| `--cuda-graph-impl`, `--cuda-graph-scope`, `--enable-cuda-graph`, `--external-cuda-graph` | cuda_graphs |
| `--pipeline-model-parallel-layout` | pipeline_model_parallel_layout |

`not_modelled` names every other known flag that changes memory or time and that the cost
model does not apply: a warning each, so nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import get_args

from planner.errors import Violation
from planner.readers import bash as shell
from planner.specs import RecomputeModule

__all__ = ["Recipe", "read_recipe", "read_recompute", "not_modelled", "NOT_MODELLED"]

_MODULES = frozenset(get_args(RecomputeModule))
_DTYPES = ("fp32", "fp16", "bf16", "fp8")


@dataclass
class Recipe:
    """The recipe fields a launch sets (Layout and TrainingSpec names)."""

    recompute: str = "none"
    recompute_modules: tuple[str, ...] = ()
    recompute_num_layers: int | None = None
    cpu_offloading_num_layers: int = 0
    grad_reduce_in_fp32: bool = True
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    moe_token_dispatcher: str = "allgather"
    overlap_moe_expert_parallel_comm: bool = False
    moe_pad_expert_input_to_capacity: bool = False
    cuda_graphs: str = "none"
    pipeline_model_parallel_layout: str | None = None
    training: dict = field(default_factory=dict)

    def layout_fields(self) -> dict:
        """The recipe's values of Layout fields (every field of this class that is a row of
        the layout table)."""
        from dataclasses import fields

        from planner.layout import LAYOUT_FIELDS

        rows = {f.name for f in LAYOUT_FIELDS}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in rows}


def _err(rule: str, message: str) -> Violation:
    return Violation(rule, message, "error")


def _warn(rule: str, message: str) -> Violation:
    return Violation(rule, message, "warning")


def read_recompute(
    flags, layers_per_chunk: int, out: list[Violation], prefix: str = "megatron"
) -> tuple[str, tuple[str, ...], int | None]:
    """(recompute, recompute_modules, recompute_num_layers) as Megatron resolves them."""
    gran = flags.choice("--recompute-granularity", ("full", "selective"))
    if gran is None and flags.has("--recompute-activations"):
        gran = "selective"
    if gran is None and flags.has("--checkpoint-activations"):
        gran = "full"
    modules: list[str] = []
    if flags.has("--recompute-modules"):
        given = flags.items("--recompute-modules")
        bad = [m for m in given if m not in _MODULES]
        if bad:
            out.append(
                _err(
                    f"{prefix}-recompute-modules",
                    f"--recompute-modules {' '.join(bad)}: not one of "
                    f"{', '.join(sorted(_MODULES))} (Megatron's TransformerConfig "
                    "raises); fix the module names",
                )
            )
        if gran == "selective":
            modules = [m for m in given if m in _MODULES]
        else:
            out.append(
                _warn(
                    f"{prefix}-recompute-modules",
                    "--recompute-modules applies with --recompute-granularity "
                    "selective only; Megatron ignores it here",
                )
            )
    if flags.has("--moe-layer-recompute"):
        if gran == "full":
            out.append(
                _err(
                    f"{prefix}-recompute-flags",
                    "--moe-layer-recompute cannot be combined with full recompute "
                    "(Megatron raises); use --recompute-modules moe with selective",
                )
            )
        else:
            gran = "selective"
            modules = (modules or ["core_attn"]) + (["moe"] if "moe" not in modules else [])
    num = None
    if gran == "full":
        method = flags.choice("--recompute-method", ("uniform", "block"))
        n = flags.int("--recompute-num-layers", 1)
        if method == "block":
            if n < 0:
                out.append(
                    _err(
                        f"{prefix}-recompute-flags",
                        f"--recompute-num-layers {n} must be >= 0; fix the value",
                    )
                )
            num = max(0, min(n, layers_per_chunk))
        elif n > 1:
            out.append(
                _warn(
                    f"{prefix}-uniform-recompute-chunks",
                    f"--recompute-method uniform --recompute-num-layers {n} keeps the "
                    f"input of every {n}-layer chunk (less memory than 1, a larger "
                    "recompute working set): planner models chunks of 1",
                )
            )
    return gran or "none", tuple(dict.fromkeys(modules)), num


def _fp8(flags, zero: int, out: list[Violation]) -> tuple[bool, dict]:
    fp8 = flags.choice("--fp8-format", ("e4m3", "hybrid")) is not None
    recipe = flags.choice("--fp8-recipe", ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"))
    keys: dict = {}
    if recipe is not None and not fp8:
        out.append(
            _warn(
                "megatron-fp8-flags",
                f"--fp8-recipe {recipe} has no effect without "
                "--fp8-format (FP8 is off); add --fp8-format "
                "hybrid or drop it",
            )
        )
    elif recipe == "custom":
        out.append(
            _warn(
                "megatron-not-modelled",
                "--fp8-recipe custom (a --fp8-quantizer-factory recipe) is not "
                "modelled: planner plans delayed scaling",
            )
        )
    elif recipe is not None:
        keys["fp8_recipe"] = recipe
    if flags.has("--fp8-param-gather"):
        if not fp8:
            out.append(
                _warn(
                    "megatron-fp8-flags",
                    "--fp8-param-gather has no effect without --fp8-format; drop it",
                )
            )
        else:
            keys["fp8_param_gather"] = True
            if zero == 0:
                out.append(
                    _err(
                        "megatron-fp8-param-gather",
                        "--fp8-param-gather needs the distributed optimizer or FSDP "
                        "(Megatron asserts it); add --use-distributed-optimizer",
                    )
                )
    return fp8, keys


def _moments(flags, out: list[Violation]) -> tuple[str, str]:
    aware = flags.has("--use-precision-aware-optimizer")
    if aware and flags.choice("--main-params-dtype", _DTYPES, "fp32") == "fp32":
        # Megatron-Core OptimizerConfig.store_param_remainders (True; Megatron-LM has no flag
        # for it): the fp32 master weights kept as the bf16 parameters + 16-bit remainders
        out.append(
            _warn(
                "megatron-param-remainders",
                "--use-precision-aware-optimizer: Megatron-Core keeps the fp32 master weights "
                "as the bf16 parameters plus 16-bit remainders (store_param_remainders, on by "
                "default), 2 bytes a parameter where planner counts 4: the optimizer states "
                "are estimated high",
            )
        )
    dtypes = []
    for flag in ("--exp-avg-dtype", "--exp-avg-sq-dtype"):
        d = flags.choice(flag, _DTYPES, "fp32")
        if d != "fp32" and not aware:
            out.append(
                _err(
                    "megatron-precision-aware-optimizer",
                    f"{flag} {d} needs --use-precision-aware-optimizer (Megatron "
                    "asserts the moments are fp32 without it); add the flag",
                )
            )
            d = "fp32"
        if d in ("fp16", "fp8"):
            size = "2 bytes, as bf16" if d == "fp16" else "1 byte; planner counts 2, as bf16"
            out.append(
                _warn(
                    "megatron-not-modelled",
                    f"{flag} {d}: planner plans the moment in bf16 ({size})",
                )
            )
            d = "bf16"
        dtypes.append(d)
    return dtypes[0], dtypes[1]


def _dispatcher(flags, out: list[Violation]) -> str:
    kind = flags.choice(
        "--moe-token-dispatcher-type", ("allgather", "alltoall", "flex"), "allgather"
    )
    backend = flags.text("--moe-flex-dispatcher-backend", fix="set it in the script")
    if kind != "flex":
        for flag in ("--moe-flex-dispatcher-backend", "--moe-enable-deepep"):
            if flags.has(flag):
                out.append(
                    _warn(
                        "megatron-moe-dispatcher",
                        f"{flag} applies to --moe-token-dispatcher-type flex only; "
                        f"Megatron dispatches with {kind} here",
                    )
                )
        return kind
    if backend is None:
        return "deepep"  # --moe-enable-deepep, or flex's default backend
    if backend not in ("deepep", "hybridep"):
        out.append(
            _warn(
                "megatron-moe-dispatcher",
                f"--moe-flex-dispatcher-backend {backend!r} is not deepep or hybridep; "
                "planner plans deepep",
            )
        )
        return "deepep"
    return backend


def _cuda_graphs(flags, out: list[Violation]) -> str:
    impl = flags.choice("--cuda-graph-impl", ("none", "local", "transformer_engine"), "none")
    old = [f for f in ("--enable-cuda-graph", "--external-cuda-graph") if flags.has(f)]
    if old:
        if impl != "none":
            out.append(
                _err(
                    "megatron-cuda-graph-flags",
                    f"{old[0]} cannot be combined with --cuda-graph-impl (Megatron "
                    "asserts it); keep --cuda-graph-impl",
                )
            )
        if len(old) == 2:
            out.append(
                _err(
                    "megatron-cuda-graph-flags",
                    "--enable-cuda-graph and --external-cuda-graph are exclusive "
                    "(Megatron asserts it); keep one",
                )
            )
        impl = "local" if old[0] == "--enable-cuda-graph" else "transformer_engine"
    if impl == "none":
        return "none"
    scope = flags.items("--cuda-graph-scope") or ["full"]
    if "full_iteration" in scope:
        if impl == "local":
            return "full"
        out.append(
            _warn(
                "megatron-cuda-graph-flags",
                "--cuda-graph-scope full_iteration works with --cuda-graph-impl local "
                "only; planner models per-layer graphs",
            )
        )
    return "partial"


def _offloading(
    flags, *, num_layers: int, pp: int, recompute: str, graphs: str, out: list[Violation]
) -> int:
    n = flags.int("--cpu-offloading-num-layers", 0)
    if n <= 0:
        return 0
    problems = [
        (
            n >= num_layers,
            f"--cpu-offloading-num-layers {n} must be below num_layers ({num_layers})",
        ),
        (pp > 1, f"CPU offloading does not work with pipeline parallelism (pp {pp})"),
        (recompute != "none", "CPU offloading does not work with activation recompute"),
        (graphs != "none", "CPU offloading does not work with CUDA graphs"),
    ]
    for broken, msg in problems:
        if broken:
            out.append(
                _err(
                    "megatron-cpu-offloading",
                    f"{msg} (Megatron's TransformerConfig raises); fix one of them",
                )
            )
    return n


def read_recipe(
    flags,
    *,
    num_layers: int,
    layers_per_chunk: int,
    pp: int,
    zero: int,
    is_moe: bool,
    out: list[Violation],
) -> Recipe:
    """The recipe fields and the training keys (`precision`, fp8_recipe, fp8_param_gather,
    flash_attention) of a Megatron-LM launch."""
    fp8, training = _fp8(flags, zero, out)
    fp16 = flags.has("--fp16") and not flags.has("--bf16")
    training["precision"] = "fp8" if fp8 else ("fp16" if fp16 else "bf16")
    backend = flags.text("--attention-backend", "auto", fix="set it in the script")
    training["flash_attention"] = backend not in ("unfused", "local")
    gran, modules, num = read_recompute(flags, layers_per_chunk, out)
    graphs = _cuda_graphs(flags, out)
    if graphs == "partial" and gran == "full":
        out.append(
            _err(
                "megatron-cuda-graph-recompute",
                "full recompute is not supported with per-layer CUDA graphs (Megatron "
                "asserts it); use selective recompute or --cuda-graph-scope "
                "full_iteration",
            )
        )
    grad_fp32 = (
        flags.has("--accumulate-allreduce-grads-in-fp32")
        if fp16
        else not flags.has("--grad-reduce-in-bf16")
    )
    exp_avg, exp_avg_sq = _moments(flags, out)
    overlap_ep = flags.has("--overlap-moe-expert-parallel-comm")
    dispatcher = _dispatcher(flags, out) if is_moe else "allgather"
    if overlap_ep and dispatcher == "allgather":
        out.append(
            _err(
                "megatron-moe-ep-overlap",
                "--overlap-moe-expert-parallel-comm needs --moe-token-dispatcher-type "
                "alltoall or flex (Megatron's TransformerConfig raises); set one",
            )
        )
    padded = is_moe and flags.has("--moe-pad-expert-input-to-capacity")
    if padded and not flags.has("--moe-expert-capacity-factor"):
        out.append(
            _err(
                "megatron-moe-pad-capacity",
                "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor "
                "(Megatron's TransformerConfig raises); set the capacity factor, e.g. 1.0",
            )
        )
    if padded and dispatcher != "alltoall":
        out.append(
            _err(
                "megatron-moe-pad-capacity",
                "--moe-pad-expert-input-to-capacity needs --moe-token-dispatcher-type alltoall "
                "(Megatron's flex dispatcher asserts it is off, and a capacity factor works only "
                "with alltoall); set --moe-token-dispatcher-type alltoall",
            )
        )
    return Recipe(
        recompute=gran,
        recompute_modules=modules,
        recompute_num_layers=num,
        cpu_offloading_num_layers=_offloading(
            flags, num_layers=num_layers, pp=pp, recompute=gran, graphs=graphs, out=out
        ),
        grad_reduce_in_fp32=grad_fp32,
        exp_avg_dtype=exp_avg,
        exp_avg_sq_dtype=exp_avg_sq,
        moe_token_dispatcher=dispatcher,
        overlap_moe_expert_parallel_comm=overlap_ep,
        moe_pad_expert_input_to_capacity=padded,
        cuda_graphs=graphs,
        pipeline_model_parallel_layout=flags.text(
            "--pipeline-model-parallel-layout", fix="set it in the script"
        ),
        training=training,
    )


def _differs(default: str) -> Callable[[list[str]], bool]:
    return lambda values: bool(values) and values[0] != default


def _given(values: list[str]) -> bool:
    return True


NOT_MODELLED: dict[str, tuple[str, Callable[[list[str]], bool]]] = {
    "--optimizer-cpu-offload": (
        "optimizer states in host memory (less GPU memory, a slower step)",
        _given,
    ),
    "--offload-modules": ("fine-grained activation offloading", _given),
    "--activation-offload-fraction": ("fine-grained activation offloading", _given),
    "--main-params-dtype": ("fp16 main parameters (precision-aware optimizer)", _differs("fp32")),
    "--main-grads-dtype": ("bf16 main gradients (precision-aware optimizer)", _differs("fp32")),
    "--distribute-saved-activations": ("recompute inputs split over the TP ranks", _given),
    "--num-distributed-optimizer-instances": (
        "optimizer states sharded over part of DP only",
        _differs("1"),
    ),
    "--fp4-format": ("FP4 (NVFP4) GEMMs; planner plans bf16/fp8", _given),
    "--fp4-param-gather": ("FP4 weight copies", _given),
    "--first-last-layers-bf16": ("bf16 first/last layers under FP8", _given),
    "--fp8-dot-product-attention": ("FP8 attention kernels; planner keeps attention bf16", _given),
    "--fp8-multi-head-attention": (
        "FP8 multi-head attention; planner keeps attention bf16",
        _given,
    ),
    "--keep-fp8-transpose-cache": ("FP8 transpose caches kept with Megatron-FSDP", _given),
    "--fsdp-double-buffer": ("double Megatron-FSDP communication buffers", _given),
    "--defer-embedding-wgrad-compute": (
        "the output layer's weight gradient deferred to the pipeline flush",
        _given,
    ),
    "--delay-wgrad-compute": ("weight gradients delayed for EP overlap", _given),
    "--moe-shared-expert-overlap": ("shared experts overlapped with the dispatch", _given),
    "--hierarchical-context-parallel-sizes": ("hierarchical (a2a+p2p) context parallelism", _given),
    "--overlap-param-gather-with-optimizer-step": (
        "the first all-gather overlapped with the optimizer step",
        _given,
    ),
    "--use-nccl-ub": ("NCCL user-buffer registration for DP/FSDP communication", _given),
    "--empty-unused-memory-level": ("torch.cuda.empty_cache() every step", _differs("0")),
    "--rampup-batch-size": ("a batch-size ramp-up; planner plans the final global batch", _given),
    "--cross-entropy-fusion-impl": (
        "Transformer Engine's cross-entropy, in place on the bf16 "
        "logits (planner counts Megatron's fp32 copy: an upper "
        "bound)",
        _differs("native"),
    ),
    "--moe-router-padding-for-fp8": ("routing maps padded for FP8", _given),
    "--cpu-offloading-retain-pinned-cpu-buffers": (
        "pinned host buffers kept for offloading",
        _given,
    ),
}
"""Known flags that change memory or time and that the cost model does not apply."""


def not_modelled(flags, out: list[Violation], prefix: str = "megatron") -> None:
    for flag, (what, applies) in NOT_MODELLED.items():
        if flags.has(flag) and applies([shell.display(v) for v in flags.values[flag]]):
            out.append(
                _warn(
                    f"{prefix}-not-modelled",
                    f"{flag} ({what}) changes memory or step time in a way planner "
                    "does not model: the estimate ignores it",
                )
            )
