"""Rich renderables and JSON shaping for every command. Never prints.

The JSON shapes here are the stable interface documented in README ("JSON output").
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.units import GiB, fmt_count, fmt_seconds

__all__ = ["estimate_json", "validation_json", "validation_view", "models_view", "hardware_view",
           "memory_table", "time_table"]


# --------------------------------------------------------------------------------- JSON

def estimate_json(est, layout, global_batch_size: int) -> dict[str, Any]:
    """layout / memory / time / throughput keys of the contract (time keys when computed)."""
    out: dict[str, Any] = {"layout": layout.as_dict(global_batch_size)}
    if est is None:
        return out
    out["memory"] = est.memory.as_dict()
    if est.time is not None:
        out["time"] = est.time.as_dict()
        out["throughput"] = est.time.throughput_dict()
        if getattr(est.time, "train", None):
            out["time_to_train"] = est.time.train
    return out


def validation_json(result) -> dict[str, Any]:
    gbs = result.job.training.global_batch_size
    out = {
        "valid": result.valid,
        "errors": [v.as_dict() for v in result.errors],
        "warnings": [v.as_dict() for v in result.warnings],
    }
    out.update(estimate_json(result.estimate, result.layout, gbs))
    out["job"] = job_json(result.job)
    return out


def job_json(job) -> dict[str, Any]:
    from planner.cost.params import total_params
    return {
        "model": job.model.name, "parameters": total_params(job.model),
        "hardware": job.hardware.name, "num_gpus": job.num_gpus,
        "seq_length": job.training.seq_length,
        "global_batch_size": job.training.global_batch_size,
        "precision": job.training.precision,
    }


# ------------------------------------------------------------------------------ rich views

def _gib(x: float) -> str:
    return f"{x / GiB:.2f}"


def memory_table(mem) -> Table:
    t = Table(title=f"Memory per GPU (most loaded: {mem.stage} pipeline rank)", title_justify="left")
    t.add_column("component")
    t.add_column("GiB", justify="right")
    t.add_column("share", justify="right")
    total = mem.total
    for name, val in (("weights", mem.weights), ("gradients", mem.gradients),
                      ("optimizer states", mem.optimizer), ("activations", mem.activations),
                      ("other (context, NCCL, fragmentation, buffers)", mem.other)):
        t.add_row(name, _gib(val), f"{val / total:.0%}" if total else "-")
    t.add_row(Text("total", style="bold"), Text(_gib(total), style="bold"),
              f"{mem.fraction:.0%} of {mem.capacity / GiB:.1f}")
    return t


def time_table(tm) -> Table:
    t = Table(title="Step time", title_justify="left")
    t.add_column("part")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    step = tm.step_time_s
    for name, val in tm.parts():
        t.add_row(name, f"{val:.3f}", f"{val / step:.0%}" if step else "-")
    t.add_row(Text("step", style="bold"), Text(f"{step:.3f}", style="bold"), "")
    return t


def throughput_line(tm) -> Text:
    line = (f"{tm.tokens_per_s:,.0f} tokens/s, {tm.tokens_per_s_per_gpu:,.0f} per GPU; "
            f"{tm.model_tflops_per_gpu:.0f} model TFLOP/s per GPU; MFU {tm.mfu:.1%}, HFU {tm.hfu:.1%}")
    if getattr(tm, "train", None):
        tt = tm.train
        line += (f"\n{fmt_count(tt['tokens'])} tokens: {tt['days']:.1f} days, "
                 f"{tt['gpu_hours']:,.0f} GPU-hours")
    return Text(line)


def _layout_line(layout, gbs: int) -> Text:
    d = layout.as_dict(gbs)
    parts = [f"tp {d['tp']}", f"pp {d['pp']}", f"dp {d['dp']}", f"cp {d['cp']}", f"ep {d['ep']}",
             f"etp {d['etp']}", f"vpp {d['vpp']}", f"micro-batch {d['micro_batch_size']}",
             f"micro-batches {d['num_microbatches']}", f"sp {'on' if d['sequence_parallel'] else 'off'}",
             f"zero {d['zero_stage']}", f"recompute {d['recompute']}"]
    if layout.uneven:
        parts.append(f"first/last stage layers {layout.first_stage_layers}/{layout.last_stage_layers}")
    return Text("Layout: " + ", ".join(parts))


def validation_view(result, *, source: str = "") -> Group:
    job = result.job
    head = (f"{job.model.name} on {job.num_gpus} x {job.hardware.name}, seq {job.training.seq_length}, "
            f"global batch {job.training.global_batch_size}, {job.training.precision}")
    verdict = Text("VALID" if result.valid else "INVALID",
                   style="bold green" if result.valid else "bold red")
    parts: list[Any] = [Text.assemble(verdict, "  ", head + (f"  ({source})" if source else "")),
                        _layout_line(result.layout, job.training.global_batch_size)]
    if result.errors or result.warnings:
        t = Table(title="Rules", title_justify="left", show_lines=False)
        t.add_column("")
        t.add_column("rule")
        t.add_column("message", overflow="fold")
        for v in result.errors:
            t.add_row(Text("error", style="red"), v.rule, v.message)
        for v in result.warnings:
            t.add_row(Text("warning", style="yellow"), v.rule, v.message)
        parts.append(t)
    else:
        parts.append(Text("Rules: all pass"))
    est = result.estimate
    if est is None:
        parts.append(Text("No estimate: the layout does not tile the GPUs (fix the errors above)."))
    else:
        parts.append(memory_table(est.memory))
        if est.time is not None:
            parts.append(time_table(est.time))
            parts.append(throughput_line(est.time))
    return Group(*parts)


def models_view(rows: list[dict]) -> Table:
    t = Table(title="Preset models")
    for col in ("name", "aliases", "params", "active", "layers", "hidden", "heads/kv", "experts", "seq"):
        t.add_column(col, justify="right" if col not in ("name", "aliases") else "left")
    for r in rows:
        t.add_row(r["name"], ", ".join(r["aliases"]), fmt_count(r["parameters"]),
                  fmt_count(r["active_parameters"]), str(r["num_layers"]), str(r["hidden_size"]),
                  f"{r['num_attention_heads']}/{r['num_kv_heads']}",
                  f"{r['num_experts']} top-{r['moe_top_k']}" if r["num_experts"] else "-",
                  str(r["seq_length"]))
    return t


def hardware_view(rows: list[dict]) -> Table:
    t = Table(title="Hardware profiles")
    for col in ("name", "memory GiB", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GB/s", "GPUs/node",
                "NVLink domain", "NVLink GB/s", "network GB/s"):
        t.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        t.add_row(r["name"], f"{r['memory_gib']:.1f}", f"{r['peak_tflops']['bf16']:.0f}",
                  f"{r['peak_tflops']['fp8']:.0f}" if r["peak_tflops"].get("fp8") else "-",
                  f"{r['hbm_bandwidth_gb_per_s']:.0f}", str(r["gpus_per_node"]),
                  str(r["nvlink_domain_size"]), f"{r['nvlink_bandwidth_gb_per_s']:.0f}",
                  f"{r['network_bandwidth_gb_per_s']:.0f}")
    return t
