"""Route: the same question on several clusters, side by side (``autopar search --versus`` over HTTP).

A what-if is a set of searches that differ only in their cluster (another node type, NVL72 racks,
or ``cluster.fabric`` oversubscribed): POST each to ``/v1/searches`` (identical ones are shared),
then ``GET /v1/whatif?ids=a,b`` lays the best configuration of each done search next to the others,
with its cluster's NVLink domain and fabric and where each of its parallel groups runs.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from search import ParallelConfig
from search._fabric import fabric_dict
from search._placement import landing
from service import store
from service._search_request import from_stored
from service.api._errors import ApiError
from service.api._search_models import CONFLICT, INVALID, NOT_FOUND, UNAUTHORIZED
from service.api._state import Reader, State, in_pool

router = APIRouter(prefix="/v1/whatif", tags=["searches"])
MAX_IDS = 8


class WhatIfBest(BaseModel):
    """The best configuration of one search and what it achieves."""

    framework: str
    config: dict[str, Any]
    tokens_per_s: float
    mfu: float
    iteration_time_s: float
    peak_memory_bytes_per_gpu: float


class WhatIfRow(BaseModel):
    """One search of the comparison."""

    search_id: str
    cluster: str
    num_nodes: int
    world_size: int
    nvlink_domain_gpus: int = Field(description="GPUs in one NVLink domain (8 on DGX, 72 in an NVL72 rack).")
    fabric: dict[str, Any] = Field(description="The cluster's scale-out fabric (as cluster.fabric takes it).")
    best: WhatIfBest | None = Field(description="Null when nothing fits.")
    groups: dict[str, str] = Field(description="Where each group of the best runs: nvlink, or the highest fabric "
                                   "tier it spans (leaf, spine, core).")


class WhatIfOut(BaseModel):
    data: list[WhatIfRow]


def _row(state: Any, search_id: str) -> WhatIfRow:
    db = state.db
    with db.session() as s:
        search = store.get_search(s, search_id=search_id)
        best = None if search is None else next(iter(store.list_configs(s, search_id=search_id, top=1)), None)
    if search is None:
        raise ApiError(404, "ids", f"no search {search_id!r}", "check the ids (GET /v1/searches lists them)")
    if search.status != "done":
        raise ApiError(409, "ids", f"search {search_id} is {search.status}",
                       "wait until every search is done (poll GET /v1/searches/{id})".replace("{id}", search_id))
    cluster = from_stored(search.request, db).cluster
    node = cluster.node
    out: WhatIfBest | None = None
    groups: dict[str, str] = {}
    if best is not None:
        config = ParallelConfig(**best.config)
        p = best.prediction
        out = WhatIfBest(framework=best.framework, config=best.config, tokens_per_s=p["tokens_per_s"], mfu=p["mfu"],
                         iteration_time_s=p["iteration_time_s"],
                         peak_memory_bytes_per_gpu=p["peak_memory_bytes_per_gpu"])
        groups = landing(config, node.gpus_per_node, node.nvlink_domain, cluster.fabric)
    return WhatIfRow(search_id=search_id, cluster=cluster.name, num_nodes=cluster.num_nodes,
                     world_size=cluster.world_size, nvlink_domain_gpus=node.nvlink_domain,
                     fabric=fabric_dict(cluster.fabric), best=out, groups=groups)


@router.get("", response_model=WhatIfOut, summary="Done searches side by side (the same question on several clusters).",
            responses={**UNAUTHORIZED, **NOT_FOUND, **CONFLICT, **INVALID})
async def compare(state: State, _: Reader,
                  ids: Annotated[str, Query(min_length=1, max_length=MAX_IDS * 33,
                                            description="Comma-separated ids of done searches, in the order to "
                                            "show them.")]) -> WhatIfOut:
    """The best configuration of each search, its cluster's NVLink domain and fabric, and where each
    of its parallel groups runs. 409 until every search is done."""
    wanted = [i.strip() for i in ids.split(",") if i.strip()]
    if not 1 <= len(wanted) <= MAX_IDS:
        raise ApiError(422, "ids", f"{len(wanted)} ids", f"give 1 to {MAX_IDS} search ids, comma-separated")
    return WhatIfOut(data=await in_pool(state, "read", lambda: [_row(state, i) for i in wanted]))
