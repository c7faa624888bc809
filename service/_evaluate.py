"""One configuration of a request, resolved to search specs and predicted: what ``POST /v1/predict``
answers and what a measured run is stored beside (``service.runs``), so a run's stored prediction
is the one predict gives for the same body."""

from __future__ import annotations

import math
from dataclasses import dataclass

from search import (
    CLUSTER_PRESETS,
    Calibration,
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    Prediction,
    SpecError,
    TrainingSpec,
    UnknownPresetError,
    predict,
    staleness,
)
from search._fit import scale_gpu_rates
from service._search_request import request_field
from service.request import ClusterIn, ConfigIn, ModelIn, Runtime, TrainingIn, cluster_spec, model_spec, parallel_config
from service.store import Database

PROFILE_MAX_AGE_DAYS = 90.0
"""A profile older than this is reported as stale (``autopar predict --profile-max-age-days``'s default)."""


@dataclass(frozen=True, slots=True)
class Evaluated:
    """A request resolved to search specs, and what the cost model predicts for it."""

    model: ModelSpec
    cluster: ClusterSpec
    config: ParallelConfig
    training: TrainingSpec
    prediction: Prediction
    profile_notes: tuple[str, ...]
    """Figures the profile did not measure (apply_profile's fallbacks)."""
    profile_warnings: tuple[str, ...]
    """Why the profile may not describe this cluster (search.staleness)."""


def request_path(err: SpecError) -> SpecError:
    """``err`` naming the request field to change (``config.tp``, not ``ParallelConfig.tp``)."""
    owner, dot, attr = err.field.partition(".")
    if owner == "ParallelConfig":
        return SpecError(f"config{dot}{attr}", err.problem, err.fix)
    if err.field == "TrainingSpec.framework":  # framework sits beside training in the request
        return SpecError("framework", err.problem, err.fix)
    return request_field(err)


def _finite(value: object) -> bool:
    """Every number in a prediction's JSON is finite (a None where a number belongs is not)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


def evaluate(model: ModelIn, cluster: ClusterIn, training: TrainingIn, framework: Runtime, config: ConfigIn,
             db: Database, calibration: Calibration | None = None, gpu_rate_scale: float = 1.0,
             host_safety_factor: float = 1.0) -> Evaluated:
    """Resolve and predict with ``calibration`` (default: the published constants) and the GPU rates
    scaled by ``gpu_rate_scale`` (a cluster calibration's); every invalid combination raises
    SpecError (-> 422 naming the request field)."""
    try:
        model_s = model_spec(model)
        cluster_s, notes = cluster_spec(cluster, db)
        cluster_s = scale_gpu_rates(cluster_s, gpu_rate_scale)
        config_s = parallel_config(config, cluster_s.world_size)
        training_s = TrainingSpec(global_batch=training.global_batch, precision=training.precision,
                                  framework=framework, grad_reduce_in_bf16=training.grad_reduce_in_bf16)
        prediction = predict(model_s, cluster_s, config_s, training_s, calibration,
                             host_safety_factor=host_safety_factor)
    except UnknownPresetError as err:  # cluster presets are looked up as "node" presets
        kind, known = ("model", err.known) if err.kind == "model" else ("cluster", list(CLUSTER_PRESETS))
        raise SpecError(f"{kind}.preset", f"unknown {kind} preset {err.name!r}",
                        f"choose one of: {', '.join(known)} (GET /v1/presets/{kind}s)") from None
    except SpecError as err:
        raise request_path(err) from None
    if not _finite(prediction.to_dict()):  # the specs' bounds should make this unreachable: refuse, never send inf
        raise SpecError("cluster", f"the cost model gives no finite prediction for {cluster_s.name}",
                        "check the hardware figures: each must lie in its physical range (see the schema)")
    stale = staleness(cluster_s.profile, cluster_s, PROFILE_MAX_AGE_DAYS) if cluster_s.profile else ()
    return Evaluated(model_s, cluster_s, config_s, training_s, prediction, notes, stale)
