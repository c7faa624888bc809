"""Refit the cost model's global constants on published runs.

    python benchmarks/fit_constants.py [--data FILE ...] [--write] [--maxiter N]

Fits the time constants of :class:`search.Calibration` by minimising the mean of the
per-source iteration-time MAPEs plus the overall MAPE (so no single source dominates), with
SciPy's differential evolution inside documented bounds; then the two memory constants on
the runs with measured memory, subject to every run that ran still fitting. Runs whose
configuration leaves fields open are predicted as tuned (``benchmarks/_tuned.py``), as
``benchmarks/fidelity.py`` scores them. ``--data`` (repeatable) defaults to
``benchmarks/data/runs.json``; records the model cannot express are left out and counted.
``--write`` stores the constants in ``search/calibration.json`` with the data they were fitted on,
and the model's error bands measured with them (per runtime and GPU family; ``--bands-only``
recomputes just those).
:func:`fit` is what ``fidelity.py --loso`` calls.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._errata import read_corrected  # noqa: E402
from benchmarks._tuned import completions, predict_tuned  # noqa: E402
from search import Calibration, ParallelConfig  # noqa: E402
from search._calibration import CALIBRATION_PATH, default_calibration  # noqa: E402
from search._error_band import MIN_RUNS, gpu_family  # noqa: E402
from search._fit import MEMORY_BOUNDS, TIME_BOUNDS, MeasuredRun, fit_time_constants  # noqa: E402
from search._fit import time_objective as _time_objective  # noqa: E402
from search._runs_file import CalibrationRun, load_runs, read_runs  # noqa: E402, F401 (load_runs: for callers)

DATA = ROOT / "benchmarks" / "data"
"""The project's calibration data (``benchmarks/data/PROVENANCE.md``)."""
FIT_DATA = (DATA / "runs.json",)
"""What the shipped constants are fitted on (``search/calibration.json`` names it): the 2019-2024
runs. The 2024-2026 runs the model can express (14 dense H100/A100 rows, 5 of them at 16K-1M
tokens) would each be a source of equal weight in the objective; add them with ``--data``."""

def short_source(source: str) -> str:
    """A short label for a source string (its first words up to the first comma or paren): the
    per-source groups of the objective and of fidelity.py's report."""
    head = source.split(",")[0].split("(")[0].strip()
    return head[:48]


Completions = dict[CalibrationRun, list[ParallelConfig]]
"""The valid completions of each run (:func:`benchmarks._tuned.completions`), computed once per fit."""


def measured(run: CalibrationRun, configs: Completions | None = None) -> MeasuredRun:
    """The run as :class:`search._fit.MeasuredRun`: its completions (computed when not given), its
    source as its group."""
    if run.iteration_time_s is None:
        raise ValueError(f"run {run.id} has no measured iteration time")
    return MeasuredRun(run.model, run.cluster, run.training, tuple((configs or {}).get(run) or completions(run)),
                       run.iteration_time_s, short_source(run.source))


def time_objective(cal: Calibration, runs: list[CalibrationRun], configs: Completions | None = None) -> float:
    """Mean of per-source MAPE plus overall MAPE (percent); ``configs``: completions by run
    (:func:`search._fit.time_objective` on the timed runs)."""
    return _time_objective(cal, [measured(r, configs) for r in runs if r.iteration_time_s is not None])


def memory_objective(cal: Calibration, runs: list[CalibrationRun], configs: Completions | None = None) -> float:
    """Memory MAPE on measured runs, plus a large penalty per run that ran but is predicted not to fit."""
    errors = []
    penalty = 0.0
    for run in runs:
        p = predict_tuned(run, cal, (configs or {}).get(run)).prediction
        if run.peak_memory_bytes:
            errors.append(abs(p.peak_memory_bytes_per_gpu - run.peak_memory_bytes) / run.peak_memory_bytes * 100)
        if run.ran is not None and p.feasible != run.ran:
            penalty += 50.0
    return (statistics.fmean(errors) if errors else 0.0) + penalty


@dataclass(frozen=True)
class FitResult:
    """Fitted constants and the objectives they reach."""

    calibration: Calibration
    time_objective: float
    memory_objective: float
    seconds: float


def fit(runs: list[CalibrationRun], maxiter: int = 40, seed: int = 0,
        progress: Callable[[str], None] | None = None) -> FitResult:
    """Fit :data:`TIME_BOUNDS` on the timed runs, then :data:`MEMORY_BOUNDS` on all of them.

    ``progress`` receives a line every 5 generations of each stage. 35-95 s on the 260 runs
    of runs.json at ``maxiter=40`` on a shared 2-core machine; the cost grows with ``maxiter``."""
    from scipy.optimize import OptimizeResult, differential_evolution

    start = time.perf_counter()
    # The constants runs.json cannot tell keep their shipped values (fitted apart: OFF_FILE).
    shipped = default_calibration()
    base = replace(Calibration(), **{name: getattr(shipped, name) for name in OFF_FILE})
    timed = [r for r in runs if r.iteration_time_s is not None and r.ran is not False]
    if not timed:
        raise ValueError("no run with a measured iteration time to fit the time constants on")
    configs = {r: completions(r) for r in runs}

    def report(stage: str) -> Callable[[OptimizeResult], None]:
        def callback(intermediate_result: OptimizeResult) -> None:
            n = int(intermediate_result.nit)
            if progress and (n % 5 == 0 or n == maxiter):
                progress(f"{stage}: generation {n}/{maxiter}, objective {float(intermediate_result.fun):.2f} "
                         f"({time.perf_counter() - start:.0f} s)")
        return callback

    cal = fit_time_constants([measured(r, configs) for r in timed], base, prior_weight=0.0, method="global",
                             maxiter=maxiter, seed=seed, progress=progress,
                             keep=[n for n in OFF_FILE if n in TIME_BOUNDS])
    time_fun = time_objective(cal, timed, configs)
    mnames = list(MEMORY_BOUNDS)

    def f_mem(x: list[float]) -> float:
        return memory_objective(replace(cal, **dict(zip(mnames, x, strict=True))), runs, configs)

    mres = differential_evolution(f_mem, [MEMORY_BOUNDS[n] for n in mnames], maxiter=maxiter, seed=seed, polish=True,
                                  callback=report("memory constants"))
    cal = replace(cal, **dict(zip(mnames, mres.x, strict=True)))
    return FitResult(cal, time_fun, float(mres.fun), time.perf_counter() - start)


def error_bands(runs: list[CalibrationRun], cal: Calibration, configs: Completions | None = None,
                moe_runs: list[CalibrationRun] | None = None) -> dict[str, Any]:
    """The model's measured iteration-time error, as fractions: per runtime and GPU family, per
    runtime, and the worst per-source figure (what :func:`search._error_band.error_band` reads;
    an unmeasured runtime/GPU falls back to the runtime's, then to the worst source's); and over
    the published mixture-of-experts runs (``moe_runs``, default: those of
    ``benchmarks/data/runs_2024_2026.json`` read with their errata, each with the token dispatcher and
    all-to-all overlap its recipe ran; rows whose dispatcher no recipe pins are refused), which an MoE
    prediction's band never falls below."""
    by_pair: dict[str, list[float]] = defaultdict(list)
    by_runtime: dict[str, list[float]] = defaultdict(list)
    by_source: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if run.iteration_time_s is None or run.ran is False:
            continue
        t = predict_tuned(run, cal, (configs or {}).get(run)).prediction.iteration_time_s
        ape = abs(t - run.iteration_time_s) / run.iteration_time_s
        framework = run.training.framework
        by_pair[f"{framework}/{gpu_family(run.cluster.gpu.name)}"].append(ape)
        by_runtime[framework].append(ape)
        by_source[short_source(run.source)].append(ape)

    def summary(groups: dict[str, list[float]]) -> dict[str, dict[str, float]]:
        return {k: {"mape": round(statistics.fmean(v), 4), "n": len(v)} for k, v in sorted(groups.items())}

    if moe_runs is None:
        # As the published recipes ran them (misprints corrected, dispatcher and overlap completed): what
        # a user of those recipes meets (an answer is never surer than that).
        moe_runs = [r for r in read_corrected(DATA / "runs_2024_2026.json")[0].runs if r.model.moe is not None]
    moe = [abs(predict_tuned(r, cal).prediction.iteration_time_s - r.iteration_time_s) / r.iteration_time_s
           for r in moe_runs if r.iteration_time_s is not None and r.ran is not False]
    return {"by_runtime_gpu": summary(by_pair), "by_runtime": summary(by_runtime),
            "worst_source": round(max(statistics.fmean(v) for v in by_source.values()), 4),
            "moe": {"mape": round(statistics.fmean(moe), 4), "n": len(moe)} if moe else None,
            "min_runs": MIN_RUNS}


OFF_FILE = ("fused_attention_share", "moe_sync_chunk_s")
"""Constants fitted on runs_2024_2026.json, not on the fit data (runs.json cannot tell them): listed as
fixed for the fit, each with its own record in calibration.json. A per-cluster calibration fits the
fused-attention share with the others (``search._fit.TIME_BOUNDS``)."""


def _fused_rows(path: Path) -> list[CalibrationRun]:
    """The dense runs of ``path`` (with their errata) whose runtime runs a fused attention kernel on a GPU
    that has one: what :attr:`Calibration.fused_attention_share` is fitted on."""
    from search._predict import FUSED_ATTENTION_RUNTIMES

    return [r for r in read_corrected(path)[0].runs
            if r.model.moe is None and r.iteration_time_s is not None and r.ran is not False
            and r.training.framework in FUSED_ATTENTION_RUNTIMES and r.cluster.gpu.fused_attention_efficiency]


def fused_attention_objective(cal: Calibration, runs: list[CalibrationRun],
                              configs: Completions | None = None) -> float:
    """Mean time APE (%) of ``runs`` predicted as tuned under ``cal``."""
    return 100 * statistics.fmean(
        abs(predict_tuned(r, cal, (configs or {}).get(r)).prediction.iteration_time_s - r.iteration_time_s)
        / r.iteration_time_s for r in runs)


def fused_attention_share_fit(cal: Calibration, path: Path = DATA / "runs_2024_2026.json",
                              tolerance: float = 0.005) -> dict[str, Any]:
    """:attr:`Calibration.fused_attention_share` minimising the mean time APE of the dense fused-attention
    runs of ``path`` (golden-section search over [0.3, 1.0], the other constants as in ``cal``), with the
    objective there and each source's value fitted without it (leave one source out)."""
    runs = _fused_rows(path)
    configs = {r: completions(r) for r in runs}

    def best(subset: list[CalibrationRun]) -> float:
        lo, hi, g = 0.3, 1.0, (math.sqrt(5) - 1) / 2
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        fa = fused_attention_objective(replace(cal, fused_attention_share=a), subset, configs)
        fb = fused_attention_objective(replace(cal, fused_attention_share=b), subset, configs)
        while hi - lo > tolerance:
            if fa <= fb:
                hi, b, fb = b, a, fa
                a = hi - g * (hi - lo)
                fa = fused_attention_objective(replace(cal, fused_attention_share=a), subset, configs)
            else:
                lo, a, fa = a, b, fb
                b = lo + g * (hi - lo)
                fb = fused_attention_objective(replace(cal, fused_attention_share=b), subset, configs)
        return round((lo + hi) / 2, 3)

    value = best(runs)
    sources = sorted({short_source(r.source) for r in runs})
    loso = {}
    for source in sources:
        held = [r for r in runs if short_source(r.source) == source]
        share = best([r for r in runs if short_source(r.source) != source])
        loso[source] = {"share": share, "n": len(held), "mape": round(fused_attention_objective(
            replace(cal, fused_attention_share=share), held, configs), 2)}
    return {"value": value, "n": len(runs), "fitted_on": path.name,
            "mape": round(fused_attention_objective(replace(cal, fused_attention_share=value), runs, configs), 2),
            "leave_one_source_out": loso}


def moe_sync_chunk_fit(cal: Calibration, path: Path = DATA / "runs_2024_2026.json") -> dict[str, Any]:
    """:attr:`Calibration.moe_sync_chunk_s` from the published MoE runs whose dispatcher synchronizes the
    host in every MoE layer (``search._moe_dispatch.syncs_host``, read with their errata): each
    run's measured minus predicted time without the term, per pipeline chunk it runs (micro-batches
    x virtual stages), averaged over the runs (0 if that is negative); with the per-run values and the
    leave-one-out spread
    (each run's value against the mean of the others). runs.json has no MoE run to fit it on. Models
    with a sliding window (GPT-OSS, read since 2026-12-01) are left out: the constant was fitted without
    them, and their 8 rows the loader reads as alltoall (no recipe pins a dispatcher) leave 0.26 s per
    chunk, 10x the others', which is no host synchronization the fit should average in."""
    from search._moe_dispatch import syncs_host

    zero = replace(cal, moe_sync_chunk_s=0.0)
    per_chunk: dict[str, float] = {}
    for run in read_corrected(path)[0].runs:
        if run.model.moe is None or run.iteration_time_s is None or run.ran is False \
                or run.model.attention_window is not None:
            continue
        tuned = predict_tuned(run, zero)
        c = tuned.config
        if c.ep <= 1 or not syncs_host(c.moe_dispatcher, run.model.moe.pad_to_capacity):
            continue
        chunks = tuned.prediction.num_micro_batches * c.vp
        per_chunk[run.id] = (run.iteration_time_s - tuned.prediction.iteration_time_s) / chunks
    if not per_chunk:
        raise ValueError(f"{path}: no MoE run with a host-synchronizing dispatcher to fit moe_sync_chunk_s on")
    values = list(per_chunk.values())
    mean = max(0.0, statistics.fmean(values))  # host time cannot be negative: 0 when the runs show none
    others = [(sum(values) - v) / (len(values) - 1) for v in values] if len(values) > 1 else values
    return {"value": round(mean, 6), "n": len(values), "per_chunk_s": {k: round(v, 6) for k, v in per_chunk.items()},
            "leave_one_out_s": [round(min(others), 6), round(max(others), 6)], "fitted_on": path.name}


def read_all(paths: list[Path]) -> tuple[list[CalibrationRun], int]:
    """The runs of every file (with their errata, ``benchmarks/_errata.py``), and how many records
    were refused (fidelity.py says why)."""
    runs: list[CalibrationRun] = []
    refused = 0
    for path in paths:
        got, _ = read_corrected(path)
        runs += got.runs
        refused += len(got.refused)
    return runs, refused


def _store_off_file_fit(name: str, key: str, record: dict[str, Any]) -> None:
    """Write one :data:`OFF_FILE` constant's fitted value into calibration.json as a fixed constant,
    with its fit's record under ``key``, the other constants kept; print the record."""
    payload = json.loads(CALIBRATION_PATH.read_text())
    payload["constants"][name] = record["value"]
    payload[key] = record
    payload["fixed"] = sorted(set(payload.get("fixed", [])) | {name})
    CALIBRATION_PATH.write_text(json.dumps(payload, indent=2) + "\n")
    default_calibration.cache_clear()
    print(json.dumps(record, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, action="append", metavar="FILE",
                        help="runs file in the calibration schema; repeat for several "
                        f"(default: {', '.join(str(p.relative_to(ROOT)) for p in FIT_DATA)})")
    parser.add_argument("--write", action="store_true", help=f"write {CALIBRATION_PATH.name}")
    parser.add_argument("--maxiter", type=int, default=40, help="generations of each differential evolution")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bands-only", action="store_true",
                        help="keep the constants; recompute and write only the error bands")
    parser.add_argument("--fused-attention", action="store_true",
                        help="keep the other constants; refit fused_attention_share on the dense fused-attention "
                             "runs of runs_2024_2026.json, then moe_sync_chunk_s and the error bands (minutes)")
    parser.add_argument("--moe-sync", action="store_true",
                        help="keep the other constants; refit moe_sync_chunk_s on the published MoE runs "
                             "(runs_2024_2026.json), then write it and the error bands")
    args = parser.parse_args(argv)
    paths = args.data or list(FIT_DATA)
    try:
        runs, refused = read_all(paths)
    except (OSError, ValueError) as exc:
        print(f"fit_constants: error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(runs)} runs from {', '.join(p.name for p in paths)}; {refused} record{'s' * (refused != 1)} the "
          "model cannot express left out (benchmarks/fidelity.py lists them)", file=sys.stderr)
    if args.fused_attention:
        _store_off_file_fit("fused_attention_share", "fused_attention_share_fit",
                            fused_attention_share_fit(default_calibration()))
        args.moe_sync = True  # fitted on residuals the attention rate moves
    if args.moe_sync:
        _store_off_file_fit("moe_sync_chunk_s", "moe_sync_chunk_fit", moe_sync_chunk_fit(default_calibration()))
        args.bands_only = True  # the bands follow the constants
    if args.bands_only:
        payload = json.loads(CALIBRATION_PATH.read_text())
        payload["error_bands"] = error_bands(runs, default_calibration())
        CALIBRATION_PATH.write_text(json.dumps(payload, indent=2) + "\n")
        print(json.dumps(payload["error_bands"], indent=2))
        print(f"wrote the error bands of {CALIBRATION_PATH}")
        return 0
    result = fit(runs, args.maxiter, args.seed, progress=lambda line: print(line, file=sys.stderr))
    # Two constants runs.json cannot tell: the fused-attention share (4 of its runs run a fused kernel)
    # on the dense Megatron-Core runs of 2024-26, then the host-sync time on the MoE runs (it has none).
    fused = fused_attention_share_fit(result.calibration)
    result = replace(result, calibration=replace(result.calibration, fused_attention_share=fused["value"]))
    sync = moe_sync_chunk_fit(result.calibration)
    result = replace(result, calibration=replace(result.calibration, moe_sync_chunk_s=sync["value"]))
    constants = {k: (round(v, 6) if not math.isclose(v, 0) else 0.0) for k, v in asdict(result.calibration).items()}
    for k, v in constants.items():
        print(f"{k:<24} {v:.6g}")
    print(f"time objective {result.time_objective:.2f}  memory objective {result.memory_objective:.2f}  "
          f"({result.seconds:.0f} s)")
    if args.write:
        payload = {
            "fitted_on": ", ".join(p.name for p in paths),
            "n_runs": len(runs),
            "fitted_at": datetime.now(UTC).strftime("%Y-%m-%d"),
            "method": "scipy differential_evolution, objective = mean per-source time MAPE + overall MAPE; "
                      "memory constants on measured peak memory with an OOM-agreement penalty; "
                      "runs with open configuration fields predicted as tuned",
            "fitted": sorted(k for k in (*TIME_BOUNDS, *MEMORY_BOUNDS) if k not in OFF_FILE),
            "fixed": sorted(k for k in constants if k in OFF_FILE or (k not in TIME_BOUNDS and k not in MEMORY_BOUNDS)),
            "constants": constants,
            "fused_attention_share_fit": fused,
            "moe_sync_chunk_fit": sync,
            "error_bands": error_bands(runs, result.calibration),
        }
        CALIBRATION_PATH.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {CALIBRATION_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
