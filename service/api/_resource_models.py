"""Request and response bodies of the profiles, presets, predict and runs endpoints (pydantic v2).

Inputs refuse unknown fields and non-finite numbers (neither database stores an infinity in
JSON). The hardware profile is validated strictly
(JSON types as ``autopar profile`` writes them) before :meth:`search.HardwareProfile.from_dict`
checks what the types cannot say. Outputs mirror the search objects field by field so a client
can post what it read back: a preset's ``shape`` is a valid ``model.shape``, a cluster preset's
``gpu`` and ``node`` a valid custom cluster, a prediction's ``config`` a valid ``config``. The
error, prediction and configuration bodies are the searches' (``_search_models``): one schema each.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from service.api._calibration_models import CalibrationUsedOut
from service.api._search_models import ErrorOut, ParallelConfigOut, PredictionOut
from service.request import (
    ClusterIn,
    ConfigIn,
    FabricIn,
    GPUIn,
    Id,
    ModelIn,
    ModelShape,
    NodeIn,
    Runtime,
    TrainingIn,
)

_ERROR_TEXT = {
    401: "No token, or an unknown or revoked one (reads too, when AUTOPAR_OPEN_READS is off).",
    403: "The token lacks the scope this endpoint needs.",
    404: "No such id.",
    422: "The body, a query parameter or the specification is invalid; `field` names it and `fix` says how.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the error codes an endpoint can answer."""
    return {code: {"model": ErrorOut, "description": _ERROR_TEXT[code]} for code in codes}


# --- hardware profiles -------------------------------------------------------------------------

class _Strict(BaseModel):
    """The profile as the profiler writes it: JSON types exactly, no coercion ("8" is not 8)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class FingerprintIn(_Strict):
    """search.Fingerprint: where and when the profile was measured."""

    gpu_name: str = Field(min_length=1, max_length=200)
    gpu_count: StrictInt = Field(ge=1, le=10_000_000)
    gpus_per_node: StrictInt = Field(ge=1, le=1024)
    created_at: str = Field(min_length=1, max_length=64, description="ISO 8601 UTC time of the measurement.")
    driver: str = Field(default="", max_length=100)
    cuda: str = Field(default="", max_length=100)
    nccl: str = Field(default="", max_length=100)
    torch: str = Field(default="", max_length=100)
    cpu_model: str = Field(default="", max_length=200)
    cpu_memory_bytes: float = Field(default=0.0, ge=0)
    hostnames: list[Annotated[str, Field(max_length=255)]] = Field(default=[], max_length=100_000)
    leaves: list[Annotated[str, Field(max_length=255)]] = Field(
        default=[], max_length=100_000, description="The leaf switch of each measured node, in node order "
        "(schema version 2).")


class GemmIn(_Strict):
    """search.GemmSample: one timed (m x k) @ (k x n)."""

    m: StrictInt = Field(ge=1)
    n: StrictInt = Field(ge=1)
    k: StrictInt = Field(ge=1)
    dtype: str = Field(min_length=1, max_length=16)
    time_s: float = Field(gt=0)


class LinkIn(_Strict):
    """search.LinkFit: alpha-beta fit of one collective on one kind of group."""

    collective: str = Field(min_length=1, max_length=40)
    scope: str = Field(min_length=1, max_length=40, description="intra_node, inter_node (across nodes of one "
                       "leaf) or inter_leaf (across leaves, schema version 2).")
    ranks: StrictInt = Field(ge=1)
    latency_s: float = Field(ge=0)
    bus_bytes_per_s: float = Field(gt=0)
    samples: list[Annotated[list[float], Field(min_length=2, max_length=2)]] = Field(default=[], max_length=10_000)
    ranks_per_node: StrictInt = Field(default=1, ge=1)


_PROFILE_EXAMPLE: dict[str, Any] = {
    "fingerprint": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "gpus_per_node": 8,
                    "created_at": "2025-06-01T12:00:00+00:00", "driver": "550.54.15", "cuda": "12.4",
                    "nccl": "2.21.5", "torch": "2.13.0", "cpu_model": "Intel Xeon Platinum 8480C",
                    "cpu_memory_bytes": 2.2e12, "hostnames": ["node01"]},
    "gemm": [{"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "time_s": 0.00145}],
    "links": [{"collective": "all_reduce", "scope": "intra_node", "ranks": 8, "latency_s": 2.5e-5,
               "bus_bytes_per_s": 4.5e11, "samples": [[1048576, 6.1e-5], [1073741824, 0.0024]],
               "ranks_per_node": 8}],
    "host_to_device_bytes_per_s": 2.6e10, "device_to_host_bytes_per_s": 2.5e10,
    "nvme_read_bytes_per_s": None, "nvme_write_bytes_per_s": None, "cpu_adam_params_per_s": None,
    "aio": {}, "schema_version": 1,
}


class ProfileIn(_Strict):
    """A hardware profile exactly as ``autopar profile`` writes it (search.HardwareProfile JSON)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              json_schema_extra={"examples": [_PROFILE_EXAMPLE]})
    fingerprint: FingerprintIn
    gemm: list[GemmIn] = Field(default=[], max_length=10_000)
    links: list[LinkIn] = Field(default=[], max_length=1_000)
    host_to_device_bytes_per_s: float | None = Field(default=None, gt=0)
    device_to_host_bytes_per_s: float | None = Field(default=None, gt=0)
    nvme_read_bytes_per_s: float | None = Field(default=None, gt=0)
    nvme_write_bytes_per_s: float | None = Field(default=None, gt=0)
    cpu_adam_params_per_s: float | None = Field(default=None, gt=0)
    aio: dict[Annotated[str, Field(max_length=100)], StrictBool | StrictInt | float | str] = Field(
        default={}, max_length=100, description="Best DeepSpeed aio settings found on the NVMe path.")
    schema_version: StrictInt = Field(description="search.SCHEMA_VERSION (2), or 1 (no leaves); other versions "
                                      "are refused.")


class ProfileSummary(BaseModel):
    """What the list shows of a stored profile."""

    id: str
    name: str
    schema_version: int
    gpu_name: str
    gpus_per_node: int
    fingerprint: str = Field(description="One line: GPUs, hosts and software versions.")
    measured_at: datetime | None
    created_at: datetime = Field(description="When it was uploaded.")


class ProfileOut(ProfileSummary):
    body: dict[str, Any] = Field(description="The HardwareProfile JSON (the schema of POST /v1/profiles).")


class ProfilePage(BaseModel):
    """A page of profiles, newest upload first."""

    data: list[ProfileSummary]
    count: int = Field(description="Profiles in all pages.")
    limit: int
    offset: int


# --- presets -----------------------------------------------------------------------------------

class ModelPresetOut(BaseModel):
    name: str
    shape: ModelShape = Field(description="Valid as model.shape of a request.")
    params: int = Field(description="Parameter count derived from the shape (search.ModelSpec.params).")
    active_params: int = Field(description="Parameters one token passes through (search.ModelSpec.active_params): "
                               "params for a dense model, fewer with a mixture of experts.")
    published_params: float | None = Field(description="The count the source publishes, rounded as published.")
    source: str | None = Field(description="Where the shape comes from.")


class ModelPresetList(BaseModel):
    data: list[ModelPresetOut]


class ClusterPresetOut(BaseModel):
    """One node of a cluster preset; ``gpu`` + ``node`` are valid as a custom cluster of a request."""

    name: str
    gpu: GPUIn
    node: NodeIn
    fabric: FabricIn | None = None
    """The preset's scale-out fabric (valid as a request's ``cluster.fabric``)."""


class ClusterPresetList(BaseModel):
    data: list[ClusterPresetOut]


# --- predict -----------------------------------------------------------------------------------

class PredictIn(BaseModel):
    """One configuration of a model on a cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, json_schema_extra={"examples": [{
        "model": {"preset": "llama3-70b"}, "cluster": {"preset": "dgx-h100", "nodes": 8},
        "training": {"global_batch": 512, "precision": "bf16"}, "framework": "megatron",
        "config": {"tp": 8, "pp": 2, "sp": True, "micro_batch": 1, "zero_stage": 1, "recompute": "selective"}}]})
    model: ModelIn
    cluster: ClusterIn
    training: TrainingIn
    framework: Runtime = "megatron"
    config: ConfigIn = ConfigIn()
    calibration_id: Id | None = Field(default=None, description="A stored calibration (GET /v1/calibrations) or "
                                      "'published'; default: the cluster's (or profile's) latest, else published.")
    host_safety_factor: float = Field(default=1.0, ge=1.0, le=4.0, allow_inf_nan=False,
                                      description="Keep this multiple of the offloaded states' host memory free: 1 "
                                      "requires what the runtime allocates, 1.5 DeepSpeed's estimator margin.")


class PredictOut(BaseModel):
    model: str = Field(description="The model's name.")
    cluster: str = Field(description="The cluster's name.")
    num_nodes: int
    world_size: int
    framework: Runtime
    config: ParallelConfigOut = Field(description="The configuration predicted, dp filled in (valid as config).")
    profile_id: str | None
    prediction: PredictionOut
    profile_notes: list[str] = Field(description="Figures the profile did not measure (preset values used).")
    profile_warnings: list[str] = Field(description="Why the profile may not describe this cluster (age, GPU).")
    calibration: CalibrationUsedOut = Field(description="The constants used and their cross-validated error.")


# --- measured runs -----------------------------------------------------------------------------

class RunOut(BaseModel):
    """A stored run, its specification, what was predicted at upload, and the errors."""

    id: str
    search_id: str | None
    rank: int | None
    profile_id: str | None
    model: ModelIn
    cluster: ClusterIn
    training: TrainingIn
    framework: Runtime
    config: ParallelConfigOut = Field(description="The configuration that ran, dp filled in.")
    notes: str | None
    iteration_time_s: float | None
    peak_memory_bytes: float | None
    oom: bool
    predicted_iteration_time_s: float | None
    predicted_peak_memory_bytes: float | None
    predicted_fits: bool | None
    time_error: float | None = Field(description="predicted / measured - 1 (positive: predicted slower).")
    memory_error: float | None = Field(description="predicted / measured - 1 (positive: predicted more).")
    oom_agrees: bool | None = Field(description="predicted_fits == (not oom).")
    autopar_version: str
    created_at: datetime


class AccuracyOut(BaseModel):
    """How well the stored predictions matched the stored measurements."""

    runs: int = Field(description="Runs matching the filters.")
    timed: int = Field(description="Runs with a measured and a predicted iteration time.")
    time_mape: float | None = Field(description="Mean |predicted/measured - 1| of the iteration time.")
    time_median_ape: float | None = Field(description="Median of the same.")
    time_worst_ape: float | None = Field(description="Largest of the same.")
    time_bias: float | None = Field(description="Mean predicted/measured - 1 (negative: predictions too fast).")
    memory_measured: int = Field(description="Runs with a measured and a predicted peak memory.")
    memory_mape: float | None = Field(description="Mean |predicted/measured - 1| of the peak memory per GPU.")
    oom_judged: int = Field(description="Runs with both an OOM outcome and a fit verdict.")
    oom_agreement: float | None = Field(description="Share of them where 'fits' and 'did not run out of memory' "
                                                    "agree.")


class RunPage(BaseModel):
    """A page of runs, newest first."""

    data: list[RunOut]
    count: int = Field(description="Runs matching the filters, over all pages.")
    limit: int
    offset: int


# --- measured runs from training logs (POST /v1/runs:import) ------------------------------------

class ImportedLog(BaseModel):
    """One training log stored as a measured run."""

    file: str = Field(description="The log's file name (a text/plain body's `name`).")
    format: str = Field(description="megatron, megatron-deepspeed, deepspeed or torchtitan (as detected or given).")
    iterations: int = Field(description="Iteration lines in the log.")
    steady_iterations: int = Field(description="Lines the iteration time is the median of: the first max(2, 10%) "
                                   "are warm-up, and lines with skipped or NaN iterations are left out.")
    memory_kind: str | None = Field(description="What the peak memory counts: max allocated (Megatron, DeepSpeed) "
                                    "or max reserved (torchtitan); null when the log prints none.")
    run: RunOut


class RunImportOut(BaseModel):
    """The runs stored from the logs of one import, in the order the logs were sent."""

    data: list[ImportedLog]
    count: int
