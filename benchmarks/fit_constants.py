"""Refit the cost model's global constants on published runs.

    python benchmarks/fit_constants.py [--data runs.json] [--write] [--maxiter N]

Fits the time constants of :class:`search.Calibration` by minimising the mean of the
per-source iteration-time MAPEs plus the overall MAPE (so no single source dominates), with
SciPy's differential evolution inside documented bounds; then the two memory constants on
the runs with measured memory, subject to every run that ran still fitting. ``--write``
stores them in ``search/calibration.json`` with the data they were fitted on.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scipy.optimize import differential_evolution  # noqa: E402

from search import Calibration, predict  # noqa: E402
from search._calibration import CALIBRATION_PATH  # noqa: E402
from search._runs_file import CalibrationRun, load_runs  # noqa: E402

DATA = ROOT / "benchmarks" / "data"

TIME_BOUNDS: dict[str, tuple[float, float]] = {
    "hbm_efficiency": (0.3, 0.95),
    "attention_efficiency": (0.2, 0.8),
    "gemm_overhead_s": (0.0, 100e-6),
    "zero3_efficiency": (0.05, 1.0),
    "deepspeed_zero3_efficiency": (0.02, 1.0),
    "zero3_overlap": (0.0, 1.0),
    "dp_overlap": (0.0, 1.0),
    "microbatch_overhead_s": (0.0, 0.05),
    "fp8_gemm_speedup": (1.0, 2.0),
}
MEMORY_BOUNDS: dict[str, tuple[float, float]] = {
    "memory_overhead_bytes": (0.5 * 2**30, 6 * 2**30),
    "memory_fragmentation": (1.0, 1.3),
}


def _source(run: CalibrationRun) -> str:
    return run.source.split(",")[0][:40]


def time_objective(cal: Calibration, runs: list[CalibrationRun]) -> float:
    """Mean of per-source MAPE plus overall MAPE (percent)."""
    by_source: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if run.iteration_time_s is None:
            continue
        t = predict(run.model, run.cluster, run.config, run.training, cal).iteration_time_s
        by_source[_source(run)].append(abs(t - run.iteration_time_s) / run.iteration_time_s * 100)
    all_errors = [e for es in by_source.values() for e in es]
    return statistics.fmean(statistics.fmean(es) for es in by_source.values()) + statistics.fmean(all_errors)


def memory_objective(cal: Calibration, runs: list[CalibrationRun]) -> float:
    """Memory MAPE on measured runs, plus a large penalty per run that ran but is predicted not to fit."""
    errors = []
    penalty = 0.0
    for run in runs:
        p = predict(run.model, run.cluster, run.config, run.training, cal)
        if run.peak_memory_bytes:
            errors.append(abs(p.peak_memory_bytes_per_gpu - run.peak_memory_bytes) / run.peak_memory_bytes * 100)
        if run.ran is not None and p.feasible != run.ran:
            penalty += 50.0
    return (statistics.fmean(errors) if errors else 0.0) + penalty


def fit(runs: list[CalibrationRun], maxiter: int, seed: int) -> tuple[Calibration, float, float]:
    base = Calibration()
    timed = [r for r in runs if r.iteration_time_s is not None and r.ran is not False]
    names = list(TIME_BOUNDS)

    def f_time(x: list[float]) -> float:
        return time_objective(replace(base, **dict(zip(names, x, strict=True))), timed)

    res = differential_evolution(f_time, [TIME_BOUNDS[n] for n in names], maxiter=maxiter, seed=seed,
                                 polish=True, tol=1e-4, popsize=10)
    cal = replace(base, **dict(zip(names, res.x, strict=True)))
    mnames = list(MEMORY_BOUNDS)

    def f_mem(x: list[float]) -> float:
        return memory_objective(replace(cal, **dict(zip(mnames, x, strict=True))), runs)

    mres = differential_evolution(f_mem, [MEMORY_BOUNDS[n] for n in mnames], maxiter=maxiter, seed=seed, polish=True)
    cal = replace(cal, **dict(zip(mnames, mres.x, strict=True)))
    return cal, float(res.fun), float(mres.fun)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA / "runs.json")
    parser.add_argument("--write", action="store_true", help=f"write {CALIBRATION_PATH.name}")
    parser.add_argument("--maxiter", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    runs = load_runs(args.data)
    start = time.perf_counter()
    cal, t_obj, m_obj = fit(runs, args.maxiter, args.seed)
    elapsed = time.perf_counter() - start
    constants = {k: (round(v, 6) if not math.isclose(v, 0) else 0.0) for k, v in asdict(cal).items()}
    for k, v in constants.items():
        print(f"{k:<24} {v:.6g}")
    print(f"time objective {t_obj:.2f}  memory objective {m_obj:.2f}  ({elapsed:.0f} s)")
    if args.write:
        payload = {
            "fitted_on": str(args.data.name),
            "n_runs": len(runs),
            "fitted_at": datetime.now(UTC).strftime("%Y-%m-%d"),
            "method": "scipy differential_evolution, objective = mean per-source time MAPE + overall MAPE; "
                      "memory constants on measured peak memory with an OOM-agreement penalty",
            "fitted": sorted([*TIME_BOUNDS, *MEMORY_BOUNDS]),
            "fixed": sorted(k for k in constants if k not in TIME_BOUNDS and k not in MEMORY_BOUNDS),
            "constants": constants,
        }
        CALIBRATION_PATH.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {CALIBRATION_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
