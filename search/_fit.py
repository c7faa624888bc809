"""Fit the cost model's time constants (:class:`Calibration`) on measured runs.

Two uses share this one implementation:

- ``benchmarks/fit_constants.py`` fits the published constants on every published run from the
  defaults, globally (SciPy's differential evolution, ``prior_weight=0``);
- a per-cluster calibration (``autopar calibrate``, ``POST /v1/calibrations``) refits them on the
  handful of runs of one cluster, locally from the published fit (the *prior*), with a penalty on
  moving away from it: objective = :func:`time_objective` + ``prior_weight`` x
  :func:`prior_penalty`. A constant the runs do not inform changes no prediction, so only the
  penalty sees it and it stays at the prior; one they inform moves as far as the error it removes
  pays for. With :data:`PRIOR_WEIGHT` = 10, moving one constant across its whole bound costs 10
  points of MAPE, a tenth of its range 0.1 point.

The error a calibration is judged by is its k-fold cross-validated MAPE (:func:`cross_validate`):
every run predicted by constants fitted without its fold, against the prior's MAPE on the same
runs. Deterministic: the folds are a seeded shuffle and the local search has no randomness.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from search._calibration import Calibration
from search._cluster_spec import FRACTION, ClusterSpec
from search._model_spec import ModelSpec
from search._parallel_spec import ParallelConfig, TrainingSpec
from search._predict import predict

TIME_BOUNDS: dict[str, tuple[float, float]] = {
    "hbm_efficiency": (0.3, 0.95),
    "attention_efficiency": (0.2, 0.8),
    "fused_attention_share": (0.2, 1.0),
    "gemm_overhead_s": (0.0, 100e-6),
    "zero3_efficiency": (0.05, 1.0),
    "deepspeed_zero3_efficiency": (0.02, 1.0),
    "zero3_overlap": (0.0, 1.0),
    "dp_overlap": (0.0, 1.0),
    "microbatch_overhead_s": (0.0, 0.05),
    "pipeline_engine_microbatch_s": (0.0, 0.1),
    "fp8_gemm_speedup": (1.0, 2.0),
}
"""The time constants fitted, each within the range its physical meaning allows."""
MEMORY_BOUNDS: dict[str, tuple[float, float]] = {
    "memory_overhead_bytes": (0.5 * 2**30, 6 * 2**30),
    "memory_fragmentation": (1.0, 1.3),
}
"""The memory constants ``benchmarks/fit_constants.py`` fits on measured peak memory."""
GPU_RATE_BOUNDS = (0.5, 1.5)
"""The cluster's GPU kernel rates relative to its spec's (:func:`scale_gpu_rates`): a per-cluster
calibration fits this factor too, since none of the global constants scales GEMM throughput, and
a cluster's kernels (its software versions, clocks, cooling) are what most often differ."""
PRIOR_WEIGHT = 10.0
"""Points of MAPE that moving one constant across its whole bound costs (:func:`prior_penalty`)."""
MIN_RUNS = 5
"""Timed runs a per-cluster calibration needs: 5 folds of at least one run each."""
FOLDS = 5
"""Folds of the cross-validation (fewer when there are fewer runs)."""
MAX_EVALUATIONS = 150
"""Objective evaluations of one local fit (each predicts every run once)."""


@dataclass(frozen=True, slots=True)
class MeasuredRun:
    """One run as specs and its measured iteration time."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    configs: tuple[ParallelConfig, ...]
    """The configuration that ran; several when its record left fields open: it is predicted as
    tuned, the fastest feasible of them (``benchmarks/_tuned.py``), the first winning a tie."""
    iteration_time_s: float
    group: str = ""
    """Its source or cluster: the objective weighs each group's MAPE equally."""

    def __post_init__(self) -> None:
        if not self.configs:
            raise ValueError("a measured run needs at least one configuration")
        if not (self.iteration_time_s > 0 and math.isfinite(self.iteration_time_s)):
            raise ValueError(f"iteration_time_s {self.iteration_time_s!r} is not a positive number")


def predicted_time_s(run: MeasuredRun, cal: Calibration) -> float:
    """The run's predicted iteration time under ``cal`` (as tuned over its configurations)."""
    if len(run.configs) == 1:
        return predict(run.model, run.cluster, run.configs[0], run.training, cal).iteration_time_s
    scored = [predict(run.model, run.cluster, c, run.training, cal) for c in run.configs]
    return max(scored, key=lambda p: (p.feasible, -p.iteration_time_s)).iteration_time_s


def time_ape(run: MeasuredRun, cal: Calibration) -> float:
    """|predicted / measured - 1| of the run's iteration time, as a fraction."""
    return abs(predicted_time_s(run, cal) - run.iteration_time_s) / run.iteration_time_s


def time_mape(runs: Sequence[MeasuredRun], cal: Calibration) -> float:
    """Mean :func:`time_ape` over ``runs``, as a fraction."""
    return statistics.fmean(time_ape(r, cal) for r in runs)


def time_objective(cal: Calibration, runs: Sequence[MeasuredRun]) -> float:
    """Mean of the per-group MAPEs plus the overall MAPE, in percent: no group dominates, and
    within a group every run counts."""
    by_group: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        by_group[run.group].append(time_ape(run, cal) * 100)
    every = [e for es in by_group.values() for e in es]
    return statistics.fmean(statistics.fmean(es) for es in by_group.values()) + statistics.fmean(every)


def prior_penalty(cal: Calibration, prior: Calibration, names: Sequence[str] = tuple(TIME_BOUNDS)) -> float:
    """Sum over ``names`` of the squared move from the prior, in units of the constant's bound width."""
    total = 0.0
    for name in names:
        low, high = TIME_BOUNDS[name]
        total += ((getattr(cal, name) - getattr(prior, name)) / (high - low)) ** 2
    return total


def _clip(prior: Calibration, names: Sequence[str]) -> list[float]:
    return [min(max(getattr(prior, n), TIME_BOUNDS[n][0]), TIME_BOUNDS[n][1]) for n in names]


def fit_time_constants(runs: Sequence[MeasuredRun], prior: Calibration, *, prior_weight: float = PRIOR_WEIGHT,
                       method: str = "local", max_evaluations: int = MAX_EVALUATIONS, maxiter: int = 40,
                       seed: int = 0, progress: Callable[[str], None] | None = None,
                       keep: Sequence[str] = ()) -> Calibration:
    """The constants of :data:`TIME_BOUNDS` minimising :func:`time_objective` on ``runs`` plus
    ``prior_weight`` x :func:`prior_penalty`; the other constants, and those named in ``keep``, are
    the prior's (the published fit keeps the constants runs.json cannot tell, fitted apart).

    ``method``: ``"local"``, a compass search from the prior (:func:`_pattern_search`, at most
    ``max_evaluations`` evaluations: a per-cluster calibration, a few seconds for 5-30 runs);
    ``"global"``, SciPy's differential evolution over the bounds (``maxiter`` generations,
    ``seed``; what the published fit uses, minutes on the 257 published runs; SciPy is a test and
    benchmark dependency only). ``progress`` receives a line every 5 generations."""
    unknown = set(keep) - set(TIME_BOUNDS)
    if unknown:
        raise ValueError(f"keep names {sorted(unknown)}, which are not fitted time constants")
    if not runs:
        raise ValueError("no run with a measured iteration time to fit the time constants on")
    names = [n for n in TIME_BOUNDS if n not in keep]
    bounds = [TIME_BOUNDS[n] for n in names]

    def calibration(x: Sequence[float]) -> Calibration:
        clipped = [min(max(float(v), lo), hi) for v, (lo, hi) in zip(x, bounds, strict=True)]
        return replace(prior, **dict(zip(names, clipped, strict=True)))

    def objective(x: Sequence[float]) -> float:
        cal = calibration(x)
        penalty = prior_weight * prior_penalty(cal, prior, names) if prior_weight else 0.0
        return time_objective(cal, runs) + penalty

    if method == "local":
        widths = [hi - lo for lo, hi in bounds]
        unit = [(v - lo) / w for v, (lo, _hi), w in zip(_clip(prior, names), bounds, widths, strict=True)]
        best = _pattern_search(lambda u: objective([lo + v * w for v, (lo, _hi), w in
                                                    zip(u, bounds, widths, strict=True)]), unit, max_evaluations)
        return calibration([lo + v * w for v, (lo, _hi), w in zip(best, bounds, widths, strict=True)])
    if method != "global":
        raise ValueError(f"method {method!r} is neither 'local' nor 'global'")
    from scipy.optimize import OptimizeResult, differential_evolution  # type: ignore[import-untyped]

    start = time.perf_counter()

    def callback(intermediate_result: OptimizeResult) -> None:
        n = int(intermediate_result.nit)
        if progress and (n % 5 == 0 or n == maxiter):
            progress(f"time constants: generation {n}/{maxiter}, objective {float(intermediate_result.fun):.2f} "
                     f"({time.perf_counter() - start:.0f} s)")

    res = differential_evolution(objective, bounds, maxiter=maxiter, seed=seed, polish=True, tol=1e-4,
                                 popsize=10, callback=callback)
    return calibration(res.x)


def _pattern_search(f: Callable[[list[float]], float], start: list[float], max_evaluations: int,
                    step: float = 0.1, min_step: float = 1e-3) -> list[float]:
    """Minimise ``f`` over the unit cube from ``start`` by compass search (Kolda, Lewis and
    Torczon, SIAM Review 45(3), 2003, Algorithm 3.2): try +-step along each coordinate, keep the
    first improvement, halve the step when none improves; stop below ``min_step`` or after
    ``max_evaluations``. Deterministic, derivative-free (a MAPE has kinks), and it needs no SciPy,
    which the service does not install."""
    x, fx, n = list(start), f(start), 1
    while step >= min_step and n < max_evaluations:
        improved = False
        for i in range(len(x)):
            for d in (step, -step):
                y = list(x)
                y[i] = min(1.0, max(0.0, x[i] + d))
                if y[i] == x[i]:
                    continue
                fy, n = f(y), n + 1
                if fy < fx:
                    x, fx, improved = y, fy, True
                    break
                if n >= max_evaluations:
                    return x
        if not improved:
            step /= 2
    return x


def scale_gpu_rates(cluster: ClusterSpec, scale: float) -> ClusterSpec:
    """``cluster`` with its GPU's GEMM and attention rates times ``scale``: the matmul, attention and
    fused-attention efficiencies (kept within their [0.01, 1] range) and a profile's measured GEMM
    rates. 1 is the cluster as specified."""
    if scale == 1.0:
        return cluster
    gpu = cluster.gpu

    def fraction(x: float) -> float:
        return min(FRACTION[1], max(FRACTION[0], x * scale))

    fused = gpu.fused_attention_efficiency
    return replace(cluster, gpu=replace(
        gpu, matmul_efficiency=fraction(gpu.matmul_efficiency), attention_efficiency=fraction(gpu.attention_efficiency),
        fused_attention_efficiency=None if fused is None else fraction(fused),
        gemm_flop_per_s_by_size=tuple((f, r * scale) for f, r in gpu.gemm_flop_per_s_by_size)))


def rescaled(runs: Sequence[MeasuredRun], scale: float) -> list[MeasuredRun]:
    """``runs`` on their clusters scaled by :func:`scale_gpu_rates` (each cluster scaled once)."""
    if scale == 1.0:
        return list(runs)
    clusters: dict[int, ClusterSpec] = {}  # by identity: a profiled cluster is not hashable (its aio settings)
    out = []
    for run in runs:
        if id(run.cluster) not in clusters:
            clusters[id(run.cluster)] = scale_gpu_rates(run.cluster, scale)
        out.append(replace(run, cluster=clusters[id(run.cluster)]))
    return out


@dataclass(frozen=True, slots=True)
class Fitted:
    """A cluster's fitted constants and the factor on its GPU kernel rates."""

    calibration: Calibration
    gpu_rate_scale: float = 1.0


def fit_cluster(runs: Sequence[MeasuredRun], prior: Calibration, *, prior_weight: float = PRIOR_WEIGHT,
                max_evaluations: int = MAX_EVALUATIONS) -> Fitted:
    """:func:`fit_time_constants` (local) and the cluster's GPU rate factor (:data:`GPU_RATE_BOUNDS`,
    prior 1, penalised like a constant) together."""
    if not runs:
        raise ValueError("no run with a measured iteration time to fit the time constants on")
    names = list(TIME_BOUNDS)
    bounds = [TIME_BOUNDS[n] for n in names] + [GPU_RATE_BOUNDS]
    widths = [hi - lo for lo, hi in bounds]

    def fitted(u: Sequence[float]) -> Fitted:
        x = [lo + v * w for v, (lo, _hi), w in zip(u, bounds, widths, strict=True)]
        return Fitted(replace(prior, **dict(zip(names, x[:-1], strict=True))), x[-1])

    def objective(u: Sequence[float]) -> float:
        f = fitted(u)
        penalty = prior_penalty(f.calibration, prior, names) + ((f.gpu_rate_scale - 1.0) / widths[-1]) ** 2
        return time_objective(f.calibration, rescaled(runs, f.gpu_rate_scale)) + prior_weight * penalty

    start = [(v - lo) / w for v, (lo, _hi), w in zip([*_clip(prior, names), 1.0], bounds, widths, strict=True)]
    return fitted(_pattern_search(objective, start, max_evaluations))


@dataclass(frozen=True, slots=True)
class CrossValidation:
    """The k-fold cross-validated iteration-time error of a calibration, as fractions."""

    k: int
    mape_before: float
    """The prior's MAPE on every run (it was not fitted on them)."""
    mape_after: float
    """Each run predicted by the constants fitted on the other folds, from the same prior."""


def folds(n: int, k: int, seed: int = 0) -> list[list[int]]:
    """Indices 0..n-1 in ``k`` folds of sizes differing by at most one (a seeded shuffle)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return [sorted(order[i::k]) for i in range(k)]


def cross_validate(runs: Sequence[MeasuredRun], prior: Calibration, k: int = FOLDS, *, seed: int = 0,
                   prior_weight: float = PRIOR_WEIGHT, max_evaluations: int = MAX_EVALUATIONS) -> CrossValidation:
    """k-fold cross-validated MAPE of :func:`fit_cluster` on ``runs`` (``k`` is capped at the number
    of runs)."""
    if len(runs) < 2:
        raise ValueError(f"cross-validation needs at least 2 runs, got {len(runs)}")
    k = max(2, min(k, len(runs)))
    held_out: list[float] = []
    for fold in folds(len(runs), k, seed):
        inside = set(fold)
        train = [r for i, r in enumerate(runs) if i not in inside]
        f = fit_cluster(train, prior, prior_weight=prior_weight, max_evaluations=max_evaluations)
        held_out += [time_ape(r, f.calibration) for r in rescaled([runs[i] for i in fold], f.gpu_rate_scale)]
    return CrossValidation(k, time_mape(runs, prior), statistics.fmean(held_out))


@dataclass(frozen=True, slots=True)
class ClusterFit:
    """A per-cluster calibration: the constants fitted on every run, and their cross-validated error."""

    calibration: Calibration
    gpu_rate_scale: float
    """The cluster's GPU kernel rates relative to its spec's (:func:`scale_gpu_rates`)."""
    cross_validation: CrossValidation
    in_sample_mape: float
    """MAPE of :attr:`calibration` on the runs it was fitted on (optimistic; the CV figure is not)."""
    moved: dict[str, tuple[float, float]]
    """The constants that moved by more than 0.1 % of their bound: name -> (prior, fitted)."""
    seconds: float


def calibrate(runs: Sequence[MeasuredRun], prior: Calibration, k: int = FOLDS, *, seed: int = 0,
              prior_weight: float = PRIOR_WEIGHT, max_evaluations: int = MAX_EVALUATIONS) -> ClusterFit:
    """Fit a cluster's constants on its ``runs`` from ``prior`` and cross-validate the fit.

    Raises ValueError with fewer than :data:`MIN_RUNS` runs."""
    if len(runs) < MIN_RUNS:
        raise ValueError(f"a calibration needs at least {MIN_RUNS} timed runs, got {len(runs)}")
    start = time.perf_counter()
    cv = cross_validate(runs, prior, k, seed=seed, prior_weight=prior_weight, max_evaluations=max_evaluations)
    f = fit_cluster(runs, prior, prior_weight=prior_weight, max_evaluations=max_evaluations)
    cal = f.calibration
    moved = {n: (getattr(prior, n), getattr(cal, n)) for n, (lo, hi) in TIME_BOUNDS.items()
             if abs(getattr(cal, n) - getattr(prior, n)) > 1e-3 * (hi - lo)}
    if abs(f.gpu_rate_scale - 1.0) > 1e-3:
        moved["gpu_rate_scale"] = (1.0, f.gpu_rate_scale)
    return ClusterFit(cal, f.gpu_rate_scale, cv, time_mape(rescaled(runs, f.gpu_rate_scale), cal), moved,
                      time.perf_counter() - start)
