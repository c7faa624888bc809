"""Read published runs and feasibility claims in the calibration schema into specs.

Schema: ``shared/calibration/README.md`` (runs.json, feasibility.json). Fields a source left
null take the documented default of the framework that ran it (Megatron-LM argument
defaults: micro-batch 1, vp 1, cp 1, no sequence parallelism, no recomputation; bf16).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from search._cluster_presets import GPUS, NETWORK_EFFICIENCY, NODES, NVLINK_RING_EFFICIENCY, gpu_preset
from search._cluster_spec import ClusterSpec, NodeSpec
from search._errors import SpecError
from search._model_spec import Activation, ModelSpec
from search._parallel_spec import Framework, ParallelConfig, Precision, TrainingSpec

NODE_FOR_GPU = {
    "v100-sxm3-32gb": "dgx-2",
    "v100-32gb": "dgx-2",
    "a100-sxm4-40gb": "dgx-a100-40gb",
    "a100-sxm4-80gb": "dgx-a100-80gb",
    "h100-sxm5-80gb": "dgx-h100",
    "h200-sxm-141gb": "dgx-h200",
}
_LINKS = re.compile(r"(\d+)\s*x\s*(?:[A-Za-z][\w-]*\s+){0,3}(\d+)\s*G(?:b/s|bps|bit/s)", re.IGNORECASE)
_AGGREGATE = re.compile(r"(\d+)\s*G(?:b/s|bps)\s+node-node", re.IGNORECASE)
_NVLINKS = re.compile(r"(\d+)\s+inter-GPU links", re.IGNORECASE)
NVLINK_BYTES_PER_S_PER_LINK = 25e9
"""NVLink 2, 3 and 4 all carry 25 GB/s per link per direction (V100: 6 links, A100: 12, H100: 18)."""
_RAM = re.compile(r"(\d+)\s*(GB|TB)\s+RAM", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class CalibrationRun:
    """One published run as specs plus what was measured."""

    id: str
    source: str
    model: ModelSpec
    cluster: ClusterSpec
    config: ParallelConfig
    training: TrainingSpec
    iteration_time_s: float | None
    peak_memory_bytes: float | None
    ran: bool | None
    """True: the run ran (measured time or oom false); False: it OOMed; None: unknown."""


def network_bytes_per_s(text: str | None) -> float | None:
    """Per-node network line rate from a free-text description, or None.

    ``"8x 200 Gb/s HDR"`` -> 200e9 B/s; ``"4x Omni-Path 100 Gb/s"`` -> 50e9;
    ``"1600 Gbps node-node"`` -> 200e9.
    """
    if not text:
        return None
    if m := _LINKS.search(text):
        return int(m.group(1)) * int(m.group(2)) * 1e9 / 8
    if m := _AGGREGATE.search(text):
        return int(m.group(1)) * 1e9 / 8
    return None


def _node(cluster: dict[str, Any]) -> NodeSpec:
    gpu_id = cluster["gpu"]
    if gpu_id not in GPUS:
        raise SpecError("cluster.gpu", f"{gpu_id!r} is not a known GPU", f"use one of {', '.join(sorted(GPUS))}")
    base = NODES[NODE_FOR_GPU[gpu_id]]
    gpn = int(cluster.get("gpus_per_node") or base.gpus_per_node)
    gpn = min(gpn, int(cluster.get("num_gpus") or gpn))
    node = replace(base, gpus_per_node=gpn,
                   inter_node_bytes_per_s=base.inter_node_bytes_per_s * gpn / base.gpus_per_node)
    if (net := network_bytes_per_s(cluster.get("network"))) is not None:
        node = replace(node, inter_node_bytes_per_s=net * NETWORK_EFFICIENCY)
    if m := _NVLINKS.search(cluster.get("network") or ""):
        # Nodes without NVSwitch (e.g. 4 NVLinks per GPU): the per-GPU NVLink bandwidth.
        node = replace(node, intra_node_bytes_per_s=int(m.group(1)) * NVLINK_BYTES_PER_S_PER_LINK
                       * NVLINK_RING_EFFICIENCY)
    if m := _RAM.search(cluster.get("network") or ""):
        node = replace(node, cpu_memory_bytes=int(m.group(1)) * (2**30 if m.group(2).upper() == "GB" else 2**40))
    return node


def _model(rec: dict[str, Any], pp: int, vp: int, dropout: bool) -> ModelSpec:
    m = rec
    h = int(m["hidden"])
    vocab = int(m["vocab"])
    ffn = int(m.get("ffn") or 4 * h)
    layers = m.get("layers")
    if layers is None:
        # Solve P = 12*l*h^2 + 13*l*h + V*h for l, then round to a multiple of pp*vp.
        estimate = (float(m["params"]) - vocab * h) / (12 * h * h + 13 * h)
        step = pp * vp
        layers = max(step, round(estimate / step) * step)
    activation = m.get("activation") or "gelu"
    llama_like = activation == "swiglu"

    def given(key: str, default: Any) -> Any:
        """The record's value where it states one (files written by ``autopar runs export`` do),
        else what the published runs imply: SwiGLU models are Llama-like (RoPE, RMSNorm, no
        biases, untied head), GeLU models GPT-like."""
        value = m.get(key)
        return default if value is None else value

    return ModelSpec(
        name=str(m.get("name") or "model"),
        layers=int(layers),
        hidden=h,
        heads=int(m["heads"]),
        kv_heads=int(m.get("kv_heads") or m["heads"]),
        ffn=ffn,
        vocab=vocab,
        seq_len=int(m["seq_len"]),
        activation=cast(Activation, activation),
        tied_embeddings=bool(given("tied_embeddings", not llama_like)),
        position_embedding=given("position_embedding", "rope" if llama_like else "learned"),
        bias=bool(given("bias", not llama_like)),
        norm=given("norm", "rmsnorm" if llama_like else "layernorm"),
        attention=m.get("attention") or "flash",
        dropout=bool(given("dropout", dropout)),
    )


def run_from_record(rec: dict[str, Any]) -> CalibrationRun:
    """Turn one ``runs.json`` record into specs (nulls take framework defaults)."""
    cfg = rec["config"]
    cl = rec["cluster"]
    framework = cfg.get("framework") or "megatron"
    if framework == "other":
        framework = "megatron"
    pp = int(cfg.get("pp") or 1)
    vp = int(cfg.get("vp") or 1)
    # Dropout is not in the schema: take the framework's default (Megatron-LM and
    # Megatron-DeepSpeed --hidden-dropout/--attention-dropout 0.1; MPT/llm-foundry 0).
    model = _model(rec["model"], pp, vp, dropout=framework in ("megatron", "megatron-deepspeed"))
    node = _node(cl)
    num_gpus = int(cl["num_gpus"])
    num_nodes = max(1, math.ceil(num_gpus / node.gpus_per_node))
    cluster = ClusterSpec(gpu=gpu_preset(cl["gpu"]), node=node, num_nodes=num_nodes, name=str(cl.get("gpu")))
    tp = int(cfg.get("tp") or 1)
    cp = int(cfg.get("cp") or 1)
    dp = int(cfg.get("dp") or num_gpus // (tp * pp * cp))
    precision = cfg.get("precision") or "bf16"
    if precision == "fp32":
        raise SpecError("config.precision", "fp32 training is not modelled", "use bf16, fp16 or fp8 runs")
    config = ParallelConfig(
        dp=dp, tp=tp, pp=pp, vp=vp, cp=cp, sp=bool(cfg.get("sp") or False),
        micro_batch=int(cfg.get("micro_batch") or 1),
        zero_stage=int(cfg.get("zero_stage") or 0),
        offload_optimizer=cfg.get("offload_optimizer") or "none",
        offload_param=cfg.get("offload_param") or "none",
        recompute=cfg.get("recompute") or "none",
    )
    training = TrainingSpec(global_batch=int(cfg["global_batch"]), precision=cast(Precision, precision),
                            framework=cast(Framework, framework))
    meas = rec.get("measured") or {}
    oom = meas.get("oom")
    time_s = meas.get("iteration_time_s")
    ran = (not oom) if oom is not None else (True if time_s is not None else None)
    return CalibrationRun(
        id=str(rec["id"]), source=str(rec.get("source", "unknown")), model=model, cluster=cluster, config=config,
        training=training, iteration_time_s=time_s, peak_memory_bytes=meas.get("peak_memory_bytes_per_gpu"), ran=ran,
    )


def load_runs(path: str | Path) -> list[CalibrationRun]:
    """All records of a ``runs.json``-schema file."""
    return [run_from_record(rec) for rec in json.loads(Path(path).read_text())]


@dataclass(frozen=True, slots=True)
class FeasibilityClaim:
    """One published 'fits / does not fit' claim turned into specs."""

    id: str
    model: ModelSpec
    cluster: ClusterSpec
    config: ParallelConfig
    training: TrainingSpec
    feasible: bool


def load_feasibility(path: str | Path) -> list[FeasibilityClaim]:
    """Every (record, expect) pair of a ``feasibility.json``-schema file.

    The node keeps its whole host (CPU memory, NVMe, CPU) when the claim uses fewer GPUs
    than it has, as in the ZeRO-Offload single-GPU experiment on a DGX-2.
    """
    claims = []
    for rec in json.loads(Path(path).read_text()):
        cl = rec["cluster"]
        gpu = gpu_preset(cl["gpu"])
        base = NODES[NODE_FOR_GPU[cl["gpu"]]]
        gpn = int(cl.get("gpus_per_node") or base.gpus_per_node)
        node = replace(base, gpus_per_node=gpn,
                       inter_node_bytes_per_s=base.inter_node_bytes_per_s * gpn / base.gpus_per_node)
        num_gpus = int(cl["num_gpus"])
        cluster = ClusterSpec(gpu=gpu, node=node, num_nodes=max(1, num_gpus // gpn), name=str(cl.get("node")))
        m = rec["model"]
        model = _model({**m, "kv_heads": m.get("kv_heads"), "attention": m.get("attention") or "standard"}, 1, 1,
                       dropout=False)
        for i, exp in enumerate(rec["expect"]):
            cfg = exp["config"]
            mb = int(cfg.get("micro_batch") or 1)
            config = ParallelConfig(
                dp=num_gpus, micro_batch=mb, zero_stage=int(cfg.get("zero_stage") or 0),
                offload_optimizer=cfg.get("offload_optimizer") or "none",
                offload_param=cfg.get("offload_param") or "none", recompute=cfg.get("recompute") or "none",
            )
            training = TrainingSpec(global_batch=num_gpus * mb, precision="fp16", framework="deepspeed")
            claims.append(FeasibilityClaim(f"{rec['id']}#{i}", model, cluster, config, training, bool(exp["feasible"])))
    return claims
