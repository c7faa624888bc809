"""``search``: the ranked top-k configurations of a model on a cluster, driven by one Optuna study.

Where the valid space fits the budget it is swept by branch and bound (memory first, then time,
best throughput bound first, stopping when the bound cannot reach the k-th best) so the ranking
is exact, without a study (nothing would read an in-memory one); otherwise Optuna samples it (TPE for
one objective, NSGA-II for the Pareto front), with memory feasibility as an Optuna constraint
and warm-started with known-good layouts. With
``storage`` and ``study_name`` several processes cooperate on one study through Optuna's RDB
or journal storage: the first enqueues every valid configuration, each worker pops and
evaluates queued trials until none is left (one trial per configuration).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal, cast, get_args

from search._calibration import Calibration, default_calibration
from search._cluster_spec import ClusterSpec
from search._errors import SpecError
from search._evaluator import Evaluator, ProgressFn
from search._model_spec import ModelSpec
from search._parallel_spec import (
    BLACKWELL_PRECISIONS,
    CUDA_GRAPHS,
    MAX_MTP_WITH_EP_OVERLAP,
    MOE_DISPATCHERS,
    PAD_WITH_DEEPEP,
    CudaGraphs,
    Framework,
    MoEDispatcher,
    ParallelConfig,
    Precision,
    TrainingSpec,
)
from search._predict import check_host_safety_factor, predict_memory
from search._ranking import describe, objective_score, pareto_front, rank
from search._search_result import SearchResult
from search._space import Block, Candidate, FrameworkTarget, enumerate_space, why_no_valid
from search._study import DEFAULT_N_TRIALS, run_sampler, run_shared
from search._sweeps import equivalence_sweep, pareto_refine, pareto_sweep, sweep, sweep_band

if TYPE_CHECKING:
    import optuna

Objective = Literal["throughput", "cost", "pareto"]
OBJECTIVES: tuple[Objective, ...] = get_args(Objective)


DEFAULT_MAX_EXHAUSTIVE = 1_000_000
"""Valid configurations up to which the sweep is exhaustive (a few microseconds each: the memory of
every one, the time of those the bound cannot rule out). MoE spaces reach 480,000-660,000
(DeepSeek-V3 on 1024 H100, Qwen3-235B on 256 H100): swept exactly in 1.5-2 s here
(benchmarks/search_speed.py), faster and exact where the sampler took 25-34 s with 1.6 % regret."""


def search(model: ModelSpec, cluster: ClusterSpec, global_batch: int, *, precision: Precision = "bf16",
           framework: FrameworkTarget = "any", objective: Objective = "throughput", top_k: int = 10, seed: int = 0,
           n_trials: int | None = None, timeout_s: float | None = None, price_per_gpu_hour: float | None = None,
           storage: str | None = None, study_name: str | None = None,
           max_exhaustive: int = DEFAULT_MAX_EXHAUSTIVE, progress: ProgressFn | None = None,
           calibration: Calibration | None = None, min_headroom_bytes: float = 0.0,
           allow_untested: bool = False, allow_tiling: bool = False,
           host_safety_factor: float = 1.0, grad_reduce_in_bf16: bool = False,
           moe_dispatcher: MoEDispatcher = "alltoall", moe_a2a_overlap: bool = False,
           cuda_graphs: CudaGraphs = "none") -> SearchResult:
    """Rank the configurations of ``model`` on ``cluster`` for ``global_batch`` sequences per step.

    ``framework`` is a runtime or ``any``; ``objective`` is ``throughput`` (max tokens/s),
    ``cost`` (min $ per million tokens, needs ``price_per_gpu_hour``) or ``pareto`` (tokens/s
    vs memory headroom). ``min_headroom_bytes`` of GPU memory must stay free at every ranked
    configuration's predicted peak (a safety margin); ``allow_untested`` also ranks what the
    support matrix marks untested; ``allow_tiling`` also ranks DeepSpeed ZeRO-3 with memory-centric
    tiling (the model code must use ``deepspeed.zero.TiledLinear``); ``host_safety_factor`` > 1 keeps
    that multiple of the offloaded states' host memory free (1.5: DeepSpeed's estimators);
    ``grad_reduce_in_bf16`` reduces the gradients in bf16 (:attr:`TrainingSpec.grad_reduce_in_bf16`,
    Megatron-Core only: restricts ``any`` to ``megatron``); ``moe_dispatcher`` and ``moe_a2a_overlap`` run
    the flex token dispatcher (its DeepEP or HybridEP backend installed) and the EP all-to-all overlap in
    every expert-parallel configuration that can (:func:`search._space.moe_exchange_of`; an MoE model,
    Megatron-Core only); ``cuda_graphs`` ``full-iteration`` captures each step in Megatron-Core's
    full-iteration CUDA graph wherever a configuration runs it supported
    (:func:`search._space.cuda_graphs_of`: not Megatron-FSDP, and MoE only on HybridEP; restricts ``any``
    to ``megatron``).
    Raises :class:`SpecError` on invalid arguments.
    """
    start = time.perf_counter()
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"{objective!r} is not an objective", f"use one of: {', '.join(OBJECTIVES)}")
    if objective == "cost" and (price_per_gpu_hour is None or not price_per_gpu_hour > 0):
        raise SpecError("price_per_gpu_hour", f"{price_per_gpu_hour!r} is not a positive price",
                        "give the $ per GPU-hour of the cluster for the cost objective")
    if top_k < 1:
        raise SpecError("top_k", f"{top_k!r} is not >= 1", "ask for at least one configuration")
    if isinstance(min_headroom_bytes, bool) or not 0 <= min_headroom_bytes < cluster.gpu.memory_bytes:
        raise SpecError("min_headroom", f"{min_headroom_bytes!r} bytes is not between 0 and the GPU's memory",
                        f"give a margin below {cluster.gpu.memory_bytes / 2**30:.0f} GiB")
    host_safety_factor = check_host_safety_factor(host_safety_factor)
    if (storage is None) != (study_name is None):
        raise SpecError("study_name", "storage and study_name go together", "give both, or neither")
    # Validates batch, precision and the gradient reduction (a boolean, not with fp16); the runtime is checked below.
    TrainingSpec(global_batch, precision, grad_reduce_in_bf16=grad_reduce_in_bf16)
    if precision in BLACKWELL_PRECISIONS:  # the only runtime whose Transformer Engine recipes autopar emits
        framework = _megatron_only(framework, "precision",
                                   f"{precision} is costed and emitted for Megatron-Core only, not {framework}",
                                   "use framework 'megatron' (or 'any'), or precision fp8 / bf16")
    if grad_reduce_in_bf16:  # the only runtime with the option (TrainingSpec refuses it for the others)
        framework = _megatron_only(framework, "grad_reduce_in_bf16",
                                   f"is a Megatron-Core option (--grad-reduce-in-bf16), not {framework}'s",
                                   "use framework 'megatron' (or 'any'), or leave it false")
    framework = check_moe_exchange(model, framework, moe_dispatcher, moe_a2a_overlap)
    framework = check_cuda_graphs(framework, cuda_graphs)
    cal = calibration or default_calibration()
    study: optuna.Study | None = None
    # The collector is off from the enumeration to the answer where the search is an exhaustive sweep (a sampler's
    # open-ended trials run with it on), and the space and the evaluator are dropped before it comes back.
    with _GcPause() as pause:
        space = enumerate_space(model, cluster.world_size, global_batch, framework, allow_untested=allow_untested,
                                allow_tiling=allow_tiling, moe_exchange=(moe_dispatcher, moe_a2a_overlap),
                                cuda_graphs=cuda_graphs)
        ev = Evaluator(model, cluster, global_batch, precision, cal, objective, price_per_gpu_hour,
                       min_headroom_bytes, host_safety_factor, grad_reduce_in_bf16)
        name = study_name or f"autopar-{model.name}-{cluster.name}-{cluster.num_nodes}n-{framework}-{objective}"
        exhaustive = storage is None and space.n_valid <= max_exhaustive and n_trials is None
        if exhaustive:
            _sweep_exhaustively(ev, space.blocks, cluster, model, objective, top_k, progress)
        else:  # a study in shared storage or a sampler's (optuna is imported only for these)
            pause.end()
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)  # one study per search: no per-trial log lines
            if storage is not None:
                study = run_shared(space.candidates, ev, objective, storage, name, progress, top_k)
                exhaustive = True
            else:
                study = run_sampler(space.candidates, ev, objective, name, seed, n_trials or DEFAULT_N_TRIALS,
                                    timeout_s, cluster, progress)
        top, pareto = rank(ev, objective, top_k)
        elapsed = time.perf_counter() - start
        if study is not None:
            study.set_user_attr("counts", {"space": space.size, "valid": space.n_valid, "feasible": ev.n_feasible,
                                           "evaluated": ev.n_evaluated, "exhaustive": exhaustive})
        hints = (why_no_valid(model, cluster.world_size, global_batch, framework, allow_untested) if not space.n_valid
                 else _hints(ev, model, cluster, global_batch, framework, cal, top_k, allow_tiling))
        # An enumerated configuration that fits uses none of the fine-grained knobs (the scan's count).
        knobs = (None if ev.scanned and ev.n_feasible else fine_grained_knobs(
            [cand.config for cand in ev.fitting] or [cand.config for cand, _, _ in ev.feasible]))
        if top and knobs is not None:
            hints = (f"only fine-grained memory policies fit: {knobs} (no configuration with all-or-nothing offload "
                     "and recomputation does)", *hints)
        result = SearchResult(
            model=model.name, cluster=cluster.name, num_nodes=cluster.num_nodes, world_size=cluster.world_size,
            framework=framework, objective=objective, top=top, pareto=pareto, space_size=space.size,
            n_valid=space.n_valid, n_feasible=ev.n_feasible, n_evaluated=ev.n_evaluated, exhaustive=exhaustive,
            elapsed_s=elapsed, study_name=name, hints=hints,
        )
        del space, ev  # freed now, by reference counting (_GcPause)
    return result


def _sweep_exhaustively(ev: Evaluator, blocks: Sequence[Block], cluster: ClusterSpec, model: ModelSpec,
                        objective: Objective, top_k: int, progress: ProgressFn | None) -> None:
    """The exact answer by branch and bound, in ``ev``: memory of every configuration (the exact feasible
    count), then the Pareto front and the top k by branch and bound over those that fit. No study is
    told: an in-memory one would be dropped unread (building it took a tenth of a 660,000-configuration
    search, mostly Optuna copying each trial); a search with ``storage`` records its configurations
    (:func:`search._study.config_trials`)."""
    fitting = ev.scan_memory(blocks)
    bounds = ev.row_bounds(fitting)
    pareto_sweep(fitting, ev, bounds)
    sweep(fitting, ev, top_k, "throughput", progress, bounds=bounds)
    # Fine-grained memory policies, derived where they may come within the best one's band (issue 18).
    band = sweep_band(fitting.runtimes, cluster, model.moe is not None)
    derived = ev.derive_partials(ev.threshold_tokens_per_s(band), bounds)
    if derived:
        pareto_refine(derived, ev)
        sweep(derived, ev, top_k, "throughput", None, known=list(ev.feasible))
    # Then the simplest of those the model cannot tell from the best, as many as the top k lists
    # (the Pareto objective's answer is the front itself).
    if objective != "pareto":
        equivalence_sweep([(fitting, bounds), (derived, [ev.upper_bound_tokens_per_s(c) for c in derived])], ev,
                          top_k)
    ev.release_scan()


class _GcPause:
    """Python's cyclic garbage collector off while a search enumerates and sweeps its 10^5-10^6
    blocks, rows, tuples and caches: they hold no cycles, yet every collection of the oldest
    generation walks all of them (a third of a 660,000-configuration search's time), and the first
    collection after the collector comes back walks every object made meanwhile that is still alive
    (0.05-0.08 s after a MoE search: drop what is done with before :meth:`end`). Back on at
    :meth:`end` or on leaving the ``with`` block, if it was on. The switch is process-wide: a search
    running alongside in another thread is only slower or faster, not changed."""

    def __enter__(self) -> _GcPause:
        self._was_enabled = gc.isenabled()
        gc.disable()
        return self

    def end(self) -> None:
        if self._was_enabled:
            gc.enable()
            self._was_enabled = False

    def __exit__(self, *exc: object) -> None:
        self.end()


def check_moe_exchange(model: ModelSpec, framework: FrameworkTarget, moe_dispatcher: str,
                       moe_a2a_overlap: bool) -> FrameworkTarget:
    """The runtime a search with this token dispatcher and EP overlap ranks: ``megatron`` when either is
    asked for (``any`` narrows to it); a :class:`SpecError` naming the field for an unknown dispatcher,
    a dense model (no token exchange to run) or another runtime."""
    if moe_dispatcher not in MOE_DISPATCHERS:
        raise SpecError("moe_dispatcher", f"{moe_dispatcher!r} is not a token dispatcher autopar costs",
                        f"use one of: {', '.join(MOE_DISPATCHERS)}")
    if not isinstance(moe_a2a_overlap, bool):
        raise SpecError("moe_a2a_overlap", f"{moe_a2a_overlap!r} is not a boolean", "use true or false")
    if moe_dispatcher == "alltoall" and not moe_a2a_overlap:
        return framework
    field = "moe_dispatcher" if moe_dispatcher != "alltoall" else "moe_a2a_overlap"
    if model.moe is None:
        raise SpecError(field, f"{model.name} has no mixture of experts: there is no token exchange to run",
                        "leave moe_dispatcher alltoall and moe_a2a_overlap false, or search an MoE model")
    if moe_dispatcher == "flex-deepep" and model.moe.pad_to_capacity:
        raise SpecError("moe_dispatcher", f"{model.name} pads its experts' inputs to capacity; {PAD_WITH_DEEPEP}",
                        "use moe_dispatcher 'alltoall' or 'flex-hybridep'")
    if moe_a2a_overlap and model.mtp_layers > MAX_MTP_WITH_EP_OVERLAP:
        raise SpecError("moe_a2a_overlap", f"{model.name} has {model.mtp_layers} multi-token-prediction layers: "
                        f"megatron-core overlaps the expert all-to-all with at most {MAX_MTP_WITH_EP_OVERLAP}",
                        "leave moe_a2a_overlap false for this model")
    return _megatron_only(framework, field, f"is a Megatron-Core option, not {framework}'s",
                          "use framework 'megatron' (or 'any'), or leave it at its default")


def check_cuda_graphs(framework: FrameworkTarget, cuda_graphs: str) -> FrameworkTarget:
    """The runtime a search with this CUDA graph ranks: ``megatron`` for a full-iteration graph (``any``
    narrows to it); a :class:`SpecError` naming the field for an unknown value or another runtime."""
    if cuda_graphs not in CUDA_GRAPHS:
        raise SpecError("cuda_graphs", f"{cuda_graphs!r} is not a CUDA graph autopar costs",
                        f"use one of: {', '.join(CUDA_GRAPHS)}")
    if cuda_graphs == "none":
        return framework
    return _megatron_only(framework, "cuda_graphs", f"is a Megatron-Core option (--cuda-graph-impl "
                          f"full_iteration), not {framework}'s", "use framework 'megatron' (or 'any'), or 'none'")


def _megatron_only(framework: FrameworkTarget, field: str, problem: str, fix: str) -> FrameworkTarget:
    """``megatron`` for an input only Megatron-Core runs: a search of ``any`` narrows to it, another
    runtime is refused (a :class:`SpecError` on ``field``)."""
    if framework not in ("megatron", "any"):
        raise SpecError(field, problem, fix)
    return "megatron"


def fine_grained_knobs(configs: list[ParallelConfig]) -> str | None:
    """The fine-grained memory knobs (issue 18) that every one of ``configs`` uses, named as the
    spec names them; None when some configuration uses none of them."""
    used: set[str] = set()
    for c in configs:
        these = {name for name, on in (("optimizer_offload_fraction", c.optimizer_offload_fraction < 1),
                                       ("recompute_layers", c.recompute_layers is not None),
                                       ("activation_offload_layers", c.activation_offload_layers > 0)) if on}
        if not these:
            return None
        used |= these
    return ", ".join(sorted(used)) if used else None


def _hints(ev: Evaluator, model: ModelSpec, cluster: ClusterSpec, global_batch: int, framework: str,
           cal: Calibration, top_k: int, allow_tiling: bool = False) -> tuple[str, ...]:
    """When fewer than ``top_k`` fit: why the closest fail and what would fit."""
    if len(ev.feasible) >= top_k or not ev.closest:
        return ()
    hints = []
    for _neg_ratio, _n, cand, plan in sorted(ev.closest, reverse=True):
        reasons = plan.reasons or (f"leaves {(plan.gpu_capacity_bytes - plan.peak_bytes) / 2**30:.1f} GiB free, "
                                   f"less than the {ev.min_headroom_bytes / 2**30:.1f} GiB asked for",)
        hints.append(f"closest: {describe(cand.framework, cand.config)}: {'; '.join(reasons)}")
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
                if plan.tiles_hint is not None and not allow_tiling:
                    tiled = ev.memory(Candidate("deepspeed", replace(cfg, tiles=plan.tiles_hint)))
                    if tiled.feasible:
                        hints.append(f"fits with ZeRO-3 + {offload.upper()} offload of optimizer and parameters and "
                                     f"memory-centric tiling, tiles={plan.tiles_hint} (deepspeed, micro-batch 1, "
                                     "full recompute; the model code must use deepspeed.zero.TiledLinear): allow "
                                     "tiling (--allow-tiling, allow_tiling)")
                        break
    best = sorted(ev.closest, reverse=True)[0][2]
    bigger = replace(cluster, num_nodes=cluster.num_nodes * 2)
    doubled = replace(best.config, dp=best.config.dp * 2)
    # The search's own TrainingSpec of that runtime (precision, gradient reduction), so the hint agrees with it.
    if global_batch % (doubled.dp * doubled.micro_batch) == 0 and \
            predict_memory(model, bigger, doubled, ev.trainings[best.framework], cal).feasible:
        hints.append(f"fits with twice the nodes ({bigger.num_nodes}): {describe(best.framework, doubled)}")
    return tuple(hints)


__all__ = ["DEFAULT_MAX_EXHAUSTIVE", "OBJECTIVES", "check_cuda_graphs", "check_moe_exchange", "describe",
           "objective_score", "pareto_front", "search"]
