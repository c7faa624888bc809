"""Fidelity of the cost model against published runs and feasibility claims.

    python benchmarks/fidelity.py [--data runs.json] [--feasibility feasibility.json] [--json]

Predicts every run of a file in the calibration schema (``benchmarks/data/README.md``)
and prints, per run, predicted vs measured iteration time and peak memory and whether the
OOM verdict agrees; then MAPE, median and max absolute percentage error per source and
overall. ``--json`` prints one JSON object (errors in percent).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from search import Calibration, predict  # noqa: E402
from search._runs_file import CalibrationRun, load_feasibility, load_runs  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
GiB = 2**30


@dataclass(frozen=True)
class RunResult:
    run: CalibrationRun
    time_s: float
    memory_bytes: float
    feasible: bool
    error: str | None = None

    @property
    def time_ape(self) -> float | None:
        measured = self.run.iteration_time_s
        return None if measured is None or self.error else abs(self.time_s - measured) / measured * 100

    @property
    def memory_ape(self) -> float | None:
        measured = self.run.peak_memory_bytes
        return None if measured is None or self.error else abs(self.memory_bytes - measured) / measured * 100

    @property
    def oom_correct(self) -> bool | None:
        return None if self.run.ran is None else (self.feasible == self.run.ran)


def evaluate(runs: list[CalibrationRun], calibration: Calibration | None = None) -> list[RunResult]:
    """Predict every run (a run whose specs are invalid is reported, not skipped)."""
    out = []
    for run in runs:
        try:
            p = predict(run.model, run.cluster, run.config, run.training, calibration)
        except (ValueError, KeyError) as exc:
            out.append(RunResult(run, float("nan"), float("nan"), False, str(exc)))
            continue
        out.append(RunResult(run, p.iteration_time_s, p.peak_memory_bytes_per_gpu, p.feasible))
    return out


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "mape": None, "median_ape": None, "max_ape": None}
    return {"n": len(values), "mape": statistics.fmean(values), "median_ape": statistics.median(values),
            "max_ape": max(values)}


def short_source(source: str) -> str:
    """A short label for a source string (its first words up to the first comma or paren)."""
    head = source.split(",")[0].split("(")[0].strip()
    return head[:48]


def summarize(results: list[RunResult], claims_ok: list[bool] | None = None) -> dict[str, Any]:
    """The JSON summary: overall and per-source time/memory errors, OOM and feasibility agreement."""
    times = [r.time_ape for r in results if r.time_ape is not None]
    mems = [r.memory_ape for r in results if r.memory_ape is not None]
    ooms = [r.oom_correct for r in results if r.oom_correct is not None]
    by_source: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by_source[short_source(r.run.source)].append(r)
    per_source = {}
    for name, rs in sorted(by_source.items()):
        t = _stats([r.time_ape for r in rs if r.time_ape is not None])
        m = _stats([r.memory_ape for r in rs if r.memory_ape is not None])
        per_source[name] = {
            "n_time": t["n"], "time_mape": t["mape"], "time_median_ape": t["median_ape"], "time_max_ape": t["max_ape"],
            "n_memory": m["n"], "memory_mape": m["mape"], "memory_max_ape": m["max_ape"],
        }
    overall_t = _stats(times)
    overall_m = _stats(mems)
    summary: dict[str, Any] = {
        "n_runs": len(results),
        "n_errors": sum(1 for r in results if r.error),
        "n_time": overall_t["n"], "time_mape": overall_t["mape"], "time_median_ape": overall_t["median_ape"],
        "time_max_ape": overall_t["max_ape"],
        "n_memory": overall_m["n"], "memory_mape": overall_m["mape"], "memory_median_ape": overall_m["median_ape"],
        "memory_max_ape": overall_m["max_ape"],
        "n_oom": len(ooms), "oom_correct": sum(ooms),
        "per_source": per_source,
    }
    if claims_ok is not None:
        summary["n_feasibility"] = len(claims_ok)
        summary["feasibility_correct"] = sum(claims_ok)
    return summary


def check_claims(path: Path, calibration: Calibration | None = None) -> list[tuple[str, bool, bool, str]]:
    """(claim id, expected feasible, predicted feasible, reasons) for every claim."""
    rows = []
    for claim in load_feasibility(path):
        p = predict(claim.model, claim.cluster, claim.config, claim.training, calibration)
        rows.append((claim.id, claim.feasible, p.feasible, "; ".join(p.reasons)))
    return rows


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(results: list[RunResult], summary: dict[str, Any], claims: list[tuple[str, bool, bool, str]]) -> None:
    print(f"{'run':<58} {'t_pred':>9} {'t_meas':>9} {'err%':>6} {'mem_pred':>8} {'mem_meas':>8} {'err%':>6} oom")
    for r in results:
        if r.error:
            print(f"{r.run.id[:58]:<58} ERROR {r.error}")
            continue
        mm = r.run.peak_memory_bytes
        oom = {None: "-", True: "ok", False: "WRONG"}[r.oom_correct]
        print(f"{r.run.id[:58]:<58} {r.time_s:9.3f} {_fmt(r.run.iteration_time_s, '9.3f'):>9} "
              f"{_fmt(r.time_ape, '6.1f'):>6} {r.memory_bytes / GiB:8.1f} {_fmt(mm and mm / GiB, '8.1f'):>8} "
              f"{_fmt(r.memory_ape, '6.1f'):>6} {oom}")
    print()
    print(f"{'source':<50} {'n_t':>4} {'MAPE':>6} {'med':>6} {'max':>6} {'n_m':>4} {'memMAPE':>7}")
    for name, s in summary["per_source"].items():
        print(f"{name:<50} {s['n_time']:>4} {_fmt(s['time_mape'], '6.1f'):>6} {_fmt(s['time_median_ape'], '6.1f'):>6} "
              f"{_fmt(s['time_max_ape'], '6.1f'):>6} {s['n_memory']:>4} {_fmt(s['memory_mape'], '7.1f'):>7}")
    print(f"{'OVERALL':<50} {summary['n_time']:>4} {_fmt(summary['time_mape'], '6.1f'):>6} "
          f"{_fmt(summary['time_median_ape'], '6.1f'):>6} {_fmt(summary['time_max_ape'], '6.1f'):>6} "
          f"{summary['n_memory']:>4} {_fmt(summary['memory_mape'], '7.1f'):>7}")
    print(f"OOM verdicts correct: {summary['oom_correct']}/{summary['n_oom']}")
    if claims:
        print()
        for cid, expected, got, why in claims:
            mark = "ok" if expected == got else "WRONG"
            print(f"{cid:<40} expected {'fits' if expected else 'does not fit':<13} "
                  f"predicted {'fits' if got else 'does not fit':<13} {mark} {why}")
        print(f"feasibility claims correct: {summary['feasibility_correct']}/{summary['n_feasibility']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA / "runs.json", help="runs file (calibration schema)")
    parser.add_argument("--feasibility", type=Path, default=None,
                        help="feasibility claims file (default: feasibility.json next to the default data)")
    parser.add_argument("--json", action="store_true", help="print one JSON summary object")
    args = parser.parse_args(argv)
    feas = args.feasibility
    if feas is None and args.data == DATA / "runs.json" and (DATA / "feasibility.json").exists():
        feas = DATA / "feasibility.json"
    try:
        results = evaluate(load_runs(args.data))
        claims = check_claims(feas) if feas else []
    except (OSError, ValueError, KeyError) as exc:
        print(f"fidelity: error: {exc}", file=sys.stderr)
        return 2
    summary = summarize(results, [e == g for _, e, g, _ in claims] if feas else None)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_table(results, summary, claims)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
