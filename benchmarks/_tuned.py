"""Predict a published run whose configuration leaves fields unknown "as tuned".

A source that does not state the micro-batch, sequence parallelism, recomputation, the virtual
pipeline stages, the expert tensor-parallel degree, (Megatron-Bridge's Megatron-FSDP recipes) how
many layers' activations it offloads or (a row no recipe of its release pins) the MoE token
dispatcher still ran with some value of each, and a
team publishing its throughput ran the fastest one that fit. So such a run
(``CalibrationRun.unknown`` names its open fields) is predicted at its best: the fastest
feasible prediction over every valid completion of the open fields, each value checked by
:func:`search.check_compatible` (the framework's rules included). When no completion fits, the
fastest one is kept, and it is reported infeasible. A run with no open field is predicted as it is.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from search import Calibration, ParallelConfig, Prediction, SpecError, check_compatible, predict
from search._parallel_spec import MOE_DISPATCHERS
from search._runs_file import CalibrationRun

RECOMPUTES = ("none", "selective", "full")


def field_values(run: CalibrationRun, name: str) -> tuple[Any, ...]:
    """Values of one open field worth trying, the loader's default first (it wins ties)."""
    c, model = run.config, run.model
    if name == "micro_batch":
        per_rank = run.training.global_batch // c.dp
        return tuple(b for b in range(1, per_rank + 1) if per_rank % b == 0)
    if name == "vp":
        per_stage = model.layers // c.pp
        return tuple(v for v in range(1, per_stage + 1) if per_stage % v == 0)
    if name == "sp":
        return (False, True)
    if name == "recompute":
        return RECOMPUTES
    if name == "etp":  # Megatron's default (tp) and the MoE README's advice for fine-grained experts (1)
        return tuple(sorted({1, c.tp}))
    if name == "activation_offload_layers":  # none, or any number of layers short of all of them
        return tuple(range(model.layers))
    if name == "moe_dispatcher":  # Megatron-Core's dispatchers, the loader's default (alltoall) first
        return (c.moe_dispatcher, *(d for d in MOE_DISPATCHERS if d != c.moe_dispatcher))
    raise ValueError(f"{name!r} is not a configuration field the runs loader leaves open")


def pipeline_options(run: CalibrationRun) -> list[tuple[int, tuple[int, ...] | None]]:
    """(vp, per-rank layers) pairs the run's runtime can express for its pp, as the search lists
    them (``search._pipeline_layout.pipeline_options``, untested forms such as BLOOM's partition included):
    a source that says its pipeline is uneven but not how ran one of these."""
    from search._pipeline_layout import last_stage_extra_layers, pipeline_options

    m, c = run.model, run.config
    head_w = round(last_stage_extra_layers(m), 3)
    options = pipeline_options((run.training.framework,), m.layers, c.pp, head_w, True)
    vp_known = "vp" not in run.unknown
    return [(vp, layout) for vp, layout, _rts in options if not vp_known or vp == c.vp]


def completions(run: CalibrationRun) -> list[ParallelConfig]:
    """Every valid configuration that fills the run's open fields (the run's own when none is open;
    the run's own too when no completion is valid, so that its prediction reports why). An open
    pipeline layout is filled jointly with vp (:func:`pipeline_options`)."""
    if not run.unknown:
        return [run.config]
    names = [n for n in run.unknown if n not in ("stage_layers", "vp")] if "stage_layers" in run.unknown \
        else list(run.unknown)
    # An open layout the runtime's listed forms cannot give at the run's vp keeps the loader's split.
    pipelines: list[dict[str, Any]] = ([{"vp": vp, "stage_layers": layout} for vp, layout in pipeline_options(run)]
                                       if "stage_layers" in run.unknown else []) or [{}]
    out = []
    for pipeline in pipelines:
        for values in itertools.product(*(field_values(run, name) for name in names)):
            try:
                config = replace(run.config, **pipeline, **dict(zip(names, values, strict=True)))
                check_compatible(run.model, run.cluster.world_size, config, run.training)
            except SpecError:
                continue
            out.append(config)
            out += partial_recomputes(run, config)
    return out or [run.config]


def partial_recomputes(run: CalibrationRun, config: ParallelConfig) -> list[ParallelConfig]:
    """With the recomputation open and Megatron-Core running full recomputation: also the block
    method's 1..n-1 recomputed layers per (virtual) stage (``--recompute-method block``), which a team
    tuning for speed uses when every layer need not recompute (issue 18)."""
    if "recompute" not in run.unknown or config.recompute != "full" or run.training.framework != "megatron":
        return []
    chunk = -(-max(config.stage_layers or (run.model.layers // config.pp,)) // config.vp)
    return [replace(config, recompute_layers=k) for k in range(1, chunk)]


@dataclass(frozen=True, slots=True)
class TunedPrediction:
    """The prediction a run is scored with, and the configuration it was made for."""

    prediction: Prediction
    config: ParallelConfig
    n_completions: int
    """Configurations tried: 1 for a run with no open field."""


def predict_tuned(run: CalibrationRun, calibration: Calibration | None = None,
                  configs: list[ParallelConfig] | None = None) -> TunedPrediction:
    """The fastest feasible prediction over ``configs`` (default :func:`completions`; a fit passes
    them once, they do not depend on the calibration), else the fastest; the first wins a tie.

    Raises :class:`search.SpecError` when the run's only configuration is invalid."""
    configs = configs or completions(run)
    scored = [(predict(run.model, run.cluster, c, run.training, calibration), c) for c in configs]
    p, config = max(scored, key=lambda pc: (pc[0].feasible, -pc[0].iteration_time_s))
    return TunedPrediction(p, config, len(configs))
