"""The serving config: what `planner validate SERVE.yaml` reads and `planner serve` writes.

A serving config is a planner config whose top level has a `serving:` section (request
lengths, concurrency, precision, engine) and whose `parallel:` describes one engine instance
(tp, pp, ep, dp, dp_attention, cp) times `replicas`, or disaggregated `prefill:` and `decode:`
workers. The specs are frozen and forbid unknown keys like every planner spec
(`planner.specs._Spec`); their field docstrings are the help text (README, "Inference").
`load_serve_config` turns a file or mapping into a `ServeJob` and a `ServeLayout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from planner.errors import SpecError
from planner.io import read_yaml
from planner.specs import HardwareSpec, ModelSpec, _Spec, parse_spec

__all__ = [
    "Engine",
    "ServePrecision",
    "KvCacheDtype",
    "SpeculativeSpec",
    "ServingSpec",
    "WorkerSpec",
    "ServeParallelSpec",
    "ServeConfigSpec",
    "ServeJob",
    "ENGINES",
    "serve_config_from_data",
    "load_serve_config",
    "default_kv_dtype",
]

Engine = Literal["vllm", "sglang", "trtllm"]
ServePrecision = Literal["bf16", "fp8", "fp4"]
KvCacheDtype = Literal["bf16", "fp8"]
ENGINES = ("vllm", "sglang", "trtllm")

_MAX = 10_000_000


class SpeculativeSpec(_Spec):
    """`serving.speculative:` speculative decoding, costed with an acceptance rate."""

    method: Literal["mtp", "draft"]
    """mtp: the model's own multi-token-prediction layers draft (DeepSeek-V3, needs
    model.mtp_num_layers); draft: a smaller draft model (draft_model)."""
    num_tokens: int = Field(default=1, ge=1, le=16)
    """Draft tokens proposed per step (vLLM num_speculative_tokens, SGLang
    speculative-num-steps, TRT-LLM max_draft_len)."""
    acceptance_rate: float = Field(gt=0, lt=1)
    """Probability that each drafted token is accepted (measure it on your traffic: it
    depends on the data); expected tokens per step = (1 - a^(k+1)) / (1 - a)."""
    draft_model: str | dict[str, Any] | None = None
    """The draft model for method draft: preset, model YAML / HF config.json, or a mapping."""

    @model_validator(mode="after")
    def _draft(self) -> SpeculativeSpec:
        if self.method == "draft" and self.draft_model is None:
            raise ValueError(
                "method draft needs draft_model (a preset such as llama3-8b, or a model file)"
            )
        if self.method == "mtp" and self.draft_model is not None:
            raise ValueError(
                "method mtp drafts with the model's own MTP layers; remove "
                "draft_model or use method draft"
            )
        return self


class ServingSpec(_Spec):
    """`serving:` what is served and how (the request shape and the engine)."""

    precision: ServePrecision = "bf16"
    """bf16 | fp8 | fp4 (NVFP4/MXFP4, Blackwell only): the weights and the GEMMs."""
    kv_cache_dtype: KvCacheDtype | None = None
    """bf16 | fp8; default: bf16, fp8 when precision is fp8 or fp4."""
    input_length: int = Field(ge=1, le=_MAX)
    """Prompt tokens per request (ISL)."""
    output_length: int = Field(ge=1, le=_MAX)
    """Generated tokens per request (OSL)."""
    concurrency: int | Literal["max"] = "max"
    """Requests in flight per engine instance, or "max": as many as the KV cache holds."""
    engine: Engine = "vllm"
    """vllm | sglang | trtllm: memory-fraction semantics, defaults, launch flags."""
    batching: Literal["continuous", "static"] = "continuous"
    """continuous: requests join and leave every step (what servers do; the default);
    static: one batch of `concurrency` requests, prefilled together then decoded to the end
    (vLLM benchmark_latency, TRT-LLM static batching)."""
    memory_fraction: float | None = Field(default=None, gt=0, le=1)
    """The engine's memory knob: vLLM --gpu-memory-utilization and SGLang
    --mem-fraction-static (of all GPU memory), TRT-LLM --free_gpu_memory_fraction (of the
    memory left after weights and activations); default: the engine's."""
    max_batch_size: int | None = Field(default=None, ge=1, le=_MAX)
    """Most requests an engine instance runs at once (vLLM --max-num-seqs, SGLang
    --max-running-requests, TRT-LLM --max_batch_size); default: the engine's."""
    max_num_tokens: int | None = Field(default=None, ge=1, le=_MAX)
    """Most tokens one engine step processes, the prefill chunk (vLLM
    --max-num-batched-tokens, SGLang --chunked-prefill-size, TRT-LLM --max_num_tokens);
    default: the engine's."""
    chunked_prefill: bool | None = None
    """False: a prompt goes whole into one engine step, never split across steps
    (TensorRT-LLM with enable_chunked_prefill false: its MicroBatchScheduler stops taking
    prompts at the first that does not fit max_num_tokens; vLLM --no-enable-chunked-prefill;
    SGLang --chunked-prefill-size -1, whole prompts up to --max-prefill-tokens); true or
    unset: a prompt may be split at the step budget (vLLM V1's chunked prefill, on by
    default; planner's estimate for every engine unless told, and what its exports write)."""
    speculative: SpeculativeSpec | None = None
    """Speculative decoding (MTP or a draft model) with an acceptance rate; default none."""
    requests_per_client: float | None = Field(default=None, ge=1, le=_MAX)
    """A benchmark run's requests per client (its request count / concurrency): the first
    of them arrive together (the tool's first wave), 1 / this share of the TTFTs measured;
    default: none, the steady state (a server's traffic has no first wave)."""

    @field_validator("concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(
                f'must be a whole number of requests or "max", got {str(value).lower()}'
            )
        if isinstance(value, (int, float)) and value < 1:
            raise ValueError(f'must be at least 1 (or "max"), got {value}')
        if isinstance(value, str) and value != "max":
            if not value.strip().isdigit():
                raise ValueError(f'must be a whole number of requests or "max", got {value!r}')
            value = int(value)
        return value

    @property
    def kv_dtype(self) -> str:
        return self.kv_cache_dtype or default_kv_dtype(self.precision)


def default_kv_dtype(precision: str) -> str:
    """The contract's default: bf16, fp8 when the weights are fp8 or fp4."""
    return "fp8" if precision in ("fp8", "fp4") else "bf16"


class WorkerSpec(_Spec):
    """`parallel.prefill:` / `parallel.decode:` one kind of disaggregated worker."""

    tp: int = Field(default=1, ge=1, le=_MAX)
    """Tensor-parallel degree of one worker (its attention)."""
    pp: int = Field(default=1, ge=1, le=_MAX)
    """Pipeline-parallel degree of one worker."""
    ep: int = Field(default=1, ge=1, le=_MAX)
    """MoE: experts over ep ranks of the worker."""
    dp: int = Field(default=1, ge=1, le=_MAX)
    """Data-parallel (attention-DP) ranks inside the worker."""
    dp_attention: bool = False
    """The dp ranks share the MoE layers (attention data-parallel, experts over tp*dp)."""
    cp: int = Field(default=1, ge=1, le=_MAX)
    """Context-parallel degree of one worker: each prompt and its KV cache split over cp tp
    groups (weights replicated on each); GPUs = tp*cp*pp*dp."""
    workers: int = Field(default=1, ge=1, le=_MAX)
    """How many workers of this kind."""


class ServeParallelSpec(_Spec):
    """`parallel:` one engine instance (tp*cp*pp*dp GPUs) times `replicas`, or disaggregated
    `prefill:` and `decode:` workers; num_gpus = tp*cp*pp*dp*replicas."""

    tp: int = Field(default=1, ge=1, le=_MAX)
    """Tensor-parallel degree (of the attention; the dense layers too)."""
    pp: int = Field(default=1, ge=1, le=_MAX)
    """Pipeline-parallel degree: every stage adds to each request's latency."""
    ep: int = Field(default=1, ge=1, le=_MAX)
    """MoE: experts over ep ranks of the instance (of tp*dp with dp_attention, else of tp)."""
    dp: int = Field(default=1, ge=1, le=_MAX)
    """Data-parallel ranks inside the instance (MoE attention-DP: vLLM --data-parallel-size,
    SGLang --dp with --enable-dp-attention, TRT-LLM attention DP)."""
    dp_attention: bool = False
    """The dp ranks run their own attention and share the MoE layers (experts over tp*dp
    ranks); false: dp ranks are independent copies in one server."""
    cp: int = Field(default=1, ge=1, le=_MAX)
    """Context-parallel degree: each prompt (prefill split over cp ranks, K/V passed round a
    ring) and its KV cache (1/cp per rank, partial attention combined each decode step) over
    cp tp groups holding the same weights; for long prompts (TRT-LLM --cp_size)."""
    replicas: int = Field(default=1, ge=1, le=_MAX)
    """Independent instances behind a load balancer."""
    prefill: WorkerSpec | None = None
    """Disaggregated serving: the prefill workers (with decode:, instead of the keys above)."""
    decode: WorkerSpec | None = None
    """Disaggregated serving: the decode workers (with prefill:)."""

    @model_validator(mode="after")
    def _shape(self) -> ServeParallelSpec:
        if (self.prefill is None) != (self.decode is None):
            given = "prefill" if self.prefill is not None else "decode"
            missing = "decode" if given == "prefill" else "prefill"
            raise ValueError(
                f"disaggregated serving needs both prefill: and decode: workers; "
                f"{given}: is given, add {missing}: {{tp, pp, ep, dp, workers}}"
            )
        if self.prefill is not None:
            used = [
                k
                for k in ("tp", "pp", "ep", "dp", "dp_attention", "cp", "replicas")
                if k in self.model_fields_set
            ]
            if used:
                raise ValueError(
                    f"{', '.join(used)} describe an aggregated instance; with "
                    "prefill: and decode: put them inside each worker"
                )
        return self


class ServeConfigSpec(_Spec):
    """A whole serving config file (top level)."""

    model: str | dict[str, Any]
    """Preset name or alias, path to a model YAML or HF config.json, or an inline mapping."""
    hardware: str | dict[str, Any] = "h100-sxm"
    """Profile name, path to a profile YAML, or an inline mapping."""
    num_gpus: int = Field(ge=1, le=_MAX)
    """All GPUs of the deployment."""
    serving: ServingSpec
    """The request shape, precision, concurrency and engine."""
    parallel: ServeParallelSpec = ServeParallelSpec()
    """One engine instance and its replicas, or prefill/decode workers."""


@dataclass(frozen=True)
class ServeJob:
    """What to serve (model, serving) on what (hardware, num_gpus); draft: the speculative
    draft model, when there is one."""

    model: ModelSpec
    hardware: HardwareSpec
    num_gpus: int
    serving: ServingSpec
    draft: ModelSpec | None = None


def serve_config_from_data(data: Any, *, base: Path | None = None, source: str = "config"):
    """(ServeJob, ServeLayout) from a serving config's data."""
    from planner.config import resolve_hardware
    from planner.presets import resolve_model
    from planner.serve.layout import layout_from_spec

    if not isinstance(data, dict):
        got = "nothing (only comments?)" if data is None else type(data).__name__
        raise SpecError(
            f"config {source!r} must be a mapping of keys to values at the top "
            f"level, got {got}; see README, 'Inference'"
        )
    spec: ServeConfigSpec = parse_spec(ServeConfigSpec, data, where="")
    model = resolve_model(spec.model, base=base)
    hardware = resolve_hardware(spec.hardware, base=base)
    sv = spec.serving
    draft = None
    if sv.speculative is not None and sv.speculative.draft_model is not None:
        draft = resolve_model(sv.speculative.draft_model, base=base)
    job = ServeJob(model=model, hardware=hardware, num_gpus=spec.num_gpus, serving=sv, draft=draft)
    return job, layout_from_spec(spec.parallel)


def load_serve_config(path: str | Path):
    """Read a serving config YAML into (ServeJob, ServeLayout)."""
    p = Path(path)
    return serve_config_from_data(read_yaml(p, what="config"), base=p.parent, source=str(p))
