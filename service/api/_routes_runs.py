"""Routes: measured training runs, stored with what the cost model predicted for them
(:func:`service.runs.store_run`: the prediction made when the run is posted is stored beside the
measurement, so the error a run shows is that of the autopar version that was asked).
"""

from __future__ import annotations

import hashlib
import statistics
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from search import SpecError
from service import store
from service._calibrations import drift, error_by_week
from service.api._drift_models import AccuracyDriftOut
from service.api._errors import ApiError, error_body
from service.api._idempotency import Answer, Idempotency
from service.api._resource_models import RunImportOut, RunOut, RunPage, error_responses
from service.api._runs_import import IMPORT_BODY, LOG_FORMATS, Refused, file_error, logs_of, spec_object
from service.api._state import Reader, State, Writer, in_pool
from service.logs import AUTO
from service.request import RunIn
from service.runs import LogRun, check_measured, log_run, ratio_error, run_out, store_run
from service.store import Run, Session

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.post("", status_code=201, response_model=RunOut, responses=error_responses(401, 403, 404, 422),
             summary="Record a measured run and the prediction for it",
             description="Either `search_id` + `rank` (the search's request and that rank's configuration are used) "
                         "or `model`, `cluster`, `training`, `config` (and `framework`, default megatron). "
                         "`iteration_time_s` is required unless `oom` is true. The configuration is predicted now "
                         "and stored with the run.")
def create_run(_: Writer, body: RunIn, state: State, idem: Idempotency) -> Response:
    check_measured(body)

    def create(s: Session) -> Answer:
        row = store_run(s, body, state.db, idem.tenant)
        return Answer(201, RunOut.model_validate(run_out(row)).model_dump(mode="json"), f"/v1/runs/{row.id}")

    return idem.respond(state.db, body, create)


# --- POST /v1/runs:import ------------------------------------------------------------------------

def imported(row: Run, run: LogRun) -> dict[str, Any]:
    return {"file": run.log.name, "format": run.log.format, "iterations": len(run.log.iterations),
            "steady_iterations": run.log.steady_iterations, "memory_kind": run.log.memory_kind, "run": run_out(row)}


ImportFormat = Annotated[str, Query(pattern="^(" + "|".join(LOG_FORMATS) + ")$",
                                    description="The log format; auto detects it by signature lines.")]


@router.post(":import", status_code=201, response_model=RunImportOut, responses=error_responses(401, 403, 404, 422),
             openapi_extra=IMPORT_BODY, summary="Import training logs as measured runs",
             description="Each log (a text/plain body, or multipart/form-data files) is parsed -- Megatron-LM, "
             "Megatron-DeepSpeed, DeepSpeed or torchtitan, detected by signature lines unless `format` says -- into "
             "the run it describes: degrees, batch, ZeRO stage, recompute, precision and model shape where the log "
             "prints them, the median iteration time over the steady-state iterations (the first max(2, 10%) "
             "logged lines are warm-up), the peak memory, an OOM traceback as oom=true. `cluster` (a preset name "
             "or a JSON cluster object) is required; `nodes` defaults to the log's world size; `model` (a preset or "
             "a JSON model object) is needed when the log does not print the shape. Each run is predicted and "
             "stored as POST /v1/runs does. A log that cannot be read is a 422 naming its file and line, and then "
             "nothing of the request is stored. Bodies above AUTOPAR_MAX_BODY_BYTES (1 MiB by default) are a 413: "
             "raise it for long logs, or import them with `autopar runs import`.")
async def import_runs(
    request: Request,
    _: Writer,
    state: State,
    idem: Idempotency,
    cluster: Annotated[str | None, Query(min_length=1, max_length=20_000, description="A cluster preset, or the "
                                         "cluster JSON object of POST /v1/runs (required here or as a form field).")
                       ] = None,
    nodes: Annotated[int | None, Query(ge=1, le=65_536, description="Default: the log's world size.")] = None,
    model: Annotated[str | None, Query(min_length=1, max_length=200_000, description="A model preset, or the "
                                       "model JSON object of POST /v1/runs; default: the shape the log prints.")
                     ] = None,
    format: ImportFormat = AUTO,
    profile_id: Annotated[str | None, Query(min_length=1, max_length=32, description="The profile of the "
                                            "machine the runs ran on.")] = None,
    notes: Annotated[str | None, Query(max_length=500, description="Said before each run's notes.")] = None,
    name: Annotated[str, Query(min_length=1, max_length=255, description="File name of a text/plain log.")] = "log",
) -> Response:
    files, form = await logs_of(request, name)
    given: dict[str, Any] = {"cluster": cluster, "nodes": nodes, "model": model,
                             "format": format if format != AUTO else None, "profile_id": profile_id, "notes": notes}
    for field, value in form.items():
        if given[field] is not None:
            raise SpecError(f"form.{field}", "is also a query parameter", "give it once")
        given[field] = int(value) if field == "nodes" and value.isdigit() else value
    if given["cluster"] is None:
        raise SpecError("cluster", "is required: a log does not say which GPUs it ran on",
                        "give a cluster preset (GET /v1/presets/clusters) or a cluster JSON object")
    if given["format"] is not None and given["format"] not in LOG_FORMATS:
        raise SpecError("form.format", f"{given['format']!r} is not a log format",
                        f"use one of {', '.join(LOG_FORMATS)}")
    if given["nodes"] is not None and (not isinstance(given["nodes"], int) or not 1 <= given["nodes"] <= 65_536):
        raise SpecError("form.nodes", f"{given['nodes']!r} is not a node count", "give an integer from 1 to 65536")
    cluster_in = spec_object(str(given["cluster"]), "cluster")
    if given["nodes"] is not None:
        cluster_in = {**cluster_in, "nodes": given["nodes"]}
    model_in = spec_object(str(given["model"]), "model") if given["model"] is not None else None
    payload = {**given, "logs": [[f, hashlib.sha256(d).hexdigest()] for f, d in files]}

    def work() -> Response:
        runs: list[LogRun] = []
        errors: list[dict[str, Any]] = []
        for file, data in files:
            try:
                runs.append(log_run(data, file, format=str(given["format"] or AUTO), cluster=cluster_in,
                                    model=model_in, notes=given["notes"], profile_id=given["profile_id"]))
            except SpecError as err:
                errors.append(file_error(file, err))
        if errors:
            return JSONResponse(error_body(errors), status_code=422)

        def create(s: Session) -> Answer:
            rows: list[Run] = []
            refused: list[dict[str, Any]] = []
            for run in runs:
                try:
                    rows.append(store_run(s, run.body, state.db, idem.tenant))
                except SpecError as err:
                    refused.append(file_error(run.log.name, err))
            if refused:
                raise Refused(refused)
            data = [imported(row, run) for row, run in zip(rows, runs, strict=True)]
            return Answer(201, RunImportOut.model_validate({"data": data, "count": len(data)}).model_dump(mode="json"))

        try:
            return idem.respond(state.db, payload, create)
        except Refused as refused:
            return JSONResponse(error_body(refused.items), status_code=422)

    return await in_pool(state, "write", work)


SearchFilter = Annotated[str | None, Query(max_length=32, description="Runs of this search.")]
ModelFilter = Annotated[str | None, Query(max_length=100, description="A model preset or custom shape name.")]


@router.get("", response_model=RunPage, responses=error_responses(401, 403, 422),
            summary="List measured runs with their prediction errors, newest first")
def list_runs(
    _: Reader,
    state: State,
    search_id: SearchFilter = None,
    model: ModelFilter = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> dict[str, Any]:
    with state.db.session() as s:
        total, rows = store.list_runs(s, search_id=search_id, model=model, limit=limit, offset=offset)
    return {"data": [run_out(row) for row in rows], "count": total, "limit": limit, "offset": offset}


MAX_ACCURACY_RUNS = 100_000


@router.get("/accuracy", response_model=AccuracyDriftOut, responses=error_responses(401, 403, 422),
            summary="How well predictions matched the stored runs (MAPE of time and memory, OOM agreement), per week, "
                    "and whether a cluster drifted from its calibration")
def accuracy(
    _: Reader,
    state: State,
    search_id: SearchFilter = None,
    model: ModelFilter = None,
    cluster: Annotated[str | None, Query(max_length=200, description="Also check this cluster's newest runs "
                                         "against its latest calibration (drift).")] = None,
    window: Annotated[int, Query(ge=1, le=1000, description="Newest runs the drift check predicts again.")] = 20,
) -> dict[str, Any]:
    """The cost model's error on this cluster's own measurements: the figure to check before
    trusting a ranking, and the data for refitting the calibration constants. Over the newest
    100,000 matching runs; the predictions are the ones stored with each run (its autopar version).
    ``by_week``: the same error per ISO week; ``drift`` (with ``cluster``): the cluster's newest
    runs predicted again with its latest calibration, against that calibration's cross-validated
    error (``service._calibrations.drift_threshold``), with advice to recalibrate when they drifted."""
    with state.db.session() as s:
        rows = store.run_figures(s, search_id=search_id, model=model, limit=MAX_ACCURACY_RUNS)
    time_errors = [e for e in (ratio_error(r[1], r[0]) for r in rows) if e is not None]
    memory_errors = [e for e in (ratio_error(r[3], r[2]) for r in rows) if e is not None]
    judged = [r for r in rows if r[5] is not None]
    time_abs = sorted(abs(e) for e in time_errors)
    return {
        "runs": len(rows), "timed": len(time_errors),
        "time_mape": statistics.fmean(time_abs) if time_abs else None,
        "time_median_ape": statistics.median(time_abs) if time_abs else None,
        "time_worst_ape": time_abs[-1] if time_abs else None,
        "time_bias": statistics.fmean(time_errors) if time_errors else None,
        "memory_measured": len(memory_errors),
        "memory_mape": statistics.fmean(abs(e) for e in memory_errors) if memory_errors else None,
        "oom_judged": len(judged),
        "oom_agreement": sum(r[5] == (not r[4]) for r in judged) / len(judged) if judged else None,
        "by_week": error_by_week([(r[6], e) for r in rows if (e := ratio_error(r[1], r[0])) is not None]),
        "drift": None if cluster is None else drift(state.db, cluster=cluster, window=window),
    }


@router.get("/{run_id}", response_model=RunOut, responses=error_responses(401, 403, 404, 422),
            summary="One measured run with its prediction errors")
def get_run(_: Reader, state: State, run_id: Annotated[str, Path()]) -> dict[str, Any]:
    with state.db.session() as s:
        row = store.get_run(s, run_id=run_id)
    if row is None:
        raise ApiError(404, "run_id", f"no run {run_id!r}", "list the stored ones with GET /v1/runs")
    return run_out(row)
