"""Serving rules: small pure checks of a job and a serving layout, each returning a Violation.

Errors are what the engines refuse (vLLM, SGLang and TensorRT-LLM check the same divisibility
at start-up) or what cannot run (the weights do not leave room for one request); warnings are
the reference chapter's inference guidance ("推理侧的并行": TP first inside the node, PP only
when memory forces it, EP inside the NVLink domain). `check` runs them in that order and is
shared by `validate` and the search.
"""

from __future__ import annotations

from planner.caveats import LONG_CONTEXT_TOKENS
from planner.errors import Violation
from planner.units import GiB, divisors

__all__ = ["check", "instance_errors", "job_errors"]


def _err(rule: str, msg: str) -> Violation:
    return Violation(rule, msg, "error")


def _warn(rule: str, msg: str) -> Violation:
    return Violation(rule, msg, "warning")


def _choices(values) -> str:
    values = list(values)
    return (
        ", ".join(map(str, values[:-1])) + f" or {values[-1]}"
        if len(values) > 1
        else str(values[0])
    )


def job_errors(job) -> list[Violation]:
    """What the precision, engine and speculative settings need of the hardware and model."""
    out = []
    hw, sv, m = job.hardware, job.serving, job.model
    if sv.precision == "fp8" and hw.peak_tflops.fp8 is None:
        out.append(
            _err(
                "precision-supported",
                f"precision fp8 needs FP8 tensor cores; {hw.name} has none; use bf16",
            )
        )
    if sv.precision == "fp4" and hw.peak_tflops.fp4 is None:
        out.append(
            _err(
                "precision-supported",
                f"precision fp4 (NVFP4/MXFP4) needs FP4 tensor cores (Blackwell: b200, "
                f"gb200-nvl72, rtx-pro-6000); {hw.name} has none; use fp8 or bf16",
            )
        )
    if sv.kv_dtype == "fp8" and hw.peak_tflops.fp8 is None:
        out.append(
            _err(
                "kv-cache-dtype-supported",
                f"kv_cache_dtype fp8 needs FP8 support; {hw.name} has none; use bf16",
            )
        )
    if sv.engine == "trtllm" and hw.architecture == "cdna3":
        out.append(
            _err(
                "engine-on-hardware",
                f"engine trtllm: TensorRT-LLM runs on NVIDIA GPUs only; {hw.name} is AMD; "
                "use vllm or sglang",
            )
        )
    spec = sv.speculative
    if spec is not None and spec.method == "mtp" and m.mtp_num_layers == 0:
        out.append(
            _err(
                "speculative-mtp-needs-layers",
                f"speculative method mtp drafts with the model's MTP layers; {m.name} has "
                "none (mtp_num_layers 0); use method draft with a draft_model",
            )
        )
    return out


def instance_errors(job, inst, *, what: str = "") -> list[Violation]:
    """The engines' divisibility rules for one instance (`what`: 'prefill ' / 'decode ')."""
    m, sv = job.model, job.serving
    out = []
    a, g = m.num_attention_heads, m.kv_heads
    if a % inst.tp:
        ok = [t for t in divisors(a) if t <= 64]
        out.append(
            _err(
                "heads-divisible-by-tp",
                f"{what}num_attention_heads ({a}) must be divisible by tp ({inst.tp}); "
                f"try tp {_choices(ok)}",
            )
        )
    elif not m.is_mla and g % inst.tp and inst.tp % g:
        out.append(
            _err(
                "kv-heads-vs-tp",
                f"{what}tp ({inst.tp}) must divide num_kv_heads ({g}) or be a multiple "
                f"of it (the engines replicate KV heads only by whole copies)",
            )
        )
    if inst.pp > m.num_layers:
        out.append(
            _err(
                "pp-vs-layers",
                f"{what}pp ({inst.pp}) exceeds num_layers "
                f"({m.num_layers}); use pp <= {m.num_layers}",
            )
        )
    if inst.dp_attention and not m.is_moe:
        out.append(
            _err(
                "dp-attention-needs-moe",
                f"{what}dp_attention shares the MoE layers across the dp ranks; "
                f"{m.name} is dense; use replicas (or dp without dp_attention)",
            )
        )
    elif inst.dp_attention and inst.dp == 1:
        out.append(
            _err(
                "dp-attention-needs-dp",
                f"{what}dp_attention needs dp > 1 (the attention data-parallel ranks)",
            )
        )
    if inst.ep > 1 and not m.is_moe:
        out.append(
            _err("ep-needs-moe", f"{what}ep ({inst.ep}) > 1 but {m.name} has no experts; set ep 1")
        )
    elif m.is_moe:
        E, G = m.num_experts, inst.moe_group
        if E % inst.ep:
            out.append(
                _err(
                    "experts-divisible-by-ep",
                    f"{what}num_experts ({E}) must be divisible by ep ({inst.ep}); try ep "
                    f"{_choices([d for d in divisors(E) if G % d == 0] or [1])}",
                )
            )
        elif G % inst.ep:
            span = f"tp*dp = {G}" if inst.dp_attention else f"tp = {G}"
            out.append(
                _err(
                    "ep-vs-group",
                    f"{what}ep ({inst.ep}) must divide the GPUs the experts spread over "
                    f"({span}); try ep {_choices([d for d in divisors(G) if E % d == 0])}",
                )
            )
    out += _cp_errors(job, inst, what=what)
    if sv.engine == "trtllm":
        if inst.dp_attention and inst.tp > 1:
            out.append(
                _err(
                    "trtllm-attention-dp",
                    f"{what}engine trtllm: attention DP runs the attention with TP 1 on "
                    f"every rank (enable_attention_dp); set tp 1 and dp {inst.tp * inst.dp}",
                )
            )
        if inst.dp > 1 and not inst.dp_attention:
            out.append(
                _err(
                    "trtllm-dp",
                    f"{what}engine trtllm: trtllm-serve has no data-parallel copies in one "
                    f"server; use replicas {inst.dp} instead of dp {inst.dp}",
                )
            )
    return out


def _cp_errors(job, inst, *, what: str) -> list[Violation]:
    """Which engines run context parallelism as planner costs it (cp tp groups holding the
    same weights, each prompt and its KV cache split over them), from their own docs:

    - TensorRT-LLM (trtllm-serve --cp_size / LLM API context_parallel_size with cp_config):
      Helix context parallelism, which its docs (docs/source/features/helix.md) support for
      MLA models (DeepSeek-V3) on Blackwell GPUs.
    - vLLM v0.11: --decode-context-parallel-size (-dcp) splits only the KV cache that TP
      duplicates, inside the TP group, without more GPUs (dcp in [1, tp / kv heads];
      docs/serving/context_parallel_deployment.md); its --prefill-context-parallel-size,
      which adds GPUs, is newer than v0.11. Neither is planner's cp.
    - SGLang 0.5.8: no context-parallel size for a model in general (only
      --enable-nsa-prefill-context-parallel, for DeepSeek-V3.2's sparse attention).
    """
    cp = inst.cp
    if cp <= 1:
        return []
    eng, m, hw = job.serving.engine, job.model, job.hardware
    fix = (
        "use engine trtllm, or cp 1 with more tp or replicas"
        if m.is_mla and hw.architecture == "blackwell"
        else "use cp 1 with more tp or replicas"
    )
    if eng == "vllm":
        return [
            _err(
                "vllm-cp",
                f"{what}cp ({cp}): vLLM v0.11 has no context-parallel axis that adds "
                "GPUs (its --decode-context-parallel-size only splits the KV cache tp "
                f"duplicates, inside the TP group); {fix}",
            )
        ]
    if eng == "sglang":
        return [
            _err(
                "sglang-cp",
                f"{what}cp ({cp}): SGLang 0.5.8 has no context parallelism for "
                f"{m.name} (only --enable-nsa-prefill-context-parallel, for DeepSeek-V3.2's "
                f"sparse attention); {fix}",
            )
        ]
    out = []
    if not m.is_mla:
        out.append(
            _err(
                "trtllm-cp-needs-mla",
                f"{what}cp ({cp}): TensorRT-LLM's context parallelism (Helix) supports "
                f"MLA models only (DeepSeek-V3); {m.name} has none; use cp 1 with more "
                "tp or replicas",
            )
        )
    elif hw.architecture != "blackwell":
        out.append(
            _err(
                "trtllm-cp-needs-blackwell",
                f"{what}cp ({cp}): TensorRT-LLM's context parallelism (Helix) runs on "
                f"Blackwell GPUs; {hw.name} is {hw.architecture or 'not Blackwell'}; use "
                "cp 1, or b200 / gb200-nvl72",
            )
        )
    return out


def _world(job, layout) -> list[Violation]:
    n = layout.num_gpus
    if n == job.num_gpus:
        return []
    if layout.disaggregated:
        p, d = layout.prefill, layout.decode
        desc = (
            f"prefill {layout.prefill_workers} x {p.gpus} + decode {layout.decode_workers} x "
            f"{d.gpus} GPUs = {n}"
        )
    else:
        i = layout.instance
        cp = f" x cp ({i.cp})" if i.cp > 1 else ""
        desc = f"tp ({i.tp}){cp} x pp ({i.pp}) x dp ({i.dp}) x replicas ({layout.replicas}) = {n}"
        if job.num_gpus % i.gpus == 0:
            desc += f"; replicas {job.num_gpus // i.gpus} would use all {job.num_gpus}"
    return [_err("serve-world-size", f"{desc}, but num_gpus is {job.num_gpus}")]


def _memory(job, inst, mem, *, what: str) -> list[Violation]:
    sv = job.serving
    out = []
    need = sv.input_length + sv.output_length
    if mem.max_concurrency < 1:
        free = mem.kv_cache / GiB
        out.append(
            _err(
                "fits-in-memory",
                f"{what}{inst.name}: weights {mem.weights / GiB:.1f} GiB + activations "
                f"{mem.activations / GiB:.1f} + other {mem.other / GiB:.1f} of "
                f"{mem.capacity / GiB:.1f} GiB leave {free:.1f} GiB of KV cache for "
                f"{mem.kv_tokens_capacity:,} tokens, less than one request "
                f"({need:,} tokens); use more tp or pp, fp8/fp4 weights or an fp8 KV cache",
            )
        )
        return out
    c = sv.concurrency
    if c != "max" and int(c) > mem.max_concurrency:
        why = (
            "the KV cache holds" if mem.limited_by == "kv" else "the engine's max_batch_size allows"
        )
        out.append(
            _warn(
                "concurrency-above-capacity",
                f"{what}concurrency {c} exceeds the {mem.max_concurrency} requests of "
                f"{need:,} tokens {why}; the rest wait for a slot: TTFT includes the "
                f"wait (Little's law), TPOT is at {mem.max_concurrency} running",
            )
        )
    return out


def _guidance(job, inst, *, what: str) -> list[Violation]:
    hw, m = job.hardware, job.model
    out = []
    node = min(hw.gpus_per_node, hw.nvlink_domain_size)
    if inst.tp > hw.nvlink_domain_size:
        out.append(
            _warn(
                "tp-crosses-node",
                f"{what}tp ({inst.tp}) spans more than one NVLink domain "
                f"({hw.nvlink_domain_size} GPUs): two all-reduces per layer per token "
                f"cross the network; keep tp <= {hw.nvlink_domain_size}, add pp or replicas",
            )
        )
    if inst.pp > 1 and inst.tp * inst.pp <= node and inst.tp < node:
        out.append(
            _warn(
                "pp-adds-latency",
                f"{what}pp ({inst.pp}) inside one node: every stage adds to each request's "
                f"latency while tp {inst.tp * inst.pp} would also split the layers' work "
                "(TP first inside the node; PP only when memory forces it)",
            )
        )
    if inst.cp > 1:
        isl = job.serving.input_length
        if isl < LONG_CONTEXT_TOKENS:
            out.append(
                _warn(
                    "cp-short-prompt",
                    f"{what}cp ({inst.cp}) splits prompts of only {isl:,} tokens (< "
                    f"{LONG_CONTEXT_TOKENS:,}): the K/V ring and the per-layer decode "
                    "combine cost about what they save, and the weights are held "
                    f"{inst.cp} times; use cp 1 and replicas",
                )
            )
        if inst.tp * inst.cp > hw.nvlink_domain_size:
            out.append(
                _warn(
                    "cp-crosses-node",
                    f"{what}tp x cp ({inst.tp * inst.cp}) spans more than one NVLink "
                    f"domain ({hw.nvlink_domain_size} GPUs): the K/V ring and the decode "
                    "combine of every layer cross the network",
                )
            )
        if job.serving.engine == "trtllm" and what != "decode ":
            out.append(
                _warn(
                    "trtllm-cp-generation-only",
                    f"{what}cp ({inst.cp}): TensorRT-LLM's Helix context parallelism is "
                    "meant for the generation (decode) workers of disaggregated serving; "
                    "its docs do not cover it on "
                    + ("prefill workers" if what else "an aggregated server"),
                )
            )
    if m.is_moe and inst.ep > 1 and inst.moe_group > hw.nvlink_domain_size:
        out.append(
            _warn(
                "ep-crosses-node",
                f"{what}ep ({inst.ep}) over {inst.moe_group} GPUs spans more than one "
                f"NVLink domain ({hw.nvlink_domain_size}): the all-to-all of every MoE "
                "layer crosses the network",
            )
        )
    return out


def check(job, layout, *, memory=None, prefill_memory=None) -> list[Violation]:
    """Every serving rule for `layout` (memory: the decode/aggregated instance's)."""
    out = job_errors(job) + _world(job, layout)
    if layout.disaggregated:
        pairs = [(layout.prefill, "prefill ", prefill_memory), (layout.decode, "decode ", memory)]
        if layout.prefill.tp != layout.decode.tp and max(layout.prefill.tp, layout.decode.tp) % min(
            layout.prefill.tp, layout.decode.tp
        ):
            out.append(
                _err(
                    "disagg-tp-multiple",
                    f"prefill tp ({layout.prefill.tp}) and decode tp ({layout.decode.tp}) "
                    "must be multiples of each other (the KV transfer maps heads by whole "
                    "shards)",
                )
            )
    else:
        pairs = [(layout.instance, "", memory)]
    for inst, what, mem in pairs:
        errs = instance_errors(job, inst, what=what)
        out += errs
        if not errs and mem is not None:
            out += _memory(job, inst, mem, what=what)
        out += _guidance(job, inst, what=what)
    return out
