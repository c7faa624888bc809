"""Routes: searches. POST queues a search (workers run it: ``service._worker``), GET follows it,
``/configs`` serves its ranked configurations, ``/configs/{rank}/launch`` their launch files, DELETE
cancels it.

A POST is checked completely before anything is stored (422 naming the field and the fix), and an
identical request (same resolved specs, budget and autopar version) returns the search that
already answers it instead of searching again.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from datetime import datetime
from typing import Annotated, cast

from fastapi import APIRouter, Path, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from search import ParallelConfig, SpecError
from service import store
from service._search_request import from_stored, resolve
from service._version import autopar_version
from service.api._auth import Principal
from service.api._errors import ApiError
from service.api._idempotency import Answer, Idempotency, IdempotentRequest
from service.api._search_models import (
    BUSY,
    CONFLICT,
    FORBIDDEN,
    INVALID,
    NOT_FOUND,
    UNAUTHORIZED,
    ConfigsOut,
    LaunchOut,
    SearchIn,
    SearchListOut,
    SearchOut,
    Status,
)
from service.api._search_views import CACHE_KEY, BytesLru, configs_json, location, search_body
from service.api._state import AppState, Reader, State, Writer, in_pool
from service.launch import LAUNCH_TARGETS, LaunchRequest, emit_target, recipe_from_dict
from service.request import RecipeIn, Runtime
from service.store import Conflict, Database, Search, Session

router = APIRouter(prefix="/v1/searches", tags=["searches"])

SearchIdPath = Annotated[str, Path(min_length=1, max_length=32, description="The search's id.")]
_LOCATION = {"Location": {"description": "/v1/searches/{id}", "schema": {"type": "string"}}}


def _row(db: Database, search_id: str) -> Search:
    with db.session() as s:
        row = store.get_search(s, search_id=search_id)
    if row is None:
        raise ApiError(404, "id", f"no search {search_id!r}", "check the id (GET /v1/searches lists them)")
    return row


def _require_done(row: Search) -> None:
    if row.status == "done":
        return
    fixes = {"queued": "wait until a worker runs it: poll GET /v1/searches/{id} until status is done",
             "running": "wait until it finishes: poll GET /v1/searches/{id} until status is done",
             "failed": "read its error, correct the request and POST it again",
             "cancelled": "POST the request again to search again"}
    raise ApiError(409, "status", f"search {row.id} is {row.status}, so it has no configurations"
                   + (f" ({row.error})" if row.error else ""), fixes[row.status].replace("{id}", row.id))


@router.post(
    "", status_code=202, response_model=SearchOut, summary="Queue a search (or return the one that answers it).",
    responses={
        202: {"description": "Queued; or an identical search is already queued or running (that one is "
                             "returned). Poll the Location.", "headers": _LOCATION},
        200: {"model": SearchOut, "description": "An identical search is already done: it is returned, "
                                                 "nothing is searched again.", "headers": _LOCATION},
        **UNAUTHORIZED, **FORBIDDEN, **INVALID, **BUSY},
)
async def create_search(body: SearchIn, state: State, idem: Idempotency) -> Response:
    """Check the request (presets, shapes, limits, that the node count and batch allow at least one
    configuration), then queue it. An identical request returns the existing search (failed and
    cancelled ones excepted). Honours `Idempotency-Key`."""
    return await in_pool(state, "write", _create_search, body, state, idem)


def _create_search(body: SearchIn, state: AppState, idem: IdempotentRequest) -> Response:
    resolved = resolve(body, state.db, state.settings)
    version = autopar_version()
    digest = resolved.request_hash(version)

    dialect, tenant = state.db.dialect, idem.tenant

    def existing_answer(s: Session) -> Answer | None:
        existing = store.find_answering_search(s, request_hash=digest)
        if existing is None:
            return None
        store.want_search(s, search_id=existing.id, tenant=tenant, dialect=dialect)  # a cancel of others spares it
        return Answer(200 if existing.status == "done" else 202, search_body(existing), location(existing.id))

    def create(s: Session) -> Answer:
        answer = existing_answer(s)
        if answer is not None:
            return answer
        queued = store.count_queued(s, dialect=dialect)  # under the admission lock: the limit is exact under races
        if queued >= state.settings.max_queued:
            raise ApiError(429, "queue", f"{queued} searches are already waiting for a worker",
                           "retry later, or add workers (`autopar worker`); AUTOPAR_MAX_QUEUED sets the limit",
                           {"Retry-After": "30"})
        row = Search(id=uuid.uuid4().hex, request_hash=digest, request=resolved.stored(version),
                     model_name=resolved.model.name, cluster_name=resolved.base_cluster.name,
                     num_nodes=resolved.base_cluster.num_nodes, framework=body.framework, objective=body.objective,
                     profile_id=body.cluster.profile_id, autopar_version=version, status="queued", progress=0.0,
                     attempts=0, tenant=tenant)
        store.add_search(s, row=row)
        store.want_search(s, search_id=row.id, tenant=tenant, dialect=dialect)
        return Answer(202, search_body(row), location(row.id))

    try:
        return idem.respond(state.db, body, create)
    except Conflict:
        # An identical request queued its search between our check and our insert (the unique
        # index of migration 0002 refused the second): answer with that search.
        with state.db.session() as s:
            answer = existing_answer(s)
        if answer is None:
            raise
        return answer.response()


def _encode_cursor(row: Search) -> str:
    text = json.dumps([row.created_at.isoformat(), row.id])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        created, search_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return datetime.fromisoformat(created), str(search_id)
    except (ValueError, TypeError, binascii.Error):
        raise SpecError("cursor", "is not a cursor of this API", "pass next_cursor of the previous page unchanged, "
                        "or drop it to start from the newest") from None


@router.get("", response_model=SearchListOut, summary="List searches, newest first.",
            responses={**UNAUTHORIZED, **INVALID})
def list_searches(
    state: State, _: Reader,
    model: Annotated[str | None, Query(max_length=200, description="Only this model (its name).")] = None,
    cluster: Annotated[str | None, Query(max_length=200, description="Only this cluster (its name).")] = None,
    status: Annotated[Status | None, Query(description="Only searches in this state.")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000, description="Skip this many (or page with cursor).")] = 0,
    cursor: Annotated[str | None, Query(max_length=400, description="next_cursor of the previous page: "
                                        "stable while new searches arrive.")] = None,
) -> JSONResponse:
    if cursor is not None and offset:
        raise SpecError("cursor", "offset and cursor were both given", "page with one of them")
    after = _decode_cursor(cursor) if cursor is not None else None
    with state.db.session() as s:  # one more than the page: is there a next one?
        total, rows = store.list_searches(s, model=model, cluster=cluster, status=status, limit=limit + 1,
                                          offset=offset, after=after)
    more = len(rows) > limit
    rows = rows[:limit]
    body = {"data": [search_body(r) for r in rows], "count": total, "limit": limit,
            "offset": None if cursor is not None else offset,
            "next_cursor": _encode_cursor(rows[-1]) if more and rows else None}
    return JSONResponse(body)


@router.get("/{search_id}", response_model=SearchOut, summary="A search: status, progress, counts, timings.",
            responses={**UNAUTHORIZED, **NOT_FOUND, **INVALID})
async def get_search(search_id: SearchIdPath, state: State, _: Reader) -> JSONResponse:
    """In the read pool: never behind a burst of POSTs (p99 <= 100 ms during 200 of them)."""
    return JSONResponse(await in_pool(state, "read", lambda: search_body(_row(state.db, search_id))))


def _configs_bytes(state: AppState, search_id: str, top: int | None) -> bytes:
    row = _row(state.db, search_id)
    _require_done(row)
    return configs_json(state.db, search_id, row.objective, row.exhaustive, top)


@router.get("/{search_id}/configs", response_model=ConfigsOut, summary="The ranked configurations of a done search.",
            responses={**UNAUTHORIZED, **NOT_FOUND, **CONFLICT, **INVALID})
async def get_configs(search_id: SearchIdPath, state: State, _: Reader,
                      top: Annotated[int | None, Query(ge=1, le=10_000,
                                                       description="Only the best k (default: all kept).")]
                      = None) -> Response:
    """Best first, each with its prediction (time and memory breakdowns). 409 until the search is done.
    Served from memory after the first call: a done search never changes."""
    if top is not None:
        top = min(top, state.settings.max_top)
    cache: BytesLru | None = state.extras.get(CACHE_KEY)
    if cache is None:
        cache = state.extras.setdefault(CACHE_KEY, BytesLru())
    key = (search_id, top or 0)
    body = cache.get(key)
    if body is None:
        body = await run_in_threadpool(_configs_bytes, state, search_id, top)
        cache.put(key, body)
    return Response(body, media_type="application/json")


_HOST = re.compile(r"[A-Za-z0-9\[][A-Za-z0-9._:\[\]-]{0,252}")
"""A host name, IPv4 or [IPv6] address: what a rendezvous endpoint, a hostfile and Slurm accept."""


def _hosts(text: str | None, num_nodes: int) -> tuple[str, ...]:
    hosts = tuple(h.strip() for h in (text or "").split(",") if h.strip())
    if text is not None and not hosts:
        raise SpecError("hosts", f"{text!r} names no host", "give comma-separated host names, or leave hosts out")
    bad = [h for h in hosts if _HOST.fullmatch(h) is None]
    if bad:
        raise SpecError("hosts", f"{bad[0]!r} is not a host name or address",
                        "use names of letters, digits, '.', '-' and ':' (or [IPv6]), comma-separated")
    if hosts and len(hosts) != num_nodes:
        raise SpecError("hosts", f"{len(hosts)} hosts for {num_nodes} nodes",
                        f"give {num_nodes} comma-separated host names, or none for placeholders node0..")
    return hosts


def _launch_error(err: SpecError, target: str, framework: str) -> SpecError:
    """The emitter's error, named after the query parameter the caller controls."""
    owner, _, attr = err.field.partition(".")
    if owner == "LaunchRequest" and attr in ("hosts", "train_script"):
        return SpecError(attr, err.problem, err.fix)
    if owner == "recipe":  # a query parameter of the recipe
        return SpecError(attr.partition("[")[0], err.problem, err.fix)
    if err.field == "target":
        return err
    if owner == "ModelSpec":  # e.g. torchtitan runs only its llama3 flavors: no other target fixes that
        return SpecError("model", f"{target} cannot launch this model: {err.problem}",
                         f"{err.fix}; the search's other targets may still launch it")
    return SpecError("target", f"{target} cannot launch this {framework} configuration: {err.field}: {err.problem}",
                     f"use another target, or a rank whose framework it runs ({err.fix})")


@router.get("/{search_id}/configs/{rank}/launch", response_model=LaunchOut,
            summary="Launch files and command of one ranked configuration.",
            responses={**UNAUTHORIZED, **NOT_FOUND, **CONFLICT, **INVALID})
def get_launch(
    search_id: SearchIdPath, state: State, _: Reader,
    rank: Annotated[int, Path(ge=1, le=10_000, description="The configuration's rank (1 = best).")],
    target: Annotated[str, Query(max_length=40, description=f"One of: {', '.join(LAUNCH_TARGETS)}.")],
    hosts: Annotated[str | None, Query(max_length=10_000, description="Comma-separated host names, one per "
                                       "node (default: node0, node1, ...).")] = None,
    recipe: Annotated[RecipeIn, Query()] = RecipeIn(),  # noqa: B008 (a frozen model: FastAPI's query model idiom)
    train_script: Annotated[str | None, Query(min_length=1, max_length=500, description="The training entry "
                                              "point (default: pretrain_gpt.py for the Megatron forks; "
                                              "$TRAIN_SCRIPT at launch for plain DeepSpeed).")] = None,
) -> JSONResponse:
    """A ds_config checked by DeepSpeed's rules, Megatron-LM arguments checked against its flag list and
    validate_args' rules, a torchtitan config module, or a torchrun / deepspeed launcher / Slurm script,
    with every shell value quoted; the training recipe comes from the query (what it leaves out is read
    from the environment at launch: see ``notes``). Needs no framework installed. 422 when the target
    cannot run the configuration (megatron for a deepspeed one, ...)."""
    row = _row(state.db, search_id)
    _require_done(row)
    with state.db.session() as s:
        chosen = store.get_config(s, search_id=search_id, rank=rank)
    if chosen is None:
        raise ApiError(404, "rank", f"search {search_id} has no configuration of rank {rank}",
                       f"pick a rank from GET /v1/searches/{search_id}/configs")
    resolved = from_stored(row.request, state.db)
    # What the ranked configuration was predicted with (bf16 gradient reduction included: --grad-reduce-in-bf16).
    training = resolved.training_for(cast(Runtime, chosen.framework))
    nodes = _hosts(hosts, resolved.cluster.num_nodes)
    try:
        request = LaunchRequest(model=resolved.model, cluster=resolved.cluster,
                                config=ParallelConfig(**chosen.config), training=training,
                                hosts=nodes, train_script=train_script,
                                job_name=f"autopar-{search_id[:8]}-r{rank}", profile=resolved.cluster.profile,
                                recipe=recipe_from_dict(recipe.model_dump(exclude_none=True)))
        files = emit_target(request, target)
    except SpecError as err:
        raise _launch_error(err, target, chosen.framework) from None
    return JSONResponse({"search_id": search_id, "rank": rank, "target": target, "framework": chosen.framework,
                         "files": files.files, "command": files.command, "env": files.env,
                         "notes": list(files.notes)})


@router.delete(
    "/{search_id}", response_model=SearchOut, summary="Cancel a queued or running search.",
    responses={
        200: {"description": "Cancelled while queued, or already cancelled."},
        202: {"model": SearchOut, "description": "Cancelled while running: its worker stops at its next "
                                                 "heartbeat and stores nothing."},
        **UNAUTHORIZED, **FORBIDDEN, **NOT_FOUND, **CONFLICT, **INVALID},
)
async def cancel_search(search_id: SearchIdPath, state: State, who: Writer) -> JSONResponse:
    """Cancel for the caller's tenant. A search that identical requests of several tenants share keeps
    running while another tenant still wants it (the answer shows its status); it is cancelled when
    none does. 403 for a search the caller's tenant never asked for; an admin token cancels any."""
    return await in_pool(state, "write", _cancel_search, search_id, state, who)


def _cancel_search(search_id: str, state: AppState, who: Principal) -> JSONResponse:
    before = _row(state.db, search_id).status
    with state.db.session() as s:
        if before in ("queued", "running") and not who.admin and not store.is_wanted_by(
                s, search_id=search_id, tenant=who.tenant):
            raise ApiError(403, "id", f"search {search_id} was not asked for by tenant {who.tenant!r}",
                           "cancel only your tenant's searches (an admin token, `autopar token create --scope "
                           "admin`, cancels any)")
        after = store.withdraw_search(s, search_id=search_id, tenant=None if who.admin else who.tenant) if (
            before in ("queued", "running")) else before
    if after is None:
        raise ApiError(404, "id", f"no search {search_id!r}", "check the id (GET /v1/searches lists them)")
    if after not in ("cancelled", "queued", "running"):
        raise ApiError(409, "status", f"search {search_id} is {after}; only queued or running searches can be "
                       "cancelled", "nothing to do: its result stays" if after == "done"
                       else "nothing to do: POST the request again to retry it")
    return JSONResponse(search_body(_row(state.db, search_id)), status_code=202 if before == "running" else 200)
