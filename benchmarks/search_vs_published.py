"""Does the search rediscover what published runs used, and when it claims better, why?

    python benchmarks/search_vs_published.py [--data runs.json] [--top 10] [--json]

For every run of a calibration-schema file that ran, search the run's own model, cluster, global
batch, precision and framework, then report per source and overall:

* how often the published configuration ranks in the top k (open fields of the published
  configuration, such as an unstated micro-batch, match any value);
* how often, and by how much, the search's first choice is predicted faster than the published
  configuration's measured speed;
* for every claim above :data:`CLAIM_FLAG` (15 %), the lever: the configuration fields in which
  the first choice differs from the published one, and the model's terms that differ most, so a
  reader can judge whether to believe it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._errata import read_corrected  # noqa: E402
from benchmarks._tuned import predict_tuned  # noqa: E402
from search import ParallelConfig, search  # noqa: E402
from search._runs_file import CalibrationRun  # noqa: E402

RUNS = ROOT / "benchmarks" / "data" / "runs.json"
CLAIM_FLAG = 0.15
"""A first choice predicted this much faster than the measured published run gets its lever named."""


def short_source(source: str) -> str:
    return source.split(",")[0].split("(")[0].strip()[:48]


def lever(published: ParallelConfig, chosen: ParallelConfig, framework: str, chosen_framework: str) -> str:
    """The configuration fields that differ, ``name published -> chosen``."""
    diffs = [f"{f.name} {getattr(published, f.name)}->{getattr(chosen, f.name)}" for f in fields(ParallelConfig)
             if getattr(published, f.name) != getattr(chosen, f.name)]
    if framework != chosen_framework:
        diffs.insert(0, f"framework {framework}->{chosen_framework}")
    return ", ".join(diffs) or "none"


def term_shift(published: Mapping[str, float], chosen: Mapping[str, float], n: int = 2) -> str:
    """The ``n`` time terms that shrink most from the published configuration to the chosen one."""
    deltas = sorted(((published.get(k, 0.0) - chosen.get(k, 0.0), k) for k in set(published) | set(chosen)),
                    reverse=True)
    return ", ".join(f"{k} -{d:.2f} s" for d, k in deltas[:n] if d > 0) or "no term shrinks"


def matches(run: CalibrationRun, framework: str, config: ParallelConfig) -> bool:
    """The chosen configuration is the published one, open fields matching any value."""
    if framework != run.training.framework:
        return False
    return all(getattr(config, f.name) == getattr(run.config, f.name)
               for f in fields(ParallelConfig) if f.name not in run.unknown)


def evaluate(run: CalibrationRun, top_k: int) -> dict[str, Any]:
    """Search one run's question; where its own configuration ranks and how fast the first choice is."""
    published = predict_tuned(run).prediction
    result = search(run.model, run.cluster, run.training.global_batch, precision=run.training.precision,
                    framework=run.training.framework, top_k=top_k)
    rank = next((r.rank for r in result.top if matches(run, r.framework, r.config)), None)
    measured = (run.training.global_batch * run.model.seq_len / run.iteration_time_s) if run.iteration_time_s else None
    row: dict[str, Any] = {
        "id": run.id, "source": short_source(run.source), "rank": rank, "published_feasible": published.feasible,
        "published_predicted_tokens_per_s": published.tokens_per_s, "published_measured_tokens_per_s": measured,
        "best_tokens_per_s": None, "gain_over_measured": None, "lever": None, "terms": None,
        "valid": result.n_valid, "seconds": result.elapsed_s,
    }
    best = result.best
    if best is None:
        return row
    row["best_tokens_per_s"] = best.prediction.tokens_per_s
    row["best"] = f"{best.framework} {best.config}"
    if measured:
        row["gain_over_measured"] = best.prediction.tokens_per_s / measured - 1.0
        if row["gain_over_measured"] > CLAIM_FLAG:
            row["lever"] = lever(run.config, best.config, run.training.framework, best.framework)
            row["terms"] = term_shift(published.time_breakdown_s, best.prediction.time_breakdown_s)
    return row


def per_source(rows: list[dict[str, Any]], top_k: int) -> dict[str, dict[str, Any]]:
    """Counts and gains per source."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["source"]].append(r)
    out = {}
    for name, rs in sorted(groups.items()):
        gains = [r["gain_over_measured"] for r in rs if r["gain_over_measured"] is not None]
        out[name] = {
            "n_runs": len(rs),
            f"published_in_top_{top_k}": sum(1 for r in rs if r["rank"] is not None),
            "n_measured": len(gains),
            "first_choice_faster_than_measured": sum(1 for g in gains if g > 0),
            "median_gain": statistics.median(gains) if gains else None,
            "max_gain": max(gains) if gains else None,
            "claims_over_15_percent": sum(1 for g in gains if g > CLAIM_FLAG),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=RUNS)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    runs = [run for run in read_corrected(args.data)[0].runs if run.ran]
    rows = []
    for i, run in enumerate(runs, start=1):
        rows.append(evaluate(run, args.top))
        if not args.json and sys.stderr.isatty():
            print(f"\r{i}/{len(runs)} searched", end="", file=sys.stderr, flush=True)
    n = len(rows)
    gains = [r["gain_over_measured"] for r in rows if r["gain_over_measured"] is not None]
    summary = {
        "n_runs": n, "top_k": args.top, f"published_in_top_{args.top}": sum(1 for r in rows if r["rank"] is not None),
        "n_measured": len(gains), "first_choice_faster_than_measured": sum(1 for g in gains if g > 0),
        "median_gain": statistics.median(gains) if gains else None,
        "claims_over_15_percent": sum(1 for g in gains if g > CLAIM_FLAG),
        "per_source": per_source(rows, args.top), "seconds": time.perf_counter() - start,
    }
    if args.json:
        print(json.dumps({"summary": summary, "runs": rows}, indent=2))
        return 0
    print(file=sys.stderr)
    print(f"{'source':<48} {'runs':>5} {'top' + str(args.top):>6} {'faster':>7} {'median':>7} {'max':>7} {'>15%':>5}")
    for name, s in summary["per_source"].items():
        med = "-" if s["median_gain"] is None else f"{s['median_gain']:+.1%}"
        top = "-" if s["max_gain"] is None else f"{s['max_gain']:+.1%}"
        print(f"{name:<48} {s['n_runs']:>5} {s[f'published_in_top_{args.top}']:>6} "
              f"{s['first_choice_faster_than_measured']:>7} {med:>7} {top:>7} {s['claims_over_15_percent']:>5}")
    print(f"published configuration in the top {args.top}: {summary[f'published_in_top_{args.top}']}/{n}; first choice "
          f"predicted faster than the published measured speed: {summary['first_choice_faster_than_measured']}/"
          f"{len(gains)} (median {summary['median_gain']:+.1%})")
    claims = [r for r in rows if r["lever"]]
    if claims:
        print(f"\nclaims above {CLAIM_FLAG:.0%} over the measured speed, with the lever the model credits:")
        for r in claims:
            print(f"  {str(r['id'])[:52]:<52} {r['gain_over_measured']:+.1%}: {r['lever']} ({r['terms']})")
    print(f"{summary['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
