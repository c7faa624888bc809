"""Evaluating configurations for a search: the memory scan of every candidate (its rows:
:mod:`search._fit_rows`), the fine-grained memory policies it may derive (issue 18), throughput bounds,
and timing (the sweeps that use them: :mod:`search._sweeps`; the ranking of what was timed:
:mod:`search._ranking`)."""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from operator import add
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from search._bounds import BoundBatch, BoundGroup, ThroughputBounds
from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._fit_rows import FitList, FitRow, FitSpan, ScanOutcome, Walk, walk_of
from search._memory_plan import GpuPeak, MemoryPlan, host_breakdown
from search._model_spec import ModelSpec
from search._parallel_spec import CudaGraphs, Framework, ParallelConfig, Precision, Recompute, TrainingSpec
from search._predict import (
    MicroBatchTerms,
    predict,
    predict_memory,
)
from search._prediction import Prediction
from search._ranking import objective_score
from search._space import NO_EXCHANGE, Block, Candidate, MoEExchange
from search._support import support_status

ProgressFn = Callable[[int, int], None]
_OFFLOAD_SHARES: tuple[float, ...] = tuple(i / 20 for i in range(1, 20))
"""Shares of the optimizer states on the host a partial offload tries (steps of 5 %)."""


def _with_offload_share(config: ParallelConfig, share: float) -> ParallelConfig:
    return replace(config, optimizer_offload_fraction=round(share, 2))


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
        self._fit = FitList([], set())
        """The fitting rows of the last :meth:`scan_memory` (what :meth:`derive_partials` refines)."""
        self._refine_misses: list[tuple[int, FitRow]] = []
        """Scanned configurations that do not fit and that activation offload may make fit (Megatron, pp = 1,
        no recomputation: :meth:`_partial_kinds`), in the scan's order, each with how many fitting rows came
        before it."""
        self._scanned: dict[tuple[Any, ...], ScanOutcome] = {}
        """What the scan found in each block, by its fields but the entries (:meth:`_scanned_fit`; the twins
        :meth:`_derive` starts its estimates from: :meth:`_twin_peak`)."""
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
        spans: list[FitSpan] = []
        size = 0  # fitting rows so far
        runtimes: set[Framework] = set()
        refine_misses: list[tuple[int, FitRow]] = []
        scanned: dict[tuple[Any, ...], ScanOutcome] = {}
        # Peak memory never falls as the micro-batch grows (activations per micro-batch scale with it,
        # micro-batches in flight at most inversely: stored = per-layer x min(mb (pp - r), batch/dp)),
        # so once a configuration does not fit, the same one with a larger micro-batch does not either
        # (and is never looked at). Within a block (no two blocks share their fields) a configuration is
        # its (runtime, tiles) pair and micro-batch: the placement changes no byte. The pairs of a block
        # are walked one after another, each up to its first failure; its rows then come in the order
        # of the block's candidates (:class:`Walk`).
        gpu_peak, batch = self._gpu_peak, self.trainings["megatron"].global_batch
        lb_of = {fw: gpu_peak.linear_input_bytes(fw) for fw in self.trainings}
        cap = self.cluster.gpu.memory_bytes - self.min_headroom_bytes
        overhead = self.cal.memory_overhead_bytes
        node = self.cluster.node
        walks: dict[int, Walk] = {}
        gpu_bytes, closest = self.cluster.gpu.memory_bytes, self.closest
        # Activations per micro-batch, for all blocks of one shape, schedule and saved linear-input width
        # (:meth:`GpuPeak.activation_key` less what they fix: dp follows from tp, pp and cp), with a
        # configuration of theirs that stands in for every micro-batch (GpuPeak.activations).
        acts_by_shape: dict[tuple[Any, ...], tuple[ParallelConfig, dict[int, tuple[float, ...]]]] = {}
        # Model states (and the tail after them) per runtime, policy, expert degrees and tiles, for the
        # blocks of one pipeline layout (they come in a run: search._space.enumerate_space's loop order).
        states_by_policy: dict[tuple[Any, ...], tuple[tuple[float, ...], float]] = {}
        # Whether host memory and NVMe fit, per expert degrees and policy (and, with parameter offload,
        # micro-batch and recomputation: the host-held checkpoints) within a pipeline layout's run: the
        # host side depends on nothing else (search._memory_plan.host_breakdown; blocks offload no
        # activations, so the saved linear-input width plays no part either).
        host_by_policy: dict[tuple[Any, ...], bool] = {}
        # What the scan finds in a block, per the fields its bytes depend on within a pipeline layout's run:
        # blocks that differ only in TP overlap, the MoE exchange or the CUDA graph (four in ten of an MoE
        # space's) hold the same bytes (nothing above depends on them) and share it.
        outcomes: dict[tuple[Any, ...], ScanOutcome] = {}
        pipeline: tuple[Any, ...] = ()
        order = 0  # candidates visited so far: ranks misses among themselves (_remember_miss)
        for block in blocks:
            dp, tp, pp, vp, cp, sp, _overlap, layout, ep, etp, zero, opt, param, rc, entries, _exchange, _graphs = block
            if pipeline[:4] != (tp, pp, vp, cp) or pipeline[4] is not layout:
                pipeline, states_by_policy, host_by_policy, outcomes = (tp, pp, vp, cp, layout), {}, {}, {}
            walk_id = id(entries)  # blocks share their entries (search._space.enumerate_space)
            walk = walks.get(walk_id)
            if walk is None:
                walk = walks[walk_id] = walk_of(entries)
            host = opt != "none" or param != "none"
            outcome_key = (sp, rc, ep, etp, zero, opt, param, walk_id)
            outcome = outcomes.get(outcome_key)
            if outcome is None:
                # The GPU's peak alone (:class:`search._memory_plan.GpuPeak`): configurations are built where a
                # cache misses, full plans for what is timed and the closest misses.
                fits: list[tuple[int, float]] = []  # (index in the walk, peak) of each candidate that fits
                misses: list[tuple[int, float]] = []
                pair_peaks: list[float] = []
                last_failure = 0  # the largest micro-batch a pair failed at
                for pair, pair_mbs, firsts, placements, steps in walk.pairs:
                    runtime, tiles = pair
                    lb = lb_of[runtime]
                    acts_key = (pp, vp, layout, tp, cp, sp, rc, etp, param != "none", lb)
                    own: ParallelConfig | None = None  # the block's configuration, where one was built
                    shape = acts_by_shape.get(acts_key)
                    if shape is None:
                        own = block.config(pair_mbs[0])
                        shape = acts_by_shape[acts_key] = (own, {})
                    # A configuration of this shape (GpuPeak.activations: at any micro-batch), its activations.
                    shape_config, acts_at = shape
                    states = states_by_policy.get((runtime, zero, opt, param, ep, etp, tiles))
                    if states is None:
                        # :meth:`GpuPeak.state_key` written out (blocks offload whole optimizers: fraction 1).
                        held = gpu_peak.known_states((runtime, dp * cp, tp, pp, vp if gpu_peak.states_by_vp else 1,
                                                      zero, opt, param, 1.0, layout, ep, etp, tiles))
                        if held is None:
                            held = gpu_peak.states(block.config(pair_mbs[0], placements[0], tiles) if tiles > 1 else
                                                   own or block.config(pair_mbs[0]), runtime)
                        states = states_by_policy[(runtime, zero, opt, param, ep, etp, tiles)] = (
                            held, gpu_peak.tail_bytes(runtime, zero))
                    held, tail = states
                    host_fits: bool | None = None
                    pair_peaks = []
                    for mb in pair_mbs:
                        acts = acts_at.get(mb)
                        if acts is None:
                            acts = acts_at[mb] = gpu_peak.activations(shape_config, batch // (dp * mb), lb, mb)
                        peak = max(map(add, held, acts)) + tail + overhead  # :meth:`GpuPeak.peak` written out
                        fit = peak <= cap
                        if fit and host:
                            # The host side depends on the configuration, not the runtime, and without
                            # parameter offload not on the micro-batch either (search._memory_plan.host_breakdown).
                            if host_fits is None or param != "none":
                                host_key = (ep, etp, zero, opt, param) if param == "none" else (ep, etp, zero, opt,
                                                                                                param, mb, rc)
                                host_fits = host_by_policy.get(host_key)
                                if host_fits is None:
                                    if own is None or own.micro_batch != mb:
                                        own = block.config(mb)
                                    cpu, nvme, _ = host_breakdown(self.model, self.cluster, own, batch // (dp * mb),
                                                                  self.host_safety_factor)
                                    host_fits = host_by_policy[host_key] = (sum(cpu.values()) <= node.cpu_memory_bytes
                                                                            and nvme <= node.nvme_bytes)
                            fit = host_fits
                        if not fit:
                            misses.append((firsts[len(pair_peaks)], peak))
                            if mb > last_failure:
                                last_failure = mb
                            break
                        pair_peaks.append(peak)
                    if pair_peaks:
                        runtimes.add(runtime)
                        if not walk.single:
                            fits += [(j, peak) for k, peak in enumerate(pair_peaks) for j in steps[k]]
                fit_at: tuple[int, ...] | None = None
                if walk.single:  # the pair's candidates up to its first failure: the walk's first ones
                    n = walk.pairs[0].firsts[len(pair_peaks)] if misses else len(walk.variants)
                    fit_peaks = pair_peaks if n == len(pair_peaks) else [
                        peak for k, peak in enumerate(pair_peaks) for _j in walk.pairs[0].steps[k]]
                else:
                    fits.sort()
                    misses.sort()
                    n = len(fits)
                    fit_at = None if not fits or fits[-1][0] == n - 1 else tuple(j for j, _peak in fits)
                    fit_peaks = [peak for _j, peak in fits]
                # The walk stops once every pair has failed, at the end of the last one's micro-batch.
                visited = walk.ends[last_failure] if len(misses) == len(walk.pairs) else len(walk.variants)
                outcome = outcomes[outcome_key] = (n, fit_at, fit_peaks, misses, visited, walk)
            n, fit_at, fit_peaks, misses, visited, _walk = outcome
            scanned[block[:14]] = outcome
            if n:
                spans.append((block, size, walk, fit_at, fit_peaks))
            for j, peak in misses:
                if len(closest) < 3 or -peak / gpu_bytes >= closest[0][0][0]:  # _remember_miss's first test
                    self._remember_miss(FitRow(block, walk.micro_batches[j], *walk.variants[j], peak), order + j + 1,
                                        host)
                if pp == 1 and rc == "none" and walk.variants[j][0] == "megatron":  # what _partial_kinds may refine
                    refine_misses.append((size + (min(n, j) if fit_at is None else bisect_left(fit_at, j)),
                                          FitRow(block, walk.micro_batches[j], *walk.variants[j], peak)))
            size += n
            order += visited
        self._scanned = scanned
        self._refine_misses = refine_misses
        self._fit = FitList(spans, runtimes)
        self.n_feasible = size
        self.scanned = True
        return self._fit

    def _scanned_fit(self, block: Block, micro_batch: int, runtime: Framework, tiles: int, *,
                     offload_optimizer: str | None = None, recompute: str | None = None) -> bool:
        """Whether the scan found this configuration of ``block`` (or its twin with another optimizer
        offload or recomputation) enumerated and fitting: it fits below the micro-batch its (runtime,
        tiles) first failed at (:meth:`scan_memory`)."""
        key = (*block[:11], offload_optimizer or block.offload_optimizer, block.offload_param,
               recompute or block.recompute)
        scanned = self._scanned.get(key)
        if scanned is None or (micro_batch, runtime, tiles) not in scanned[5].present:
            return False
        first_failure = self._first_failure(scanned, runtime, tiles)
        return first_failure is None or micro_batch < first_failure[0]

    def _twin_peak(self, framework: Framework, c: ParallelConfig, *, offload_optimizer: str | None = None,
                   recompute: str | None = None) -> float | None:
        """The peak bytes the scan found for the enumerated twin of ``c`` with another optimizer offload or
        recomputation, where the twin was the first of its (runtime, tiles) pair not to fit (the scan looks
        at no larger micro-batch); else None."""
        key = (c.dp, c.tp, c.pp, c.vp, c.cp, c.sp, c.tp_comm_overlap, c.stage_layers, c.ep, c.etp, c.zero_stage,
               offload_optimizer or c.offload_optimizer, c.offload_param, recompute or c.recompute)
        scanned = self._scanned.get(key)
        first_failure = None if scanned is None else self._first_failure(scanned, framework, c.tiles)
        return first_failure[1] if first_failure is not None and first_failure[0] == c.micro_batch else None

    @staticmethod
    def _first_failure(outcome: ScanOutcome, runtime: Framework, tiles: int) -> tuple[int, float] | None:
        """(micro-batch, peak bytes) of the first candidate of a block's (runtime, tiles) the scan found not to
        fit, from its outcome; None when all fit."""
        _n, _at, _peaks, misses, _visited, walk = outcome
        for j, peak in misses:
            miss_runtime, _placement, miss_tiles = walk.variants[j]
            if miss_runtime == runtime and miss_tiles == tiles:
                return walk.micro_batches[j], peak
        return None

    def release_scan(self) -> None:
        """Drop what only the memory scan and the sweeps read (its per-block records, its fitting rows,
        the bounds' and GPU-peak caches; recomputed on demand if asked again), so reference counting
        frees them while the garbage collector is still paused: re-enabled, it would walk every one of
        them once (about 0.15 s after a 660,000-configuration search)."""
        self._scanned, self._refine_misses, self._fit = {}, [], FitList([], set())
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
        fit = self._fit
        spans = fit.spans
        lengths = np.array([len(peaks) for _block, _start, _walk, _at, peaks in spans], dtype=np.intp)
        # The fitting rows :meth:`_partial_kinds` may refine (the conditions on its block: full recomputation
        # or a whole optimizer offload), and which of them block recomputation may (:func:`_may_recompute_layers`).
        at = np.flatnonzero(np.repeat(np.array([b.recompute == "full" or b.offload_optimizer == "cpu"
                                                for b, _start, _walk, _at, _peaks in spans], dtype=bool), lengths))
        layers = np.repeat(np.array([b.recompute == "full" and b.offload_param == "none"
                                     for b, _start, _walk, _at, _peaks in spans], dtype=bool), lengths)[at]
        if fit.runtimes != {"megatron"}:
            variants = fit.variants
            layers &= np.array([variants[i][0] == "megatron" for i in at.tolist()], dtype=bool)
        # Most sources fit and cannot beat the threshold even at the largest gain: ruled out at once.
        best_case = np.asarray(bounds, dtype=float)[at] * np.where(layers, top_gain, 1.0)
        sources: list[tuple[FitRow, tuple[str, ...]]] = []
        misses = iter(self._refine_misses)  # in the scan's order, as the rows: merged back into it
        miss = next(misses, None)
        for index in [*at[best_case > threshold_tokens_per_s].tolist(), len(fit)]:
            while miss is not None and miss[0] <= index:  # the misses the scan met before this row
                kinds = self._partial_kinds(miss[1], False)
                if kinds:
                    sources.append((miss[1], kinds))
                miss = next(misses, None)
            if index == len(fit):
                break
            row = fit.row(index)
            if self._beyond_refinement(row, bounds[index], threshold_tokens_per_s, gains, top_gain):
                continue  # which policies may refine it is not asked
            kinds = self._partial_kinds(row, True)
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
        self._refine_misses = []
        return derived

    def _derive(self, cand: Candidate, peak: float,
                kinds: tuple[str, ...]) -> list[tuple[Candidate, MemoryPlan]]:
        c, fw = cand.config, cand.framework
        out: list[tuple[Candidate, MemoryPlan]] = []
        if "recompute_layers" in kinds:
            chunk = -(-max(c.stage_layers or (self.model.layers // c.pp,)) // c.vp)
            # The peak falls affinely from no recomputation (the twin the scan planned) to every layer.
            peak_none = self._twin_peak(fw, c, recompute="none")
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
                peak0 = self._twin_peak(fw, s, offload_optimizer="none") \
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
        """:meth:`upper_bound_tokens_per_s` of each scanned fitting candidate, without building it: a
        block's bound keys differ only in the runtime and micro-batch (:class:`BoundGroup`), and the
        blocks of a group whose rows are the first candidates of the same walk have the same keys in the
        same order (cached here as their positions); the keys' terms are computed at once
        (:class:`BoundBatch`), the bounds as arrays (the same operations as :meth:`_bound`)."""
        batch = BoundBatch(self.bounds)
        groups: dict[tuple[Any, ...], tuple[dict[Framework, BoundGroup], dict[int, list[int]]]] = {}
        positions: list[int] = []
        for block, _start, walk, fit_at, peaks in rows.spans:
            key = (*block[1:10], block.recompute, block.moe_exchange, block.cuda_graphs)
            group = groups.get(key)
            if group is None:
                group = groups[key] = ({}, {})
            by_runtime, walked = group
            if fit_at is not None:
                for j in fit_at:
                    runtime = walk.variants[j][0]
                    at = by_runtime.get(runtime) or by_runtime.setdefault(
                        runtime, self._bound_group(batch, block, runtime, None))
                    positions.append(at.at(walk.micro_batches[j]))
                continue
            n = len(peaks)
            known = walked.get(id(walk))
            if known is None:
                known = walked[id(walk)] = []
            if len(known) < n:  # the keys of the walk's candidates not yet asked for in this group
                if walk.runtime is not None:
                    at = by_runtime.get(walk.runtime) or by_runtime.setdefault(
                        walk.runtime, self._bound_group(batch, block, walk.runtime, None))
                    known += at.at_each(walk.micro_batches[len(known):n])
                else:
                    for (runtime, _placement, _tiles), mb in zip(walk.variants[len(known):n],
                                                                 walk.micro_batches[len(known):n], strict=True):
                        at = by_runtime.get(runtime) or by_runtime.setdefault(
                            runtime, self._bound_group(batch, block, runtime, None))
                        known.append(at.at(mb))
            positions += known if len(known) == n else known[:n]
        lengths = np.array([len(peaks) for _block, _start, _walk, _at, peaks in rows.spans], dtype=np.intp)
        dp_mb = np.repeat(np.array([b.dp for b, _start, _walk, _at, _peaks in rows.spans], dtype=np.int64),
                          lengths) * np.array(rows.micro_batches, dtype=np.int64)
        vps = np.repeat(np.array([b.vp for b, _start, _walk, _at, _peaks in rows.spans], dtype=np.int64), lengths)
        return self._bounds_at(batch, positions, dp_mb, vps)

    def _rows_bounds(self, rows: Sequence[FitRow], recompute_layers: Sequence[int | None]) -> list[float]:
        """:meth:`upper_bound_tokens_per_s` of each scanned row with its ``recompute_layers`` (standing in for
        its own, which enumerated rows leave None), without building it (as :meth:`row_bounds`)."""
        batch = BoundBatch(self.bounds)
        groups: dict[tuple[Any, ...], BoundGroup] = {}
        positions: list[int] = []
        for row, layers in zip(rows, recompute_layers, strict=True):
            block = row.block
            key = (*block[1:10], block.recompute, block.moe_exchange, block.cuda_graphs, row.runtime, layers)
            group = groups.get(key)
            if group is None:
                group = groups[key] = self._bound_group(batch, block, row.runtime, layers)
            positions.append(group.at(row.micro_batch))
        return self._bounds_at(batch, positions, np.array([row.block.dp * row.micro_batch for row in rows],
                                                          dtype=np.int64),
                               np.array([row.block.vp for row in rows], dtype=np.int64))

    def _bound_group(self, batch: BoundBatch, block: Block, runtime: Framework,
                     recompute_layers: int | None) -> BoundGroup:
        """The bound keys of ``block``'s configurations of ``runtime`` (:meth:`ThroughputBounds.key`)."""
        return batch.group(runtime, block.tp, block.pp, self.bounds.chunks(block.vp, block.ep, block.moe_exchange),
                           block.cp, block.sp, block.recompute, block.tp_comm_overlap, block.stage_layers, block.ep,
                           block.etp, recompute_layers, block.moe_exchange, block.cuda_graphs)

    def _bounds_at(self, batch: BoundBatch, positions: list[int], dp_mb: npt.NDArray[np.int64],
                   vps: npt.NDArray[np.int64]) -> list[float]:
        """The bounds of the keys of ``batch`` at ``positions``, with each one's dp x micro-batch and vp:
        :meth:`_bound`'s operations on arrays."""
        slowest, others = batch.terms()
        at = np.array(positions, dtype=np.intp)
        micro_batches = self.tokens_per_step // (self.model.seq_len * dp_mb)
        bounds: list[float] = (self.tokens_per_step / (micro_batches * slowest[at] + others[at] / vps)).tolist()
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
