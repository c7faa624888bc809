"""The body of ``POST /v1/runs`` (pydantic v2; unknown fields are refused): a measured run, also what
``POST /v1/runs:import`` and ``autopar runs import`` build from each training log."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from service.request._schemas import ClusterIn, ConfigIn, ModelIn, Runtime, TrainingIn

Id = Annotated[str, Field(min_length=1, max_length=32)]
"""A stored row's id (a search, profile or calibration)."""


class RunIn(BaseModel):
    """A measured run: a search's ranked configuration (search_id + rank), or a full specification."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False,
                              json_schema_extra={"examples": [
        {"search_id": "3f9c0e5b8a2d4c6e9f1a2b3c4d5e6f70", "rank": 1, "iteration_time_s": 7.9,
         "peak_memory_bytes": 6.1e10, "oom": False, "notes": "nightly, NCCL 2.21"},
        {"model": {"preset": "llama3-8b"}, "cluster": {"preset": "dgx-h100"}, "training": {"global_batch": 64},
         "config": {"tp": 2}, "iteration_time_s": None, "oom": True}]})
    search_id: Id | None = None
    rank: int | None = Field(default=None, ge=1, le=100_000)
    model: ModelIn | None = None
    cluster: ClusterIn | None = None
    training: TrainingIn | None = None
    framework: Runtime | None = Field(default=None, description="Default: the search's, else megatron.")
    config: ConfigIn | None = None
    # Bounds that keep prediction errors finite: no training step is under a microsecond, no GPU
    # peaks under a kilobyte.
    iteration_time_s: float | None = Field(default=None, ge=1e-6, le=1e7,
                                           description="Measured seconds per iteration; required unless oom.")
    peak_memory_bytes: float | None = Field(default=None, ge=1024, le=1e15,
                                            description="Measured peak GPU memory (max over GPUs).")
    oom: bool = False
    profile_id: Id | None = Field(default=None, description="The profile of the machine it ran on.")
    notes: str | None = Field(default=None, max_length=2000)
