"""Fidelity of the cost model against published runs and feasibility claims.

    python benchmarks/fidelity.py [--data FILE ...] [--feasibility FILE] [--json] [--as-published]
                                  [--loso [--maxiter N]]

Predicts every run of the files in the calibration schema (``benchmarks/data/README.md``;
default: the project's published runs in ``benchmarks/data``) and prints, per run, predicted vs
measured iteration time and peak memory and whether the OOM verdict agrees; then MAPE, median
and max absolute percentage error per source and overall. A run whose configuration leaves
fields open is predicted as tuned (``benchmarks/_tuned.py``). A record the model cannot express
(an unknown GPU, a mixture of experts, an uneven pipeline, ...) or that is malformed is listed
with its reasons and counted by reason; it never stops the others. A row whose printed layout its
own recipe contradicts is read with its erratum (``benchmarks/data/errata.json``, listed in the
report; ``--as-published`` reads every row as printed).

Ranking: among runs of the same model shape on the same GPU type and count, every pair whose
measured tokens/s differ by more than 10 % (5 % and 20 % too) is concordant when the predicted
tokens/s order the two the same way. ``--loso`` refits the constants without each source and
predicts that source (``fit_constants.fit``; minutes), the honest error on a new cluster.
``--json`` prints one JSON object (errors in percent).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._errata import Erratum, load_errata, read_corrected  # noqa: E402
from benchmarks._tuned import predict_tuned  # noqa: E402
from benchmarks.fit_constants import DATA, fit, short_source  # noqa: E402
from search import Calibration, predict  # noqa: E402
from search._runs_file import (  # noqa: E402
    CalibrationRun,
    RefusedRow,
    load_feasibility,
    load_runs,  # noqa: F401 (for callers)
    read_runs,  # noqa: F401 (for callers)
)

DEFAULT_DATA = (DATA / "runs.json", DATA / "runs_2024_2026.json")
"""Every published run of the project (``benchmarks/data/PROVENANCE.md``)."""
GiB = 2**30
THRESHOLDS = (0.05, 0.10, 0.20)
"""Measured tokens/s gaps above which a pair of runs is ranked; 0.10 is the headline."""
HEADLINE = 0.10
ERRATA_NOTE = "benchmarks/data/errata.json; --as-published reads them as printed"
ACROSS = "(across sources)"


@dataclass(frozen=True)
class RunResult:
    run: CalibrationRun
    time_s: float
    memory_bytes: float
    feasible: bool
    error: str | None = None
    completed: bool = False
    """The record left configuration fields open and the prediction took the best completion."""

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


def evaluate(runs: Sequence[CalibrationRun], calibration: Calibration | None = None) -> list[RunResult]:
    """Predict every run, as tuned where it leaves fields open (an invalid run is reported, not skipped)."""
    out = []
    for run in runs:
        try:
            tuned = predict_tuned(run, calibration)
        except (ValueError, KeyError) as exc:
            out.append(RunResult(run, float("nan"), float("nan"), False, str(exc)))
            continue
        p = tuned.prediction
        out.append(RunResult(run, p.iteration_time_s, p.peak_memory_bytes_per_gpu, p.feasible,
                             completed=bool(run.unknown)))
    return out


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "mape": None, "median_ape": None, "max_ape": None}
    return {"n": len(values), "mape": statistics.fmean(values), "median_ape": statistics.median(values),
            "max_ape": max(values)}


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def group_key(run: CalibrationRun) -> tuple[Any, ...]:
    """Runs compared pairwise: same model shape, GPU type and GPU count."""
    m = run.model
    return (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab, m.seq_len, m.activation,
            run.cluster.gpu.name, run.cluster.world_size)


def pairwise(results: Sequence[RunResult], threshold: float = HEADLINE) -> dict[str, Any]:
    """Concordance of the predicted with the measured order of tokens/s, over the pairs of one
    :func:`group_key` whose measured tokens/s differ by more than ``threshold`` (max/min - 1);
    a pair the model predicts equal is not concordant. Per source: pairs of one source, and
    pairs across sources."""
    groups: dict[tuple[Any, ...], list[RunResult]] = defaultdict(list)
    for r in results:
        if r.error is None and r.run.iteration_time_s and r.run.ran is not False:
            groups[group_key(r.run)].append(r)
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for members in groups.values():
        for a, b in itertools.combinations(members, 2):
            tokens = [r.run.training.global_batch * r.run.model.seq_len for r in (a, b)]
            measured = [n / float(r.run.iteration_time_s or 0) for n, r in zip(tokens, (a, b), strict=True)]
            if max(measured) / min(measured) - 1 <= threshold:
                continue
            predicted = [n / r.time_s for n, r in zip(tokens, (a, b), strict=True)]
            concordant = predicted[0] != predicted[1] and (predicted[0] > predicted[1]) == (measured[0] > measured[1])
            sa, sb = short_source(a.run.source), short_source(b.run.source)
            for key in (sa if sa == sb else ACROSS, ""):
                tally[key][0] += 1
                tally[key][1] += concordant
    pairs, concordant = tally.pop("", [0, 0])
    return {
        "threshold": threshold, "pairs": pairs, "concordant": concordant, "concordance": _ratio(concordant, pairs),
        "n_groups": sum(1 for g in groups.values() if len(g) > 1),
        "per_source": {s: {"pairs": n, "concordant": c, "concordance": _ratio(c, n)}
                       for s, (n, c) in sorted(tally.items())},
    }


def ranking(results: Sequence[RunResult]) -> dict[str, Any]:
    """The headline :func:`pairwise` figures, with the other thresholds under ``at``."""
    out = pairwise(results, HEADLINE)
    keys = ("pairs", "concordant", "concordance")
    out["at"] = {f"{t:g}": {k: v for k, v in pairwise(results, t).items() if k in keys} for t in THRESHOLDS}
    return out


def refusals(refused: Sequence[RefusedRow]) -> dict[str, Any]:
    """Records that could not be predicted, counted by reason category (a record counts under each of
    its categories in ``by_reason`` and under its first in ``by_first_reason``), and listed."""
    return {
        "n": len(refused),
        "by_reason": dict(Counter(c for row in refused for c in dict.fromkeys(r.category for r in row.refusals))
                          .most_common()),
        "by_first_reason": dict(Counter(row.refusals[0].category for row in refused).most_common()),
        "rows": [{"id": row.id, "file": Path(row.path).name,
                  "reasons": [{"field": r.field, "category": r.category, "problem": r.problem} for r in row.refusals]}
                 for row in refused],
    }


def summarize(results: list[RunResult], claims_ok: list[bool] | None = None,
              refused: Sequence[RefusedRow] = (), errata: Sequence[Erratum] = ()) -> dict[str, Any]:
    """The JSON summary: overall and per-source time/memory errors, OOM and feasibility agreement,
    the pairwise ranking, the runs completed as tuned, the records refused, the errata applied
    (``benchmarks/_errata.py``), the mixture-of-experts runs' error per model family, and the error
    per GPU type (dense and MoE apart)."""
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
    completed = [r for r in results if r.completed]
    by_family: dict[str, list[float]] = defaultdict(list)
    by_gpu: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r.time_ape is None:
            continue
        by_gpu[f"{r.run.cluster.gpu.name} {'MoE' if r.run.model.moe is not None else 'dense'}"].append(r.time_ape)
        if r.run.model.moe is not None:
            by_family[r.run.model.name].append(r.time_ape)
    summary: dict[str, Any] = {
        "n_runs": len(results),
        "n_errors": sum(1 for r in results if r.error),
        "n_time": overall_t["n"], "time_mape": overall_t["mape"], "time_median_ape": overall_t["median_ape"],
        "time_max_ape": overall_t["max_ape"],
        "n_memory": overall_m["n"], "memory_mape": overall_m["mape"], "memory_median_ape": overall_m["median_ape"],
        "memory_max_ape": overall_m["max_ape"],
        "n_oom": len(ooms), "oom_correct": sum(ooms),
        "per_source": per_source,
        "n_completed_as_tuned": len(completed),
        "completed_fields": dict(Counter(f for r in completed for f in r.run.unknown).most_common()),
        "pairwise": ranking(results),
        "refused": refusals(refused),
        "errata": [e.as_dict() for e in errata],
        "moe_families": {name: {"n_time": st["n"], "time_mape": st["mape"], "time_max_ape": st["max_ape"]}
                         for name, apes in sorted(by_family.items()) for st in (_stats(apes),)},
        "per_gpu": {name: {"n_time": st["n"], "time_mape": st["mape"], "time_max_ape": st["max_ape"]}
                    for name, apes in sorted(by_gpu.items()) for st in (_stats(apes),)},
    }
    if claims_ok is not None:
        summary["n_feasibility"] = len(claims_ok)
        summary["feasibility_correct"] = sum(claims_ok)
    return summary


def leave_one_source_out(runs: Sequence[CalibrationRun], maxiter: int = 40, seed: int = 0,
                         progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Refit the constants without each source and predict it: its time MAPE then is the error to
    expect on a cluster the constants never saw (``in_sample_time_mape``: with the shipped constants)."""
    say = progress or (lambda _line: None)
    timed_sources = sorted({short_source(r.source) for r in runs if r.iteration_time_s is not None})
    shipped = {s: _stats([a for r in evaluate([r for r in runs if short_source(r.source) == s])
                          if (a := r.time_ape) is not None])["mape"] for s in timed_sources}
    per_source: dict[str, Any] = {}
    for i, source in enumerate(timed_sources, 1):
        held = [r for r in runs if short_source(r.source) == source]
        rest = [r for r in runs if short_source(r.source) != source]
        if not any(r.iteration_time_s is not None for r in rest):
            say(f"LOSO {i}/{len(timed_sources)}: {source}: no other source to fit on, skipped")
            continue
        say(f"LOSO {i}/{len(timed_sources)}: refit without {source} ({len(rest)} runs), then predict its {len(held)}")
        result = fit(rest, maxiter, seed, progress=lambda line, s=source: say(f"  {s}: {line}"))
        held_out = _stats([a for r in evaluate(held, result.calibration) if (a := r.time_ape) is not None])
        per_source[source] = {"n_time": held_out["n"], "time_mape": held_out["mape"],
                              "time_median_ape": held_out["median_ape"], "in_sample_time_mape": shipped[source],
                              "fit_seconds": result.seconds}
        say(f"LOSO {i}/{len(timed_sources)}: {source}: held-out time MAPE {held_out['mape']:.1f} % "
            f"(shipped constants {shipped[source]:.1f} %), {result.seconds:.0f} s")
    mapes = [v["time_mape"] for v in per_source.values() if v["time_mape"] is not None]
    return {"maxiter": maxiter, "seed": seed, "per_source": per_source,
            "mean_time_mape": statistics.fmean(mapes) if mapes else None}


def check_claims(path: Path, calibration: Calibration | None = None) -> list[tuple[str, bool, bool, str]]:
    """(claim id, expected feasible, predicted feasible, reasons) for every claim."""
    rows = []
    for claim in load_feasibility(path):
        p = predict(claim.model, claim.cluster, claim.config, claim.training, calibration)
        rows.append((claim.id, claim.feasible, p.feasible, "; ".join(p.reasons)))
    return rows


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def print_table(results: list[RunResult], summary: dict[str, Any], claims: list[tuple[str, bool, bool, str]],
                refused: Sequence[RefusedRow] = ()) -> None:
    corrected = {e["id"] for e in summary.get("errata", ())}
    print(f"{'run':<58} {'t_pred':>9} {'t_meas':>9} {'err%':>6} {'mem_pred':>8} {'mem_meas':>8} {'err%':>6} oom")
    for r in results:
        if r.error:
            print(f"{r.run.id[:58]:<58} ERROR {r.error}")
            continue
        mm = r.run.peak_memory_bytes
        oom = {None: "-", True: "ok", False: "WRONG"}[r.oom_correct]
        print(f"{r.run.id[:58]:<58} {r.time_s:9.3f} {_fmt(r.run.iteration_time_s, '9.3f'):>9} "
              f"{_fmt(r.time_ape, '6.1f'):>6} {r.memory_bytes / GiB:8.1f} {_fmt(mm and mm / GiB, '8.1f'):>8} "
              f"{_fmt(r.memory_ape, '6.1f'):>6} {oom}{' tuned' if r.completed else ''}"
              f"{' erratum' if r.run.id in corrected else ''}")
    for row in refused:
        first, more = row.refusals[0], len(row.refusals) - 1
        print(f"{row.id[:58]:<58} REFUSED {first.category}: {first.field}: {first.problem}"
              f"{f' (+{more} more)' if more else ''}")
    print()
    print(f"{'source':<50} {'n_t':>4} {'MAPE':>6} {'med':>6} {'max':>6} {'n_m':>4} {'memMAPE':>7}")
    for name, s in summary["per_source"].items():
        print(f"{name:<50} {s['n_time']:>4} {_fmt(s['time_mape'], '6.1f'):>6} {_fmt(s['time_median_ape'], '6.1f'):>6} "
              f"{_fmt(s['time_max_ape'], '6.1f'):>6} {s['n_memory']:>4} {_fmt(s['memory_mape'], '7.1f'):>7}")
    print(f"{'OVERALL':<50} {summary['n_time']:>4} {_fmt(summary['time_mape'], '6.1f'):>6} "
          f"{_fmt(summary['time_median_ape'], '6.1f'):>6} {_fmt(summary['time_max_ape'], '6.1f'):>6} "
          f"{summary['n_memory']:>4} {_fmt(summary['memory_mape'], '7.1f'):>7}")
    for name, s in summary["per_gpu"].items():
        print(f"{'GPU ' + name:<50} {s['n_time']:>4} {_fmt(s['time_mape'], '6.1f'):>6} {'':>6} "
              f"{_fmt(s['time_max_ape'], '6.1f'):>6}")
    for name, s in summary["moe_families"].items():
        print(f"{'MoE ' + name:<50} {s['n_time']:>4} {_fmt(s['time_mape'], '6.1f'):>6} {'':>6} "
              f"{_fmt(s['time_max_ape'], '6.1f'):>6}")
    print(f"OOM verdicts correct: {summary['oom_correct']}/{summary['n_oom']}")
    fields = ", ".join(f"{k} {v}" for k, v in summary["completed_fields"].items())
    print(f"runs completed as tuned (open fields at their fastest feasible values): {summary['n_completed_as_tuned']}"
          f"{f' ({fields})' if fields else ''}")
    pw = summary["pairwise"]
    others = ", ".join(f">{100 * float(t):g} %: {v['concordant']}/{v['pairs']} = {_pct(v['concordance'])}"
                       for t, v in pw["at"].items() if float(t) != HEADLINE)
    print(f"pairwise concordance (same model, GPU type and count; measured tokens/s apart by >{100 * HEADLINE:g} %): "
          f"{pw['concordant']}/{pw['pairs']} = {_pct(pw['concordance'])} ({others})")
    ref = summary["refused"]
    if ref["n"]:
        reasons = ", ".join(f"{k} {v}" for k, v in ref["by_reason"].items())
        print(f"records the model cannot express: {ref['n']} "
              f"(by reason, a record under each of its reasons: {reasons})")
    if summary.get("errata"):
        rows = {e["id"] for e in summary["errata"]}
        print(f"rows read with an erratum ({ERRATA_NOTE}): {len(rows)}")
        for e in summary["errata"]:
            fields = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in e["fields"].items())
            print(f"  {e['id']} ({e['kind']}): {fields}")
    if claims:
        print()
        for cid, expected, got, why in claims:
            mark = "ok" if expected == got else "WRONG"
            print(f"{cid:<40} expected {'fits' if expected else 'does not fit':<13} "
                  f"predicted {'fits' if got else 'does not fit':<13} {mark} {why}")
        print(f"feasibility claims correct: {summary['feasibility_correct']}/{summary['n_feasibility']}")
    if "leave_one_source_out" in summary:
        print()
        print(f"{'left out (refit without it, then predicted)':<50} {'n_t':>4} {'MAPE':>6} {'shipped':>7}")
        for name, s in summary["leave_one_source_out"]["per_source"].items():
            print(f"{name:<50} {s['n_time']:>4} {_fmt(s['time_mape'], '6.1f'):>6} "
                  f"{_fmt(s['in_sample_time_mape'], '7.1f'):>7}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, action="append", metavar="FILE",
                        help="runs file in the calibration schema; repeat for several "
                        f"(default: {', '.join(str(p.relative_to(ROOT)) for p in DEFAULT_DATA)})")
    parser.add_argument("--feasibility", type=Path, default=None,
                        help="feasibility claims file (default, with the default data: "
                        "benchmarks/data/feasibility.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON summary object")
    parser.add_argument("--as-published", action="store_true",
                        help="read every row as printed, without benchmarks/data/errata.json")
    parser.add_argument("--loso", action="store_true",
                        help="leave one source out: refit the constants without each source and predict it (minutes)")
    parser.add_argument("--maxiter", type=int, default=40, help="generations of each --loso fit (fewer: faster)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the --loso fits")
    args = parser.parse_args(argv)
    paths = args.data or list(DEFAULT_DATA)
    feas = args.feasibility
    if feas is None and args.data is None and (DATA / "feasibility.json").exists():
        feas = DATA / "feasibility.json"
    try:
        errata = () if args.as_published else load_errata()
        read = [read_corrected(path, errata) for path in paths]
        files = [f for f, _ in read]
        applied = [e for _, got in read for e in got]
        claims = check_claims(feas) if feas else []
    except (OSError, ValueError, KeyError) as exc:
        print(f"fidelity: error: {exc}", file=sys.stderr)
        return 2
    runs = [run for f in files for run in f.runs]
    refused = [row for f in files for row in f.refused]
    if not runs:
        why = "; ".join(f"{row.id}: {row.refusals[0].field}: {row.refusals[0].problem}" for row in refused[:3])
        print(f"fidelity: error: no record of {', '.join(map(str, paths))} could be read ({why})", file=sys.stderr)
        return 2
    results = evaluate(runs)
    summary = summarize(results, [e == g for _, e, g, _ in claims] if feas else None, refused, applied)
    if args.loso:
        summary["leave_one_source_out"] = leave_one_source_out(
            runs, args.maxiter, args.seed, progress=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_table(results, summary, claims, refused)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
