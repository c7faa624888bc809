"""The Optuna side of a search: the sampler for large spaces, shared storage for several workers,
and the configuration study a shared search records. optuna is imported where it is used: it takes over a second
to import, and ``autopar predict`` never needs it."""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from search._cluster_spec import ClusterSpec
from search._errors import SpecError
from search._evaluator import Evaluator, ProgressFn
from search._parallel_spec import Framework
from search._predict import predict
from search._prediction import Prediction
from search._ranking import describe, objective_score, rank
from search._space import Candidate
from search._storage import open_storage
from search._sweeps import sweep

if TYPE_CHECKING:
    import optuna

QUEUED = "autopar_queued"
"""User attribute of the trials a shared-storage search enqueues (one per valid configuration)."""


WARM_START_VISITS = 40_000
"""Configurations the seeding branch-and-bound sweep may visit (about 1 s; a count, not a time,
so that the same seed gives the same answer)."""


IN_FLIGHT_WAIT_S = 60.0
"""Seconds a shared-storage worker that found the queue empty waits for the other workers' last
evaluations (milliseconds each) before it ranks; a trial still running after that belongs to a
worker that died, and the ranking goes without it."""


DEFAULT_N_TRIALS = 400
"""Trials of the sampled search when the space is too large to sweep (TPE costs grow with trials)."""


PARAMS = ("framework", "tp", "pp", "cp", "vp", "sp", "tp_comm_overlap", "micro_batch", "zero_stage",
          "offload_optimizer", "offload_param", "recompute")


def _params(candidate: Candidate) -> dict[str, Any]:
    c = candidate.config
    return {"framework": candidate.framework, "tp": c.tp, "pp": c.pp, "cp": c.cp, "vp": c.vp, "sp": c.sp,
            "tp_comm_overlap": c.tp_comm_overlap, "micro_batch": c.micro_batch, "zero_stage": c.zero_stage,
            "offload_optimizer": c.offload_optimizer,
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


def warm_start(candidates: Sequence[Candidate], cluster: ClusterSpec, ev: Evaluator, limit: int) -> list[Candidate]:
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
    sweep(candidates, ev, limit, "throughput", None, max_visits=WARM_START_VISITS)
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
                         + (c.tp_comm_overlap != p["tp_comm_overlap"])
                         + (c.zero_stage != p["zero_stage"]) + (c.offload_optimizer != p["offload_optimizer"])
                         + (c.offload_param != p["offload_param"]) + (c.recompute != p["recompute"]))

        return min(self.by_layout[layout], key=mismatch)


def run_sampler(candidates: Sequence[Candidate], ev: Evaluator, objective: str, name: str, seed: int,
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
    for cand in warm_start(candidates, cluster, ev, max(8, n_trials // 4)):
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

    callbacks: list[Any] = [] if progress is None else [lambda _s, t: progress(t.number + 1, n_trials)]
    if timeout_s is None:  # a time budget means: sample that long; without one, stop once converged
        callbacks.append(_Converged(patience(n_trials), objective))
    study.optimize(run, n_trials=n_trials, timeout=timeout_s, callbacks=callbacks)
    return study


def patience(n_trials: int) -> int:
    """Trials without a better configuration after which a sampled search with no time budget stops
    (with ``timeout_s`` it samples until the budget or the trials run out): a quarter of the
    budget, at least :data:`MIN_PATIENCE` (TPE's cost per trial grows with the trials told, so a
    3,000-trial budget spent after convergence took 117 s for the answer the sweep gives in 1.4 s)."""
    return max(MIN_PATIENCE, n_trials // 4)


MIN_PATIENCE = 200


class _Converged:
    """Optuna callback: stop the study once ``patience`` trials in a row found nothing better.
    The study's user attribute ``converged_at`` then says after how many trials."""

    def __init__(self, patience: int, objective: str) -> None:
        self.patience, self.objective = patience, objective
        self.best: float | None = None
        self.since = 0

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if self.objective == "pareto" or trial.values is None:
            return
        value = trial.values[0]
        better = self.best is None or (value < self.best if self.objective == "cost" else value > self.best)
        if better and value not in (0.0, float("inf")):
            self.best, self.since = value, 0
            return
        self.since += 1
        if self.since >= self.patience:
            study.set_user_attr("converged_at", trial.number + 1)
            study.stop()


def _join_study(storage: optuna.storages.BaseStorage, name: str, sampler: optuna.samplers.BaseSampler
                ) -> optuna.Study:
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


def _wait_for_others(study: optuna.Study) -> None:
    """Wait until no queued configuration is still being evaluated by another worker (at most
    :data:`IN_FLIGHT_WAIT_S`), so that this worker ranks everything."""
    import optuna

    in_flight = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)
    deadline = time.monotonic() + IN_FLIGHT_WAIT_S
    while time.monotonic() < deadline and any(
            t.user_attrs.get(QUEUED) for t in study.get_trials(deepcopy=False, states=in_flight)):
        time.sleep(0.05)


SHARED_TRIALS_TARGET = 64
"""Batches a shared-storage search aims for (enough to spread over workers)."""
SHARED_BATCH_MAX = 512
"""Most configurations in one shared-storage trial: a batch costs a few database round trips and
about 20 ms of evaluation, so the round trips no longer dominate (one trial per configuration
took over 15 minutes for GPT-3 175B's 22,000 configurations)."""
SAMPLE_TRIALS = 300
"""Configurations beyond the top k and the Pareto front that a search records in its
configuration study (every n-th timed one), so parameter importances have a spread to work on."""


def batch_size(n_candidates: int) -> int:
    """Configurations per shared-storage trial: about :data:`SHARED_TRIALS_TARGET` batches, at most
    :data:`SHARED_BATCH_MAX` configurations each."""
    return max(1, min(SHARED_BATCH_MAX, n_candidates // SHARED_TRIALS_TARGET))


def config_trials(ev: Evaluator, objective: str, top_k: int) -> list[optuna.trial.FrozenTrial]:
    """Completed trials whose parameters are the configurations' own (framework, dp, tp, pp, ...)
    and whose user attributes hold the prediction: the ranked top k, the Pareto front and every
    n-th other timed configuration (what Optuna Dashboard and ``optuna.importance`` read)."""
    if not ev.feasible:
        return []
    top, pareto = rank(ev, objective, top_k)
    chosen: dict[tuple[str, Any], tuple[Candidate, Prediction, float]] = {}
    for r in (*top, *pareto):
        chosen[(r.framework, r.config)] = (Candidate(cast(Framework, r.framework), r.config), r.prediction, r.score)
    step = max(1, len(ev.feasible) // SAMPLE_TRIALS)
    for cand, pred, score in ev.feasible[::step]:
        chosen.setdefault((cand.framework, cand.config), (cand, pred, score))
    dists = _distributions([cand for cand, _p, _s in chosen.values()])
    return [_trial(cand, pred, _values(objective, pred, score), dists) for cand, pred, score in chosen.values()]


def run_shared(candidates: Sequence[Candidate], ev: Evaluator, objective: str, storage: str, name: str,
                progress: ProgressFn | None, top_k: int = 10) -> optuna.Study:
    """Cooperate with other processes on one study in shared storage (an Optuna RDB URL).

    The creating process enqueues one trial per batch of :func:`batch_size` configurations
    (parameter ``batch``: its place in the deterministic enumeration, so every worker must search
    the same question); each worker pops queued batches until none is left, evaluates every
    configuration of its batches (memory, then time where it fits), records which fit, waits for
    the others' last batches, and ranks everything. The first worker to finish also writes the
    study ``NAME-configs``: one trial per ranked, Pareto or sampled configuration with the
    configuration's own parameters (:func:`config_trials`). Workers may start together on a
    database that never held a study: :func:`open_storage` creates Optuna's schema once.
    """
    import optuna

    directions = _directions(objective)
    # Every trial is a queued batch: the sampler never chooses, so take the cheapest one.
    sampler = optuna.samplers.RandomSampler()
    rdb = open_storage(storage)
    size = batch_size(len(candidates))
    n_batches = -(-len(candidates) // size)
    try:
        study = optuna.create_study(storage=rdb, study_name=name, directions=directions, sampler=sampler)
    except optuna.exceptions.DuplicatedStudyError:
        # Another worker created it: its enqueuing may still be under way, which _join_study waits out.
        study = _join_study(rdb, name, sampler)
    else:
        for b in range(n_batches):
            study.enqueue_trial({"batch": b}, user_attrs={QUEUED: True})
        study.set_user_attr("batch_size", size)
        study.set_user_attr("queued", len(candidates))
    if study.user_attrs["queued"] != len(candidates) or study.user_attrs.get("batch_size") != size:
        raise SpecError("study_name", f"study {name!r} holds a different search "
                        f"({study.user_attrs['queued']} configurations, this one has {len(candidates)})",
                        "give every worker the same model, cluster, batch and framework, or a new --study-name")
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
        b = trial.suggest_int("batch", 0, max(0, n_batches - 1))
        fitting: list[int] = []
        best: tuple[Prediction, float] | None = None
        for i in range(b * size, min(len(candidates), (b + 1) * size)):
            pred, _plan = ev(candidates[i])
            if pred is not None:
                fitting.append(i)
                score = ev.feasible[-1][2]
                if best is None or (score < best[1] if objective == "cost" else score > best[1]):
                    best = (pred, score)
        n = min(len(candidates), (b + 1) * size) - b * size
        trial.set_user_attr("result", {"n": n, "fitting": fitting, "worker": worker})
        study.tell(trial, worst if best is None else _values(objective, *best))
        done += n
        if progress is not None:
            progress(done, len(candidates))
    # Rank what every worker found, not only this one's share (predictions are deterministic).
    _wait_for_others(study)
    complete = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                if t.user_attrs.get(QUEUED)]
    mine = {cand: pred for cand, pred, _s in ev.feasible}
    ev.feasible.clear()
    for t in complete:
        for i in t.user_attrs["result"]["fitting"]:
            cand = candidates[i]
            pred = mine.get(cand) or predict(ev.model, ev.cluster, cand.config, ev.trainings[cand.framework], ev.cal)
            ev.feasible.append((cand, pred, objective_score(pred, ev.objective, ev.cluster.world_size, ev.price)))
    ev.n_evaluated = sum(t.user_attrs["result"]["n"] for t in complete)
    ev.n_feasible = len(ev.feasible)
    try:
        configs = optuna.create_study(storage=rdb, study_name=f"{name}-configs", directions=directions)
    except optuna.exceptions.DuplicatedStudyError:
        pass  # another worker wrote the same ranking
    else:
        configs.add_trials(config_trials(ev, objective, top_k))
    return study

