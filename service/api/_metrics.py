"""Prometheus metrics of one app: request counts and latency (an ASGI middleware), the search
queue and the run time and queue wait of finished searches by outcome (read from the database at
scrape time), and the build.

Each app has its own ``CollectorRegistry`` (on ``AppState.extras["metrics"]``), so several apps
in one process (tests, or an embedding program) never register the same metric twice. Requests
are labelled by the route *template* (``/v1/searches/{search_id}``), never the raw path, so ids
do not multiply the series; paths that match no route share one label. The middleware is pure
ASGI and caches each label set's child, so the hot GET path pays two dict lookups and two
atomic updates per request.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Histogram, Info, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.store import STATUSES, Database, Span, StoreError, queue_depth, search_times

EXTRAS_KEY = "metrics"
UNMATCHED = "<unmatched>"
"""The route label of requests that match no route (404s of arbitrary paths)."""
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Most API answers take milliseconds; searches run in workers, not in requests.
_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)



def _go_float(value: float) -> str:
    """A bucket bound as Prometheus' own histograms write it (``le="0.5"``, ``"+Inf"``)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
    return text


class QueueCollector:
    """Searches per status and the queue depth, counted in the database when scraped.

    Read at scrape time rather than counted in the API process: workers on other machines change
    the statuses, and the database is the only place that sees them all.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def describe() -> list[GaugeMetricFamily]:
        """The names this collector yields, without touching the database (at registration)."""
        return [GaugeMetricFamily(name, "") for name in ("autopar_database_up", "autopar_searches",
                                                         "autopar_queue_depth")]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("autopar_database_up", "1 when the database answered the last scrape, else 0.")
        try:
            counts = queue_depth(self.db)
        except StoreError:
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        searches = GaugeMetricFamily("autopar_searches", "Searches by status.", labels=["status"])
        for status in STATUSES:
            searches.add_metric([status], float(counts.get(status, 0)))
        yield searches
        yield GaugeMetricFamily("autopar_queue_depth", "Searches waiting for a worker (status queued).",
                                value=float(counts.get("queued", 0)))


SEARCH_RUN_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Searches take 0.05 s (a preset on one node) to the service's limit (AUTOPAR_MAX_TIMEOUT_S, 600 s)."""
QUEUE_WAIT_BUCKETS_S = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""An idle worker claims within its poll (0.5 s); a busy fleet makes searches wait minutes."""
_SEARCH_HISTOGRAMS: tuple[tuple[str, Span, tuple[float, ...], str], ...] = (
    ("autopar_search_duration_seconds", "run", SEARCH_RUN_BUCKETS_S,
     "Run time of finished searches (first claim to finish), by outcome: done, failed, cancelled."),
    ("autopar_search_queue_wait_seconds", "queue_wait", QUEUE_WAIT_BUCKETS_S,
     "Time finished searches waited in the queue (creation to first claim), by outcome."),
)


class SearchTimesCollector:
    """The run time and queue wait of finished searches as histograms, summed by the database when
    scraped (``service.store.search_times``). Nothing is yielded while the database does not answer
    (``autopar_database_up`` says so)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def describe() -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(name, "", labels=["outcome"]) for name, *_ in _SEARCH_HISTOGRAMS]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        for name, span, bounds, doc in _SEARCH_HISTOGRAMS:
            try:
                times = search_times(self.db, span=span, bounds_s=bounds)
            except StoreError:
                return
            family = HistogramMetricFamily(name, doc, labels=["outcome"])
            for t in times:
                buckets = [(_go_float(b), float(n)) for b, n in zip(bounds, t.cumulative_counts, strict=True)]
                family.add_metric([t.outcome], [*buckets, ("+Inf", float(t.count))], sum_value=t.sum_s)
            yield family


class Metrics:
    """The metrics of one app and their registry."""

    def __init__(self, db: Database, version: str) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("autopar_http_requests", "HTTP requests by method, route template and status.",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("autopar_http_request_duration_seconds",
                                 "Time from the request to the end of the response body, by route template.",
                                 ["route"], buckets=_LATENCY_BUCKETS_S, registry=self.registry)
        Info("autopar_build", "The running autopar.", registry=self.registry).info(
            {"version": version, "python": platform.python_version()})
        self.registry.register(QueueCollector(db))
        self.registry.register(SearchTimesCollector(db))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._histograms: dict[str, Any] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request. Children are cached: ``labels()`` takes a lock and builds a key."""
        key = (method, route, status)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.requests.labels(method, route, str(status))
        counter.inc()
        histogram = self._histograms.get(route)
        if histogram is None:
            histogram = self._histograms[route] = self.latency.labels(route)
        histogram.observe(seconds)


def route_template(scope: Scope) -> str:
    """The matched route's path template; the router leaves the route in the (shared) scope."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else UNMATCHED


class RequestMetrics:
    """Pure ASGI middleware: counts each HTTP request once it has been answered (or has failed)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # an exception before the response started becomes a 500 outside this middleware

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"
            self.metrics.observe(method, route_template(scope), status, time.perf_counter() - start)


def install_metrics(app: FastAPI) -> Metrics:
    """Create the app's metrics and add the middleware as the outermost user middleware.

    Call it after the other ``add_middleware`` calls so that their answers (413 of the body limit)
    are counted too.
    """
    state = app.state.autopar
    metrics = Metrics(state.db, app.version)
    state.extras[EXTRAS_KEY] = metrics
    app.add_middleware(RequestMetrics, metrics=metrics)
    return metrics
