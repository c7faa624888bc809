"""Cost-model speed: predictions per second and microseconds per prediction.

    python benchmarks/costmodel_speed.py [--repeat N] [--json]

Times ``search.predict`` over every run of the calibration set (a mix of 3D-parallel, ZeRO-3
and offload configurations) and over one preset configuration, reporting the median of
``--repeat`` passes (this machine is shared and noisy). Target: <= 50 us per prediction.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from search import ParallelConfig, TrainingSpec, cluster_preset, model_preset, predict  # noqa: E402
from search._runs_file import load_runs  # noqa: E402

RUNS = ROOT / "benchmarks" / "data" / "runs.json"


def time_per_prediction_s(cases: list[tuple], repeat: int) -> float:
    """Median over ``repeat`` passes of (pass time / number of cases)."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for model, cluster, config, training in cases:
            predict(model, cluster, config, training)
        samples.append((time.perf_counter() - start) / len(cases))
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--data", type=Path, default=RUNS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    preset_case = (model_preset("gpt3-175b"), cluster_preset("dgx-a100-80gb", 128),
                   ParallelConfig(dp=8, tp=8, pp=16, micro_batch=1, recompute="full"), TrainingSpec(1536, "fp16"))
    results = {"preset_gpt3_175b_us": time_per_prediction_s([preset_case] * 200, args.repeat) * 1e6}
    if args.data.exists():
        runs = load_runs(args.data)
        cases = [(r.model, r.cluster, r.config, r.training) for r in runs]
        results["calibration_runs_us"] = time_per_prediction_s(cases, args.repeat) * 1e6
        results["n_calibration_runs"] = len(cases)
    results["predictions_per_s"] = 1e6 / max(v for k, v in results.items() if k.endswith("_us"))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:<24} {value:12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
