"""Throughput bounds of a search's configurations: :func:`search.time_lower_bound_s` as tokens/s.

A bound is ``tokens / (m * slowest + others / vp)``, where (slowest, others) are the slowest
pipeline rank's per-micro-batch time and the other ranks' summed (:func:`search._predict.stage_bound_terms`).
Those depend on a layer's shape and the pipeline layout, not on dp, ZeRO or offloads: they are
cached per bound key, built from a layer's terms per shape (10^3-10^4 of them) and the layer counts
and host overhead per layout (10^2). A memory scan's 10^5 fitting candidates hold 10^4-10^5 keys:
:class:`BoundBatch` computes them a layout at a time with numpy, the very operations of
:func:`search._predict.stage_micro_batch_s` in the same order, so the floats agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._model_spec import ModelSpec
from search._moe_dispatch import syncs_host
from search._parallel_spec import CudaGraphs, Framework, ParallelConfig, Recompute, TrainingSpec
from search._predict import (
    MicroBatchTerms,
    layer_shape_terms,
    slowest_and_others_s,
    stage_micro_batch_s,
    stage_overhead_s,
)
from search._space import MoEExchange
from search._stages import stage_layer_counts, stage_moe_layer_counts, stage_recompute_shares

BoundKey = tuple[Any, ...]
"""(tp, cp, sp, pp, micro_batch, recompute, tp_comm_overlap, framework, stage_layers, ep, etp,
recompute_layers, moe_exchange, chunks, cuda_graphs): what (slowest, others) depend on
(:meth:`ThroughputBounds.key`)."""
Layout = tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...] | None, float]
"""(layers per rank, MoE layers per rank, recomputed share per rank or None when all recompute,
host overhead per micro-batch) of one pipeline layout."""
Floats = npt.NDArray[np.float64]
LayerTimes = tuple[float, float, float, float, float]
"""(dense layer, MoE layer, their recomputation, LM head and MTP modules) seconds per micro-batch of one
layer shape (:class:`search._predict.MicroBatchTerms`), what :func:`_stage_bound_arrays` reads."""


class ThroughputBounds:
    """The (slowest, others) terms of each bound key: one at a time, cached (:meth:`terms`), or many at once
    (:meth:`many`, :class:`BoundBatch`)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, cal: Calibration,
                 trainings: Mapping[str, TrainingSpec]) -> None:
        self.model, self.cluster, self.cal, self.trainings = model, cluster, cal, trainings
        moe = model.moe
        self._dense_first = moe is not None and moe.first_dense_layers > 0
        self._terms: dict[BoundKey, tuple[float, float]] = {}
        self._layers: dict[tuple[Any, ...], MicroBatchTerms] = {}
        self._layouts: dict[tuple[Any, ...], Layout] = {}
        self._times: dict[tuple[Any, ...], dict[int, LayerTimes]] = {}
        """:data:`LayerTimes` per layer shape less the micro-batch (:meth:`layer`'s key without it), per micro-batch."""

    def clear(self) -> None:
        """Drop every cached term (they are recomputed on demand)."""
        for cache in (self._terms, self._layers, self._layouts, self._times):
            cache.clear()

    def key(self, framework: Framework, tp: int, pp: int, vp: int, cp: int, sp: bool, micro_batch: int,
            recompute: Recompute, tp_comm_overlap: bool, stage_layers: tuple[int, ...] | None, ep: int, etp: int,
            recompute_layers: int | None, moe_exchange: MoEExchange, cuda_graphs: CudaGraphs = "none") -> BoundKey:
        """The bound key of one configuration. The runtime is part of it: its kernels (attention) and
        per-micro-batch costs differ. vp enters the per-micro-batch terms through a host-synchronizing
        MoE dispatcher's per-chunk host time (search._moe_dispatch.moe_sync_overhead_s) and, with dense
        first layers, through which ranks the interleaved chunks put the dense layers on
        (search._stages.stage_moe_layer_counts): keyed there. Elsewhere vp 1 bounds every vp (its layer
        counts are the same; recomputing a block per chunk only adds time). A full-iteration CUDA graph
        removes the host overhead per micro-batch (the layout's part)."""
        return (tp, cp, sp, pp, micro_batch, recompute, tp_comm_overlap, framework, stage_layers, ep, etp,
                recompute_layers, moe_exchange, self.chunks(vp, ep, moe_exchange), cuda_graphs)

    def chunks(self, vp: int, ep: int, moe_exchange: MoEExchange) -> int:
        """What a bound key holds of vp (:meth:`key`): vp where it changes the per-micro-batch terms, else 1."""
        moe = self.model.moe
        return vp if moe is not None and (self._dense_first or (
            ep > 1 and syncs_host(moe_exchange[0], moe.pad_to_capacity))) else 1

    def terms(self, key: BoundKey) -> tuple[float, float]:
        """(slowest, others) of one bound key: :func:`search._predict.stage_bound_terms`."""
        terms = self._terms.get(key)
        if terms is None:
            (tp, cp, sp, pp, micro_batch, recompute, overlap, framework, layers, ep, etp, rl, exchange, chunks,
             graphs) = key
            counts, moe_counts, shares, overhead_s = self.layout(framework, pp, chunks, layers, recompute, rl, ep,
                                                                  exchange, graphs)
            layer = self.layer(framework, tp, cp, sp, micro_batch, recompute, overlap, ep, etp, exchange, graphs)
            terms = self._terms[key] = slowest_and_others_s(stage_micro_batch_s(layer, counts, overhead_s,
                                                                                moe_counts, shares))
        return terms

    def many(self, keys: Sequence[BoundKey]) -> tuple[Floats, Floats]:
        """(slowest, others) of each key, as arrays, computed a layout at a time (:class:`BoundBatch`)."""
        batch = BoundBatch(self)
        groups: dict[BoundKey, BoundGroup] = {}
        positions = []
        for key in keys:
            (tp, cp, sp, pp, micro_batch, recompute, overlap, framework, layers, ep, etp, rl, exchange, chunks,
             graphs) = key
            group_key = (*key[:4], *key[5:])
            group = groups.get(group_key)
            if group is None:
                group = groups[group_key] = batch.group(framework, tp, pp, chunks, cp, sp, recompute, overlap, layers,
                                                        ep, etp, rl, exchange, graphs)
            positions.append(group.at(micro_batch))
        slowest, others = batch.terms()
        at = np.array(positions, dtype=np.intp)
        return slowest[at], others[at]

    def layer_times(self, head: tuple[Any, ...], tail: tuple[Any, ...]) -> dict[int, LayerTimes]:
        """:data:`LayerTimes` of the layer shapes (:meth:`layer`'s key) with these fields before and after
        the micro-batch, by micro-batch: a dictionary filled as they are asked for (:meth:`times_at`)."""
        times = self._times.get((head, tail))
        if times is None:
            times = self._times[(head, tail)] = {}
        return times

    def times_at(self, times: dict[int, LayerTimes], head: tuple[Any, ...], micro_batch: int,
                 tail: tuple[Any, ...]) -> LayerTimes:
        """:data:`LayerTimes` of one layer shape, into ``times`` (its :meth:`layer_times`)."""
        (framework, tp, cp, sp), (recompute, overlap, ep, etp, exchange, graphs) = head, tail
        t = self.layer(framework, tp, cp, sp, micro_batch, recompute, overlap, ep, etp, exchange, graphs)
        layer_times = times[micro_batch] = (t.layer_s, t.moe_layer_s, t.recompute_s,
                                            t.moe.recompute_s if t.moe is not None else t.recompute_s,
                                            t.head_s + t.mtp_s)
        return layer_times

    def layer(self, framework: Framework, tp: int, cp: int, sp: bool, micro_batch: int, recompute: Recompute,
              tp_comm_overlap: bool, ep: int, etp: int, moe_exchange: MoEExchange,
              cuda_graphs: CudaGraphs = "none") -> MicroBatchTerms:
        """:func:`search._predict.micro_batch_terms` of one layer shape, cached here (the CUDA graph is part of
        an MoE layer's shape: an MoE model's full-iteration graph runs Transformer Engine's op fuser on the
        experts, :func:`search._unfused_paths.expert_path`)."""
        shape = (framework, tp, cp, sp, micro_batch, recompute, tp_comm_overlap, ep, etp, moe_exchange, cuda_graphs)
        layer = self._layers.get(shape)
        if layer is None:  # the runtime's precision and kernels: its TrainingSpec (the batch plays no part)
            layer = self._layers[shape] = layer_shape_terms(
                self.model, self.cluster, self.trainings[framework], self.cal, tp, cp, sp, micro_batch, recompute,
                tp_comm_overlap, ep, etp, moe_exchange[0], moe_exchange[1], cuda_graphs)
        return layer

    def layers(self) -> dict[tuple[Any, ...], MicroBatchTerms]:
        """Every layer shape's terms computed so far, by (framework, tp, cp, sp, micro_batch,
        recompute, tp_comm_overlap, ep, etp, moe_exchange, cuda_graphs)."""
        return self._layers

    def layout(self, framework: Framework, pp: int, chunks: int, stage_layers: tuple[int, ...] | None,
                recompute: Recompute, recompute_layers: int | None, ep: int, moe_exchange: MoEExchange,
                cuda_graphs: CudaGraphs = "none") -> Layout:
        """:data:`Layout` of one pipeline layout, cached."""
        key = (framework, pp, chunks, stage_layers, recompute, recompute_layers, ep, moe_exchange[0], cuda_graphs)
        layout = self._layouts.get(key)
        if layout is None:
            one = ParallelConfig.trusted(1, 1, pp, chunks, 1, False, 1, 0, "none", "none", recompute,
                                         stage_layers=stage_layers, ep=ep, recompute_layers=recompute_layers,
                                         moe_dispatcher=moe_exchange[0], moe_a2a_overlap=moe_exchange[1],
                                         cuda_graphs=cuda_graphs)
            shares = stage_recompute_shares(self.model, one)
            # All ranks recomputing every layer is stage_micro_batch_s's default: no shares to apply.
            layout = self._layouts[key] = (
                stage_layer_counts(self.model, one), stage_moe_layer_counts(self.model, one),
                shares if min(shares) < 1.0 else None, stage_overhead_s(self.model, framework, one, self.cal))
        return layout


class BoundBatch:
    """The (slowest, others) terms of many bound keys, asked for group by group (:meth:`group`: the keys
    that differ only in the micro-batch), each key given a position, and computed at once a layout at a
    time (:meth:`terms`). Nothing is cached in :class:`ThroughputBounds`' terms: the arrays hold the
    very floats :meth:`ThroughputBounds.terms` gives one key at a time (:func:`_stage_bound_arrays`), so
    which of the two computes a key changes no bound (``tests/search/test_bounds.py``)."""

    def __init__(self, bounds: ThroughputBounds) -> None:
        self.bounds = bounds
        self._layouts: dict[tuple[Any, ...], tuple[list[int], list[LayerTimes]]] = {}
        self.size = 0
        """Keys asked for so far (their positions are 0 .. size - 1)."""

    def group(self, framework: Framework, tp: int, pp: int, chunks: int, cp: int, sp: bool, recompute: Recompute,
              tp_comm_overlap: bool, stage_layers: tuple[int, ...] | None, ep: int, etp: int,
              recompute_layers: int | None, moe_exchange: MoEExchange, cuda_graphs: CudaGraphs) -> BoundGroup:
        """The keys of :meth:`ThroughputBounds.key` with these fields (``chunks``: its vp or 1), one per
        micro-batch."""
        layout = (framework, pp, chunks, stage_layers, recompute, recompute_layers, ep, moe_exchange, cuda_graphs)
        members = self._layouts.get(layout)
        if members is None:
            members = self._layouts[layout] = ([], [])
        return BoundGroup(self, members, (framework, tp, cp, sp),
                          (recompute, tp_comm_overlap, ep, etp, moe_exchange, cuda_graphs))

    def terms(self) -> tuple[Floats, Floats]:
        """(slowest, others) of every key asked for, by position."""
        slowest, others = np.empty(self.size), np.empty(self.size)
        for layout_key, (members, times) in self._layouts.items():
            if members:
                group_slowest, group_others = _stage_bound_arrays(np.array(times), self.bounds.layout(*layout_key))
                slowest[members], others[members] = group_slowest, group_others
        return slowest, others


class BoundGroup:
    """The bound keys of one :meth:`BoundBatch.group`: the position of each micro-batch's."""

    __slots__ = ("_at", "_batch", "_head", "_layer_times", "_members", "_tail", "_times")

    def __init__(self, batch: BoundBatch, members: tuple[list[int], list[LayerTimes]], head: tuple[Any, ...],
                 tail: tuple[Any, ...]) -> None:
        self._batch, (self._members, self._times) = batch, members
        self._head, self._tail = head, tail  # a layer shape's fields before and after the micro-batch
        self._layer_times = batch.bounds.layer_times(head, tail)
        self._at: dict[int, int] = {}

    def at(self, micro_batch: int) -> int:
        """The position of this group's key at ``micro_batch`` (the same one each time it is asked)."""
        position = self._at.get(micro_batch)
        return self.at_each((micro_batch,))[0] if position is None else position

    def at_each(self, micro_batches: Sequence[int]) -> list[int]:
        """:meth:`at` of each of ``micro_batches``."""
        at, out = self._at, []
        for micro_batch in micro_batches:
            position = at.get(micro_batch)
            if position is None:
                batch = self._batch
                position = at[micro_batch] = batch.size
                batch.size += 1
                self._members.append(position)
                times = self._layer_times.get(micro_batch)
                self._times.append(times or batch.bounds.times_at(self._layer_times, self._head, micro_batch,
                                                                   self._tail))
            out.append(position)
        return out


def _stage_bound_arrays(shapes: Floats, layout: Layout) -> tuple[Floats, Floats]:
    """:func:`search._predict.stage_micro_batch_s` and :func:`search._predict.slowest_and_others_s` of
    many layer shapes (a row of :data:`LayerTimes` each) on one layout: a row per shape, a column per
    rank, the same operations in the same order (IEEE arithmetic, element by element, and the ranks
    summed one after another), so each row's floats are the ones the scalar functions give."""
    counts, moe_counts, shares, overhead_s = layout
    dense = np.array([n - k for n, k in zip(counts, moe_counts, strict=True)], dtype=float)
    moe = np.array(moe_counts, dtype=float)
    layer_s, moe_layer_s, recompute_s, moe_recompute_s, head_s = (shapes[:, [i]] for i in range(5))
    times = dense * layer_s + moe * moe_layer_s + overhead_s
    if shares is not None:
        times = times - (1.0 - np.array(shares)) * (dense * recompute_s + moe * moe_recompute_s)
    times[:, -1] += head_s[:, 0]
    slowest = times.max(axis=1)
    total = times[:, 0].copy()
    for rank in range(1, times.shape[1]):
        total += times[:, rank]
    return slowest, total - slowest
