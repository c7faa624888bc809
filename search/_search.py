"""``search``: the ranked top-k configurations of a model on a cluster, driven by one Optuna study.

Where the valid space fits the budget it is swept exhaustively (memory first, then time, for
every valid configuration) so the ranking is exact, and the ranked results are told to the
study; otherwise Optuna samples it (TPE for one objective, NSGA-II for the Pareto front), with
memory feasibility as an Optuna constraint and warm-started with known-good layouts. With
``storage`` and ``study_name`` several processes cooperate on one study through Optuna's RDB
or journal storage: the first enqueues every valid configuration, each worker pops and
evaluates queued trials until none is left (one trial per configuration).
"""

from __future__ import annotations

import heapq
import math
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, cast

from search._calibration import Calibration, default_calibration
from search._cluster_spec import ClusterSpec
from search._errors import SpecError
from search._memory_plan import MemoryPlan
from search._model_spec import ModelSpec
from search._parallel_spec import Framework, ParallelConfig, Precision, TrainingSpec
from search._predict import predict, predict_memory, time_lower_bound_s
from search._prediction import Prediction
from search._search_result import RankedConfig, SearchResult
from search._space import Candidate, enumerate_space

if TYPE_CHECKING:  # optuna is imported where it is used: it takes over a second, and predict never needs it
    import optuna

OBJECTIVES = ("throughput", "cost", "pareto")
QUEUED = "autopar_queued"
"""User attribute of the trials a shared-storage search enqueues (one per valid configuration)."""
DEFAULT_MAX_EXHAUSTIVE = 200_000
"""Valid configurations up to which the sweep is exhaustive (about 50-100 us each)."""
WARM_START_VISITS = 40_000
"""Configurations the seeding branch-and-bound sweep may visit (about 1 s; a count, not a time,
so that the same seed gives the same answer)."""
DEFAULT_N_TRIALS = 400
"""Trials of the sampled search when the space is too large to sweep (TPE costs grow with trials)."""
PARAMS = ("framework", "tp", "pp", "cp", "vp", "sp", "micro_batch", "zero_stage", "offload_optimizer",
          "offload_param", "recompute")
ProgressFn = Callable[[int, int], None]


def describe(framework: str, c: ParallelConfig) -> str:
    """A compact one-line label of a configuration."""
    offload = "" if c.offload_optimizer == c.offload_param == "none" else (
        f" offload(opt={c.offload_optimizer},param={c.offload_param})")
    return (f"{framework} dp={c.dp} tp={c.tp} pp={c.pp}" + (f" vp={c.vp}" if c.vp > 1 else "")
            + (f" cp={c.cp}" if c.cp > 1 else "") + (" sp" if c.sp else "")
            + f" mb={c.micro_batch} zero={c.zero_stage}{offload} recompute={c.recompute}")


def objective_score(prediction: Prediction, objective: str, world_size: int, price_per_gpu_hour: float | None) -> float:
    """The value a configuration is ranked by: tokens/s (higher is better), or for ``cost`` the
    dollars per million tokens (lower is better)."""
    if objective == "cost":
        if price_per_gpu_hour is None:
            raise SpecError("price_per_gpu_hour", "the cost objective needs a price", "give $ per GPU-hour")
        return price_per_gpu_hour * world_size / 3600.0 / prediction.tokens_per_s * 1e6
    return prediction.tokens_per_s


def pareto_front(items: Sequence[tuple[float, float, int]]) -> list[int]:
    """Indices of the (tokens/s, headroom) points no other point beats on both (both maximised)."""
    front: list[int] = []
    best_headroom = float("-inf")
    for _tps, headroom, index in sorted(items, key=lambda x: (-x[0], -x[1])):
        if headroom > best_headroom:
            front.append(index)
            best_headroom = headroom
    return front


def _params(candidate: Candidate) -> dict[str, Any]:
    c = candidate.config
    return {"framework": candidate.framework, "tp": c.tp, "pp": c.pp, "cp": c.cp, "vp": c.vp, "sp": c.sp,
            "micro_batch": c.micro_batch, "zero_stage": c.zero_stage, "offload_optimizer": c.offload_optimizer,
            "offload_param": c.offload_param, "recompute": c.recompute}


def _distributions(candidates: Sequence[Candidate]) -> dict[str, optuna.distributions.BaseDistribution]:
    import optuna

    values: dict[str, set[Any]] = {name: set() for name in PARAMS}
    for cand in candidates:
        for name, value in _params(cand).items():
            values[name].add(value)
    return {name: optuna.distributions.CategoricalDistribution(sorted(vals, key=str)) for name, vals in values.items()}


def _directions(objective: str) -> list[optuna.study.StudyDirection]:
    import optuna

    up, down = optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE
    if objective == "pareto":
        return [up, up]
    return [down] if objective == "cost" else [up]


class _Evaluator:
    """Memory first, then time; remembers every timed feasible prediction and the closest misses."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, global_batch: int, precision: str,
                 cal: Calibration, objective: str, price: float | None) -> None:
        self.model, self.cluster, self.cal = model, cluster, cal
        self.objective, self.price = objective, price
        self.tokens_per_step = global_batch * model.seq_len
        self.trainings = {fw: TrainingSpec(global_batch, cast(Precision, precision), framework=fw)
                          for fw in ("megatron", "deepspeed", "megatron-deepspeed", "fsdp")}
        self.feasible: list[tuple[Candidate, Prediction, float]] = []
        self.closest: list[tuple[tuple[float, float], int, Candidate, MemoryPlan]] = []
        self.n_evaluated = 0
        self.n_feasible = 0
        self._bound_cache: dict[tuple[Any, ...], float] = {}
        self._seen: dict[Candidate, tuple[Prediction | None, MemoryPlan]] = {}

    def memory(self, cand: Candidate) -> MemoryPlan:
        return predict_memory(self.model, self.cluster, cand.config, self.trainings[cand.framework], self.cal)

    def upper_bound_tokens_per_s(self, cand: Candidate) -> float:
        """Tokens/s no better than this bound (:func:`search.time_lower_bound_s`). The bound is
        m times a per-micro-batch time that depends only on the layer shape, cached here by it."""
        c = cand.config
        key = (c.tp, c.cp, c.sp, c.pp, c.micro_batch, c.recompute)
        per_micro_batch_s = self._bound_cache.get(key)
        if per_micro_batch_s is None:
            one = replace(c, dp=1, zero_stage=0, offload_optimizer="none", offload_param="none", vp=1)
            training = replace(self.trainings[cand.framework], global_batch=c.micro_batch)
            per_micro_batch_s = time_lower_bound_s(self.model, self.cluster, one, training, self.cal)
            self._bound_cache[key] = per_micro_batch_s
        micro_batches = self.tokens_per_step // (self.model.seq_len * c.dp * c.micro_batch)
        return self.tokens_per_step / (micro_batches * per_micro_batch_s)

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
        if not plan.feasible:
            node = self.cluster.node
            # Closest first: by how far GPU memory is exceeded, then host memory and NVMe.
            ratio = (plan.peak_bytes / self.cluster.gpu.memory_bytes,
                     max(plan.cpu_bytes_per_node / node.cpu_memory_bytes, plan.nvme_bytes_per_node / node.nvme_bytes))
            item = ((-ratio[0], -ratio[1]), -self.n_evaluated, cand, plan)
            if len(self.closest) < 3:
                heapq.heappush(self.closest, item)
            else:
                heapq.heappushpop(self.closest, item)
            return None, plan
        self.n_feasible += 1
        pred = predict(self.model, self.cluster, cand.config, self.trainings[cand.framework], self.cal, memory=plan)
        self.feasible.append((cand, pred, objective_score(pred, self.objective, self.cluster.world_size, self.price)))
        return pred, plan


def search(model: ModelSpec, cluster: ClusterSpec, global_batch: int, *, precision: str = "bf16",
           framework: str = "any", objective: str = "throughput", top_k: int = 10, seed: int = 0,
           n_trials: int | None = None, timeout_s: float | None = None, price_per_gpu_hour: float | None = None,
           storage: str | None = None, study_name: str | None = None,
           max_exhaustive: int = DEFAULT_MAX_EXHAUSTIVE, progress: ProgressFn | None = None,
           calibration: Calibration | None = None) -> SearchResult:
    """Rank the configurations of ``model`` on ``cluster`` for ``global_batch`` sequences per step.

    ``framework`` is a runtime or ``any``; ``objective`` is ``throughput`` (max tokens/s),
    ``cost`` (min $ per million tokens, needs ``price_per_gpu_hour``) or ``pareto`` (tokens/s
    vs memory headroom). Raises :class:`SpecError` on invalid arguments.
    """
    import optuna

    start = time.perf_counter()
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"{objective!r} is not an objective", f"use one of: {', '.join(OBJECTIVES)}")
    if objective == "cost" and (price_per_gpu_hour is None or not price_per_gpu_hour > 0):
        raise SpecError("price_per_gpu_hour", f"{price_per_gpu_hour!r} is not a positive price",
                        "give the $ per GPU-hour of the cluster for the cost objective")
    if top_k < 1:
        raise SpecError("top_k", f"{top_k!r} is not >= 1", "ask for at least one configuration")
    if (storage is None) != (study_name is None):
        raise SpecError("study_name", "storage and study_name go together", "give both, or neither")
    TrainingSpec(global_batch, cast(Precision, precision))  # validates batch and precision
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one study per search: no per-trial log lines
    cal = calibration or default_calibration()
    space = enumerate_space(model, cluster.world_size, global_batch, framework)
    ev = _Evaluator(model, cluster, global_batch, precision, cal, objective, price_per_gpu_hour)
    candidates = space.candidates
    name = study_name or f"autopar-{model.name}-{cluster.name}-{cluster.num_nodes}n-{framework}-{objective}"
    exhaustive = storage is None and len(candidates) <= max_exhaustive and n_trials is None
    if storage is not None:
        study = _run_shared(candidates, ev, objective, storage, name, progress)
        exhaustive = True
    elif exhaustive:
        _sweep(candidates, ev, top_k, objective, progress)
        study = _tell_study(ev, objective, name, top_k)
    else:
        study = _run_sampler(candidates, ev, objective, name, seed, n_trials or DEFAULT_N_TRIALS, timeout_s,
                             cluster, progress)
    top, pareto = _rank(ev, objective, top_k)
    elapsed = time.perf_counter() - start
    study.set_user_attr("counts", {"space": space.size, "valid": len(candidates), "feasible": ev.n_feasible,
                                   "evaluated": ev.n_evaluated, "exhaustive": exhaustive})
    hints = _hints(ev, model, cluster, global_batch, precision, framework, cal, top_k)
    return SearchResult(
        model=model.name, cluster=cluster.name, num_nodes=cluster.num_nodes, world_size=cluster.world_size,
        framework=framework, objective=objective, top=top, pareto=pareto, space_size=space.size,
        n_valid=len(candidates), n_feasible=ev.n_feasible, n_evaluated=ev.n_evaluated, exhaustive=exhaustive,
        elapsed_s=elapsed, study_name=name, hints=hints,
    )


def _sweep(candidates: Sequence[Candidate], ev: _Evaluator, top_k: int, objective: str,
           progress: ProgressFn | None, max_visits: int | None = None) -> None:
    """Exact top-k by branch and bound: visit configurations by their optimistic throughput
    (:meth:`_Evaluator.upper_bound_tokens_per_s`), best first, and stop once that bound falls
    to the k-th best throughput found (no configuration left can enter the top k). The Pareto
    objective needs every feasible point, so it visits all. With ``max_visits`` it is an anytime
    search (deterministic, unlike a deadline): it stops there with the best found so far."""
    total = len(candidates)
    bounds = sorted(((ev.upper_bound_tokens_per_s(c), i) for i, c in enumerate(candidates)), reverse=True)
    kth: list[float] = []  # min-heap of the k best tokens/s so far
    step = max(1, total // 100)
    for visited, (bound, i) in enumerate(bounds, start=1):
        if objective != "pareto" and len(kth) == top_k and bound <= kth[0]:
            break
        if max_visits is not None and visited > max_visits:
            break
        pred, _plan = ev(candidates[i])
        if pred is not None:
            if len(kth) < top_k:
                heapq.heappush(kth, pred.tokens_per_s)
            elif pred.tokens_per_s > kth[0]:
                heapq.heapreplace(kth, pred.tokens_per_s)
        if progress is not None and visited % step == 0:
            progress(visited, total)
    if progress is not None:
        progress(total, total)


def _values(objective: str, pred: Prediction, score: float) -> list[float]:
    return [pred.tokens_per_s, pred.memory_headroom_bytes] if objective == "pareto" else [score]


def _trial(cand: Candidate, pred: Prediction, values: list[float],
           dists: dict[str, optuna.distributions.BaseDistribution]) -> optuna.trial.FrozenTrial:
    import optuna

    return optuna.trial.create_trial(
        params=_params(cand), distributions=dists, values=values,
        user_attrs={"iteration_time_s": pred.iteration_time_s, "peak_memory_bytes": pred.peak_memory_bytes_per_gpu,
                    "bottleneck": pred.bottleneck},
    )


def _tell_study(ev: _Evaluator, objective: str, name: str, top_k: int) -> optuna.Study:
    """An in-memory study holding the ranked results of an exhaustive sweep (telling every
    evaluated configuration would cost more than evaluating it)."""
    import optuna

    study = optuna.create_study(study_name=name, directions=_directions(objective))
    if not ev.feasible:
        return study
    top, pareto = _rank(ev, objective, top_k)
    chosen = {(r.framework, r.config): r for r in (*top, *pareto)}
    dists = _distributions([Candidate(cast(Framework, fw), cfg) for fw, cfg in chosen])
    study.add_trials([
        _trial(Candidate(cast(Framework, fw), cfg), r.prediction, _values(objective, r.prediction, r.score), dists)
        for (fw, cfg), r in chosen.items()
    ])
    return study


def _rank(ev: _Evaluator, objective: str, top_k: int) -> tuple[tuple[RankedConfig, ...], tuple[RankedConfig, ...]]:
    sign = -1.0 if objective == "cost" else 1.0
    # Best score first; equal scores go to the one with more memory headroom (safer to launch).
    ordered = sorted(ev.feasible, key=lambda x: (sign * x[2], x[1].memory_headroom_bytes), reverse=True)
    top = tuple(RankedConfig(i + 1, c.framework, c.config, p, s) for i, (c, p, s) in enumerate(ordered[:top_k]))
    points = [(p.tokens_per_s, p.memory_headroom_bytes, i) for i, (_c, p, _s) in enumerate(ev.feasible)]
    front_idx = pareto_front(points)
    pareto = tuple(RankedConfig(i + 1, ev.feasible[j][0].framework, ev.feasible[j][0].config, ev.feasible[j][1],
                                ev.feasible[j][2]) for i, j in enumerate(front_idx))
    return top, pareto


def _warm_start(candidates: Sequence[Candidate], cluster: ClusterSpec, ev: _Evaluator, limit: int) -> list[Candidate]:
    """Known-good layouts to seed the sampler: the rule of thumb of Narayanan et al. 2021 Sec. 3.3
    (TP up to the GPUs of a node, then the fewest pipeline stages, micro-batch 1, full
    recomputation), the lightest on memory (ZeRO-3 with the deepest offload), and the best
    configurations a branch-and-bound sweep (:func:`_sweep`) finds in its first
    :data:`WARM_START_VISITS` configurations."""
    gpn = cluster.node.gpus_per_node

    def rule_of_thumb(c: Candidate) -> tuple[Any, ...]:
        cfg = c.config
        return (cfg.tp > gpn, -min(cfg.tp, gpn), cfg.pp, cfg.cp, cfg.micro_batch, cfg.recompute != "full",
                cfg.offload_optimizer != "none", cfg.zero_stage)

    def memory_light(c: Candidate) -> tuple[Any, ...]:
        cfg = c.config
        offload = {"nvme": 0, "cpu": 1, "none": 2}
        return (offload[cfg.offload_param], offload[cfg.offload_optimizer], -cfg.zero_stage,
                cfg.recompute != "full", cfg.micro_batch, -cfg.tp * cfg.pp)

    seeds = sorted(candidates, key=rule_of_thumb)[:4] + sorted(candidates, key=memory_light)[:4]
    _sweep(candidates, ev, limit, "throughput", None, max_visits=WARM_START_VISITS)
    seeds += [c for c, _p, _s in sorted(ev.feasible, key=lambda x: x[1].tokens_per_s, reverse=True)[:limit]]
    return list(dict.fromkeys(seeds))[:limit]


class _Repair:
    """Map a sampled combination that is not a valid configuration to the nearest valid one.

    Samplers propose each parameter independently, and most combinations break a divisibility
    or runtime rule; repairing them (Michalewicz 1996's repair operator for constrained
    search) keeps every trial useful. Nearest: same runtime and the closest (tp, pp, cp) in
    log2 distance, then the fewest differing remaining parameters.
    """

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self.by_layout: dict[tuple[Any, ...], list[Candidate]] = {}
        for cand in candidates:
            c = cand.config
            self.by_layout.setdefault((cand.framework, c.tp, c.pp, c.cp), []).append(cand)

    def __call__(self, p: dict[str, Any]) -> Candidate:
        def layout_distance(key: tuple[Any, ...]) -> float:
            fw, tp, pp, cp = key
            return float((fw != p["framework"]) * 100.0 + abs(math.log2(tp / p["tp"]))
                         + abs(math.log2(pp / p["pp"])) + abs(math.log2(cp / p["cp"])))

        layout = min(self.by_layout, key=layout_distance)

        def mismatch(cand: Candidate) -> float:
            c = cand.config
            return float(abs(math.log2(c.micro_batch / p["micro_batch"])) + (c.vp != p["vp"]) + (c.sp != p["sp"])
                         + (c.zero_stage != p["zero_stage"]) + (c.offload_optimizer != p["offload_optimizer"])
                         + (c.offload_param != p["offload_param"]) + (c.recompute != p["recompute"]))

        return min(self.by_layout[layout], key=mismatch)


def _run_sampler(candidates: Sequence[Candidate], ev: _Evaluator, objective: str, name: str, seed: int,
                 n_trials: int, timeout_s: float | None, cluster: ClusterSpec,
                 progress: ProgressFn | None) -> optuna.Study:
    """TPE (one objective) or NSGA-II (Pareto) over the valid space, memory as a constraint."""
    import optuna

    by_key = {tuple(_params(c).values()): c for c in candidates}
    choices = {p: cast(optuna.distributions.CategoricalDistribution, d).choices
               for p, d in _distributions(candidates).items()}

    sampler: optuna.samplers.BaseSampler
    if objective == "pareto":
        sampler = optuna.samplers.NSGAIISampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True)
    study = optuna.create_study(study_name=name, directions=_directions(objective), sampler=sampler)
    for cand in _warm_start(candidates, cluster, ev, max(8, n_trials // 4)):
        study.enqueue_trial(_params(cand))
    worst = [0.0, float("-inf")] if objective == "pareto" else [float("inf") if objective == "cost" else 0.0]
    repair = _Repair(candidates)

    def run(trial: optuna.Trial) -> Sequence[float]:
        key = tuple(trial.suggest_categorical(p, choices[p]) for p in PARAMS)
        cand = by_key.get(key) or repair(dict(zip(PARAMS, key, strict=True)))
        trial.set_user_attr("evaluated", describe(cand.framework, cand.config))
        pred, plan = ev(cand)  # each configuration is evaluated once; repeats reuse the answer
        if pred is None:
            trial.set_constraint("memory", plan.peak_bytes / cluster.gpu.memory_bytes - 1.0 + 1e-9)
            return worst
        trial.set_constraint("memory", -pred.memory_headroom_bytes / cluster.gpu.memory_bytes)
        score = objective_score(pred, objective, cluster.world_size, ev.price)
        return _values(objective, pred, score)

    callbacks = [] if progress is None else [lambda _s, t: progress(t.number + 1, n_trials)]
    study.optimize(run, n_trials=n_trials, timeout=timeout_s, callbacks=callbacks)
    return study


def _join_study(storage: str, name: str, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Load a study another worker created, once it has finished enqueuing."""
    import optuna

    study = optuna.load_study(storage=storage, study_name=name, sampler=sampler)
    deadline = time.monotonic() + 600
    while "queued" not in study.user_attrs:
        if time.monotonic() > deadline:
            raise SpecError("study_name", f"study {name!r} never finished enqueuing",
                            "delete the study or use a new --study-name")
        time.sleep(0.2)
    return study


def _run_shared(candidates: Sequence[Candidate], ev: _Evaluator, objective: str, storage: str, name: str,
                progress: ProgressFn | None) -> optuna.Study:
    """Cooperate with other processes on one study in shared storage (RDB or journal).

    The creating process enqueues one trial per valid configuration (parameter ``candidate``:
    its index in the deterministic enumeration, so every worker must search the same
    question); each worker pops queued trials until none is left. One parameter and one user
    attribute per trial keep the database round trips few (each costs milliseconds).
    """
    import optuna

    directions = _directions(objective)
    # Every trial is a queued configuration: the sampler never chooses, so take the cheapest one.
    sampler = optuna.samplers.RandomSampler()
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=directions, sampler=sampler)
        for i in range(len(candidates)):
            study.enqueue_trial({"candidate": i}, user_attrs={QUEUED: True})
        study.set_user_attr("queued", len(candidates))
    except optuna.exceptions.DuplicatedStudyError:
        study = _join_study(storage, name, sampler)
    if study.user_attrs["queued"] != len(candidates):
        raise SpecError("study_name", f"study {name!r} holds a different search "
                        f"({study.user_attrs['queued']} configurations, this one has {len(candidates)})",
                        "give every worker the same model, cluster, batch and framework, or a new --study-name")
    index = optuna.distributions.IntDistribution(0, max(0, len(candidates) - 1))
    worst = [0.0, float("-inf")] if objective == "pareto" else [float("inf") if objective == "cost" else 0.0]
    done = 0
    worker = f"{socket.gethostname()}:{os.getpid()}"
    while True:
        # ask() pops a queued trial atomically (Optuna's RDB storage locks the row); when the
        # queue is empty it opens a fresh trial instead, which is closed as pruned and ends
        # this worker: one such trial per worker, never a second evaluation of a configuration.
        trial = study.ask()
        if not trial.user_attrs.get(QUEUED):
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            break
        cand = candidates[trial.suggest_int("candidate", index.low, index.high)]
        pred, _plan = ev(cand)
        values = worst if pred is None else _values(objective, pred, ev.feasible[-1][2])
        trial.set_user_attr("result", {"feasible": pred is not None, "worker": worker,
                                       "config": describe(cand.framework, cand.config)})
        study.tell(trial, values)
        done += 1
        if progress is not None:
            progress(done, len(candidates))
    # Rank what every worker found, not only this one's share (predictions are deterministic).
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    ev.feasible.clear()
    for t in complete:
        if t.user_attrs["result"]["feasible"]:
            cand = candidates[t.params["candidate"]]
            pred = predict(ev.model, ev.cluster, cand.config, ev.trainings[cand.framework], ev.cal)
            ev.feasible.append((cand, pred, objective_score(pred, ev.objective, ev.cluster.world_size, ev.price)))
    ev.n_evaluated = len(complete)
    ev.n_feasible = len(ev.feasible)
    return study


def _hints(ev: _Evaluator, model: ModelSpec, cluster: ClusterSpec, global_batch: int, precision: str,
           framework: str, cal: Calibration, top_k: int) -> tuple[str, ...]:
    """When fewer than ``top_k`` fit: why the closest fail and what would fit."""
    if len(ev.feasible) >= top_k or not ev.closest:
        return ()
    hints = []
    for _neg_ratio, _n, cand, plan in sorted(ev.closest, reverse=True):
        hints.append(f"closest: {describe(cand.framework, cand.config)}: {'; '.join(plan.reasons)}")
    if framework in ("any", "deepspeed", "megatron-deepspeed"):
        fw = "deepspeed" if framework == "any" else framework
        for offload in ("cpu", "nvme"):
            cfg = ParallelConfig(dp=cluster.world_size, micro_batch=1, zero_stage=3, offload_optimizer=offload,
                                 offload_param=offload, recompute="full")
            if global_batch % cluster.world_size == 0:
                plan = ev.memory(Candidate(cast(Framework, fw), cfg))
                if plan.feasible:
                    hints.append(f"fits with ZeRO-3 + {offload.upper()} offload of optimizer and parameters "
                                 f"({fw}, micro-batch 1, full recompute)")
                    break
    best = sorted(ev.closest, reverse=True)[0][2]
    bigger = replace(cluster, num_nodes=cluster.num_nodes * 2)
    doubled = replace(best.config, dp=best.config.dp * 2)
    if global_batch % (doubled.dp * doubled.micro_batch) == 0:
        training = TrainingSpec(global_batch, cast(Precision, precision), framework=best.framework)
        if predict_memory(model, bigger, doubled, training, cal).feasible:
            hints.append(f"fits with twice the nodes ({bigger.num_nodes}): {describe(best.framework, doubled)}")
    return tuple(hints)


def config_dict(config: ParallelConfig) -> dict[str, Any]:
    """The configuration as a plain dict (JSON-ready)."""
    return asdict(config)
