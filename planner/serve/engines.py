"""What each serving engine does by default, and how it sizes its KV cache.

The three engines split GPU memory differently (the reason the same deployment holds a
different number of requests on each):

    vLLM     kv = f * M - weights - activations - other         f = --gpu-memory-utilization
    SGLang   kv = f * M - weights                               f = --mem-fraction-static
             (activations, CUDA graphs and NCCL live in the (1 - f) * M it reserves)
    TRT-LLM  kv = f * (M - weights - activations - other)        f = --free_gpu_memory_fraction

M is the GPU's memory. Defaults and sources:

- vLLM v0.11 (vllm/engine/arg_utils.py EngineArgs, _set_default_args): f 0.90; max_num_seqs
  1024 and max_num_batched_tokens 8192 (API server) on GPUs with >= 70 GiB other than A100,
  256 and 2048 below; KV blocks of 16 tokens.
- SGLang 0.5 (python/sglang/srt/server_args.py): f = (M - reserved) / M with reserved =
  2.8 + tp*pp/10 GiB below 35 GiB, 9.5 + tp*pp/2 below 90 GiB, 12 + tp*pp/2 below 160 GiB,
  32 GiB above (+2 GiB with speculative decoding, +4 GiB with DP attention); chunked prefill
  2048 / 8192 / 16384 tokens by the same memory classes (divided by dp with DP attention); KV
  pages of 1 token; running requests limited by the KV pool only.
- TensorRT-LLM 1.x trtllm-serve (tensorrt_llm/commands/serve.py, BuildConfig): f 0.90,
  max_batch_size 2048, max_num_tokens 8192, KV blocks of 32 tokens (tokens_per_block).

Decode steps of at most `cuda_graph_batch` sequences (per rank) and no prompt tokens replay a
captured CUDA graph (the per-layer fixed cost graph_layer_overhead_us instead of the eager
layer_overhead_us): vLLM V1 captures batch sizes up to 512 (compilation config
cudagraph_capture_sizes, max 512); SGLang 0.5 `cuda_graph_max_bs` 256 below tp 4 and 512 from
tp 4 on GPUs of 60 GiB and more (server_args.py; 160 or less on smaller GPUs); TensorRT-LLM's
PyTorch backend `cuda_graph_config` as the serving recipes set it, max_batch_size 128 (an
assumption where a deployment does not say).

`other` is the CUDA context and NCCL buffers (the profile's) plus the engine's CUDA graphs
(captured decode graphs: about 1 GiB per GPU in vLLM's logs, ~0.5 GiB in TRT-LLM's; an
estimate, not a measured constant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.units import GiB

__all__ = ["EngineSettings", "engine_settings", "kv_budget", "round_up", "CUDA_GRAPH_GIB"]

CUDA_GRAPH_GIB = {"vllm": 1.0, "sglang": 0.0, "trtllm": 0.5}
"""Decode CUDA graphs per GPU (SGLang's are inside the memory it reserves)."""


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """One engine's knobs for one instance, the job's values where it gives them."""

    engine: str
    memory_fraction: float
    max_batch_size: int  # per (attention-)DP rank; a very large number = KV-limited
    max_num_tokens: int  # tokens per engine step (the prefill chunk)
    block_tokens: int  # KV-cache allocation granularity
    cuda_graph_bytes: float
    memory_fraction_default: bool
    max_batch_size_default: bool
    max_num_tokens_default: bool
    cuda_graph_batch: int = 512  # decode steps of at most this many sequences replay a graph


def _sglang_fraction(
    memory_gib: float, tp: int, pp: int, *, speculative: bool, dp_attention: bool
) -> float:
    par = tp * pp
    if memory_gib < 35:
        reserved = 2.8 + par / 10
    elif memory_gib < 90:
        reserved = 9.5 + par / 2
    elif memory_gib < 160:
        reserved = 12 + par / 2
    else:
        reserved = 32.0
    reserved += 2.0 if speculative else 0.0
    reserved += 4.0 if dp_attention else 0.0
    return round((memory_gib - reserved) / memory_gib, 3)


def engine_settings(job, inst) -> EngineSettings:
    """The engine's settings for one instance: the serving config's, else the defaults."""
    sv, hw = job.serving, job.hardware
    eng = sv.engine
    mem = hw.memory_gib
    big = mem >= 70 and not hw.name.startswith("a100")
    if eng == "vllm":
        frac, batch, tokens, block = 0.90, (1024 if big else 256), (8192 if big else 2048), 16
    elif eng == "sglang":
        frac = _sglang_fraction(
            mem,
            inst.tp * (inst.dp if inst.dp_attention else 1),
            inst.pp,
            speculative=sv.speculative is not None,
            dp_attention=inst.dp_attention,
        )
        tokens = 2048 if mem < 35 else (8192 if mem < 160 else 16384)
        if inst.dp_attention:
            tokens = max(1, tokens // inst.dp)
        batch, block = 10**9, 1
    else:
        frac, batch, tokens, block = 0.90, 2048, 8192, 32
    return EngineSettings(
        engine=eng,
        memory_fraction=sv.memory_fraction if sv.memory_fraction is not None else frac,
        max_batch_size=sv.max_batch_size if sv.max_batch_size is not None else batch,
        max_num_tokens=(
            tokens
            if sv.max_num_tokens is None
            # SGLang's --chunked-prefill-size is the instance's; with attention DP
            # each rank prefills its share (the export writes per rank x dp)
            else max(1, sv.max_num_tokens // inst.dp)
            if eng == "sglang" and inst.dp_attention
            else sv.max_num_tokens
        ),
        block_tokens=block,
        cuda_graph_bytes=CUDA_GRAPH_GIB[eng] * GiB,
        memory_fraction_default=sv.memory_fraction is None,
        max_batch_size_default=sv.max_batch_size is None,
        max_num_tokens_default=sv.max_num_tokens is None,
        cuda_graph_batch=_graph_batch(eng, mem, inst.tp),
    )


def _graph_batch(engine: str, memory_gib: float, tp: int) -> int:
    """The largest decode batch the engine replays from a CUDA graph (module docstring)."""
    if engine == "vllm":
        return 512
    if engine == "sglang":
        if memory_gib < 60:
            return 32 if tp < 4 else 160
        return 256 if tp < 4 else 512
    return 128


def kv_budget(
    settings: EngineSettings, *, capacity: float, weights: float, activations: float, other: float
) -> float:
    """Bytes the engine gives the KV cache on one GPU (formulas in the module docstring)."""
    f = settings.memory_fraction
    if settings.engine == "vllm":
        kv = f * capacity - weights - activations - other
    elif settings.engine == "sglang":
        kv = f * capacity - weights
    else:
        kv = f * (capacity - weights - activations - other)
    return max(0.0, kv)


def round_up(tokens: float, block: int) -> int:
    """Tokens a request occupies in a paged KV cache of `block`-token blocks."""
    return int(math.ceil(tokens / block) * block)
