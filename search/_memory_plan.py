"""Peak memory of the fullest GPU, host memory and NVMe per node, and whether they fit."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import add

from search._breakdowns import MemoryBreakdown
from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._host_memory import (
    estimator_margin_bytes,
    host_checkpoint_bytes_per_gpu,
    offloaded_state_bytes_per_gpu,
    runtime_reserved_bytes_per_node,
    safety_margin_bytes,
    swap_buffer_bytes_per_gpu,
)
from search._memory import (
    ModelStateBytes,
    deepspeed_bucket_bytes,
    in_flight_micro_batches,
    layer_activation_bytes,
    logits_bytes,
    main_grad_bytes,
    model_state_bytes,
    pipeline_buffer_bytes,
    saved_linear_input_bytes,
    working_layer_bytes,
)
from search._model_spec import ModelSpec
from search._moe_terms import moe_layer_activation_bytes
from search._parallel_spec import ParallelConfig, TrainingSpec
from search._stages import (
    stage_expert_params_per_rank,
    stage_layer_counts,
    stage_moe_layer_counts,
    stage_params_per_rank,
    stage_recompute_shares,
)
from search._tiling import largest_module_params, tiles_that_fit
from search._units import BYTES_16BIT, GiB


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Peak per-GPU bytes with components, host and NVMe bytes per node, and the capacities."""

    peak_bytes: float
    breakdown: MemoryBreakdown
    cpu_bytes_per_node: float
    nvme_bytes_per_node: float
    gpu_capacity_bytes: float
    cpu_capacity_bytes: float
    nvme_capacity_bytes: float
    cpu_breakdown: dict[str, float] = field(default_factory=dict)
    """Host memory per node by component (:mod:`search._host_memory`); adds up to
    ``cpu_bytes_per_node``. Empty when nothing lives in host memory."""
    estimator_margin_bytes: float = 0.0
    """What DeepSpeed's estimators add on top of the offloaded states (``additional_buffer_factor``
    1.5): reported, not required unless a safety factor asks for it."""
    tiles_hint: int | None = None
    """When the GPU does not fit and memory-centric tiling would make it fit: the fewest tiles."""

    @property
    def feasible(self) -> bool:
        """GPU, host memory and NVMe all fit."""
        return (self.peak_bytes <= self.gpu_capacity_bytes and self.cpu_bytes_per_node <= self.cpu_capacity_bytes
                and self.nvme_bytes_per_node <= self.nvme_capacity_bytes)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why it does not fit, one sentence per exhausted resource (empty when it fits). Built on
        demand: a search checks tens of thousands of plans and reads few reasons."""
        reasons: list[str] = []
        if self.peak_bytes > self.gpu_capacity_bytes:
            top = max(self.breakdown.items(), key=lambda kv: kv[1])
            reasons.append(
                f"needs {self.peak_bytes / GiB:.1f} GiB per GPU ({top[0].replace('_', ' ')} {top[1] / GiB:.1f} GiB), "
                f"the GPU has {self.gpu_capacity_bytes / GiB:.1f} GiB"
            )
            if self.tiles_hint is not None:
                reasons.append(f"memory-centric tiling would make it fit: tiles={self.tiles_hint} (DeepSpeed "
                               "TiledLinear in the model code; allow it with allow_tiling / --allow-tiling)")
        if self.cpu_bytes_per_node > self.cpu_capacity_bytes:
            parts = ", ".join(f"{k.replace('_', ' ')} {v / GiB:.0f}" for k, v in self.cpu_breakdown.items() if v)
            reasons.append(f"needs {self.cpu_bytes_per_node / GiB:.0f} GiB of CPU memory per node ({parts} GiB), "
                           f"the node has {self.cpu_capacity_bytes / GiB:.0f} GiB")
        if self.nvme_bytes_per_node > self.nvme_capacity_bytes:
            reasons.append(f"offloaded states need {self.nvme_bytes_per_node / 1e12:.1f} TB of NVMe per node, "
                           f"the node has {self.nvme_capacity_bytes / 1e12:.1f} TB")
        return tuple(reasons)


@lru_cache(maxsize=256)
def _largest_layer_params(model: ModelSpec) -> int:
    return model.largest_layer_params


def _rank_states(model: ModelSpec, config: ParallelConfig, framework: str, params: float,
                 expert_params: float, grad_bytes: float) -> ModelStateBytes:
    """Weights, gradients, optimizer states and gathered parameters of one pipeline rank holding
    ``params`` parameters per GPU (``expert_params`` of them routed experts, whose gradients and
    optimizer states shard over the expert data-parallel group: Megatron
    ``theoretical_memory_usage.py`` 6 + 12/EDP bytes each with the distributed optimizer). They do
    not depend on the micro-batch, sequence parallelism or recomputation. ``grad_bytes``: Megatron's
    gradient buffer per parameter (:func:`search._memory.main_grad_bytes`)."""
    c = config
    largest = _largest_layer_params(model) if c.tiles == 1 else largest_module_params(model, c.tiles)
    states = model_state_bytes(
        framework=framework, zero_stage=c.zero_stage, shard_degree=c.dp * c.cp, params=params - expert_params,
        largest_layer_params=largest / c.tp, layer_params=model.params_per_layer / c.tp,
        offload_optimizer=c.offload_optimizer, offload_param=c.offload_param, pipelined=c.pp > 1,
        offload_fraction=c.optimizer_offload_fraction, megatron_grad_bytes=grad_bytes,
    )
    if expert_params:
        ex = model_state_bytes(
            framework=framework, zero_stage=c.zero_stage, shard_degree=c.edp, params=expert_params,
            largest_layer_params=_largest_layer_params(model) / c.tp,
            layer_params=model.expert_params_per_layer / (c.ep * c.etp), offload_optimizer=c.offload_optimizer,
            offload_param=c.offload_param, pipelined=c.pp > 1, offload_fraction=c.optimizer_offload_fraction,
            megatron_grad_bytes=grad_bytes,
        )
        states = ModelStateBytes(states.weights_bytes + ex.weights_bytes, states.gradients_bytes + ex.gradients_bytes,
                                 states.optimizer_bytes + ex.optimizer_bytes,
                                 max(states.gathered_params_bytes, ex.gathered_params_bytes))
    return states


def _rank_activation_bytes(model: ModelSpec, config: ParallelConfig, held: float, last: bool,
                           per_micro_batch: float, working: float, micro_batch: int | None = None) -> float:
    """Activation bytes of one pipeline rank before fragmentation: ``per_micro_batch`` (its layers'
    stored bytes per micro-batch) times the ``held`` micro-batches, ``working`` (the transient
    bytes of one recomputed layer), the pipeline's stage buffers and, on the last rank, the logits;
    ``micro_batch``: in place of the configuration's (:meth:`GpuPeak.activations`)."""
    c = config
    mb = c.micro_batch if micro_batch is None else micro_batch
    stored = per_micro_batch * held
    if c.offload_param != "none" and c.recompute == "full":
        stored = 0.0  # ZeRO-Infinity keeps the activation checkpoints in host memory
    if c.pp > 1:
        working += pipeline_buffer_bytes(model, mb, c.cp, held, c.tp if c.sp else 1)
    if last:
        working += logits_bytes(model, mb, c.tp, c.cp)
    return stored + working


def _stage_breakdown(model: ModelSpec, config: ParallelConfig, training: TrainingSpec, params: float,
                     held: float, last: bool, cal: Calibration, per_micro_batch: float,
                     working: float, expert_params: float = 0.0,
                     states: ModelStateBytes | None = None) -> MemoryBreakdown:
    """Components of one pipeline rank (:func:`_rank_states`, :func:`_rank_activation_bytes`);
    ``per_micro_batch`` = its layers' stored activation bytes per micro-batch, ``working`` = the
    transient bytes of one recomputed layer; ``states``: its :func:`_rank_states`, where known."""
    if states is None:
        states = _rank_states(model, config, training.framework, params, expert_params,
                              main_grad_bytes(training.framework, training.precision, training.grad_reduce_in_bf16))
    return MemoryBreakdown(
        weights_bytes=states.weights_bytes,
        gradients_bytes=states.gradients_bytes,
        optimizer_states_bytes=states.optimizer_bytes,
        gathered_params_bytes=states.gathered_params_bytes,
        activations_bytes=cal.memory_fragmentation * _rank_activation_bytes(model, config, held, last,
                                                                            per_micro_batch, working),
        comm_buffers_bytes=cal.memory_fragmentation * deepspeed_bucket_bytes(training.framework, config.zero_stage, 2),
        runtime_overhead_bytes=cal.memory_overhead_bytes,
    )


def rank_held_micro_batches(pp: int, vp: int, num_micro_batches: int, rank: int) -> float:
    """Micro-batches whose activations pipeline rank ``rank`` holds at its peak: 1F1B keeps
    ``pp - rank`` in flight on rank ``rank`` (Narayanan et al. 2021 Sec. 2.2.1), never more than
    exist; the interleaved schedule multiplies that by ``1 + (p-1)/(p v)`` (Korthikanti et al. 2022
    Sec. 4.2.3, stated for the first rank). The last rank holds one."""
    if rank == pp - 1:
        return 1.0
    held = float(min(pp - rank, num_micro_batches))
    if vp > 1:
        held *= 1.0 + (pp - 1) / (pp * vp)
    return held


RankInputs = tuple[int, float, float, float, float, float]
"""(rank, micro-batches held, stored activation bytes per micro-batch, working bytes, parameters
per GPU, routed-expert parameters per GPU) of one pipeline rank."""

LayerBytes = tuple[float, float, float, float, float]
"""(stored bytes of a dense layer, of an MoE layer, the same two for a layer that does not recompute,
working bytes of one recomputed layer) per micro-batch: :func:`_layer_bytes`."""


def _layer_bytes(model: ModelSpec, config: ParallelConfig, lb: float, micro_batch: int | None = None) -> LayerBytes:
    """One layer's activation bytes per micro-batch (:data:`LayerBytes`); they depend on the layer's
    shape (micro-batch, tp, cp, sp, etp), the recomputation and ``lb``, not on the pipeline;
    ``micro_batch``: in place of the configuration's (:meth:`GpuPeak.activations`)."""
    c = config
    mb = c.micro_batch if micro_batch is None else micro_batch
    per_layer = layer_activation_bytes(model, mb, c.tp, c.cp, c.sp, c.recompute, linear_input_bytes=lb)
    per_moe_layer = (moe_layer_activation_bytes(model, mb, c.tp, c.cp, c.sp, c.etp, c.recompute, lb)
                     if model.moe is not None else per_layer)
    kept, kept_moe = per_layer, per_moe_layer  # layers that do not recompute (partial recomputation)
    if c.recompute == "full" and c.recompute_layers is not None:
        kept = layer_activation_bytes(model, mb, c.tp, c.cp, c.sp, "none", linear_input_bytes=lb)
        kept_moe = (moe_layer_activation_bytes(model, mb, c.tp, c.cp, c.sp, c.etp, "none", lb)
                    if model.moe is not None else kept)
    working = 0.0
    if c.recompute == "full":
        working = working_layer_bytes(model, mb, c.tp, c.cp, c.sp, lb)
        if model.moe is not None:
            working = max(working, moe_layer_activation_bytes(model, mb, c.tp, c.cp, c.sp, c.etp, "none", lb))
    return per_layer, per_moe_layer, kept, kept_moe, working


RankLayout = tuple[tuple[int, int, int, "float | None"], ...]
"""(rank, dense layers, MoE layers with the MTP modules', share of its layers that recompute or None when
all do) of each pipeline rank asked for: :func:`_rank_layout`."""


def _rank_layout(model: ModelSpec, config: ParallelConfig, ranks: Sequence[int] | None) -> RankLayout:
    """The layer counts of each pipeline rank in ``ranks`` (default: every rank) that its activations
    scale with; they depend on the pipeline layout and the partial recomputation only."""
    c = config
    counts = stage_layer_counts(model, c)
    moe_counts = stage_moe_layer_counts(model, c)
    shares = stage_recompute_shares(model, c) if c.recompute == "full" and c.recompute_layers is not None else None
    return tuple((r, counts[r] - moe_counts[r], moe_counts[r] + (model.mtp_layers if r == c.pp - 1 else 0),
                  None if shares is None else shares[r])
                 for r in (range(c.pp) if ranks is None else ranks))


def _rank_activation_inputs(model: ModelSpec, config: ParallelConfig, num_micro_batches: int,
                            ranks: Sequence[int] | None, layer: LayerBytes,
                            layout: RankLayout | None = None) -> list[tuple[int, float, float, float]]:
    """(rank, micro-batches held, stored activation bytes per micro-batch, working bytes) of each
    pipeline rank in ``ranks`` (default: every rank), from one layer's bytes (:func:`_layer_bytes`);
    ``layout``: :func:`_rank_layout` of the same ranks, where known."""
    c = config
    per_layer, per_moe_layer, kept, kept_moe, working = layer
    out = []
    for r, n_dense, n_moe, share in _rank_layout(model, c, ranks) if layout is None else layout:
        held = rank_held_micro_batches(c.pp, c.vp, num_micro_batches, r) if c.pp > 1 else float(
            in_flight_micro_batches(1, 1, num_micro_batches))
        if share is None:
            per_mb = n_dense * per_layer + n_moe * per_moe_layer
        else:
            per_mb = (n_dense * (share * per_layer + (1.0 - share) * kept)
                      + n_moe * (share * per_moe_layer + (1.0 - share) * kept_moe))
        if c.activation_offload_layers:
            # Offloaded layers leave the GPU after their forward; one comes back ahead of its backward.
            per_mb -= (c.activation_offload_layers - 1) * per_layer
        out.append((r, held, per_mb, working))
    return out


def _rank_inputs(model: ModelSpec, config: ParallelConfig, num_micro_batches: int,
                 ranks: Sequence[int] | None, lb: float = BYTES_16BIT) -> list[RankInputs]:
    """What :func:`_stage_breakdown` needs for each pipeline rank in ``ranks`` (default: every rank);
    ``lb``: bytes per element of the saved linear-layer inputs (:func:`saved_linear_input_bytes`)."""
    c = config
    params = stage_params_per_rank(model, c)
    experts = stage_expert_params_per_rank(model, c) if model.moe is not None else (0.0,) * c.pp
    return [(r, held, per_mb, working, params[r], experts[r])
            for r, held, per_mb, working in _rank_activation_inputs(model, c, num_micro_batches, ranks,
                                                                    _layer_bytes(model, c, lb))]


def stage_breakdowns(model: ModelSpec, config: ParallelConfig, training: TrainingSpec, num_micro_batches: int,
                     cal: Calibration, ranks: Sequence[int] | None = None) -> dict[int, MemoryBreakdown]:
    """The memory components of each pipeline rank in ``ranks`` (default: every rank)."""
    lb = saved_linear_input_bytes(training.framework, training.precision)
    grad_bytes = main_grad_bytes(training.framework, training.precision, training.grad_reduce_in_bf16)
    # Ranks with the same parameters hold the same states (the middle ranks of an even split): computed once.
    states_of: dict[tuple[float, float], ModelStateBytes] = {}
    out = {}
    for r, held, per_mb, working, params, experts in _rank_inputs(model, config, num_micro_batches, ranks, lb):
        states = states_of.get((params, experts))
        if states is None:
            states = states_of[(params, experts)] = _rank_states(model, config, training.framework, params, experts,
                                                                 grad_bytes)
        out[r] = _stage_breakdown(model, config, training, params, held, r == config.pp - 1, cal, per_mb, working,
                                  experts, states)
    return out


def _checked_ranks(model: ModelSpec, config: ParallelConfig) -> tuple[int, ...]:
    c = config
    return _ranks_of(model, c.pp, c.vp, c.stage_layers)


@lru_cache(maxsize=4096)
def _ranks_of(model: ModelSpec, pp: int, vp: int, stage_layers: tuple[int, ...] | None) -> tuple[int, ...]:
    """:func:`ranks_to_check` of one pipeline layout (its layer and MoE layer counts per rank)."""
    c = ParallelConfig(pp=pp, vp=vp, stage_layers=stage_layers)
    return ranks_to_check(tuple(zip(stage_layer_counts(model, c), stage_moe_layer_counts(model, c), strict=True)))


def holds_host_bytes(config: ParallelConfig) -> bool:
    """Whether anything of ``config`` lives in host memory or on NVMe (offloaded states or activations)."""
    return config.offload_optimizer != "none" or config.offload_param != "none" or config.activation_offload_layers > 0


class GpuPeak:
    """Peak GPU bytes of the fullest rank and nothing else: the very float :func:`plan_memory`
    gives (the same terms, summed in the same order), without the breakdown, for a search's memory
    scan over 10^5 configurations. Per checked rank, the model states (independent of the
    micro-batch, sequence parallelism and recomputation) are cached per layout, policy and runtime,
    and the activations (independent of dp and ZeRO) per shape, schedule and saved linear-input width
    (the runtime's under a low-precision recipe: :meth:`linear_input_bytes`)."""

    def __init__(self, model: ModelSpec, cal: Calibration, precision: str = "bf16",
                 grad_reduce_in_bf16: bool = False) -> None:
        self.model, self.cal = model, cal
        self.precision, self.grad_reduce_in_bf16 = precision, grad_reduce_in_bf16
        self._states: dict[tuple[object, ...], tuple[float, ...]] = {}
        self._activations: dict[tuple[object, ...], tuple[float, ...]] = {}
        self._tails: dict[tuple[str, int], float] = {}
        self._layer_bytes: dict[tuple[object, ...], LayerBytes] = {}
        self._rank_layouts: dict[tuple[object, ...], RankLayout] = {}
        """:func:`_rank_layout` of the checked ranks per pipeline layout and partial recomputation."""
        self.states_by_vp = model.moe is not None and model.moe.first_dense_layers > 0
        """Whether vp changes the model states: only through which ranks the interleaved chunks put dense
        first layers on (:func:`search._stages.stage_moe_layer_counts`); elsewhere they are keyed at vp 1."""

    def clear(self) -> None:
        """Drop the caches (a search's scan is over: see :meth:`search._evaluator.Evaluator.release_scan`)."""
        for cache in (self._states, self._activations, self._tails, self._layer_bytes, self._rank_layouts):
            cache.clear()

    def __call__(self, config: ParallelConfig, framework: str, num_micro_batches: int) -> float:
        return self.peak(self.states(config, framework),
                         self.activations(config, num_micro_batches, self.linear_input_bytes(framework)), framework,
                         config.zero_stage)

    def linear_input_bytes(self, framework: str) -> float:
        """:func:`saved_linear_input_bytes` of ``framework`` at this search's precision."""
        return saved_linear_input_bytes(framework, self.precision)

    def known_activations(self, key: tuple[object, ...]) -> tuple[float, ...] | None:
        """:meth:`activations` already computed under ``key`` (:meth:`activation_key`), else None."""
        return self._activations.get(key)

    @staticmethod
    def activation_key(config: ParallelConfig, num_micro_batches: int, lb: float,
                       micro_batch: int | None = None) -> tuple[object, ...]:
        """What the activations depend on (the scan writes the same tuple from a block's fields)."""
        c = config
        return (c.pp, c.vp, c.stage_layers, c.tp, c.cp, c.sp, c.recompute,
                c.micro_batch if micro_batch is None else micro_batch, c.etp, num_micro_batches, c.recompute_layers,
                c.activation_offload_layers, c.offload_param != "none", lb)

    def activations(self, config: ParallelConfig, num_micro_batches: int, lb: float,
                    micro_batch: int | None = None) -> tuple[float, ...]:
        """Activation bytes of each checked rank (:func:`_checked_ranks`), fragmentation included, with
        the linear-layer inputs kept at ``lb`` bytes per element (:meth:`linear_input_bytes`), at
        ``micro_batch`` in place of the configuration's: a configuration with the same layout, layer shape
        and recomputation stands in for all micro-batches (a search's scan builds one per shape, not one
        per micro-batch: building costs about as much as the activations)."""
        c = config
        mb = c.micro_batch if micro_batch is None else micro_batch
        akey = self.activation_key(c, num_micro_batches, lb, mb)
        acts = self._activations.get(akey)
        if acts is None:
            frag = self.cal.memory_fragmentation
            lkey = (mb, c.tp, c.cp, c.sp, c.etp, c.recompute, c.recompute_layers is not None, lb)
            layer = self._layer_bytes.get(lkey)
            if layer is None:
                layer = self._layer_bytes[lkey] = _layer_bytes(self.model, c, lb, mb)
            partial = c.recompute == "full" and c.recompute_layers is not None
            rkey = (c.pp, c.vp, c.stage_layers, c.recompute_layers if partial else None)
            ranks = self._rank_layouts.get(rkey)
            if ranks is None:
                ranks = self._rank_layouts[rkey] = _rank_layout(self.model, c, _checked_ranks(self.model, c))
            acts = tuple(frag * _rank_activation_bytes(self.model, c, held, r == c.pp - 1, per_mb, working, mb)
                         for r, held, per_mb, working in _rank_activation_inputs(
                             self.model, c, num_micro_batches, None, layer, ranks))
            self._activations[akey] = acts
        return acts

    def known_states(self, key: tuple[object, ...]) -> tuple[float, ...] | None:
        """:meth:`states` already computed under ``key`` (:meth:`state_key`), else None."""
        return self._states.get(key)

    def state_key(self, config: ParallelConfig, framework: str) -> tuple[object, ...]:
        """What the model states depend on (the scan writes the same tuple from a block's fields): dp and cp
        only through dp x cp, the group ZeRO shards over (the expert data-parallel group is tp x cp x dp /
        (ep x etp)), so configurations that trade dp for cp share them."""
        c = config
        return (framework, c.dp * c.cp, c.tp, c.pp, c.vp if self.states_by_vp else 1, c.zero_stage,
                c.offload_optimizer, c.offload_param, c.optimizer_offload_fraction, c.stage_layers, c.ep, c.etp,
                c.tiles)

    def states(self, config: ParallelConfig, framework: str) -> tuple[float, ...]:
        """Model-state bytes of each checked rank (weights, gradients, optimizer states, gathered
        parameters), summed as :func:`plan_memory` sums its breakdown so the floats agree exactly."""
        c, model = config, self.model
        skey = self.state_key(c, framework)
        states = self._states.get(skey)
        if states is None:
            params = stage_params_per_rank(model, c)
            experts = stage_expert_params_per_rank(model, c) if model.moe is not None else (0.0,) * c.pp
            sums = []
            grad_bytes = main_grad_bytes(framework, self.precision, self.grad_reduce_in_bf16)
            for r in _checked_ranks(model, c):
                s = _rank_states(model, c, framework, params[r], experts[r], grad_bytes)
                sums.append(s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.gathered_params_bytes)
            states = self._states[skey] = tuple(sums)
        return states

    def tail_bytes(self, framework: str, zero_stage: int) -> float:
        """What every rank adds after its states and activations: DeepSpeed's buckets (fragmented)."""
        tail = self._tails.get((framework, zero_stage))
        if tail is None:
            tail = self._tails[(framework, zero_stage)] = (
                self.cal.memory_fragmentation * deepspeed_bucket_bytes(framework, zero_stage, 2))
        return tail

    def peak(self, states: tuple[float, ...], activations: tuple[float, ...], framework: str,
             zero_stage: int) -> float:
        """The fullest checked rank's total, from :meth:`states` and :meth:`activations` of one
        configuration: ``states + activations + tail + overhead`` of each rank, the largest. Rounding
        is monotone, so that is the largest ``states + activations`` plus the rest (the same float; the
        scan writes it out)."""
        fullest: float = max(map(add, states, activations))
        return fullest + self.tail_bytes(framework, zero_stage) + self.cal.memory_overhead_bytes


@lru_cache(maxsize=4096)
def ranks_to_check(counts: tuple[Hashable, ...]) -> tuple[int, ...]:
    """The ranks one of which is the fullest: the first (the embedding, the most micro-batches in
    flight), the last (LM head, logits), and of the middle ranks with the same layer count the
    earliest (it holds more micro-batches in flight and the same parameters)."""
    first_with: dict[Hashable, int] = {}
    for r in range(1, len(counts) - 1):
        first_with.setdefault(counts[r], r)
    return tuple(sorted({0, len(counts) - 1, *first_with.values()}))


def host_breakdown(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, num_micro_batches: int,
                   host_safety_factor: float = 1.0, lb: float = BYTES_16BIT) -> tuple[dict[str, float], float, float]:
    """Host memory per node by component, NVMe bytes per node, and the offloaded states' host bytes
    per node (what a safety factor scales), from the fullest rank's ZeRO shard
    (:mod:`search._host_memory`); for a configuration that :func:`holds_host_bytes`."""
    c = config
    node = cluster.node
    counts = stage_layer_counts(model, c)
    held = rank_held_micro_batches(c.pp, c.vp, num_micro_batches, 0) if c.pp > 1 else 1.0
    gpn = node.gpus_per_node
    shard = max(stage_params_per_rank(model, c)) / (c.dp * c.cp)
    opt_bytes, param_bytes = offloaded_state_bytes_per_gpu(shard, c.offload_optimizer, c.offload_param)
    opt_bytes *= c.optimizer_offload_fraction
    host_states = gpn * ((opt_bytes if c.offload_optimizer == "cpu" else 0.0)
                         + (param_bytes if c.offload_param == "cpu" else 0.0))
    nvme = gpn * ((opt_bytes if c.offload_optimizer == "nvme" else 0.0)
                  + (param_bytes if c.offload_param == "nvme" else 0.0))
    checkpoints = 0.0
    if c.offload_param != "none" and c.recompute == "full":
        checkpoints = gpn * host_checkpoint_bytes_per_gpu(c.micro_batch, model.seq_len, c.cp, model.hidden,
                                                          counts[0], held)
    offloaded_activations = gpn * c.activation_offload_layers * layer_activation_bytes(
        model, c.micro_batch, c.tp, c.cp, c.sp, "none", linear_input_bytes=lb) if c.activation_offload_layers else 0.0
    cpu_breakdown = {
        "optimizer_states": gpn * opt_bytes if c.offload_optimizer == "cpu" else 0.0,
        "parameters": gpn * param_bytes if c.offload_param == "cpu" else 0.0,
        "activation_checkpoints": checkpoints,
        "offloaded_activations": offloaded_activations,
        "swap_buffers": gpn * swap_buffer_bytes_per_gpu(c.offload_optimizer, c.offload_param),
        "runtime_reserved": runtime_reserved_bytes_per_node(gpn),
    }
    if host_safety_factor > 1.0:
        cpu_breakdown["safety_margin"] = safety_margin_bytes(host_states, host_safety_factor)
    return cpu_breakdown, nvme, host_states


def plan_memory(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, training: TrainingSpec,
                num_micro_batches: int, cal: Calibration, *, host_safety_factor: float = 1.0) -> MemoryPlan:
    """Memory of the fullest pipeline rank (:func:`ranks_to_check` finds the candidates). Host and
    NVMe bytes per node come from the fullest rank's ZeRO shard (:mod:`search._host_memory`);
    ``host_safety_factor`` > 1 keeps ``(factor - 1) x`` the offloaded states free on the host
    (1.5: DeepSpeed's estimators)."""
    c = config
    stages = stage_breakdowns(model, c, training, num_micro_batches, cal, _checked_ranks(model, c))
    worst = max(stages, key=lambda r: stages[r].total)
    breakdown = stages[worst]
    peak = breakdown.total
    node = cluster.node
    gpu_cap = cluster.gpu.memory_bytes
    deepspeed = training.framework in ("deepspeed", "megatron-deepspeed")
    tiles_hint = None
    if peak > gpu_cap and training.framework == "deepspeed" and c.zero_stage == 3 and c.tiles == 1:
        tiles_hint = tiles_that_fit(breakdown.gathered_params_bytes, peak - gpu_cap, model, c.tp)
    if not holds_host_bytes(c):
        # Nothing in host memory or on NVMe (most configurations a search checks).
        return MemoryPlan(peak, breakdown, 0.0, 0.0, gpu_cap, node.cpu_memory_bytes, node.nvme_bytes,
                          tiles_hint=tiles_hint)
    cpu_breakdown, nvme, host_states = host_breakdown(model, cluster, c, num_micro_batches, host_safety_factor,
                                                      saved_linear_input_bytes(training.framework, training.precision))
    return MemoryPlan(peak, breakdown, sum(cpu_breakdown.values()), nvme, gpu_cap, node.cpu_memory_bytes,
                      node.nvme_bytes, cpu_breakdown, estimator_margin_bytes(host_states) if deepspeed else 0.0,
                      tiles_hint)
