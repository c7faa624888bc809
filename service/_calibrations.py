"""Per-cluster calibrations (issue 16): fit one on the stored runs of a cluster or profile, and
choose the one a prediction or search uses.

Shared by ``autopar calibrate`` and ``POST /v1/calibrations`` (fitting), and by predict, search and
the worker (using). A run is the cluster's when its cluster resolves to that name (a preset's
name, or ``GPUNAMExGPUS_PER_NODE`` for a custom cluster: what ``Search.cluster_name`` holds) and,
for a profile, when it names the profile. The fit itself is ``search._fit.calibrate``: from the
published constants, k-fold cross-validated.

``--from-runs`` / ``from_runs`` narrows the runs: comma-separated ``key=value`` terms, each at
most once: ``model=NAME`` (preset or custom shape name), ``search=ID``, ``since=YYYY-MM-DD``
(stored on or after, UTC), ``last=N`` (the N newest of those).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from search import Calibration, ClusterSpec, ParallelConfig, SpecError, TrainingSpec, default_calibration
from search._calibration import calibration_fingerprint, calibration_from_dict
from search._fit import FOLDS, MIN_RUNS, PRIOR_WEIGHT, MeasuredRun, calibrate, rescaled, scale_gpu_rates
from service import store
from service.request import ClusterIn, ModelIn, cluster_spec, model_spec
from service.store import ClusterCalibration, Database, Run, as_utc, utc_now

PUBLISHED = "published"
"""The id an answer gives when it used the published constants (``search/calibration.json``)."""
_FILTER_KEYS = ("model", "search", "since", "last")


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which of a cluster's runs a calibration is fitted on (module docstring)."""

    model: str | None = None
    search_id: str | None = None
    since: datetime | None = None
    last: int | None = None


def parse_filter(text: str | None, field: str = "from_runs") -> RunFilter:
    """``model=NAME,search=ID,since=YYYY-MM-DD,last=N`` (any subset); SpecError naming ``field``."""
    if not text:
        return RunFilter()
    seen: dict[str, str] = {}
    for term in text.split(","):
        key, eq, value = term.strip().partition("=")
        if not eq or key not in _FILTER_KEYS or not value.strip():
            raise SpecError(field, f"{term.strip()!r} is not a key=value term of {', '.join(_FILTER_KEYS)}",
                            "write e.g. model=llama3-8b,since=2026-11-01,last=30")
        if key in seen:
            raise SpecError(field, f"{key} is given twice", f"give {key} once")
        seen[key] = value.strip()
    since = last = None
    if "since" in seen:
        try:
            since = datetime.strptime(seen["since"], "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            raise SpecError(field, f"since={seen['since']} is not a date", "write since=YYYY-MM-DD") from None
    if "last" in seen:
        if not seen["last"].isdigit() or int(seen["last"]) < 1:
            raise SpecError(field, f"last={seen['last']} is not a positive whole number", "write e.g. last=30")
        last = int(seen["last"])
    return RunFilter(seen.get("model"), seen.get("search"), since, last)


def cluster_name(cluster: dict[str, Any]) -> str | None:
    """The name a stored request's cluster resolves to (``service.request.cluster_spec``'s)."""
    if cluster.get("preset"):
        return str(cluster["preset"])
    gpu, node = cluster.get("gpu") or {}, cluster.get("node") or {}
    if "gpus_per_node" not in node:
        return None
    return f"{gpu.get('name', 'custom-gpu')}x{node['gpus_per_node']}"


def measured_run(row: Run, db: Database) -> MeasuredRun:
    """A stored run as the fit's input, its cluster resolved (profile applied) as when it was predicted."""
    req = row.request
    try:
        model = model_spec(ModelIn.model_validate(req["model"]))
        cluster = cluster_spec(ClusterIn.model_validate(req["cluster"]), db)[0]
        training = TrainingSpec(global_batch=int(req["training"]["global_batch"]),
                                precision=req["training"].get("precision", "bf16"), framework=req["framework"],
                                grad_reduce_in_bf16=req["training"].get("grad_reduce_in_bf16", False))
        config = ParallelConfig(**req["config"])
    except (KeyError, TypeError, ValueError, ValidationError) as err:  # SpecError is a ValueError
        raise ValueError(f"run {row.id} was stored in a form this autopar cannot read ({err})") from None
    return MeasuredRun(model, cluster, training, (config,), float(row.iteration_time_s or 0.0))


def fit(db: Database, *, cluster: str | None, profile_id: str | None, run_filter: RunFilter, k: int = FOLDS,
        seed: int = 0, tenant: str, autopar_version: str, field_prefix: str = "") -> ClusterCalibration:
    """Fit and cross-validate a calibration on the cluster's (or profile's) timed runs: the row to
    store (``service.store.add_calibration``).

    SpecError naming ``cluster`` / ``profile_id`` when neither or both are given, and ``from_runs``
    when fewer than :data:`search._fit.MIN_RUNS` runs match (saying how many did)."""
    if (cluster is None) == (profile_id is None):
        raise SpecError(f"{field_prefix}cluster", "give exactly one of a cluster name and a profile id",
                        "e.g. --cluster dgx-h100, or --profile ID of an uploaded hardware profile")
    with db.session() as s:
        rows = store.timed_runs(s, profile_id=profile_id, search_id=run_filter.search_id, since=run_filter.since,
                                model=run_filter.model)
        if cluster is not None:
            rows = [r for r in rows if cluster_name(r.request.get("cluster") or {}) == cluster]
        rows = list(rows[:run_filter.last] if run_filter.last else rows)
    usable: list[tuple[str, str, MeasuredRun]] = []
    skipped: list[str] = []
    for row in rows:
        try:
            content = json.dumps([row.request, row.iteration_time_s], sort_keys=True, default=str)
            usable.append((content, row.id, measured_run(row, db)))
        except ValueError as err:
            skipped.append(str(err))
    what = f"cluster {cluster!r}" if cluster is not None else f"profile {profile_id!r}"
    if len(usable) < MIN_RUNS:
        raise SpecError(f"{field_prefix}from_runs", f"{len(usable)} timed run{'s' * (len(usable) != 1)} of {what} "
                        f"match{'es' * (len(usable) == 1)}; a calibration needs at least {MIN_RUNS}",
                        f"store {MIN_RUNS - len(usable)} more (POST /v1/runs, autopar runs import), or widen "
                        "--from-runs / from_runs")
    # the same runs give the same folds and fit, whatever their ids and the order the database returns
    usable.sort(key=lambda entry: entry[:2])
    run_ids = [rid for _, rid, _ in usable]
    result = calibrate([m for _, _, m in usable], default_calibration(), k, seed=seed)
    name = cluster
    if name is None:
        names = {cluster_name(r.request.get("cluster") or {}) for r in rows}
        name = names.pop() if len(names) == 1 else None
    stored = ClusterCalibration(
        id=uuid.uuid4().hex, tenant=tenant, cluster_name=name, profile_id=profile_id,
        constants=asdict(result.calibration), run_ids=run_ids, n_runs=len(run_ids),
        k=result.cross_validation.k, cv_mape_before=result.cross_validation.mape_before,
        cv_mape_after=result.cross_validation.mape_after,
        details={"moved": {n: {"prior": p, "fitted": f} for n, (p, f) in result.moved.items()},
                 "gpu_rate_scale": result.gpu_rate_scale,
                 "in_sample_mape": result.in_sample_mape, "prior_weight": PRIOR_WEIGHT, "seed": seed,
                 "from_runs": run_filter_text(run_filter), "skipped": skipped[:20], "fit_s": result.seconds},
        fingerprint=calibration_fingerprint(result.calibration, run_ids, {"gpu_rate_scale": result.gpu_rate_scale}),
        autopar_version=autopar_version,
        created_at=utc_now())
    return stored


def run_filter_text(f: RunFilter) -> str:
    parts = [f"model={f.model}" if f.model else "", f"search={f.search_id}" if f.search_id else "",
             f"since={f.since:%Y-%m-%d}" if f.since else "", f"last={f.last}" if f.last else ""]
    return ",".join(p for p in parts if p)


def calibration_out(row: ClusterCalibration) -> dict[str, Any]:
    """A stored calibration as JSON-ready data (``CalibrationOut``)."""
    d = row.details or {}
    return {"id": row.id, "cluster": row.cluster_name, "profile_id": row.profile_id, "constants": row.constants,
            "gpu_rate_scale": d.get("gpu_rate_scale", 1.0),
            "moved": d.get("moved", {}), "run_ids": list(row.run_ids), "n_runs": row.n_runs, "k": row.k,
            "cv_mape_before": row.cv_mape_before, "cv_mape_after": row.cv_mape_after,
            "in_sample_mape": d.get("in_sample_mape"), "prior_weight": d.get("prior_weight"),
            "from_runs": d.get("from_runs", ""), "fit_s": d.get("fit_s"), "fingerprint": row.fingerprint,
            "autopar_version": row.autopar_version, "created_at": as_utc(row.created_at).isoformat()}


@dataclass(frozen=True, slots=True)
class Chosen:
    """The calibration a prediction or search uses, and how the answer names it."""

    calibration: Calibration
    id: str
    """A stored calibration's id, or :data:`PUBLISHED`."""
    cv_mape: float | None
    """Its k-fold cross-validated iteration-time MAPE (None for the published constants)."""
    cluster: str | None = None
    n_runs: int | None = None
    defaulted: bool = False
    """Chosen as the cluster's latest, not named by the request."""
    gpu_rate_scale: float = 1.0
    """The cluster's GPU kernel rates relative to its spec's (``search._fit.scale_gpu_rates``)."""

    def apply(self, cluster: ClusterSpec) -> ClusterSpec:
        """``cluster`` at this calibration's GPU kernel rates (a prediction or search runs on this)."""
        return scale_gpu_rates(cluster, self.gpu_rate_scale)

    def out(self) -> dict[str, Any]:
        return {"id": self.id, "cv_mape": self.cv_mape, "cluster": self.cluster, "n_runs": self.n_runs,
                "defaulted": self.defaulted, "gpu_rate_scale": self.gpu_rate_scale}

    def note(self) -> str:
        if self.id == PUBLISHED and not self.defaulted:
            return "calibration: published (as requested: the constants fitted on published runs)"
        if self.id == PUBLISHED:
            return ("calibration: published (the constants fitted on published runs; no calibration of this cluster "
                    "is stored: `autopar calibrate` fits one)")
        how = "the latest of this cluster" if self.defaulted else "as requested"
        return (f"calibration: {self.id} ({how}; fitted on {self.n_runs} runs of {self.cluster or 'its profile'}, "
                f"cross-validated time MAPE {100 * (self.cv_mape or 0.0):.1f} %)")

    def fingerprint(self) -> str:
        """SHA-256 of the constants and the GPU rate factor: what a search's de-duplication key holds."""
        return calibration_fingerprint(self.calibration, extra={"gpu_rate_scale": self.gpu_rate_scale})

    def stored(self) -> dict[str, Any]:
        """What a stored search keeps: enough to rebuild the constants exactly."""
        return {**self.out(), "constants": asdict(self.calibration)}


def choose(db: Database, *, calibration_id: str | None, cluster: str | None, profile_id: str | None,
           field: str = "calibration_id") -> Chosen:
    """The calibration named by ``calibration_id`` ("published" for the published constants), else
    the latest of the profile or cluster, else the published constants. An unknown id is a SpecError
    naming ``field``."""
    if calibration_id == PUBLISHED:
        return Chosen(default_calibration(), PUBLISHED, None)
    with db.session() as s:
        if calibration_id is not None:
            row = store.get_calibration(s, calibration_id=calibration_id)
            if row is None:
                raise SpecError(field, f"no calibration {calibration_id!r}",
                                "list them with GET /v1/calibrations (autopar calibrate fits one), or give "
                                "'published' for the published constants")
        else:
            row = store.latest_calibration(s, cluster_name=cluster, profile_id=profile_id)
    if row is None:
        return Chosen(default_calibration(), PUBLISHED, None, defaulted=True)
    return from_row(row, defaulted=calibration_id is None)


def from_row(row: ClusterCalibration, *, defaulted: bool = False) -> Chosen:
    return Chosen(calibration_from_dict(row.constants), row.id, row.cv_mape_after, row.cluster_name, row.n_runs,
                  defaulted, float((row.details or {}).get("gpu_rate_scale", 1.0)))


def from_stored(doc: dict[str, Any] | None) -> Chosen:
    """A search's stored :meth:`Chosen.stored`, its constants exactly as stored (the published ones of
    this autopar when the search predates calibrations)."""
    if not doc:
        return Chosen(default_calibration(), PUBLISHED, None, defaulted=True)
    cal = calibration_from_dict(doc["constants"]) if doc.get("constants") else default_calibration()
    return Chosen(cal, str(doc.get("id") or PUBLISHED), doc.get("cv_mape"), doc.get("cluster"),
                  doc.get("n_runs"), bool(doc.get("defaulted")), float(doc.get("gpu_rate_scale", 1.0)))


DRIFT_WINDOW = 20
"""Newest runs of a cluster that the drift check predicts again (GET /v1/runs/accuracy?window=)."""
DRIFT_MIN_RUNS = 3
"""Runs after the calibration the drift check needs before it judges."""


def drift_threshold(cv_mape: float) -> float:
    """The recent error above which a cluster has drifted from its calibration: its cross-validated
    MAPE plus half of it, and at least 3 points more (a 2 % calibration drifts past 5 %, a 10 % one
    past 15 %). The margin covers the CV figure's own noise on a handful of runs."""
    return cv_mape + max(0.5 * cv_mape, 0.03)


def drift(db: Database, *, cluster: str, window: int = DRIFT_WINDOW) -> dict[str, Any]:
    """Whether ``cluster``'s newest runs (at most ``window``, stored after its latest calibration and
    not fitted on) are predicted worse by that calibration than its cross-validated error promised
    (:func:`drift_threshold`); the answer's ``advice`` says what to do."""
    with db.session() as s:
        row = store.latest_calibration(s, cluster_name=cluster)
        runs = [r for r in store.timed_runs(s) if cluster_name(r.request.get("cluster") or {}) == cluster]
    out: dict[str, Any] = {"cluster": cluster, "calibration_id": PUBLISHED, "calibration_cv_mape": None, "runs": 0,
                           "recent_time_mape": None, "recent_time_bias": None, "threshold": None, "drifting": False}
    if row is None:
        n = len(runs)
        out["advice"] = (f"no calibration of {cluster}: `autopar calibrate --cluster {cluster}` fits one on its {n} "
                         "timed runs" if n >= MIN_RUNS else
                         f"no calibration of {cluster}; one needs {MIN_RUNS} timed runs, {n} are stored")
        return out
    fitted, since = set(row.run_ids), as_utc(row.created_at)
    recent = [r for r in runs if r.id not in fitted and as_utc(r.created_at) >= since][:window]
    chosen = from_row(row)
    errors = []
    for r in recent:
        try:
            m = measured_run(r, db)
        except ValueError:
            continue
        errors.append(predicted_ratio(rescaled([m], chosen.gpu_rate_scale)[0], chosen.calibration) - 1.0)
    threshold = drift_threshold(row.cv_mape_after)
    out.update(calibration_id=row.id, calibration_cv_mape=row.cv_mape_after, runs=len(errors), threshold=threshold)
    if len(errors) < DRIFT_MIN_RUNS:
        out["advice"] = (f"{len(errors)} run{'s' * (len(errors) != 1)} of {cluster} since calibration {row.id}; "
                         f"drift is judged from {DRIFT_MIN_RUNS}")
        return out
    mape = sum(abs(e) for e in errors) / len(errors)
    out.update(recent_time_mape=mape, recent_time_bias=sum(errors) / len(errors), drifting=mape > threshold)
    out["advice"] = (f"drift: the newest {len(errors)} runs of {cluster} miss by {100 * mape:.1f} % under calibration "
                     f"{row.id}, above its cross-validated {100 * row.cv_mape_after:.1f} % (threshold "
                     f"{100 * threshold:.1f} %): recalibrate with `autopar calibrate --cluster {cluster}` "
                     "(POST /v1/calibrations)" if mape > threshold else
                     f"no drift: the newest {len(errors)} runs of {cluster} miss by {100 * mape:.1f} % under "
                     f"calibration {row.id} (threshold {100 * threshold:.1f} %)")
    return out


def predicted_ratio(run: MeasuredRun, cal: Calibration) -> float:
    """predicted / measured iteration time."""
    from search._fit import predicted_time_s

    return predicted_time_s(run, cal) / run.iteration_time_s


def error_by_week(points: list[tuple[datetime, float]]) -> list[dict[str, Any]]:
    """(created_at, predicted/measured - 1) pairs as one row per ISO week, oldest first: the stored
    predictions' error over time."""
    weeks: dict[str, list[float]] = {}
    for moment, error in points:
        year, week, _ = as_utc(moment).isocalendar()
        weeks.setdefault(f"{year}-W{week:02d}", []).append(error)
    return [{"week": week, "runs": len(errors), "time_mape": sum(abs(e) for e in errors) / len(errors),
             "time_bias": sum(errors) / len(errors)} for week, errors in sorted(weeks.items())]
