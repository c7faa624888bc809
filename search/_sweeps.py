"""Branch-and-bound sweeps over the configurations that fit: the exact top k (with everything in
the best one's error band) and the Pareto front of throughput and memory headroom."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from search._cluster_spec import ClusterSpec
from search._error_band import error_band
from search._evaluator import Evaluator, FitList, ProgressFn
from search._parallel_spec import Framework
from search._space import Candidate


def sweep(candidates: Sequence[Candidate], ev: Evaluator, top_k: int, objective: str,
           progress: ProgressFn | None, max_visits: int | None = None, band: float = 0.0,
           known_tokens_per_s: Sequence[float] = (), bounds: Sequence[float] | None = None) -> None:
    """Exact top-k by branch and bound: visit configurations by their optimistic throughput
    (:meth:`Evaluator.upper_bound_tokens_per_s`), best first, and stop once that bound falls
    to the k-th best throughput found (no configuration left can enter the top k). The Pareto
    objective needs every feasible point, so it visits all. With ``max_visits`` it is an anytime
    search (deterministic, unlike a deadline): it stops there with the best found so far. With
    ``band`` it also visits every configuration that may lie within that relative error of the
    best (those :func:`rank` marks equivalent), so the equivalence set is complete too.
    ``known_tokens_per_s``: throughputs already timed (a second sweep over derived configurations);
    ``bounds``: the candidates' :meth:`Evaluator.upper_bound_tokens_per_s`, where already computed."""
    total = len(candidates)
    if bounds is None:
        bounds = [ev.upper_bound_tokens_per_s(c) for c in candidates]
    order = sorted(zip(bounds, range(total), strict=True), reverse=True)
    kth: list[float] = heapq.nlargest(top_k, known_tokens_per_s)  # min-heap of the k best tokens/s so far
    heapq.heapify(kth)
    best = max(known_tokens_per_s, default=0.0)
    step = max(1, total // 100)
    for visited, (bound, i) in enumerate(order, start=1):
        if objective != "pareto" and len(kth) == top_k and bound <= kth[0] and bound < best * (1.0 - band):
            break
        if max_visits is not None and visited > max_visits:
            break
        pred, _plan = ev(candidates[i])
        if pred is not None:
            best = max(best, pred.tokens_per_s)
            if len(kth) < top_k:
                heapq.heappush(kth, pred.tokens_per_s)
            elif pred.tokens_per_s > kth[0]:
                heapq.heapreplace(kth, pred.tokens_per_s)
        if progress is not None and visited % step == 0:
            progress(visited, total)
    if progress is not None:
        progress(total, total)


def pareto_sweep(fitting: FitList, ev: Evaluator, bounds: Sequence[float]) -> None:
    """Time every configuration that may be on the Pareto front of tokens/s vs memory headroom,
    after :meth:`Evaluator.scan_memory`: by headroom, most first, a configuration whose throughput
    bound does not exceed the best throughput already timed at as much headroom or more is
    dominated and skipped. The front of the timed configurations is then the front of the space.
    ``bounds``: each one's :meth:`Evaluator.upper_bound_tokens_per_s`."""
    rows, capacity = fitting.rows, ev.cluster.gpu.memory_bytes
    best = 0.0
    # Most headroom first; ties in the scan's order (sorted is stable, reversed too).
    for i in sorted(range(len(rows)), key=lambda i: capacity - rows[i].peak_bytes, reverse=True):
        if bounds[i] <= best:
            continue
        pred, _plan = ev(fitting[i])
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


def sweep_band(runtimes: set[Framework], cluster: ClusterSpec, moe: bool = False) -> float:
    """The widest error band of ``runtimes`` on this GPU (for :func:`sweep`)."""
    return max((error_band(fw, cluster.gpu.name, moe) for fw in runtimes), default=0.0)
