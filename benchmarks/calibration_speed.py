"""How long a per-cluster calibration takes, and what it gains (issue 16).

    python benchmarks/calibration_speed.py [--factor F] [--source NAME]

A synthetic cluster: the published runs of one source (default Narayanan et al. 2021, its
Megatron runs first, then its DeepSpeed ones; ``--source`` takes another ``fit_constants.short_source``
label) with every measured time multiplied by ``--factor`` (default 1.23). For the first 5, 10, 16
and all of them, prints the seconds ``search._fit.calibrate`` takes (5-fold cross-validation and
the final fit) and the cross-validated time MAPE before (published constants) and after. Target:
a few seconds for 5-30 runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._tuned import predict_tuned  # noqa: E402
from benchmarks.fit_constants import FIT_DATA, read_all, short_source  # noqa: E402
from search import default_calibration  # noqa: E402
from search._fit import MeasuredRun, calibrate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--factor", type=float, default=1.23, help="hidden slowdown of the synthetic cluster")
    parser.add_argument("--source", default="Narayanan et al. 2021", help="the source whose runs it measured")
    args = parser.parse_args(argv)
    runs, _ = read_all(list(FIT_DATA))
    held = [r for r in runs if short_source(r.source) == args.source and r.iteration_time_s and r.ran is not False]
    if len(held) < 5:
        print(f"calibration_speed: error: {args.source!r} has {len(held)} timed runs; give a source with 5 or more",
              file=sys.stderr)
        return 2
    held.sort(key=lambda r: r.training.framework != "megatron")  # a Megatron cluster's runs first
    prior = default_calibration()
    measured = [MeasuredRun(r.model, r.cluster, r.training, (predict_tuned(r, prior).config,),
                            float(r.iteration_time_s or 0.0) * args.factor) for r in held]
    print(f"{args.source} x {args.factor:g}")
    print(f"{'runs':>5} {'seconds':>8} {'CV MAPE before':>15} {'after':>7}  moved")
    for n in sorted({5, 10, 16, len(measured)} & set(range(5, len(measured) + 1))):
        fit = calibrate(measured[:n], prior)
        cv = fit.cross_validation
        print(f"{n:>5} {fit.seconds:8.2f} {100 * cv.mape_before:14.1f}% {100 * cv.mape_after:6.1f}%  "
              f"{', '.join(sorted(fit.moved))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
