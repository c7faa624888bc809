"""Communication terms: tensor, context and pipeline parallelism, data-parallel / ZeRO sync."""

from __future__ import annotations

from dataclasses import dataclass

from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._collectives import (
    Link,
    all_gather_time_s,
    all_reduce_time_s,
    group_link,
    p2p_link,
    p2p_time_s,
    reduce_scatter_time_s,
)
from search._compute_time import LayerTimes
from search._model_spec import ModelSpec
from search._parallel_spec import ParallelConfig, TrainingSpec
from search._units import BYTES_16BIT


def tp_forward_per_layer_s(model: ModelSpec, tokens: float, cluster: ClusterSpec, config: ParallelConfig,
                        cal: Calibration) -> float:
    """Forward TP communication of one block: two all-reduces of the ``tokens x h`` activation.

    Narayanan et al. 2021 Sec. 3.2 / Shoeybi et al. 2019 Sec. 3 (f and g operators): 2
    all-reduces forward, 2 backward. With sequence parallelism each all-reduce becomes a
    reduce-scatter + all-gather of the same ring traffic (Korthikanti et al. 2022 Sec. 4.2.2).
    The backward pass repeats it (:func:`search._schedule.tp_comm_per_layer_s`).
    """
    if config.tp == 1:
        return 0.0
    link = group_link(cluster, config.tp, 1, cal)
    size_bytes = tokens * model.hidden * BYTES_16BIT
    if config.sp:
        rs_s = reduce_scatter_time_s(size_bytes, config.tp, link)
        return 2.0 * (rs_s + all_gather_time_s(size_bytes, config.tp, link))
    return 2.0 * all_reduce_time_s(size_bytes, config.tp, link)


def cp_comm_per_layer_s(model: ModelSpec, tokens: float, cluster: ClusterSpec, config: ParallelConfig,
                        cal: Calibration, lt: LayerTimes) -> tuple[float, float]:
    """Exposed forward and backward context-parallel traffic of one block.

    Ring attention (Liu et al. 2023, arXiv:2310.01889; Megatron-Core context parallelism):
    cp - 1 exchanges of the local K and V (``2 * tokens * kv_dim / tp`` elements) forward,
    and of K, V plus their gradients backward, overlapped with the attention blocks.
    """
    if config.cp == 1:
        return 0.0, 0.0
    link = p2p_link(cluster, config.cp, config.tp, cal)
    kv_bytes = 2.0 * tokens * model.kv_dim / config.tp * BYTES_16BIT
    fwd = (config.cp - 1) * p2p_time_s(kv_bytes, link.bus_bytes_per_s, link.latency_s)
    bwd = 2.0 * fwd
    return max(0.0, fwd - lt.attention_s), max(0.0, bwd - lt.attention_backward_s)


def pp_p2p_per_micro_batch_s(model: ModelSpec, tokens: float, cluster: ClusterSpec, config: ParallelConfig,
                             cal: Calibration) -> float:
    """Send/receive time of one micro-batch's activations and gradients at a stage boundary.

    ``b*s*h`` 16-bit elements per transfer, ``/t`` with the scatter-gather optimisation
    (Narayanan et al. 2021 Sec. 4.1); the interleaved schedule sends ``v`` times as often
    (Sec. 2.2.2). One forward and one backward transfer per micro-batch.
    """
    if config.pp == 1:
        return 0.0
    link = p2p_link(cluster, config.pp, config.tp * config.cp * config.dp, cal)
    size_bytes = tokens * model.hidden * BYTES_16BIT / config.tp
    return 2.0 * config.vp * p2p_time_s(size_bytes, link.bus_bytes_per_s, link.latency_s)


def grad_reduce_bytes_per_param(training: TrainingSpec) -> float:
    """Bytes per gradient element on the wire.

    Megatron-LM reduces bf16 gradients in fp32 (``accumulate_allreduce_grads_in_fp32`` is set
    for bf16 in ``arguments.py``), fp16 in fp16; DeepSpeed reduces in the 16-bit type; FSDP as
    configured by Composer's DEFAULT mixed precision and torchtitan reduces in fp32.
    """
    if training.framework == "fsdp":
        return 4.0
    if training.framework == "megatron" and training.precision != "fp16":
        return 4.0
    return 2.0


@dataclass(frozen=True, slots=True)
class StepComm:
    """Data-parallel traffic: per micro-batch (overlapped with it) and per optimizer step."""

    per_micro_batch_s: float
    per_step_s: float
    """Gradient reduction after the last micro-batch (overlappable with its backward)."""
    per_step_gather_s: float
    """Parameter all-gather after the optimizer step (overlappable with the next forward)."""
    params_per_gpu_shard: float
    """Parameters of this GPU's ZeRO shard_params of the largest stage (what its optimizer updates)."""
    warnings: tuple[str, ...]


def step_comm_s(cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec, cal: Calibration,
                stage_params: tuple[float, float]) -> StepComm:
    """Data-parallel gradient sync and ZeRO parameter gathers of the largest stage.

    ZeRO (Rajbhandari et al. 2020 Sec. 7): stages 0-2 move 2 x the gradient bytes per step
    (all-reduce = reduce-scatter + all-gather), stage 3 1.5x that (gather in forward and in
    backward, reduce-scatter of gradients). DeepSpeed ZeRO-2/3 and FSDP reduce-scatter every
    micro-batch (no ``no_sync`` under sharding); Megatron reduces once per step. ZeRO-3 and
    FSDP re-gather parameters every micro-batch. ``stage_params`` are the first and last
    stage's parameters per GPU (:func:`search._stages.stage_params_per_gpu`).
    """
    group = config.dp * config.cp
    params = max(stage_params)
    shard_params = params / group if config.zero_stage >= 1 else params
    warnings: list[str] = []
    if config.tp > cluster.node.gpus_per_node:
        warnings.append(f"tp={config.tp} spans nodes: tensor-parallel all-reduces run over the network")
    if group == 1:
        return StepComm(0.0, 0.0, 0.0, shard_params, tuple(warnings))
    link = group_link(cluster, group, config.tp, cal)
    grad_bytes = params * grad_reduce_bytes_per_param(training)
    param_bytes = params * BYTES_16BIT
    deepspeed = training.framework in ("deepspeed", "megatron-deepspeed")
    z3_eff = cal.deepspeed_zero3_efficiency if deepspeed else cal.zero3_efficiency
    z3_link = Link(link.bus_bytes_per_s * z3_eff, link.latency_s, link.inter_node)
    stage = config.zero_stage
    sharded_runtime = training.framework in ("deepspeed", "fsdp", "megatron-deepspeed")
    per_micro_batch_s = 0.0
    step_s = 0.0
    gather = 0.0
    if stage == 0:
        step_s = all_reduce_time_s(grad_bytes, group, link)
    elif stage == 1:
        step_s = reduce_scatter_time_s(grad_bytes, group, link)
        gather = all_gather_time_s(param_bytes, group, link)
    elif stage == 2:
        if training.framework == "fsdp":  # SHARD_GRAD_OP: gather and reduce-scatter every micro-batch
            per_micro_batch_s = reduce_scatter_time_s(grad_bytes, group, z3_link)
            per_micro_batch_s += all_gather_time_s(param_bytes, group, z3_link)
        elif sharded_runtime:  # DeepSpeed ZeRO-2: bucketed reduce-scatter in every backward
            per_micro_batch_s = reduce_scatter_time_s(grad_bytes, group, link)
            gather = all_gather_time_s(param_bytes, group, link)
        else:
            step_s = reduce_scatter_time_s(grad_bytes, group, link)
            gather = all_gather_time_s(param_bytes, group, link)
    else:
        per_micro_batch_s = 2.0 * all_gather_time_s(param_bytes, group, z3_link)
        per_micro_batch_s += reduce_scatter_time_s(grad_bytes, group, z3_link)
    return StepComm(per_micro_batch_s, step_s, gather, shard_params, tuple(warnings))
