"""Does the search rediscover what published runs used?

    python benchmarks/search_vs_published.py [--data runs.json] [--top 10] [--json]

For every run of a calibration-schema file with a complete configuration, search the run's own
model, cluster, global batch, precision and framework, then report how often the published
configuration ranks in the top k, and how often the predicted best is at least as fast as the
published configuration (both predicted by the same model, and against the measured speed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from search import predict, search  # noqa: E402
from search._runs_file import CalibrationRun, load_runs  # noqa: E402

RUNS = ROOT / "benchmarks" / "data" / "runs.json"


def evaluate(run: CalibrationRun, top_k: int) -> dict[str, object]:
    """Search one run's question; where its own configuration ranks and how fast the best is."""
    published = predict(run.model, run.cluster, run.config, run.training)
    result = search(run.model, run.cluster, run.training.global_batch, precision=run.training.precision,
                    framework=run.training.framework, top_k=top_k)
    rank = next((r.rank for r in result.top if r.config == run.config and r.framework == run.training.framework), None)
    best = result.best.prediction.tokens_per_s if result.best else 0.0
    measured = (run.training.global_batch * run.model.seq_len / run.iteration_time_s) if run.iteration_time_s else None
    return {
        "id": run.id, "rank": rank, "published_feasible": published.feasible,
        "best_tokens_per_s": best, "published_predicted_tokens_per_s": published.tokens_per_s,
        "published_measured_tokens_per_s": measured, "valid": result.n_valid, "seconds": result.elapsed_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=RUNS)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = [evaluate(run, args.top) for run in load_runs(args.data) if run.ran]
    n = len(rows)
    in_top = sum(1 for r in rows if r["rank"] is not None)
    as_fast_pred = sum(1 for r in rows if float(r["best_tokens_per_s"]) >= float(r["published_predicted_tokens_per_s"])
                       * (1 - 1e-12))
    measured = [r for r in rows if r["published_measured_tokens_per_s"]]
    as_fast_meas = sum(1 for r in measured
                       if float(r["best_tokens_per_s"]) >= float(r["published_measured_tokens_per_s"]))
    summary = {"n_runs": n, "published_in_top_k": in_top, "best_at_least_as_fast_predicted": as_fast_pred,
               "n_measured": len(measured), "best_at_least_as_fast_as_measured": as_fast_meas, "top_k": args.top,
               "seconds": time.perf_counter() - start}
    if args.json:
        print(json.dumps({"summary": summary, "runs": rows}, indent=2))
        return 0
    for r in rows:
        print(f"{str(r['id'])[:56]:<56} rank {r['rank'] or '-'!s:>3}  best {float(r['best_tokens_per_s']):>12,.0f}"
              f"  published(pred) {float(r['published_predicted_tokens_per_s']):>12,.0f}")
    print(f"published configuration in the top {args.top}: {in_top}/{n}")
    print(f"predicted best at least as fast as the published configuration (both predicted): {as_fast_pred}/{n}")
    print(f"predicted best at least as fast as the published measured speed: {as_fast_meas}/{len(measured)}")
    print(f"{summary['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
