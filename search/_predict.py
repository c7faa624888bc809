"""``predict``: one configuration's step time, memory and feasibility, as a sum of named terms.

Iteration time (Calculon-style readable sum, Isaev et al. 2023):

    compute + host_overhead + recompute + tp_comm + cp_comm + pipeline_bubble + pp_p2p
    + zero3_comm + offload_transfer + dp_comm + optimizer + offload_step (+ ep_comm for MoE)

Each term is the part on the critical path (exposed), in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import cast

from search._breakdowns import TimeBreakdown
from search._calibration import Calibration, default_calibration
from search._cluster_spec import ClusterSpec, Dtype, GPUSpec, NodeSpec
from search._comm_terms import (
    cp_comm_per_layer_s,
    pp_p2p_per_micro_batch_s,
    step_comm_s,
    tp_forward_per_layer_s,
)
from search._compute_time import (
    BACKWARD_TO_FORWARD,
    Kernels,
    LayerTimes,
    layer_times,
    lm_head_time_s,
    make_kernels,
    optimizer_step_time_s,
)
from search._error_band import error_band
from search._errors import SpecError
from search._fabric import NON_BLOCKING, Fabric
from search._flops import hardware_flop_per_iteration, model_flop_per_iteration
from search._fp8_attention import check_fp8_attention, fp8_attention_time_factors
from search._memory import saved_linear_input_bytes
from search._memory_plan import MemoryPlan, plan_memory, stage_breakdowns
from search._model_spec import ModelSpec
from search._moe_dispatch import moe_sync_overhead_s, overlapped_ep_comm_s
from search._moe_terms import MoELayerTimes, moe_layer_times, moe_warnings
from search._offload import offload_terms
from search._parallel_spec import CudaGraphs, ParallelConfig, Recompute, TrainingSpec, check_compatible
from search._prediction import Prediction
from search._schedule import (
    P2P_OVERLAP_RUNTIMES,
    TP_COLLECTIVES_BACKWARD_TO_FORWARD,
    chunked_overlap_s,
    dp_exposed_s,
    overlapped_s,
    pipeline_bubble_s,
    pp_p2p_exposed_s,
    recompute_per_layer_s,
    tp_exposed_s,
)
from search._stages import (
    stage_expert_params_per_rank,
    stage_layer_counts,
    stage_moe_layer_counts,
    stage_params_per_rank,
    stage_recompute_shares,
)
from search._support import megatron_fsdp, model_support_warnings, support_warnings
from search._tiling import tiling_launch_s
from search._unfused_paths import ExpertPath, expert_path, expert_path_warnings

FUSED_ATTENTION_RUNTIMES = ("megatron",)
"""Runtimes whose attention is Transformer Engine's fused kernel (cuDNN; FlashAttention-3-class on
Hopper, -4-class on Blackwell; ``NVTE_FUSED_ATTN`` on by default): Megatron-Core. The others are
costed with FlashAttention-2 (llm-foundry, torchtitan's SDPA as fitted, Megatron-DeepSpeed)."""


def attention_efficiency(gpu: GPUSpec, framework: str) -> float:
    """The attention kernel's fraction of peak on ``gpu`` under ``framework``: the GPU's own fused
    kernel where the runtime runs it (:data:`FUSED_ATTENTION_RUNTIMES`) and the GPU has one, else
    FlashAttention-2's."""
    if framework in FUSED_ATTENTION_RUNTIMES and gpu.fused_attention_efficiency is not None:
        return gpu.fused_attention_efficiency
    return gpu.attention_efficiency


@lru_cache(maxsize=64)
def _kernels(gpu: GPUSpec, precision: str, cal: Calibration, framework: str = "",
             fp8_attention: bool = False) -> tuple[Kernels, float]:
    """Achievable kernel rates of ``gpu`` in ``precision`` under ``framework`` and the peak MFU is
    measured against (cached: a search predicts thousands of configurations on the same GPU).
    Raises, naming the precisions the GPU supports, when it lacks ``precision``."""
    mfu_peak = gpu.peak_flop_per_s(cast(Dtype, PRECISION_DTYPE.get(precision, precision)))
    peak = gpu.peak_flop_per_s("fp16" if precision == "fp16" else "bf16")
    fused = framework in FUSED_ATTENTION_RUNTIMES and gpu.fused_attention_efficiency is not None
    kernels = make_kernels(peak, gpu.matmul_efficiency, attention_efficiency(gpu, framework), gpu.hbm_bytes_per_s,
                           cal,
                           gemm_speedup(gpu, precision, cal), gpu.fp32_flop_per_s, gpu.gemm_flop_per_s_by_size,
                           cal.fused_attention_share if fused else cal.attention_efficiency, fused,
                           fp8_attention_time_factors(gpu.fp4_flop_per_s is not None, precision)
                           if fp8_attention else None)
    return kernels, mfu_peak


PRECISION_DTYPE = {"mxfp8": "fp8", "nvfp4": "fp4"}
"""The tensor-core type each recipe runs its GEMMs on (the peak MFU is measured against)."""


def check_precision(gpu: GPUSpec, precision: str) -> None:
    """Raise :class:`SpecError` unless ``gpu`` has the tensor cores ``precision`` runs on."""
    gpu.peak_flop_per_s(cast(Dtype, PRECISION_DTYPE.get(precision, precision)))
    gemm_speedup(gpu, precision, default_calibration())


def gemm_speedup(gpu: GPUSpec, precision: str, cal: Calibration) -> float:
    """End-to-end speed-up of a recipe's GEMMs over BF16 on ``gpu``.

    FP8 with per-tensor scales: the fitted :attr:`Calibration.fp8_gemm_speedup`. MXFP8: the same
    constant; Blackwell's block-scaled MMA applies the per-32-element scales inside the tensor
    core at the FP8 peak (Transformer Engine ``MXFP8BlockScaling``), and the quantisation pass per
    tensor costs what per-tensor scaling's cast + amax costs (an assumption the MXFP8 rows of
    runs_2024_2026.json test: fidelity.py reports them). NVFP4: the FP4/FP8 peak ratio on top, at
    FP8's fraction of its peak (no published end-to-end figure to fit yet). Refuses a recipe the
    GPU cannot run (MXFP8 and NVFP4 need Blackwell: its FP4 tensor cores mark it)."""
    if precision in ("bf16", "fp16"):
        return 1.0
    if precision in ("mxfp8", "nvfp4") and gpu.fp4_flop_per_s is None:
        raise SpecError("TrainingSpec.precision", f"{precision} needs Blackwell block-scaled tensor cores; "
                        f"{gpu.name} has none", "use precision fp8 (per-tensor scaling) or bf16 on this GPU")
    speedup = cal.fp8_gemm_speedup
    if precision == "nvfp4":
        speedup *= gpu.peak_flop_per_s("fp4") / gpu.peak_flop_per_s("fp8")
    return speedup


@dataclass(frozen=True, slots=True)
class MoEBlockTerms:
    """Per-micro-batch times of one MoE block (forward + backward), see :mod:`search._moe_terms`."""

    layer: MoELayerTimes
    compute_s: float
    tp_comm_s: float
    cp_comm_s: float
    recompute_s: float
    ep_comm_s: float
    """Dispatch and combine all-to-alls (and etp gathers), forward and backward."""

    @property
    def layer_s(self) -> float:
        return self.compute_s + self.tp_comm_s + self.cp_comm_s + self.recompute_s + self.ep_comm_s


@dataclass(frozen=True, slots=True)
class MicroBatchTerms:
    """Per-micro-batch times of one transformer layer, and of the LM head, that depend only on the
    layer shapes; a pipeline rank's times are its layer count times these (+ the head on the last)."""

    layer: LayerTimes
    compute_s: float
    """Forward + backward of one layer."""
    tp_comm_s: float
    cp_comm_s: float
    recompute_s: float
    head_s: float
    """LM head + loss, forward and backward (on the last pipeline rank)."""
    moe: MoEBlockTerms | None = None
    """The MoE blocks' terms (None for a dense model)."""
    mtp_s: float = 0.0
    """The multi-token-prediction modules (a block and an LM-head pass each), on the last rank."""

    @property
    def layer_s(self) -> float:
        """Everything one dense layer costs per micro-batch."""
        return self.compute_s + self.tp_comm_s + self.cp_comm_s + self.recompute_s

    @property
    def moe_layer_s(self) -> float:
        """Everything one MoE layer costs per micro-batch."""
        return self.moe.layer_s if self.moe is not None else self.layer_s


@lru_cache(maxsize=65536)
def _micro_batch_terms(model: ModelSpec, gpu: GPUSpec, node: NodeSpec, precision: str, cal: Calibration, tp: int,
                       cp: int, sp: bool, micro_batch: int, recompute: str,
                       tp_comm_overlap: bool = False, ep: int = 1, etp: int = 1,
                       framework: str = "", fabric: Fabric = NON_BLOCKING, moe_dispatcher: str = "alltoall",
                       moe_a2a_overlap: bool = False, cuda_graphs: str = "none",
                       fp8_attention: bool = False) -> MicroBatchTerms:
    """Compute, TP/CP communication and recomputation of one layer, and LM-head time, per micro-batch.

    They depend on the degrees that shape a layer (tp, cp, sp, micro-batch, recompute), not on
    dp, pp or ZeRO, so a search reuses them across thousands of configurations.
    """
    dense, tp_fwd_s, cp_fwd_s = _dense_terms(model, gpu, node, fabric, precision, cal, tp, cp, sp, micro_batch,
                                             recompute,
                                             tp_comm_overlap, framework, fp8_attention)
    if model.moe is None:
        return dense
    mt = _moe_times(model, gpu, node, fabric, precision, cal, tp, cp, sp, micro_batch, ep, etp, framework,
                    moe_dispatcher, expert_path(model, gpu, precision, cuda_graphs, framework), fp8_attention)
    as_layer = LayerTimes(mt.gemm_s, mt.attention_s, mt.attention_backward_s, mt.elementwise_s)
    # With SP the routed experts take their tokens from the sequence shards: only the attention (and
    # the shared experts, which run on the gathered sequence) keep their TP all-gather/reduce-scatter.
    tp_share = 1.0 if (not sp or model.moe.shared_expert_ffn) else 0.5
    compute_s = as_layer.forward_s + as_layer.backward_s
    ep_comm_s = 2.0 * mt.dispatch_s  # forward and backward (search._moe_terms.dispatch_forward_s)
    moe = MoEBlockTerms(
        layer=mt,
        compute_s=compute_s,
        tp_comm_s=tp_share * dense.tp_comm_s,
        cp_comm_s=dense.cp_comm_s,
        recompute_s=recompute_per_layer_s(recompute, model.attention, as_layer, tp_share * tp_fwd_s, cp_fwd_s)
        + (mt.dispatch_s if recompute == "full" else 0.0),
        ep_comm_s=overlapped_ep_comm_s(ep_comm_s, compute_s, moe_dispatcher) if moe_a2a_overlap else ep_comm_s,
    )
    return replace(dense, moe=moe, mtp_s=model.mtp_layers * (moe.layer_s + dense.head_s))


@lru_cache(maxsize=65536)
def _dense_terms(model: ModelSpec, gpu: GPUSpec, node: NodeSpec, fabric: Fabric, precision: str, cal: Calibration,
                 tp: int,
                 cp: int, sp: bool, micro_batch: int, recompute: str, tp_comm_overlap: bool,
                 framework: str, fp8_attention: bool = False) -> tuple[MicroBatchTerms, float, float]:
    """The dense layer's and the LM head's terms (what no expert degree changes), with the forward TP
    and CP times an MoE block shares: cached apart so a search's expert layouts reuse them."""
    kernels, _ = _kernels(gpu, precision, cal, framework, fp8_attention)
    cluster = ClusterSpec(gpu=gpu, node=node, fabric=fabric)
    c = ParallelConfig(tp=tp, cp=cp, sp=sp, micro_batch=micro_batch, recompute=cast(Recompute, recompute),
                       tp_comm_overlap=tp_comm_overlap)
    tokens = micro_batch * model.seq_len / cp
    lt = layer_times(model, tokens, model.seq_len, tp, sp, kernels)
    tp_raw_s = tp_forward_per_layer_s(model, tokens, cluster, c, cal)
    # Userbuffers exchange through NVLink peer memory: a TP group beyond the NVLink domain overlaps nothing.
    overlap = tp_comm_overlap and tp <= node.nvlink_domain
    tp_fwd_s = tp_exposed_s(tp_raw_s, lt.gemm_s, tp, overlap)
    tp_bwd_s = tp_exposed_s(TP_COLLECTIVES_BACKWARD_TO_FORWARD * tp_raw_s, BACKWARD_TO_FORWARD * lt.gemm_s, tp,
                            overlap)
    cp_fwd_s, cp_bwd_s = cp_comm_per_layer_s(model, tokens, cluster, c, cal, lt, kernels.hbm_bytes_per_s)
    recompute_layer_s = recompute_per_layer_s(recompute, model.attention, lt, tp_fwd_s, cp_fwd_s)
    head_fwd_s, head_bwd_s = lm_head_time_s(model, tokens, tp, kernels)
    terms = MicroBatchTerms(
        layer=lt,
        compute_s=lt.forward_s + lt.backward_s,
        tp_comm_s=tp_fwd_s + tp_bwd_s,
        cp_comm_s=cp_fwd_s + cp_bwd_s,
        recompute_s=recompute_layer_s,
        head_s=head_fwd_s + head_bwd_s,
    )
    return terms, tp_fwd_s, cp_fwd_s


@lru_cache(maxsize=65536)
def _moe_times(model: ModelSpec, gpu: GPUSpec, node: NodeSpec, fabric: Fabric, precision: str, cal: Calibration,
               tp: int, cp: int,
               sp: bool, micro_batch: int, ep: int, etp: int, framework: str,
               dispatcher: str = "alltoall", path: ExpertPath = "eager", fp8_attention: bool = False) -> MoELayerTimes:
    """One MoE block's forward times (independent of recomputation and TP overlap: cached apart)."""
    kernels, _ = _kernels(gpu, precision, cal, framework, fp8_attention)
    cluster = ClusterSpec(gpu=gpu, node=node, fabric=fabric)
    return moe_layer_times(model, micro_batch, tp, cp, sp, ep, etp, kernels, cluster, cal, dispatcher, path)


def stage_micro_batch_s(terms: MicroBatchTerms, counts: tuple[int, ...], overhead_s: float,
                        moe_counts: tuple[int, ...] | None = None,
                        recompute_shares: tuple[float, ...] | None = None) -> tuple[float, ...]:
    """Per-micro-batch time of each pipeline rank: its dense and MoE layers, the host overhead, and
    the LM head (and MTP modules) on the last rank (the embedding lookup is memory-bound and small
    next to a layer: not counted). ``recompute_shares``: the share of each rank's layers that
    recompute (:func:`search._stages.stage_recompute_shares`; default all of them, as ``terms`` say)."""
    moe_counts = moe_counts or (0,) * len(counts)
    layer_s, moe_layer_s = terms.layer_s, terms.moe_layer_s
    times = [(n - k) * layer_s + k * moe_layer_s + overhead_s for n, k in zip(counts, moe_counts, strict=True)]
    if recompute_shares is not None and any(share < 1.0 for share in recompute_shares):
        moe_recompute_s = _moe_recompute_s(terms)
        times = [t - (1.0 - share) * ((n - k) * terms.recompute_s + k * moe_recompute_s)
                 for t, n, k, share in zip(times, counts, moe_counts, recompute_shares, strict=True)]
    times[-1] += terms.head_s + terms.mtp_s
    return tuple(times)


def _moe_recompute_s(terms: MicroBatchTerms) -> float:
    return terms.moe.recompute_s if terms.moe is not None else terms.recompute_s


def microbatch_overhead_s(framework: str, pp: int, cal: Calibration, cuda_graphs: CudaGraphs = "none") -> float:
    """Host time per micro-batch per stage: every runtime's (Python, launches), plus DeepSpeed's
    pipeline engine's own where it schedules the pipeline (Megatron-DeepSpeed with pp > 1;
    :attr:`Calibration.pipeline_engine_microbatch_s`, fitted on the BLOOM-176B benchmarks). None under
    Megatron-Core's full-iteration CUDA graph (``cuda_graphs``), which captures the whole
    forward-backward schedule of a step once and replays it: the host launches no kernel per
    micro-batch, only copies each micro-batch's inputs into the graph's static buffers (megatron-core
    0.18 ``full_cuda_graph.py:151-182, 208-232``; not costed)."""
    if cuda_graphs == "full-iteration":
        return 0.0
    engine_s = cal.pipeline_engine_microbatch_s if framework == "megatron-deepspeed" and pp > 1 else 0.0
    return cal.microbatch_overhead_s + engine_s


def dp_overlap(framework: str, pp: int, cal: Calibration) -> float:
    """Share of the last backward / first forward that hides data-parallel traffic: the fitted
    :attr:`Calibration.dp_overlap`, except under DeepSpeed's pipeline engine, whose
    ``TrainSchedule`` issues ``ReduceTiedGrads``, ``ReduceGrads`` and ``OptimizerStep`` as
    instructions after the last backward pass (``deepspeed/runtime/pipe/schedule.py:239-241``;
    ``engine.py::_exec_reduce_grads``): nothing overlaps the reduction there."""
    return 0.0 if framework == "megatron-deepspeed" and pp > 1 else cal.dp_overlap


def layer_shape_terms(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, cal: Calibration, tp: int,
                      cp: int, sp: bool, micro_batch: int, recompute: str, tp_comm_overlap: bool, ep: int, etp: int,
                      moe_dispatcher: str, moe_a2a_overlap: bool, cuda_graphs: str) -> MicroBatchTerms:
    """:func:`micro_batch_terms` from the degrees that shape a layer, without a :class:`ParallelConfig` (a
    search's throughput bounds ask for ~30,000 shapes: building a configuration for each cost ~7 % of its time)."""
    return _micro_batch_terms(model, cluster.gpu, cluster.node, training.precision, cal, tp, cp, sp, micro_batch,
                              recompute, tp_comm_overlap, ep, etp, training.framework, cluster.fabric, moe_dispatcher,
                              moe_a2a_overlap, cuda_graphs, training.fp8_attention)


def micro_batch_terms(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec,
                      cal: Calibration) -> MicroBatchTerms:
    """One layer's and the LM head's per-micro-batch terms (:func:`_micro_batch_terms`): they depend on
    the degrees that shape a layer, not on dp, pp, vp, ZeRO or the layout."""
    c = config
    return layer_shape_terms(model, cluster, training, cal, c.tp, c.cp, c.sp, c.micro_batch, c.recompute,
                             c.tp_comm_overlap, c.ep, c.etp, c.moe_dispatcher, c.moe_a2a_overlap, c.cuda_graphs)


def stage_overhead_s(model: ModelSpec, framework: str, config: ParallelConfig, cal: Calibration) -> float:
    """Host time each pipeline rank adds per micro-batch: the runtime's (:func:`microbatch_overhead_s`)
    and a host-synchronizing MoE dispatcher's per chunk (:func:`moe_sync_overhead_s`)."""
    c = config
    return microbatch_overhead_s(framework, c.pp, cal, c.cuda_graphs) + (
        moe_sync_overhead_s(c.ep, c.vp, c.moe_dispatcher, cal.moe_sync_chunk_s, model.moe.pad_to_capacity)
        if model.moe is not None else 0.0)


def slowest_and_others_s(stage_s: tuple[float, ...]) -> tuple[float, float]:
    """(the slowest rank's per-micro-batch time, the other ranks' summed) of :func:`stage_micro_batch_s`.
    The ranks are added one after another (as ``sum`` does before Python 3.12, which compensates), so
    a search's bounds computed many at once (:mod:`search._bounds`) are the same floats on every Python."""
    slowest = max(stage_s)
    total = stage_s[0]
    for time_s in stage_s[1:]:
        total += time_s
    return slowest, total - slowest


def stage_bound_terms(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec,
                      calibration: Calibration | None = None) -> tuple[float, float]:
    """(the slowest rank's per-micro-batch work, the other ranks' summed): what no overlap can hide,
    per micro-batch in the steady state and once in the warm-up and cool-down."""
    cal = calibration or default_calibration()
    c = config
    t = micro_batch_terms(model, cluster, c, training, cal)
    stage_s = stage_micro_batch_s(t, stage_layer_counts(model, c), stage_overhead_s(model, training.framework, c, cal),
                                  stage_moe_layer_counts(model, c), stage_recompute_shares(model, c))
    return slowest_and_others_s(stage_s)


def time_lower_bound_s(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec,
                       calibration: Calibration | None = None) -> float:
    """A cheap lower bound on :func:`predict`'s iteration time: the slowest pipeline rank's
    per-micro-batch work times the number of micro-batches, plus the other ranks' work once over vp
    (the warm-up and cool-down of :func:`search._schedule.pipeline_bubble_s`, without p2p); every
    other term is >= 0 and overlap never makes a micro-batch shorter than its compute. A search
    skips configurations whose bound is already slower than its k-th best. Assumes validated inputs."""
    c = config
    slowest, others = stage_bound_terms(model, cluster, c, training, calibration)
    m = training.global_batch // (c.dp * c.micro_batch)
    return m * slowest + others / c.vp


def predict_memory(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec,
                   calibration: Calibration | None = None, *, host_safety_factor: float = 1.0) -> MemoryPlan:
    """Only the memory side of :func:`predict` (GPU, host and NVMe bytes, feasibility): what a
    search checks first, before it times a configuration. Assumes the inputs were validated
    (:func:`search.check_compatible`)."""
    cal = calibration or default_calibration()
    m = training.global_batch // (config.dp * config.micro_batch)
    return plan_memory(model, cluster, config, training, m, cal, host_safety_factor=host_safety_factor)


def check_host_safety_factor(factor: float) -> float:
    """A host-memory safety factor between 1 (what the runtime allocates) and 4."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1.0 <= factor <= 4.0:
        raise SpecError("host_safety_factor", f"{factor!r} is not a factor between 1 and 4",
                        "give 1 to require what the runtime allocates, or e.g. 1.5 for DeepSpeed's estimator margin")
    return float(factor)


def predict(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec,
            calibration: Calibration | None = None, *, memory: MemoryPlan | None = None,
            host_safety_factor: float = 1.0) -> Prediction:
    """Predict one optimizer step of ``model`` trained with ``config`` on ``cluster``.

    Raises :class:`search.SpecError` when the pieces do not fit together (world size,
    divisibility, batch); returns an infeasible :class:`Prediction` (with reasons) when they
    fit together but the memory does not. ``memory`` may pass the plan
    :func:`predict_memory` already computed for the same inputs (a search does).
    ``host_safety_factor`` > 1 keeps that multiple of the offloaded states' host memory free
    (1.5 reproduces DeepSpeed's estimators; :mod:`search._host_memory`).
    """
    cal = calibration or default_calibration()
    host_safety_factor = check_host_safety_factor(host_safety_factor)
    if not isinstance(cluster, ClusterSpec):
        raise SpecError("cluster", f"{type(cluster).__name__} is not a ClusterSpec",
                        "pass a ClusterSpec (search.cluster_preset(name, num_nodes) returns one)")
    check_compatible(model, cluster.world_size, config, training)
    check_fp8_attention(model, cluster.gpu, training)
    c = config
    gpu = cluster.gpu
    kernels, peak_for_mfu = _kernels(gpu, training.precision, cal, training.framework, training.fp8_attention)
    m = training.global_batch // (c.dp * c.micro_batch)
    tokens = c.micro_batch * model.seq_len / c.cp
    counts = stage_layer_counts(model, c)
    moe_counts = stage_moe_layer_counts(model, c)

    t = micro_batch_terms(model, cluster, c, training, cal)
    lt = t.layer
    overhead_mb_s = stage_overhead_s(model, training.framework, c, cal)
    shares = stage_recompute_shares(model, c)
    stage_s = stage_micro_batch_s(t, counts, overhead_mb_s, moe_counts, shares)
    # The pipeline's pace is its slowest rank (Narayanan et al. 2021 Sec. 2.2: every micro-batch
    # passes every stage); its terms are the ones the breakdown shows.
    slowest = max(range(c.pp), key=lambda r: stage_s[r])
    n_moe = moe_counts[slowest]
    n_dense = counts[slowest] - n_moe
    mb = t.moe
    compute_mb_s = n_dense * t.compute_s + (n_moe * mb.compute_s if mb else 0.0)
    tp_mb_s = n_dense * t.tp_comm_s + (n_moe * mb.tp_comm_s if mb else 0.0)
    cp_mb_s = n_dense * t.cp_comm_s + (n_moe * mb.cp_comm_s if mb else 0.0)
    recompute_mb_s = shares[slowest] * (n_dense * t.recompute_s + (n_moe * mb.recompute_s if mb else 0.0))
    ep_mb_s = n_moe * mb.ep_comm_s if mb else 0.0
    head_mb_s = t.head_s + t.mtp_s if slowest == c.pp - 1 else 0.0
    slowest_mb_s = stage_s[slowest]

    stage_params = stage_params_per_rank(model, c)
    expert_params = stage_expert_params_per_rank(model, c) if model.moe is not None else ()
    comm = step_comm_s(cluster, c, training, cal, stage_params, model.params_per_layer / c.tp, expert_params)
    # ZeRO-3 / per-micro-batch traffic overlaps each micro-batch's compute; memory-centric tiles add
    # one gather, one gather and one reduce-scatter launch each. Megatron-FSDP inside an NVLink domain
    # hides it chunk by chunk but one chunk, costed as one layer's share of the stage's traffic (it gathers
    # and reduces per module); across the network it keeps the fitted ZeRO-3 overlap: collectives that
    # leave the NVLink domain take 16 SMs instead of 4-5 (megatron-core distributed_data_parallel_config.py,
    # nccl_ub), and no published Megatron-FSDP run spans a network.
    tiles_s = tiling_launch_s(model, c.tiles, max(counts), cal.collective_latency_s)
    # Megatron-FSDP's per-micro-batch traffic inside an NVLink domain: search._schedule.chunked_overlap_s.
    if megatron_fsdp(training.framework, c.zero_stage) and comm.on_nvlink:
        fullest = max(range(c.pp), key=lambda r: stage_params[r])  # the rank step_comm_s costs
        chunk_s = comm.per_micro_batch_s / max(counts[fullest], 1)  # one layer's unit, routed experts included
        mb_with_traffic_s = chunked_overlap_s(slowest_mb_s, comm.per_micro_batch_s + tiles_s, chunk_s)
    else:
        mb_with_traffic_s = overlapped_s(slowest_mb_s, comm.per_micro_batch_s + tiles_s, cal.zero3_overlap)
    off = offload_terms(model, cluster, c, max(counts), stage_params, training.framework,
                        comm.params_per_gpu_shard if c.zero_stage >= 1 else None,
                        saved_linear_input_bytes(training.framework, training.precision))
    mb_total_s = overlapped_s(mb_with_traffic_s, off.per_micro_batch_s, cal.zero3_overlap)

    p2p_s = pp_p2p_per_micro_batch_s(model, tokens, cluster, c, cal)
    bubble_s = pipeline_bubble_s(c.pp, c.vp, stage_s, p2p_s)
    p2p_exposed_mb_s = pp_p2p_exposed_s(p2p_s, slowest_mb_s,
                                        training.framework in P2P_OVERLAP_RUNTIMES and c.vp > 1)
    moe_fwd_s, moe_bwd_s = (mb.layer.forward_s, mb.compute_s - mb.layer.forward_s) if mb else (0.0, 0.0)
    last_bwd_s = (counts[-1] - moe_counts[-1]) * lt.backward_s + moe_counts[-1] * moe_bwd_s
    first_fwd_s = (counts[0] - moe_counts[0]) * lt.forward_s + moe_counts[0] * moe_fwd_s
    dp_s = dp_exposed_s(comm.per_step_s, comm.per_step_gather_s, last_bwd_s,
                        first_fwd_s, dp_overlap(training.framework, c.pp, cal),
                        comm.last_bucket_s, comm.last_gather_bucket_s)
    params_shard = comm.params_per_gpu_shard
    # A partial optimizer offload updates the rest of the shard on the GPU: after the CPU's share with
    # Megatron's HybridDeviceOptimizer (its step time grows linearly with the fraction: Megatron-Bridge
    # docs/training/cpu-offloading.md), alongside it with DeepSpeed's ZeRO-Offload++ (Twin-Flow: GPU and
    # CPU update their parts at once, DeepSpeed blog 2023-11 "ZeRO-Offload++").
    gpu_share = 1.0 - c.optimizer_offload_fraction if c.offload_optimizer != "none" else 1.0
    optimizer_s = optimizer_step_time_s(gpu_share * params_shard, kernels) if gpu_share > 0 else 0.0
    offload_step_s = off.per_step_s
    if gpu_share > 0 and c.offload_optimizer != "none" and training.framework == "deepspeed":
        offload_step_s = max(0.0, off.per_step_s - optimizer_s)

    # Scale the micro-batch terms so the breakdown adds up to m * mb_total_s.
    scale = m
    breakdown = {
        "compute": scale * (compute_mb_s + head_mb_s),
        "host_overhead": scale * overhead_mb_s,
        "recompute": scale * recompute_mb_s,
        "tp_comm": scale * tp_mb_s,
        "cp_comm": scale * cp_mb_s,
        "zero3_comm": scale * (mb_with_traffic_s - slowest_mb_s),
        "offload_transfer": scale * (mb_total_s - mb_with_traffic_s),
        "pipeline_bubble": bubble_s,
        "pp_p2p": scale * p2p_exposed_mb_s,
        "dp_comm": dp_s,
        "optimizer": optimizer_s,
        "offload_step": offload_step_s,
    }
    if model.moe is not None:
        breakdown["ep_comm"] = scale * ep_mb_s
    iteration_s = sum(breakdown.values())

    mem = memory if memory is not None else plan_memory(model, cluster, c, training, m, cal,
                                                        host_safety_factor=host_safety_factor)
    model_flop = model_flop_per_iteration(model, training.global_batch)
    hw_flop = hardware_flop_per_iteration(model, training.global_batch, c.recompute)
    world = cluster.world_size
    return Prediction(
        iteration_time_s=iteration_s,
        time_breakdown_s=TimeBreakdown.of(breakdown),
        tokens_per_s=training.global_batch * model.seq_len / iteration_s,
        model_flop_per_iteration=model_flop,
        hardware_flop_per_iteration=hw_flop,
        model_tflop_per_s_per_gpu=model_flop / iteration_s / world / 1e12,
        mfu=model_flop / iteration_s / world / peak_for_mfu,
        hfu=hw_flop / iteration_s / world / peak_for_mfu,
        peak_memory_bytes_per_gpu=mem.peak_bytes,
        memory_breakdown_bytes=mem.breakdown,
        gpu_memory_bytes=gpu.memory_bytes,
        cpu_memory_bytes_per_node=mem.cpu_bytes_per_node,
        cpu_memory_breakdown_bytes=mem.cpu_breakdown,
        host_estimator_margin_bytes=mem.estimator_margin_bytes,
        nvme_bytes_per_node=mem.nvme_bytes_per_node,
        num_micro_batches=m,
        feasible=mem.feasible,
        reasons=mem.reasons,
        warnings=comm.warnings + support_warnings(training.framework, c)
        + model_support_warnings(training.framework, model)
        + moe_warnings(model, c.ep, c.moe_dispatcher, c.moe_a2a_overlap, cluster)
        + expert_path_warnings(expert_path(model, gpu, training.precision, c.cuda_graphs, training.framework)),
        stage_layers=counts,
        stage_times_s=stage_s,
        stage_peak_memory_bytes=tuple(b.total for b in stage_breakdowns(model, c, training, m, cal).values()),
        error_band=error_band(training.framework, gpu.name, model.moe is not None),
    )


__all__ = ["check_precision", "layer_shape_terms", "predict", "predict_memory", "time_lower_bound_s"]
