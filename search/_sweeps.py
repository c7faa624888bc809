"""Branch-and-bound sweeps over the configurations that fit: the exact top k (with everything in
the best one's error band) and the Pareto front of throughput and memory headroom."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import numpy as np

from search._cluster_spec import ClusterSpec
from search._error_band import error_band, within_band
from search._evaluator import Evaluator, ProgressFn
from search._fit_rows import FitList
from search._parallel_spec import Framework
from search._prediction import Prediction
from search._ranking import complexity, listing_key
from search._space import Candidate

_PARETO_CHUNK = 1024
"""Configurations :func:`pareto_sweep` rules out at once against the best throughput so far."""


class _TopListed:
    """The ``k`` best throughputs timed so far, each listing (:func:`search._ranking.listing_key`)
    counted once as :func:`search._ranking.rank` lists it; listings in ``skip`` are already listed."""

    def __init__(self, k: int, skip: set[tuple[object, ...]] | None = None) -> None:
        self.k, self._skip = k, skip or set()
        self._heap: list[tuple[float, int]] = []  # min-heap of (tokens/s, arrival)
        self._keys: dict[int, tuple[object, ...]] = {}  # the listing of each arrival in the heap
        self._arrivals = itertools.count()

    def full(self) -> bool:
        return len(self._heap) == self.k

    def floor(self) -> float:
        """The k-th best throughput (when :meth:`full`)."""
        return self._heap[0][0]

    def add(self, cand: Candidate, pred: Prediction) -> None:
        key = listing_key(cand, pred)
        if key in self._skip or key in self._keys.values():
            return  # a twin of one counted: the same throughput, listed once
        arrival = next(self._arrivals)
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, (pred.tokens_per_s, arrival))
        elif pred.tokens_per_s > self._heap[0][0]:
            del self._keys[heapq.heapreplace(self._heap, (pred.tokens_per_s, arrival))[1]]
        else:
            return
        self._keys[arrival] = key

    def listings(self) -> list[tuple[object, ...]]:
        return list(self._keys.values())


def sweep(candidates: Sequence[Candidate], ev: Evaluator, top_k: int, objective: str,
          progress: ProgressFn | None, max_visits: int | None = None,
          known: Sequence[tuple[Candidate, Prediction, float]] = (), bounds: Sequence[float] | None = None) -> None:
    """Exact top-k by branch and bound: visit configurations by their optimistic throughput
    (:meth:`Evaluator.upper_bound_tokens_per_s`), best first, and stop once that bound falls
    to the k-th best throughput found (no configuration left can enter the top k). The k best are
    counted as :func:`search._ranking.rank` lists them: runtime and placement twins with the very same
    prediction once. The Pareto objective needs every feasible point, so it visits all. With
    ``max_visits`` it is an anytime search (deterministic, unlike a deadline): it stops there with the
    best found so far. ``known``: configurations already timed (:attr:`Evaluator.feasible`: a second
    sweep over derived configurations); ``bounds``: the candidates'
    :meth:`Evaluator.upper_bound_tokens_per_s`, where already computed. What the model cannot tell
    from the best is left to :func:`equivalence_sweep`."""
    total = len(candidates)
    if bounds is None:
        bounds = [ev.upper_bound_tokens_per_s(c) for c in candidates]
    top = _TopListed(top_k)
    for timed, timed_pred, _score in known:
        top.add(timed, timed_pred)
    step = max(1, total // 100)
    for visited, i in enumerate(_best_first(bounds), start=1):
        bound = bounds[i]
        if objective != "pareto" and top.full() and bound <= top.floor():
            break
        if max_visits is not None and visited > max_visits:
            break
        cand = candidates[i]
        pred, _plan = ev(cand)
        if pred is not None:
            top.add(cand, pred)
        if progress is not None and visited % step == 0:
            progress(visited, total)
    if progress is not None:
        progress(total, total)


def equivalence_sweep(parts: Sequence[tuple[Sequence[Candidate], Sequence[float]]], ev: Evaluator,
                      top_k: int) -> None:
    """Time what :func:`search._ranking.rank` lists first, after the exact top k by throughput
    (:func:`sweep`) has found the best: the configurations within the best one's error band, the
    simplest first (:func:`search._ranking.complexity`) and by throughput within the same simplicity,
    enough of them to fill the top k. Candidates whose throughput bound (``bounds``) reaches the band's
    lower edge (``parts``: candidates, each part with its bounds; a :class:`FitList` builds only those
    it is asked for) are grouped by simplicity; the groups are swept simplest first, each by branch and bound
    for the throughputs still to fill, until the top k is full. A group that cannot fill it is swept to
    the band's edge (all its equivalents are then timed); the groups after a full top k are not looked
    at, since nothing in them can be listed before it. Repeats :func:`rank` lists once count once."""
    if not ev.feasible:
        return
    # rank()'s best: the highest throughput, more memory headroom on a tie (its band is the one used).
    best = max((p for _, p, _ in ev.feasible), key=lambda p: (p.tokens_per_s, p.memory_headroom_bytes))
    best_tps, band = best.tokens_per_s, best.error_band
    edge = best_tps * (1.0 - band) * (1.0 - 1e-9)  # no bound below it can reach the band (rounding aside)
    candidates: list[Candidate] = []
    groups: dict[tuple[int, ...], list[tuple[float, int]]] = {}
    for part, bounds in parts:
        for i, bound in enumerate(bounds):
            if bound >= edge:
                cand = part[i]
                groups.setdefault(complexity(cand.framework, cand.config), []).append((bound, len(candidates)))
                candidates.append(cand)
    listed: set[tuple[object, ...]] = set()
    for group in sorted(groups):
        need = top_k - len(listed)
        if need <= 0:
            break
        top = _TopListed(need, listed)
        for bound, i in sorted(groups[group], reverse=True):
            if top.full() and bound <= top.floor():
                break
            cand = candidates[i]
            pred, _plan = ev(cand)
            if pred is not None and within_band(pred.tokens_per_s, best_tps, band):
                top.add(cand, pred)
        listed.update(top.listings())


def pareto_sweep(fitting: FitList, ev: Evaluator, bounds: Sequence[float]) -> None:
    """Time every configuration that may be on the Pareto front of tokens/s vs memory headroom,
    after :meth:`Evaluator.scan_memory`: by headroom, most first, a configuration whose throughput
    bound does not exceed the best throughput already timed at as much headroom or more is
    dominated and skipped. The front of the timed configurations is then the front of the space.
    ``bounds``: each one's :meth:`Evaluator.upper_bound_tokens_per_s`."""
    headroom = ev.cluster.gpu.memory_bytes - np.array(fitting.peaks, dtype=float)
    # Most headroom first; ties in the scan's order (a stable sort of the negated headroom).
    order = np.argsort(-headroom, kind="stable")
    ordered = np.asarray(bounds, dtype=float)[order]
    best = 0.0
    for start in range(0, len(order), _PARETO_CHUNK):
        # The best throughput only grows: what it dominates at the start of a chunk is dominated
        # throughout, and only the rest is walked one by one.
        for j in (start + np.flatnonzero(ordered[start:start + _PARETO_CHUNK] > best)).tolist():
            if ordered[j] <= best:
                continue
            pred, _plan = ev(fitting[int(order[j])])
            if pred is not None:
                best = max(best, pred.tokens_per_s)


def pareto_refine(derived: Sequence[Candidate], ev: Evaluator) -> None:
    """:func:`pareto_sweep` for refinements added after it (:meth:`Evaluator.derive_partials`): a
    refinement is timed only if its throughput bound beats every configuration already timed with
    as much headroom or more (those points are known), walking both by headroom, most first."""
    known = sorted(((p.memory_headroom_bytes, p.tokens_per_s) for _, p, _ in ev.feasible), reverse=True)
    at, best = 0, 0.0
    capacity = ev.cluster.gpu.memory_bytes
    for cand in sorted(derived, key=lambda c: capacity - ev.fitting[c], reverse=True):
        headroom = capacity - ev.fitting[cand]
        while at < len(known) and known[at][0] >= headroom:
            best = max(best, known[at][1])
            at += 1
        if ev.upper_bound_tokens_per_s(cand) <= best:
            continue
        pred, _plan = ev(cand)
        if pred is not None:
            best = max(best, pred.tokens_per_s)


def _best_first(bounds: Sequence[float]) -> list[int]:
    """Indices by bound, highest first, the later index first on a tie: the order of
    ``sorted(zip(bounds, range(n)), reverse=True)``, without a tuple per candidate."""
    order: list[int] = np.lexsort((np.arange(len(bounds)), np.asarray(bounds, dtype=float)))[::-1].tolist()
    return order


def sweep_band(runtimes: set[Framework], cluster: ClusterSpec, moe: bool = False) -> float:
    """The widest error band of ``runtimes`` on this GPU (for :func:`sweep`)."""
    return max((error_band(fw, cluster.gpu.name, moe) for fw in runtimes), default=0.0)
