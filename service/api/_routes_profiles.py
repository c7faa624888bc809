"""Routes: hardware profiles, uploaded as ``autopar profile`` writes them and used by
``cluster.profile_id`` in predictions, searches and runs."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from search import SCHEMA_VERSION, Fingerprint, HardwareProfile, SpecError
from search._profile import READABLE_VERSIONS
from service import store
from service.api._errors import ApiError
from service.api._idempotency import Answer, Idempotency
from service.api._resource_models import ProfileIn, ProfileOut, ProfilePage, error_responses
from service.api._state import Reader, State, Writer
from service.store import Profile, Session, as_utc, utc_now

router = APIRouter(prefix="/v1/profiles", tags=["profiles"])
_TEXT_MAX = 200  # the profiles table's string columns


async def _schema_version_first(request: Request) -> None:
    """A profile of another schema version gets one answer, "re-run `autopar profile`", instead of
    a field error for every field that version renamed."""
    try:
        data = await request.json()
    except ValueError:
        return  # FastAPI answers invalid JSON itself
    if isinstance(data, dict) and data.get("schema_version") not in READABLE_VERSIONS:
        HardwareProfile.from_dict(data)  # raises the SpecError naming schema_version and the fix


def _measured_at(fp: Fingerprint) -> datetime:
    try:
        return as_utc(datetime.fromisoformat(fp.created_at))
    except ValueError:
        raise SpecError("fingerprint.created_at", f"{fp.created_at!r} is not an ISO 8601 time",
                        "re-run `autopar profile` (it writes e.g. 2025-06-01T12:00:00+00:00)") from None


def _default_name(fp: Fingerprint) -> str:
    hosts = fp.hostnames
    where = "" if not hosts else hosts[0] if len(hosts) == 1 else f"{hosts[0]} +{len(hosts) - 1} hosts"
    gpus = f"{fp.gpu_count} x {fp.gpu_name}"
    return f"{where} ({gpus})" if where else gpus


def _fingerprint_line(fp: Fingerprint) -> str:
    nodes = len(fp.hostnames) or max(1, fp.gpu_count // fp.gpus_per_node)
    software = "; ".join(f"{label} {value}" for label, value in (("driver", fp.driver), ("CUDA", fp.cuda),
                                                                 ("NCCL", fp.nccl), ("torch", fp.torch)) if value)
    line = f"{fp.gpu_count} x {fp.gpu_name}, {nodes} node(s) of {fp.gpus_per_node}"
    return f"{line}; {software}" if software else line


def _summary(row: Any) -> dict[str, Any]:
    """A Profile row (or a row of its columns without the body) as ProfileSummary fields."""
    return {"id": row.id, "name": row.name, "schema_version": row.schema_version, "gpu_name": row.gpu_name,
            "gpus_per_node": row.gpus_per_node, "fingerprint": row.fingerprint,
            "measured_at": as_utc(row.measured_at) if row.measured_at else None, "created_at": as_utc(row.created_at)}


@router.post("", status_code=201, response_model=ProfileOut, responses=error_responses(401, 403, 422),
             summary="Upload a hardware profile",
             description="The body is the JSON `autopar profile` writes (`--upload URL` posts it here). "
                         "A profile of another schema version is refused: re-run `autopar profile`.")
def create_profile(
    _: Writer,  # first: a caller without a token hears 401 before anything about the body
    __: Annotated[None, Depends(_schema_version_first)],
    body: ProfileIn,
    state: State,
    idem: Idempotency,
    name: Annotated[str | None, Query(min_length=1, max_length=_TEXT_MAX,
                                      description="Default: the first hostname and the GPUs.")] = None,
) -> Response:
    profile = HardwareProfile.from_dict(body.model_dump())  # what the types cannot say (ranks_per_node <= ranks)
    fp = profile.fingerprint

    def create(s: Session) -> Answer:
        row = Profile(id=uuid.uuid4().hex, name=(name or _default_name(fp))[:_TEXT_MAX],
                      schema_version=SCHEMA_VERSION, gpu_name=fp.gpu_name, gpus_per_node=fp.gpus_per_node,
                      fingerprint=_fingerprint_line(fp)[:_TEXT_MAX], measured_at=_measured_at(fp),
                      body=json.loads(profile.to_json()), created_at=utc_now(), tenant=idem.tenant)
        store.add_profile(s, row=row)
        out = ProfileOut.model_validate({**_summary(row), "body": row.body}).model_dump(mode="json")
        return Answer(201, out, f"/v1/profiles/{row.id}")

    return idem.respond(state.db, {"body": body.model_dump(mode="json"), "name": name}, create)


@router.get("", response_model=ProfilePage, responses=error_responses(401, 403, 422),
            summary="List hardware profiles, newest upload first")
def list_profiles(
    _: Reader,
    state: State,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> dict[str, Any]:
    with state.db.session() as s:  # summaries without the bodies, which can be large
        total, rows = store.list_profiles(s, limit=limit, offset=offset)
    return {"data": [_summary(row) for row in rows], "count": total, "limit": limit, "offset": offset}


@router.get("/{profile_id}", response_model=ProfileOut, responses=error_responses(401, 403, 404, 422),
            summary="One hardware profile: summary and full body")
def get_profile(_: Reader, state: State, profile_id: Annotated[str, Path()]) -> dict[str, Any]:
    with state.db.session() as s:
        row = store.get_profile(s, profile_id=profile_id)
    if row is None:
        raise ApiError(404, "profile_id", f"no profile {profile_id!r}", "list the stored ones with GET /v1/profiles")
    return {**_summary(row), "body": row.body}
