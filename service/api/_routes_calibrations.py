"""Routes: per-cluster calibrations (issue 16). A POST fits the cost model's time constants on the
stored runs of one cluster or profile (seconds: it predicts each run a few thousand times) and
stores them with their cross-validated error; predictions and searches then use the latest."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from service import store
from service._calibrations import calibration_out, fit, parse_filter
from service._version import autopar_version
from service.api._calibration_models import CalibrationIn, CalibrationOut, CalibrationPage
from service.api._errors import ApiError
from service.api._idempotency import Answer, Idempotency
from service.api._resource_models import error_responses
from service.api._state import Reader, State, Writer
from service.store import Session

router = APIRouter(prefix="/v1/calibrations", tags=["calibrations"])


@router.post("", status_code=201, response_model=CalibrationOut, responses=error_responses(401, 403, 404, 422),
             summary="Fit and store a calibration of one cluster (or profile) on its stored runs",
             description="Fits the time constants from the published fit on the timed runs of `cluster` (or "
                         "`profile_id`), narrowed by `from_runs`, and stores them with the k-fold cross-validated "
                         "MAPE before and after. 422 naming `from_runs` when fewer runs match than a calibration "
                         "needs (it says how many).")
def create_calibration(_: Writer, body: CalibrationIn, state: State, idem: Idempotency) -> Response:
    run_filter = parse_filter(body.from_runs)
    if body.profile_id is not None and body.cluster is None:  # both: fit() refuses it, naming cluster
        with state.db.session() as s:
            if not store.profile_exists(s, profile_id=body.profile_id):
                raise ApiError(404, "profile_id", f"no profile {body.profile_id!r}",
                               "upload it first (POST /v1/profiles), or give cluster instead")

    def create(s: Session) -> Answer:
        fitted = fit(state.db, cluster=body.cluster, profile_id=body.profile_id, run_filter=run_filter, k=body.k,
                     seed=body.seed, tenant=idem.tenant, autopar_version=autopar_version())
        row = store.add_calibration(s, row=fitted)
        out = CalibrationOut.model_validate(calibration_out(row)).model_dump(mode="json")
        return Answer(201, out, f"/v1/calibrations/{row.id}")

    return idem.respond(state.db, body, create)


@router.get("", response_model=CalibrationPage, responses=error_responses(401, 403, 422),
            summary="List calibrations, newest first")
def list_calibrations(
    _: Reader,
    state: State,
    cluster: Annotated[str | None, Query(max_length=200, description="Of this cluster.")] = None,
    profile_id: Annotated[str | None, Query(max_length=32, description="Of this profile.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> dict[str, Any]:
    with state.db.session() as s:
        total, rows = store.list_calibrations(s, cluster_name=cluster, profile_id=profile_id, limit=limit,
                                              offset=offset)
    return {"data": [calibration_out(r) for r in rows], "count": total, "limit": limit, "offset": offset}


@router.get("/{calibration_id}", response_model=CalibrationOut, responses=error_responses(401, 403, 404, 422),
            summary="One calibration: its constants, runs and cross-validated error")
def get_calibration(_: Reader, state: State, calibration_id: Annotated[str, Path(max_length=32)]) -> dict[str, Any]:
    with state.db.session() as s:
        row = store.get_calibration(s, calibration_id=calibration_id)
    if row is None:
        raise ApiError(404, "calibration_id", f"no calibration {calibration_id!r}",
                       "list them with GET /v1/calibrations")
    return calibration_out(row)
