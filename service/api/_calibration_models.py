"""Request and response bodies of ``/v1/calibrations``, and the calibration an answer names (issue 16)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Id = Annotated[str, Field(min_length=1, max_length=32)]


class CalibrationIn(BaseModel):
    """Fit the cost model's time constants on one cluster's (or one profile's) stored runs."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, json_schema_extra={"examples": [
        {"cluster": "dgx-h100", "from_runs": "model=llama3-8b,last=30"}]})
    cluster: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="A cluster preset's name, or a custom cluster's GPUNAMExGPUS_PER_NODE (the "
        "cluster name GET /v1/searches shows).")
    profile_id: Id | None = Field(default=None, description="Instead of cluster: the runs that name this profile.")
    from_runs: Annotated[str, Field(max_length=500)] | None = Field(
        default=None, description="Narrow the runs: comma-separated model=NAME, search=ID, since=YYYY-MM-DD, last=N.")
    k: int = Field(default=5, ge=2, le=20, description="Folds of the cross-validation (fewer when fewer runs).")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Seed of the folds' shuffle.")


class MovedOut(BaseModel):
    prior: float
    fitted: float


class CalibrationOut(BaseModel):
    """A stored calibration: the fitted constants, the runs they were fitted on, and their errors."""

    id: str
    cluster: str | None
    profile_id: str | None
    constants: dict[str, float] = Field(description="Every constant of the cost model (search.Calibration).")
    gpu_rate_scale: float = Field(description="The cluster's GPU kernel rates (matmul and attention efficiencies, "
                                  "measured GEMM rates) relative to its spec's; fitted with the constants.")
    moved: dict[str, MovedOut] = Field(description="The constants the runs moved away from the published fit "
                                       "(and gpu_rate_scale away from 1).")
    run_ids: list[str]
    n_runs: int
    k: int = Field(description="Folds of the cross-validation.")
    cv_mape_before: float = Field(description="The published constants' iteration-time MAPE on these runs "
                                  "(0.12 = 12 %).")
    cv_mape_after: float = Field(description="The k-fold cross-validated iteration-time MAPE of the fit: each run "
                                 "predicted by constants fitted without it. The error to expect.")
    in_sample_mape: float | None = Field(description="MAPE on the runs it was fitted on (optimistic).")
    prior_weight: float | None = Field(description="MAPE points that moving one constant across its bound costs.")
    from_runs: str
    fit_s: float | None
    fingerprint: str = Field(description="SHA-256 of the constants and run ids.")
    autopar_version: str
    created_at: datetime


class CalibrationPage(BaseModel):
    """A page of calibrations, newest first."""

    data: list[CalibrationOut]
    count: int
    limit: int
    offset: int


class CalibrationUsedOut(BaseModel):
    """The constants an answer was computed with."""

    id: str = Field(description="A stored calibration's id, or 'published' (search/calibration.json).")
    cv_mape: float | None = Field(description="Its k-fold cross-validated iteration-time MAPE (null: published; "
                                  "then prediction.error_band is the published runs' measured error).")
    cluster: str | None = None
    n_runs: int | None = None
    defaulted: bool = Field(default=False, description="True when the request named none and the cluster's (or "
                            "profile's) latest was taken.")
    gpu_rate_scale: float = Field(default=1.0, description="The cluster's GPU kernel rates relative to its spec's.")

