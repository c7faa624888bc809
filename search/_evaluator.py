"""Evaluating configurations for a search: the memory scan of every candidate, the fine-grained
memory policies it may derive (issue 18), throughput bounds, and timing (the sweeps that use them:
:mod:`search._sweeps`; the ranking of what was timed: :mod:`search._ranking`)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from operator import add
from typing import Any, NamedTuple, cast, overload

import numpy as np

from search._bounds import BoundKey, ThroughputBounds
from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._memory_plan import GpuPeak, MemoryPlan, host_breakdown
from search._model_spec import ModelSpec
from search._parallel_spec import CudaGraphs, Framework, ParallelConfig, Placement, Precision, Recompute, TrainingSpec
from search._predict import (
    MicroBatchTerms,
    predict,
    predict_memory,
)
from search._prediction import Prediction
from search._ranking import objective_score
from search._space import NO_EXCHANGE, Block, Candidate, MoEExchange, Variant
from search._support import support_status

ProgressFn = Callable[[int, int], None]
_OFFLOAD_SHARES: tuple[float, ...] = tuple(i / 20 for i in range(1, 20))
"""Shares of the optimizer states on the host a partial offload tries (steps of 5 %)."""


def _twin_key(framework: str, c: ParallelConfig, *, offload_optimizer: str | None = None,
              recompute: str | None = None) -> tuple[Any, ...]:
    """The key :meth:`Evaluator.scan_memory` files a configuration's memory under (the micro-batch
    last), for ``c`` or its twin with another optimizer offload or recomputation."""
    return (framework, c.dp, c.tp, c.pp, c.vp, c.cp, c.sp, c.zero_stage, offload_optimizer or c.offload_optimizer,
            c.offload_param, recompute or c.recompute, c.tp_comm_overlap, c.stage_layers, c.ep, c.etp, c.tiles,
            c.micro_batch)


def _with_offload_share(config: ParallelConfig, share: float) -> ParallelConfig:
    return replace(config, optimizer_offload_fraction=round(share, 2))


ScanStep = tuple[Framework, Placement, int, tuple[Framework, int], bool]
"""(runtime, placement, tiles, (runtime, tiles), whether it is the pair's first placement at its
micro-batch) of one candidate of a block, as :meth:`Evaluator.scan_memory` walks it."""
EntryShape = tuple[frozenset[tuple[Framework, int]], frozenset[tuple[int, Framework, int]],
                   tuple[tuple[int, tuple[ScanStep, ...]], ...]]


def _entry_shape(entries: tuple[tuple[int, tuple[Variant, ...]], ...]) -> EntryShape:
    """A block's (runtime, tiles) pairs, its (micro-batch, runtime, tiles) candidates (placements
    aside), and its entries as :meth:`Evaluator.scan_memory` walks them (:data:`ScanStep`)."""
    walk = []
    for mb, variants in entries:
        seen: set[tuple[Framework, int]] = set()
        steps = []
        for runtime, placement, tiles in variants:
            steps.append((runtime, placement, tiles, (runtime, tiles), (runtime, tiles) not in seen))
            seen.add((runtime, tiles))
        walk.append((mb, tuple(steps)))
    present = frozenset((mb, runtime, tiles) for mb, variants in entries for runtime, _p, tiles in variants)
    return frozenset((runtime, tiles) for _mb, runtime, tiles in present), present, tuple(walk)


def _may_recompute_layers(row: FitRow) -> bool:
    """Whether block recomputation may refine a fitting row (:meth:`Evaluator._partial_kinds`)."""
    return row.block.recompute == "full" and row.runtime == "megatron" and row.block.offload_param == "none"


def _recompute_gain(layer: MicroBatchTerms) -> float:
    """How many times faster than its throughput bound a configuration with full recomputation can
    get by recomputing fewer layers (block recomputation), at most: its layer time over the layer
    time without recomputation, for its dense and MoE layers (every other term of a pipeline rank is
    the same or smaller: :func:`search._predict.stage_micro_batch_s`), with a margin far above
    rounding; inf where a layer is all recomputation."""
    gain = 1.0
    for layer_s, recompute_s in ((layer.layer_s, layer.recompute_s),
                                 *(((layer.moe.layer_s, layer.moe.recompute_s),) if layer.moe else ())):
        rest_s = layer_s - recompute_s
        gain = max(gain, layer_s / rest_s if rest_s > 0 else float("inf"))
    return gain * (1.0 + 1e-9)


class FitRow(NamedTuple):
    """A candidate that fits, as the scan found it: built into a :class:`Candidate` only when a
    sweep times it (a search holds 10^4-10^5 of these and times 10^3)."""

    block: Block
    micro_batch: int
    runtime: Framework
    placement: Placement
    tiles: int
    peak_bytes: float

    def candidate(self) -> Candidate:
        return Candidate(self.runtime, self.block.config(self.micro_batch, self.placement, self.tiles))


_fit_row: Callable[[tuple[Block, int, Framework, Placement, int, float]], FitRow] = partial(tuple.__new__, FitRow)
"""``FitRow(*fields)`` without the Python-level ``__new__`` of a named tuple (a scan makes 10^5)."""


class FitList(Sequence[Candidate]):
    """The fitting candidates in the space's order, each built on access (:class:`FitRow`)."""

    def __init__(self, rows: list[FitRow]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...

    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        if isinstance(index, slice):
            return [row.candidate() for row in self.rows[index]]
        return self.rows[index].candidate()


class Evaluator:
    """Memory first, then time; remembers every timed feasible prediction and the closest misses."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, global_batch: int, precision: str,
                 cal: Calibration, objective: str, price: float | None, min_headroom_bytes: float = 0.0,
                 host_safety_factor: float = 1.0, grad_reduce_in_bf16: bool = False) -> None:
        self.model, self.cluster, self.cal = model, cluster, cal
        self.min_headroom_bytes = min_headroom_bytes
        """GPU memory a configuration must leave free to count as feasible (a safety margin)."""
        self.host_safety_factor = host_safety_factor
        """Multiple of the offloaded states' host memory that must fit (1: what the runtime allocates)."""
        self.objective, self.price = objective, price
        self.tokens_per_step = global_batch * model.seq_len
        # Only Megatron-Core reduces gradients in bf16 (TrainingSpec refuses the flag for the others).
        self.trainings = {fw: TrainingSpec(global_batch, cast(Precision, precision), framework=fw,
                                           grad_reduce_in_bf16=grad_reduce_in_bf16 and fw == "megatron")
                          for fw in ("megatron", "deepspeed", "megatron-deepspeed", "fsdp")}
        self.feasible: list[tuple[Candidate, Prediction, float]] = []
        self.closest: list[tuple[tuple[float, float], int, Candidate, MemoryPlan]] = []
        self.n_evaluated = 0
        self.n_feasible = 0
        self.bounds = ThroughputBounds(model, cluster, cal, self.trainings)
        self._seen: dict[Candidate, tuple[Prediction | None, MemoryPlan]] = {}
        self.fitting: dict[Candidate, float] = {}
        """Refinements :meth:`derive_partials` found to fit, with their peak GPU bytes (the scan's
        own fitting candidates are the :class:`FitList` it returns)."""
        self._threshold = 0.0
        self._peaks: dict[tuple[Any, ...], float] = {}
        """Peak bytes of every configuration :meth:`scan_memory` found not to fit (the twins
        :meth:`_derive` starts its estimates from)."""
        self._refinable: list[tuple[FitRow, bool, int, bool]] = []
        """Scanned configurations a fine-grained memory policy may improve, by the block-level conditions
        of :meth:`_partial_kinds` (:meth:`derive_partials` asks the rest), with whether they fit, their
        index in the scan's fitting list (-1: none) and whether block recomputation may refine them."""
        self._scanned: dict[tuple[Any, ...], tuple[frozenset[tuple[int, str, int]], dict[tuple[str, int], int]]] = {}
        """Per scanned block (its fields but the entries): its (micro-batch, runtime, tiles) and the
        micro-batch each (runtime, tiles) first failed at (:meth:`_scanned_fit`)."""
        self.scanned = False
        self._gpu_peak = GpuPeak(model, cal, precision, grad_reduce_in_bf16)

    def memory(self, cand: Candidate) -> MemoryPlan:
        return predict_memory(self.model, self.cluster, cand.config, self.trainings[cand.framework], self.cal,
                              host_safety_factor=self.host_safety_factor)

    def fits(self, plan: MemoryPlan) -> bool:
        """GPU, host and NVMe fit, with :attr:`min_headroom_bytes` of GPU memory to spare."""
        return plan.feasible and plan.peak_bytes <= plan.gpu_capacity_bytes - self.min_headroom_bytes

    def _remember_miss(self, miss: Candidate | FitRow, order: int, host: bool = False,
                       plan: MemoryPlan | None = None) -> None:
        """Keep the three closest misses: a timed candidate with its ``plan``, or a scanned
        :class:`FitRow` whose peak alone is known (its plan is built when it may be kept, and first,
        when ``host``, to rank it by host bytes too)."""
        node = self.cluster.node
        # Closest first: by how far GPU memory is exceeded, then host memory and NVMe.
        gpu = (plan.peak_bytes if plan is not None else cast(FitRow, miss).peak_bytes) / self.cluster.gpu.memory_bytes
        if len(self.closest) == 3 and -gpu < self.closest[0][0][0]:
            return  # further over on the GPU than all three kept
        cand = miss.candidate() if isinstance(miss, FitRow) else miss
        if plan is None and host:
            plan = self.memory(cand)
        if plan is None:
            ratio = (gpu, max(0.0 / node.cpu_memory_bytes, 0.0 / node.nvme_bytes))
        else:
            ratio = (gpu, max(plan.cpu_bytes_per_node / node.cpu_memory_bytes,
                              plan.nvme_bytes_per_node / node.nvme_bytes))
        rank = ((-ratio[0], -ratio[1]), -order)
        if len(self.closest) == 3 and rank < self.closest[0][:2]:
            return
        item = (*rank, cand, plan or self.memory(cand))
        if len(self.closest) < 3:
            heapq.heappush(self.closest, item)
        else:
            heapq.heappushpop(self.closest, item)

    def scan_memory(self, blocks: Sequence[Block]) -> FitList:
        """Check every candidate's memory (:attr:`search._space.Space.blocks`, in the space's
        order): the exact count of configurations that fit, the closest misses, and the fitting ones
        (returned, in order, built on access) for the time sweeps."""
        fitting: list[FitRow] = []
        refinable: list[tuple[FitRow, bool, int, bool]] = []
        scanned: dict[tuple[Any, ...], tuple[frozenset[tuple[int, str, int]], dict[tuple[str, int], int]]] = {}
        # Peak memory never falls as the micro-batch grows (activations per micro-batch scale with it,
        # micro-batches in flight at most inversely: stored = per-layer x min(mb (pp - r), batch/dp)),
        # so once a configuration does not fit, the same one with a larger micro-batch does not either
        # (and is never looked at). Within a block (no two blocks share their fields) a configuration is
        # its (runtime, tiles) and micro-batch: the placement changes no byte.
        gpu_peak, batch = self._gpu_peak, self.trainings["megatron"].global_batch
        lb_of = {fw: gpu_peak.linear_input_bytes(fw) for fw in self.trainings}
        cap = self.cluster.gpu.memory_bytes - self.min_headroom_bytes
        overhead = self.cal.memory_overhead_bytes
        node = self.cluster.node
        shapes: dict[int, EntryShape] = {}
        peak_of: dict[tuple[Framework, int], float] = {}  # the last peak of each (runtime, tiles)
        gpu_bytes, closest = self.cluster.gpu.memory_bytes, self.closest
        # Activations per (saved linear-input width, micro-batch), for all blocks of one shape and schedule
        # (:meth:`GpuPeak.activation_key` less what they fix: dp follows from tp, pp and cp).
        acts_by_shape: dict[tuple[Any, ...], dict[tuple[float, int], tuple[float, ...]]] = {}
        # Model states (and the tail after them) per runtime, policy, expert degrees and tiles, for the
        # blocks of one pipeline layout (they come in a run: search._space.enumerate_space's loop order).
        states_by_policy: dict[tuple[Any, ...], tuple[tuple[float, ...], float]] = {}
        # Whether host memory and NVMe fit, per expert degrees and policy (and, with parameter offload,
        # micro-batch and recomputation: the host-held checkpoints) within a pipeline layout's run: the
        # host side depends on nothing else (search._memory_plan.host_breakdown; blocks offload no
        # activations).
        host_by_policy: dict[tuple[Any, ...], bool] = {}
        pipeline: tuple[Any, ...] = ()
        order = 0
        for block in blocks:
            dp, tp, pp, vp, cp, sp, overlap, layout, ep, etp, zero, opt, param, rc, entries, _exchange, _graphs = block
            if pipeline[:4] != (tp, pp, vp, cp) or pipeline[4] is not layout:
                pipeline, states_by_policy, host_by_policy = (tp, pp, vp, cp, layout), {}, {}
            host = opt != "none" or param != "none"
            # What :meth:`_partial_kinds` can find in this block (it is not asked otherwise).
            refine_fit, refine_miss = rc == "full" or opt == "cpu", pp == 1 and rc == "none"
            refine_layers = rc == "full" and param == "none"  # with Megatron: :func:`_may_recompute_layers`
            # The GPU's peak alone (:class:`search._memory_plan.GpuPeak`): configurations are built where a
            # cache misses, full plans for what is timed and the closest misses.
            acts_key = (pp, vp, layout, tp, cp, sp, rc, etp, param != "none")
            acts_at = acts_by_shape.get(acts_key)
            if acts_at is None:
                acts_at = acts_by_shape[acts_key] = {}
            host_fits: bool | None = None
            shape = shapes.get(id(entries))  # blocks share their entries (search._space.enumerate_space)
            if shape is None:
                shape = shapes[id(entries)] = _entry_shape(entries)
            # The block's (runtime, tiles) pairs: once one has failed at some micro-batch, its larger
            # micro-batches are skipped, and once all have, the walk stops (``order`` only ranks misses
            # among themselves).
            live = set(shape[0])
            failed: dict[tuple[str, int], int] = {}
            scanned[block[:14]] = (shape[1], failed)
            for mb, steps in shape[2]:
                if not live:
                    break
                shared: ParallelConfig | None = None
                if param != "none":
                    host_fits = None  # host-held activation checkpoints grow with the micro-batch
                for runtime, placement, tiles, pair, first in steps:
                    order += 1
                    if pair not in live:
                        continue
                    if not first:  # another placement of a pair that fits at this micro-batch: the same bytes
                        row = _fit_row((block, mb, runtime, placement, tiles, peak_of[pair]))
                        if refine_fit:
                            refinable.append((row, True, len(fitting), refine_layers and runtime == "megatron"))
                        fitting.append(row)
                        continue
                    lb = lb_of[runtime]
                    acts = acts_at.get((lb, mb))
                    if acts is None:
                        shared = shared or block.config(mb)
                        acts = acts_at[(lb, mb)] = gpu_peak.activations(shared, batch // (dp * mb), lb)
                    states = states_by_policy.get((runtime, zero, opt, param, ep, etp, tiles))
                    if states is None:
                        # :meth:`GpuPeak.state_key` written out (blocks offload whole optimizers: fraction 1).
                        held = gpu_peak.known_states((runtime, dp, tp, pp, vp if gpu_peak.states_by_vp else 1, cp,
                                                      zero, opt, param, 1.0, layout, ep, etp, tiles))
                        if held is None:
                            shared = shared or block.config(mb)
                            held = gpu_peak.states(shared if tiles == 1 else block.config(mb, placement, tiles),
                                                   runtime)
                        states = states_by_policy[(runtime, zero, opt, param, ep, etp, tiles)] = (
                            held, gpu_peak.tail_bytes(runtime, zero))
                    peak = max(map(add, states[0], acts)) + states[1] + overhead  # :meth:`GpuPeak.peak` written out
                    fit = peak <= cap
                    if host and fit:
                        # The host side depends on the configuration, not the runtime, and without
                        # parameter offload not on the micro-batch either (search._memory_plan.host_breakdown;
                        # blocks offload no activations, so the saved linear-input width plays no part).
                        if host_fits is None:
                            host_key = (ep, etp, zero, opt, param) if param == "none" else (ep, etp, zero, opt, param,
                                                                                            mb, rc)
                            host_fits = host_by_policy.get(host_key)
                            if host_fits is None:
                                shared = shared or block.config(mb)
                                cpu, nvme, _ = host_breakdown(self.model, self.cluster, shared, batch // (dp * mb),
                                                              self.host_safety_factor)
                                host_fits = host_by_policy[host_key] = (sum(cpu.values()) <= node.cpu_memory_bytes
                                                                        and nvme <= node.nvme_bytes)
                        fit = host_fits
                    row = _fit_row((block, mb, runtime, placement, tiles, peak))
                    if fit:
                        peak_of[pair] = peak
                        if refine_fit:
                            # Which policies may refine it is asked in derive_partials, against every
                            # configuration the scan found to fit.
                            refinable.append((row, True, len(fitting), refine_layers and runtime == "megatron"))
                        fitting.append(row)
                        continue
                    # A twin a refinement starts from (:func:`_twin_key`).
                    self._peaks[(runtime, dp, tp, pp, vp, cp, sp, zero, opt, param, rc, overlap, layout, ep, etp,
                                 tiles, mb)] = peak
                    failed[pair] = mb
                    live.discard(pair)
                    if len(closest) < 3 or -peak / gpu_bytes >= closest[0][0][0]:  # _remember_miss's first test
                        self._remember_miss(row, order, host)
                    if refine_miss and runtime == "megatron":
                        refinable.append((row, False, -1, False))
        self._scanned = scanned
        self._refinable = refinable
        self.n_feasible = len(fitting)
        self.scanned = True
        return FitList(fitting)

    def _scanned_fit(self, block: Block, micro_batch: int, runtime: str, tiles: int, *,
                     offload_optimizer: str | None = None, recompute: str | None = None) -> bool:
        """Whether the scan found this configuration of ``block`` (or its twin with another optimizer
        offload or recomputation) enumerated and fitting: it fits below the micro-batch its (runtime,
        tiles) first failed at (:meth:`scan_memory`)."""
        key = (*block[:11], offload_optimizer or block.offload_optimizer, block.offload_param,
               recompute or block.recompute)
        scanned = self._scanned.get(key)
        if scanned is None:
            return False
        present, failed = scanned
        return (micro_batch, runtime, tiles) in present and micro_batch < failed.get((runtime, tiles), micro_batch + 1)

    def release_scan(self) -> None:
        """Drop what only the memory scan and the sweeps read (its per-block records, the misses' peaks,
        the bounds' and GPU-peak caches; recomputed on demand if asked again), so reference counting
        frees them while the garbage collector is still paused: re-enabled, it would walk every one of
        them once (about 0.15 s after a 660,000-configuration search)."""
        self._scanned, self._peaks, self._refinable = {}, {}, []
        self.bounds.clear()
        self._gpu_peak.clear()

    def _fitting(self, cand: Candidate, config: ParallelConfig) -> tuple[Candidate, MemoryPlan] | None:
        part = Candidate(cand.framework, config)
        if support_status(cand.framework, config) == "refused":
            return None
        plan = self.memory(part)
        return (part, plan) if self.fits(plan) else None

    def _smallest(self, cand: Candidate, build: Callable[[float], ParallelConfig], low: float, high: float,
                  peak_low: float, peak_high: float, grid: Sequence[float]) -> tuple[Candidate, MemoryPlan] | None:
        """The smallest value of ``grid`` (ascending, between ``low`` and ``high``) whose
        configuration ``build(value)`` fits, found from the peak's affine trend between ``low``
        (``peak_low``, too big) and ``high`` (``peak_high``, fits) and checked with real plans
        (at most three); None when only ``high`` fits."""
        cap = self.cluster.gpu.memory_bytes - self.min_headroom_bytes
        if peak_low <= peak_high:
            return None
        estimate = low + (peak_low - cap) / (peak_low - peak_high) * (high - low)
        start = next((i for i, v in enumerate(grid) if v >= estimate - 1e-9), len(grid))
        for value in grid[start:start + 3]:
            config = build(value)
            if self.upper_bound_tokens_per_s(Candidate(cand.framework, config)) <= self._threshold:
                return None  # it cannot enter the answer: no plan needed (larger settings are slower still)
            found = self._fitting(cand, config)
            if found is not None:
                return found
        return None

    def _partial_kinds(self, row: FitRow, fit: bool) -> tuple[str, ...]:
        """Which fine-grained memory policies (issue 18) may improve one enumerated configuration
        (enumerated ones use none of these policies), by cheap checks only:
        block recomputation where full recomputation fits and neither no nor selective
        recomputation does (Megatron ``--recompute-method block``); a partial optimizer offload
        where a whole one fits and none does not (``--optimizer-offload-fraction``, DeepSpeed ZeRO-3
        ``ratio``); activation offload where nothing is recomputed, pp = 1 and it does not fit
        (``--cpu-offloading-num-layers``)."""
        b, fw, mb, tiles = row.block, row.runtime, row.micro_batch, row.tiles
        pp, zero, opt, param, rc = b.pp, b.zero_stage, b.offload_optimizer, b.offload_param, b.recompute
        if fit and rc != "full" and opt != "cpu":
            return ()  # most configurations: nothing to refine
        if not fit and (fw != "megatron" or pp > 1 or rc != "none"):
            return ()
        kinds = []
        if (fit and rc == "full" and fw == "megatron" and param == "none"
                and not self._scanned_fit(b, mb, fw, tiles, recompute="none")
                and not self._scanned_fit(b, mb, fw, tiles, recompute="selective")):
            kinds.append("recompute_layers")
        if (fit and opt == "cpu" and (fw == "megatron" or (fw == "deepspeed" and zero == 3))
                and not self._scanned_fit(b, mb, fw, tiles, offload_optimizer="none")):
            kinds.append("optimizer_offload_fraction")
        if not fit and fw == "megatron" and pp == 1 and rc == "none" and self.model.layers > 1:
            kinds.append("activation_offload_layers")
        return tuple(kinds)

    def _beyond_refinement(self, row: FitRow, bound: float, threshold: float, gains: dict[tuple[Any, ...], float],
                           top_gain: float) -> bool:
        """Whether no refinement of a fitting row (of throughput bound ``bound``) can beat
        ``threshold``: only block recomputation makes it faster, by at most its layer shape's
        :func:`_recompute_gain` (``gains``; tried first with ``top_gain``, the largest of them)."""
        if not _may_recompute_layers(row):
            return bound <= threshold
        if bound * top_gain <= threshold:
            return True
        b = row.block
        shape = (row.runtime, b.tp, b.cp, b.sp, row.micro_batch, b.recompute, b.tp_comm_overlap, b.ep, b.etp,
                 b.moe_exchange, b.cuda_graphs)
        gain = gains.get(shape)
        if gain is None:
            gain = gains[shape] = _recompute_gain(self.bounds.layer(*shape))
        return bound * gain <= threshold

    def derive_partials(self, threshold_tokens_per_s: float, bounds: Sequence[float]) -> list[Candidate]:
        """The least setting of each fine-grained policy that makes a source's layout fit (the
        fastest for that layout: recomputing or moving more only adds time), for the sources of
        :meth:`scan_memory` whose best case (:meth:`upper_bound_tokens_per_s` with one recomputed
        layer, or the source's own bound) beats ``threshold_tokens_per_s``: the others cannot enter
        the answer. Each derived configuration is checked against the support matrix and a real
        memory plan; they join :attr:`fitting` (not :attr:`n_feasible`, the count of the enumerated
        space's configurations that fit). ``bounds``: :meth:`row_bounds` of the scan's fitting rows,
        from which most sources are ruled out (:meth:`_beyond_refinement`) before anything else is asked."""
        derived: list[Candidate] = []
        self._threshold = threshold_tokens_per_s
        # Every fitting row's layer shape is cached (row_bounds asked for it).
        gains = {shape: _recompute_gain(layer) for shape, layer in self.bounds.layers().items()
                 if shape[5] == "full"}
        top_gain = max(gains.values(), default=1.0)
        refinable = self._refinable
        # Most sources fit and cannot beat the threshold even at the largest gain: ruled out at once.
        # (A miss, at index -1, reads the inf appended: never ruled out here.)
        at = np.array([index for _row, _fit, index, _layers in refinable], dtype=np.intp)
        best_case = np.append(np.asarray(bounds, dtype=float), np.inf)[at] * np.where(
            [layers for _row, _fit, _index, layers in refinable], top_gain, 1.0)
        sources: list[tuple[FitRow, tuple[str, ...]]] = []
        for k in np.flatnonzero(best_case > threshold_tokens_per_s).tolist():
            row, fit, index, _layers = refinable[k]
            if fit and self._beyond_refinement(row, bounds[index], threshold_tokens_per_s, gains, top_gain):
                continue  # which policies may refine it is not asked
            kinds = self._partial_kinds(row, fit)
            if kinds:
                sources.append((row, kinds))
        # Their best cases (one recomputed layer, or their own bound), computed together.
        best = self._rows_bounds([row for row, _kinds in sources],
                                 [1 if "recompute_layers" in kinds else None for _row, kinds in sources])
        for (row, kinds), bound in zip(sources, best, strict=True):
            if bound <= threshold_tokens_per_s:
                continue
            cand = row.candidate()
            for part, part_plan in self._derive(cand, row.peak_bytes, kinds):
                if part not in self.fitting:
                    self.fitting[part] = part_plan.peak_bytes
                    derived.append(part)
        self._refinable = []
        return derived

    def _derive(self, cand: Candidate, peak: float,
                kinds: tuple[str, ...]) -> list[tuple[Candidate, MemoryPlan]]:
        c, fw = cand.config, cand.framework
        out: list[tuple[Candidate, MemoryPlan]] = []
        if "recompute_layers" in kinds:
            chunk = -(-max(c.stage_layers or (self.model.layers // c.pp,)) // c.vp)
            # The peak falls affinely from no recomputation (the twin the scan planned) to every layer.
            peak_none = self._peaks.get(_twin_key(fw, c, recompute="none"))
            if chunk > 1 and peak_none is not None:
                found = self._smallest(cand, lambda k: replace(c, recompute_layers=int(k)), 0, chunk, peak_none,
                                       peak, tuple(float(k) for k in range(1, chunk)))
                if found is not None:
                    out.append(found)
        if "optimizer_offload_fraction" in kinds:
            for src, src_peak in [(cand, peak), *((part, part_plan.peak_bytes) for part, part_plan in out)]:
                s = src.config
                # The peak rises affinely as the share on the host falls: from f = 1 (fits) to f = 0, the
                # twin without offload (planned by the scan), else estimated from a plan at f = 0.5.
                peak0 = self._peaks.get(_twin_key(fw, s, offload_optimizer="none")) \
                    if s.recompute_layers is None else None
                if peak0 is None:
                    half = self.memory(Candidate(fw, replace(s, optimizer_offload_fraction=0.5)))
                    peak0 = src_peak + 2.0 * (half.peak_bytes - src_peak)
                found = self._smallest(src, partial(_with_offload_share, s), 0.0, 1.0, peak0, src_peak,
                                       _OFFLOAD_SHARES)
                if found is not None:
                    out.append(found)
        if "activation_offload_layers" in kinds:
            most = self.model.layers - 1
            full = self.memory(Candidate(fw, replace(c, activation_offload_layers=most)))
            if self.fits(full) and support_status(fw, full_config := replace(c, activation_offload_layers=most)) \
                    != "refused":
                found = self._smallest(cand, lambda n: replace(c, activation_offload_layers=int(n)), 0, most,
                                       peak, full.peak_bytes, tuple(float(n) for n in range(1, most)))
                out.append(found or (Candidate(fw, full_config), full))
        return out

    def threshold_tokens_per_s(self, band: float) -> float:
        """The throughput a refinement must be able to beat to matter: the lower edge of the best
        configuration's error band (whatever the top k asks, so counts and fronts do not depend on it)."""
        return max((p.tokens_per_s for _, p, _ in self.feasible), default=0.0) * (1.0 - band)

    def upper_bound_tokens_per_s(self, cand: Candidate, recompute_layers: int | None = -1) -> float:
        """Tokens/s no better than this bound (:func:`search.time_lower_bound_s`): m times the
        slowest rank's per-micro-batch time plus the others' once over vp, terms that depend only on
        the layer shape and the layout, cached here by them. ``recompute_layers`` (other than -1)
        stands in for the configuration's own (a refinement's best case)."""
        c = cand.config
        return self._bound(cand.framework, c.dp, c.tp, c.pp, c.vp, c.cp, c.sp, c.micro_batch, c.recompute,
                           c.tp_comm_overlap, c.stage_layers, c.ep, c.etp,
                           c.recompute_layers if recompute_layers == -1 else recompute_layers,
                           (c.moe_dispatcher, c.moe_a2a_overlap), c.cuda_graphs)

    def row_bounds(self, rows: FitList) -> list[float]:
        """:meth:`upper_bound_tokens_per_s` of each scanned fitting candidate, without building it."""
        return self._rows_bounds(rows.rows, [None] * len(rows.rows))

    def _rows_bounds(self, rows: Sequence[FitRow], recompute_layers: Sequence[int | None]) -> list[float]:
        """:meth:`upper_bound_tokens_per_s` of each scanned row with its ``recompute_layers`` (standing in for
        its own, which enumerated rows leave None), without building it: a row's bound key from its
        block's (rows of one block come together) and its runtime, micro-batch and recomputed layers,
        the keys' terms at once (:meth:`ThroughputBounds.many`), the bounds as arrays (the same
        operations as :meth:`_bound`)."""
        keys: list[BoundKey] = []
        position_of: dict[tuple[Any, ...], dict[tuple[Framework, int, int | None], int]] = {}
        positions: list[int] = []
        dp_mb: list[int] = []
        vps: list[int] = []
        block: Block | None = None
        at: dict[tuple[Framework, int, int | None], int] = {}
        for row, layers in zip(rows, recompute_layers, strict=True):
            if row.block is not block:
                block = row.block
                at = position_of.setdefault((*block[1:10], block.recompute, block.moe_exchange, block.cuda_graphs),
                                            {})
            position = at.get((row.runtime, row.micro_batch, layers))
            if position is None:
                position = at[(row.runtime, row.micro_batch, layers)] = len(keys)
                keys.append(self.bounds.key(row.runtime, block.tp, block.pp, block.vp, block.cp, block.sp,
                                            row.micro_batch, block.recompute, block.tp_comm_overlap,
                                            block.stage_layers, block.ep, block.etp, layers, block.moe_exchange,
                                            block.cuda_graphs))
            positions.append(position)
            dp_mb.append(block.dp * row.micro_batch)
            vps.append(block.vp)
        slowest, others = self.bounds.many(keys)
        at_row = np.array(positions, dtype=np.intp)
        micro_batches = self.tokens_per_step // (self.model.seq_len * np.array(dp_mb, dtype=np.int64))
        bounds: list[float] = (self.tokens_per_step / (micro_batches * slowest[at_row]
                                                       + others[at_row] / np.array(vps, dtype=np.int64))).tolist()
        return bounds

    def _bound(self, framework: Framework, dp: int, tp: int, pp: int, vp: int, cp: int, sp: bool, micro_batch: int,
               recompute: Recompute, tp_comm_overlap: bool, stage_layers: tuple[int, ...] | None, ep: int, etp: int,
               recompute_layers: int | None, moe_exchange: MoEExchange = NO_EXCHANGE,
               cuda_graphs: CudaGraphs = "none") -> float:
        slowest_s, others_s = self.bounds.terms(self.bounds.key(framework, tp, pp, vp, cp, sp, micro_batch, recompute,
                                                                tp_comm_overlap, stage_layers, ep, etp,
                                                                recompute_layers, moe_exchange, cuda_graphs))
        micro_batches = self.tokens_per_step // (self.model.seq_len * dp * micro_batch)
        return self.tokens_per_step / (micro_batches * slowest_s + others_s / vp)

    def __call__(self, cand: Candidate) -> tuple[Prediction | None, MemoryPlan]:
        """Evaluate once; a repeat (a sampler proposing it again) returns the first answer uncounted."""
        if cand in self._seen:
            return self._seen[cand]
        answer = self._evaluate(cand)
        self._seen[cand] = answer
        return answer

    def _evaluate(self, cand: Candidate) -> tuple[Prediction | None, MemoryPlan]:
        self.n_evaluated += 1
        plan = self.memory(cand)
        if not self.fits(plan):
            if not self.scanned:
                self._remember_miss(cand, self.n_evaluated, plan=plan)
            return None, plan
        if not self.scanned:
            self.n_feasible += 1
        pred = predict(self.model, self.cluster, cand.config, self.trainings[cand.framework], self.cal, memory=plan)
        self.feasible.append((cand, pred, objective_score(pred, self.objective, self.cluster.world_size, self.price)))
        return pred, plan
