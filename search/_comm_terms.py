"""Communication terms: tensor, context and pipeline parallelism, data-parallel / ZeRO sync."""

from __future__ import annotations

from dataclasses import dataclass

from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._collectives import (
    Link,
    all_gather_time_s,
    all_reduce_time_s,
    link_of,
    p2p_link_of,
    p2p_time_s,
    reduce_scatter_time_s,
)
from search._compute_time import LayerTimes
from search._fabric import Group
from search._memory import main_grad_bytes
from search._model_spec import ModelSpec
from search._parallel_spec import ParallelConfig, TrainingSpec
from search._placement import cp_group, dp_cp_group, edp_group, pp_group, tp_group
from search._units import BYTES_16BIT


def tp_forward_per_layer_s(model: ModelSpec, tokens: float, cluster: ClusterSpec, config: ParallelConfig,
                        cal: Calibration) -> float:
    """Forward TP communication of one block: two all-reduces of the ``tokens x h`` activation.

    Narayanan et al. 2021 Sec. 3.2 / Shoeybi et al. 2019 Sec. 3 (f and g operators): 2
    all-reduces forward, 2 backward. With sequence parallelism each all-reduce becomes a
    reduce-scatter + all-gather of the same ring traffic (Korthikanti et al. 2022 Sec. 4.2.2).
    The backward pass repeats it (:func:`search._schedule.tp_comm_per_layer_s`); what TP
    communication overlap hides is :func:`search._schedule.tp_exposed_s`'s business.
    """
    if config.tp == 1:
        return 0.0
    link = link_of(cluster, tp_group(config), cal)
    size_bytes = tokens * model.hidden * BYTES_16BIT
    if model.parallel_residual and not config.sp:
        # Parallel residual (GPT-J/GPT-NeoX): attention and MLP outputs are summed before one
        # all-reduce (gpt-neox megatron/model/transformer.py, gpt_j_residual "reduce once").
        return all_reduce_time_s(size_bytes, config.tp, link)
    if config.sp:
        rs_s = reduce_scatter_time_s(size_bytes, config.tp, link)
        return 2.0 * (rs_s + all_gather_time_s(size_bytes, config.tp, link))
    return 2.0 * all_reduce_time_s(size_bytes, config.tp, link)


CP_FWD_MERGE_BYTES_PER_ELEMENT = 4.0
"""Forward: each ring step's 16-bit partial output is written (2 bytes) and read (2) once more by the final
log-sum-exp correction (Transformer Engine ``AttnFuncWithCPAndKVP2P`` keeps ``out_per_step`` and
corrects after the loop; ``flash_attn_fwd_out_correction``)."""
CP_BWD_ACCUMULATE_BYTES_PER_ELEMENT = 8.0
"""Backward: each ring step adds its dq, dk and dv into fp32 accumulators (read 4 + write 4
bytes per element; the dk/dv accumulators travel around the ring with K and V)."""


def cp_comm_per_layer_s(model: ModelSpec, tokens: float, cluster: ClusterSpec, config: ParallelConfig,
                        cal: Calibration, lt: LayerTimes, hbm_bytes_per_s: float) -> tuple[float, float]:
    """Forward and backward time context parallelism adds to one block: the exposed part of the
    ring exchange and the merging of the per-step partial results.

    Ring attention (Liu et al. 2023, arXiv:2310.01889) as Megatron-Core runs it through Transformer
    Engine's ``AttnFuncWithCPAndKVP2P`` (p2p, the default ``--cp-comm-type``): ``cp`` steps per
    layer; at each of the ``cp - 1`` exchanges a rank sends its K and V chunk
    (``2 * tokens * kv_dim / tp`` 16-bit elements) to the next rank while it runs attention of
    its queries against the chunk it holds, so a step exposes only the part of the transfer
    that the step's attention (1/cp of the layer's, with the zig-zag causal load balance) does
    not cover. Backward sends K, V and their gradients (twice the bytes) against the backward
    step's attention. The partial outputs are merged by log-sum-exp (forward) and the
    gradients accumulated in fp32 (backward): memory-bound traffic of
    :data:`CP_FWD_MERGE_BYTES_PER_ELEMENT` / :data:`CP_BWD_ACCUMULATE_BYTES_PER_ELEMENT` per
    element and step that the unsplit attention does not pay.
    """
    cp = config.cp
    if cp == 1:
        return 0.0, 0.0
    link = p2p_link_of(cluster, cp_group(config), cal)
    kv_elements = 2.0 * tokens * model.kv_dim / config.tp
    send_s = p2p_time_s(kv_elements * BYTES_16BIT, link.bus_bytes_per_s, link.latency_s)
    steps = cp - 1
    fwd_exposed = steps * max(0.0, send_s - lt.attention_s / cp)
    bwd_send_s = p2p_time_s(2.0 * kv_elements * BYTES_16BIT, link.bus_bytes_per_s, link.latency_s)
    bwd_exposed = steps * max(0.0, bwd_send_s - lt.attention_backward_s / cp)
    q_elements = tokens * model.hidden / config.tp
    merge_s = cp * q_elements * CP_FWD_MERGE_BYTES_PER_ELEMENT / hbm_bytes_per_s
    accumulate_s = steps * (q_elements + kv_elements) * CP_BWD_ACCUMULATE_BYTES_PER_ELEMENT / hbm_bytes_per_s
    return fwd_exposed + merge_s, bwd_exposed + accumulate_s


def pp_p2p_per_micro_batch_s(model: ModelSpec, tokens: float, cluster: ClusterSpec, config: ParallelConfig,
                             cal: Calibration) -> float:
    """Send/receive time of one micro-batch's activations and gradients at a stage boundary.

    ``b*s*h`` 16-bit elements per transfer, ``/t`` with the scatter-gather optimisation
    (Narayanan et al. 2021 Sec. 4.1); the interleaved schedule sends ``v`` times as often
    (Sec. 2.2.2). One forward and one backward transfer per micro-batch.
    """
    if config.pp == 1:
        return 0.0
    link = p2p_link_of(cluster, pp_group(config), cal)
    size_bytes = tokens * model.hidden * BYTES_16BIT / config.tp
    return 2.0 * config.vp * p2p_time_s(size_bytes, link.bus_bytes_per_s, link.latency_s)


def grad_reduce_bytes_per_param(training: TrainingSpec) -> float:
    """Bytes per gradient element on the wire: the runtime's gradient buffer
    (:func:`search._memory.main_grad_bytes`)."""
    return main_grad_bytes(training.framework, training.precision, training.grad_reduce_in_bf16)


MEGATRON_MIN_BUCKET_PARAMS = 40e6
"""Megatron DDP bucket: ``max(40M, 1M x dp)`` parameters (``distributed_data_parallel_config.py``
``bucket_size``; frameworks_2.md sec. 2.3)."""
MEGATRON_BUCKET_PARAMS_PER_DP_RANK = 1e6
DEEPSPEED_REDUCE_BUCKET_PARAMS = 5e8
"""DeepSpeed ``reduce_bucket_size`` / ``allgather_bucket_size`` default (elements)."""


def dp_bucket_params(framework: str, dp: int, params: float, layer_params: float) -> float:
    """Parameters of the last bucket a runtime reduces or gathers, the part of the data-parallel
    traffic no overlap can hide ("exposes only one DP communication chunk", NeMo
    communication_overlap.rst; frameworks_2.md sec. 5): Megatron's DDP bucket, DeepSpeed's
    reduce bucket, FSDP's per-block flat parameter."""
    if framework == "megatron":
        bucket = max(MEGATRON_MIN_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_DP_RANK * dp)
    elif framework == "fsdp":
        bucket = layer_params
    else:
        bucket = DEEPSPEED_REDUCE_BUCKET_PARAMS
    return min(params, bucket)


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
    last_bucket_s: float = 0.0
    """The last bucket of ``per_step_s`` (exposed whatever the overlap)."""
    last_gather_bucket_s: float = 0.0
    """The first bucket of ``per_step_gather_s`` (exposed whatever the overlap)."""
    on_nvlink: bool = False
    """Every data-parallel group with traffic stays inside one NVLink domain (NVLS reductions in the
    switch, copy-engine gathers: the traffic takes few SMs from the compute it overlaps)."""


def _bucket_share(total_s: float, bucket_params: float, params: float) -> float:
    return total_s * bucket_params / params if params > 0 else 0.0


def step_comm_s(cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec, cal: Calibration,
                stage_params: tuple[float, ...], layer_params: float = 0.0,
                expert_params: tuple[float, ...] = ()) -> StepComm:
    """Data-parallel gradient sync and ZeRO parameter gathers of the largest stage, when each
    runtime really runs them (frameworks_2.md sec. 2.3, read from the runtimes' code):

    * ZeRO-1 / distributed optimizer and DDP (Megatron, DeepSpeed stages 0-1): one reduction per
      step, on the last micro-batch (``no_sync`` / gradient-accumulation boundary).
    * DeepSpeed ZeRO-2 (``partition_gradients``, ``stage_1_and_2.py``), Megatron-FSDP
      ``optim_grads`` / ``optim_grads_params`` (``grad_reduce_every_bprop``) and FSDP2 without
      pipelining reduce-scatter on every micro-batch's backward.
    * ZeRO-3 / FULL_SHARD re-gathers parameters in every forward and backward.
    * torch pipelining + FSDP2 (torchtitan pp > 1): ``set_requires_gradient_sync(False)`` and
      ``set_reshard_after_backward(False)`` on all but the last backward, so one all-gather and
      one reduce-scatter per step, the stage's parameters and gradients unsharded meanwhile.

    Volumes (Rajbhandari et al. 2020 Sec. 7): all-reduce = reduce-scatter + all-gather of the
    gradient bytes. ``stage_params`` are each pipeline rank's parameters per GPU
    (:func:`search._stages.stage_params_per_rank`; the fullest rank sets the pace); ``layer_params``
    one block's per GPU. ``expert_params``, the routed-expert part of ``stage_params``, syncs over
    the expert data-parallel group instead (``config.edp`` ranks at a stride of ep x etp;
    Megatron-Core reduces expert gradients over EDP, the rest over DP x CP; frameworks_2.md sec. 3.2).
    Where those groups land follows ``config.placement`` (:mod:`search._placement`).
    """
    group = config.dp * config.cp
    rank = max(range(len(stage_params)), key=stage_params.__getitem__)
    params = stage_params[rank]
    experts = expert_params[rank] if expert_params else 0.0
    dense = params - experts
    zero = config.zero_stage >= 1
    edp = config.edp
    shard_params = (dense / group + experts / edp) if zero else params
    warnings: list[str] = []
    if config.tp > cluster.node.nvlink_domain:
        warnings.append(f"tp={config.tp} spans nodes: tensor-parallel all-reduces run over the network")
    if config.ep * config.etp > cluster.node.nvlink_domain:
        warnings.append(f"ep*etp={config.ep * config.etp} spans nodes: the expert all-to-all runs over the network")
    parts = [_sync_s(cluster, config, training, cal, dense, group, dp_cp_group(config))]
    if experts:
        parts.append(_sync_s(cluster, config, training, cal, experts, edp, edp_group(config)))
    per_mb, step_s, gather = (sum(p[i] for p in parts) for i in range(3))
    bucket = dp_bucket_params(training.framework, config.dp, params, layer_params or params)
    return StepComm(per_mb, step_s, gather, shard_params, tuple(warnings),
                    _bucket_share(step_s, bucket, params), _bucket_share(gather, bucket, params),
                    all(p[3] for p in parts))


def _sync_s(cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec, cal: Calibration,
            params: float, group: int, ranks: Group) -> tuple[float, float, float, bool]:
    """(per micro-batch, per step reduction, per step gather) seconds of ``params`` parameters per
    GPU synchronised over the ``group`` ranks of ``ranks`` (see :func:`step_comm_s`), and whether
    the group stays inside one NVLink domain."""
    if group == 1 or params <= 0:
        return 0.0, 0.0, 0.0, True
    link = link_of(cluster, ranks, cal)
    grad_bytes = params * grad_reduce_bytes_per_param(training)
    param_bytes = params * BYTES_16BIT
    framework = training.framework
    deepspeed = framework in ("deepspeed", "megatron-deepspeed")
    z3_eff = cal.deepspeed_zero3_efficiency if deepspeed else cal.zero3_efficiency
    z3_link = Link(link.bus_bytes_per_s * z3_eff, link.latency_s, link.inter_node)
    stage = config.zero_stage
    torch_pipeline = framework == "fsdp" and config.pp > 1
    per_micro_batch_s = 0.0
    step_s = 0.0
    gather = 0.0
    if stage == 0:
        step_s = all_reduce_time_s(grad_bytes, group, link)
    elif stage == 1:
        if deepspeed and training.precision == "bf16":
            # bf16 + ZeRO-1 runs DeepSpeed's BF16_Optimizer (engine.py _do_optimizer_sanity_check), which
            # all-reduces the whole gradient (buffered_allreduce_fallback; pipe/engine.py _bf16_reduce_grads)
            # before each rank updates its partition and all-gathers the parameters.
            step_s = all_reduce_time_s(grad_bytes, group, link)
        else:
            step_s = reduce_scatter_time_s(grad_bytes, group, link)
        gather = all_gather_time_s(param_bytes, group, link)
    elif torch_pipeline:  # FSDP2 under torch pipelining: once per step (stage 2 and 3 alike)
        step_s = reduce_scatter_time_s(grad_bytes, group, z3_link)
        gather = all_gather_time_s(param_bytes, group, z3_link)
    elif stage == 2:
        if framework == "fsdp":  # SHARD_GRAD_OP: gather and reduce-scatter every micro-batch
            per_micro_batch_s = reduce_scatter_time_s(grad_bytes, group, z3_link)
            per_micro_batch_s += all_gather_time_s(param_bytes, group, z3_link)
        elif framework == "megatron":  # Megatron-FSDP optim_grads: flat-buffer reduce-scatter per backward
            per_micro_batch_s = reduce_scatter_time_s(grad_bytes, group, z3_link)
            gather = all_gather_time_s(param_bytes, group, link)
        else:  # DeepSpeed ZeRO-2: bucketed reduce-scatter in every backward
            per_micro_batch_s = reduce_scatter_time_s(grad_bytes, group, link)
            gather = all_gather_time_s(param_bytes, group, link)
    else:
        per_micro_batch_s = 2.0 * all_gather_time_s(param_bytes, group, z3_link)
        per_micro_batch_s += reduce_scatter_time_s(grad_bytes, group, z3_link)
    return per_micro_batch_s, step_s, gather, link.tier < 0
