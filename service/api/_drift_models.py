"""The body of GET /v1/runs/accuracy with its error over time and a cluster's drift (issue 16)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.api._resource_models import AccuracyOut


class ErrorWeekOut(BaseModel):
    """The stored predictions' iteration-time error of the runs stored in one ISO week."""

    week: str = Field(description="ISO year and week, e.g. 2026-W49.")
    runs: int
    time_mape: float
    time_bias: float = Field(description="Mean predicted/measured - 1 (negative: predictions too fast).")


class DriftOut(BaseModel):
    """Whether a cluster's newest runs still match its calibration's cross-validated error."""

    cluster: str
    calibration_id: str = Field(description="The cluster's latest calibration, or 'published' when it has none.")
    calibration_cv_mape: float | None
    runs: int = Field(description="Runs stored after the calibration (and not fitted on) that were predicted again.")
    recent_time_mape: float | None = Field(description="Their iteration-time MAPE under the calibration.")
    recent_time_bias: float | None
    threshold: float | None = Field(description="cv_mape + max(cv_mape / 2, 0.03): above it, the cluster drifted.")
    drifting: bool
    advice: str = Field(description="What the figures mean and what to do (recalibrate when drifting).")


class AccuracyDriftOut(AccuracyOut):
    """The accuracy of the stored predictions, over time, and a cluster's drift from its calibration."""

    by_week: list[ErrorWeekOut] = Field(description="Error of the matching runs' stored predictions per week.")
    drift: DriftOut | None = Field(description="With ?cluster=: the drift check of that cluster (null without).")
