"""Measured runs: a training log read into the run it describes, and a run stored with what the cost
model predicts for it. Shared by the API (``POST /v1/runs``, ``POST /v1/runs:import``) and the
command line (``autopar runs import``), so neither imports the other's internals."""

from service.runs._logs import LogRun, log_run
from service.runs._store import SPEC_FIELDS, RunSpec, check_measured, ratio_error, run_out, store_run

__all__ = ["SPEC_FIELDS", "LogRun", "RunSpec", "check_measured", "log_run", "ratio_error", "run_out", "store_run"]
