"""Storing a measured run with what the cost model predicts for it: the one path every run is stored
by (``POST /v1/runs``, ``POST /v1/runs:import``, ``autopar runs import``).

The prediction is made when the run is stored and kept beside the measurement, so the error a run
shows is that of the autopar version that was asked (``autopar_version``), not of whatever version
reads it; a later cost model is judged by predicting the stored requests again.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from dataclasses import dataclass
from typing import Any, cast, get_args

from pydantic import ValidationError

from search import SpecError
from service import store
from service._evaluate import evaluate
from service._version import autopar_version
from service.request import ClusterIn, ConfigIn, ModelIn, RunIn, Runtime, TrainingIn
from service.store import Database, NotFound, Run, Session, as_utc, utc_now

SPEC_FIELDS = ("model", "cluster", "training", "framework", "config")
"""The request fields a prediction needs, as a stored run keeps them."""
_RUNTIMES: tuple[str, ...] = get_args(Runtime)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What ran: the request fields a prediction needs."""

    model: ModelIn
    cluster: ClusterIn
    training: TrainingIn
    framework: Runtime
    config: ConfigIn


def _from_search(db: Database, search_id: str, rank: int) -> RunSpec:
    """The stored search's model, cluster and batch with its rank-th configuration."""
    with db.session() as s:
        search = store.get_search(s, search_id=search_id)
        if search is None:
            raise NotFound("search_id", f"no search {search_id!r}",
                           "give the id POST /v1/searches returned, or the full specification instead")
        row = store.get_config(s, search_id=search_id, rank=rank)
        ranked = store.count_configs(s, search_id=search_id)
    if row is None and search.status != "done":
        raise SpecError("search_id", f"search {search_id} is {search.status}: it has no ranked configurations yet",
                        "post the run once the search is done, or give model, cluster, training and config")
    if row is None:
        raise NotFound("rank", f"search {search_id} has no rank {rank} (it ranked {ranked})",
                       f"give a rank from 1 to {ranked}" if ranked else "this search found nothing that fits")
    try:  # the request as the client sent it (SearchIn): presets resolve with this autopar's figures
        sent = search.request["body"]
        if row.framework not in _RUNTIMES:
            raise TypeError(row.framework)
        return RunSpec(ModelIn.model_validate(sent["model"]), ClusterIn.model_validate(sent["cluster"]),
                       TrainingIn.model_validate(sent["training"]), cast(Runtime, row.framework),
                       ConfigIn.model_validate(row.config))
    except (KeyError, TypeError, ValidationError):
        raise SpecError("search_id", f"search {search_id} was stored in a form this autopar cannot read",
                        "give model, cluster, training, framework and config instead of search_id and rank") from None


def _spec(body: RunIn, db: Database) -> RunSpec:
    given = [name for name in SPEC_FIELDS if getattr(body, name) is not None]
    if body.rank is not None and body.search_id is None:
        raise SpecError("search_id", "rank needs the search it ranks", "give search_id too, or drop rank")
    if body.search_id is not None:
        if body.rank is None:
            raise SpecError("rank", "search_id needs the rank of the configuration that ran",
                            "give rank (1 is the search's best)")
        if given:
            raise SpecError(given[0], "is taken from the search when search_id and rank are given",
                            f"drop {', '.join(given)}, or drop search_id and rank")
        return _from_search(db, body.search_id, body.rank)
    model, cluster, training, config = body.model, body.cluster, body.training, body.config
    if model is None or cluster is None or training is None or config is None:
        missing = [name for name in ("model", "cluster", "training", "config") if getattr(body, name) is None]
        raise SpecError(missing[0], f"is required without search_id and rank (missing: {', '.join(missing)})",
                        "give model, cluster, training and config, or the search_id and rank of a stored search")
    return RunSpec(model, cluster, training, body.framework or "megatron", config)


def _with_profile(cluster: ClusterIn, profile_id: str | None, db: Database) -> ClusterIn:
    """The cluster measured by the run's profile (which must exist and agree with cluster.profile_id)."""
    if profile_id is None:
        return cluster
    if cluster.profile_id not in (None, profile_id):
        raise SpecError("profile_id", f"{profile_id!r} is not the cluster's profile {cluster.profile_id!r}",
                        "give one of profile_id and cluster.profile_id, or the same id in both")
    with db.session() as s:
        if not store.profile_exists(s, profile_id=profile_id):
            raise NotFound("profile_id", f"no profile {profile_id!r}",
                           "upload it first (POST /v1/profiles), or drop profile_id")
    return cluster.model_copy(update={"profile_id": profile_id})


def ratio_error(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured - 1, None when either is missing or the ratio is not finite."""
    if predicted is None or not measured:
        return None
    error = predicted / measured - 1.0
    return error if math.isfinite(error) else None


def run_out(row: Run) -> dict[str, Any]:
    """A stored run with its prediction errors (``RunOut``'s fields; ``created_at`` a UTC datetime)."""
    req = row.request
    return {
        "id": row.id, "search_id": row.search_id, "rank": row.rank, "profile_id": row.profile_id,
        **{name: req[name] for name in SPEC_FIELDS}, "notes": req.get("notes"),
        "iteration_time_s": row.iteration_time_s, "peak_memory_bytes": row.peak_memory_bytes, "oom": row.oom,
        "predicted_iteration_time_s": row.predicted_iteration_time_s,
        "predicted_peak_memory_bytes": row.predicted_peak_memory_bytes, "predicted_fits": row.predicted_fits,
        "time_error": ratio_error(row.predicted_iteration_time_s, row.iteration_time_s),
        "memory_error": ratio_error(row.predicted_peak_memory_bytes, row.peak_memory_bytes),
        "oom_agrees": None if row.predicted_fits is None else row.predicted_fits == (not row.oom),
        "autopar_version": row.autopar_version, "created_at": as_utc(row.created_at),
    }


def check_measured(body: RunIn) -> None:
    """A run says how long an iteration took, or that it ran out of memory."""
    if body.iteration_time_s is None and not body.oom:
        raise SpecError("iteration_time_s", "is required unless oom is true",
                        "give the measured seconds per iteration, or oom=true for a run that ran out of memory")


def store_run(s: Session, body: RunIn, db: Database, tenant: str) -> Run:
    """Predict the run ``body`` describes and add it, with the prediction, to session ``s``. Raises
    SpecError, or NotFound for a search, rank or profile the database does not hold (nothing added),
    when the body does not describe a run this autopar predicts."""
    check_measured(body)
    spec = _spec(body, db)
    cluster = _with_profile(spec.cluster, body.profile_id, db)
    ev = evaluate(spec.model, cluster, spec.training, spec.framework, spec.config, db)
    request = {
        "model": spec.model.model_dump(mode="json", exclude_none=True),
        "cluster": cluster.model_dump(mode="json", exclude_none=True),
        "training": spec.training.model_dump(mode="json"), "framework": spec.framework,
        "config": dataclasses.asdict(ev.config), "notes": body.notes,
    }
    row = Run(id=uuid.uuid4().hex, search_id=body.search_id, rank=body.rank, profile_id=cluster.profile_id,
              request=request, iteration_time_s=body.iteration_time_s, peak_memory_bytes=body.peak_memory_bytes,
              oom=body.oom, predicted_iteration_time_s=ev.prediction.iteration_time_s,
              predicted_peak_memory_bytes=ev.prediction.peak_memory_bytes_per_gpu,
              predicted_fits=ev.prediction.feasible, autopar_version=autopar_version(), created_at=utc_now(),
              tenant=tenant)
    return store.add_run(s, row=row)
