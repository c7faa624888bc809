"""Stored searches as response bodies, and the cache that makes ``GET .../configs`` cheap.

A done search never changes (a worker writes its result once, under its claim), so the JSON of its
ranked configurations is built once per (search, top) and served as bytes from a bounded LRU on
``AppState.extras``: a cache hit costs no database round trip, no pydantic validation and no JSON
encoding. The bytes follow :class:`ConfigsOut` field for field (a test validates them against it).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from service import store
from service._calibrations import from_stored as stored_calibration
from service.api._search_models import SearchOut
from service.store import Database, Search, utc_now

CACHE_KEY = "searches.configs_cache"
CACHE_MAX_BYTES = 64 << 20
"""Serialized configurations kept in memory per app (a top-100 answer is about 200 KB)."""


def location(search_id: str) -> str:
    return f"/v1/searches/{search_id}"


def launch_link(search_id: str, rank: int | str) -> str:
    return f"/v1/searches/{search_id}/configs/{rank}/launch"


def _utc(t: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes (stored as UTC); PostgreSQL aware ones."""
    if t is None:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def search_body(row: Search) -> dict[str, Any]:
    """The :class:`SearchOut` of a stored search, as JSON-ready data."""
    created, started, finished = _utc(row.created_at) or utc_now(), _utc(row.started_at), _utc(row.finished_at)
    out = SearchOut.model_validate({
        "id": row.id, "status": row.status, "progress": row.progress or 0.0, "model": row.model_name,
        "cluster": row.cluster_name, "nodes": row.num_nodes,
        "counts": {"space_size": row.space_size, "n_valid": row.n_valid, "n_feasible": row.n_feasible,
                   "n_evaluated": row.n_evaluated, "exhaustive": row.exhaustive},
        "timings": {"created_at": created, "started_at": started, "finished_at": finished,
                    "queued_s": _seconds(created, started), "search_s": row.search_s,
                    "total_s": _seconds(created, finished)},
        "attempts": row.attempts or 0, "worker_id": row.worker_id, "error": row.error,
        "hints": list(row.hints or ()), "notes": list(row.request.get("notes", ())),
        "calibration": stored_calibration(row.request.get("calibration")).out(), "request": row.request["body"],
        "links": {"self": location(row.id), "configs": f"{location(row.id)}/configs",
                  "launch": f"{launch_link(row.id, '{rank}')}?target={{target}}"},
    })
    return out.model_dump(mode="json")


def configs_json(db: Database, search_id: str, objective: str, exhaustive: bool | None, top: int | None) -> bytes:
    """The :class:`ConfigsOut` of a done search as JSON bytes, best ``top`` first (all when None)."""
    with db.session() as s:
        rows = store.list_configs(s, search_id=search_id, top=top)
    configs = [{"rank": r.rank, "framework": r.framework, "config": r.config, "score": r.score,
                "explanation": r.explanation, "prediction": r.prediction, "launch": launch_link(search_id, r.rank)}
               for r in rows]
    body = {"search_id": search_id, "objective": objective, "exhaustive": exhaustive, "count": len(configs),
            "configs": configs}
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


class BytesLru:
    """A thread-safe LRU of byte strings bounded by their total size."""

    def __init__(self, max_bytes: int = CACHE_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0

    def get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: tuple[str, int], value: bytes) -> None:
        if len(value) > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self._size += len(value) - (len(old) if old is not None else 0)
            self._items[key] = value
            while self._size > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._size -= len(evicted)

    def __len__(self) -> int:
        return len(self._items)
