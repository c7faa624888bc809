"""How sure a prediction is: the model's measured iteration-time error for a runtime and GPU family.

The bands are the mean absolute percentage errors that ``benchmarks/fidelity.py`` measures on
the published runs, per runtime and GPU family, stored in the ``error_bands`` section of
``search/calibration.json`` by ``benchmarks/fit_constants.py --write``. A runtime/GPU pair
with fewer than :data:`MIN_RUNS` measured runs takes the runtime's figure over all GPUs, then
the worst per-source figure: an unmeasured combination is never claimed to be better known
than the worst measured one.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from search._calibration import CALIBRATION_PATH

MIN_RUNS = 5
"""Measured runs a band needs before it stands on its own."""
FALLBACK_BAND = 0.15
"""Used only when ``calibration.json`` holds no bands (the fidelity bar per source)."""


def gpu_family(gpu_name: str) -> str:
    """``a100-sxm4-80gb`` -> ``a100``: the GPU generation a band is measured for."""
    return gpu_name.split("-", 1)[0].lower()


@lru_cache(maxsize=1)
def _bands() -> dict[str, Any]:
    if not CALIBRATION_PATH.exists():
        return {}
    data = json.loads(CALIBRATION_PATH.read_text())
    bands = data.get("error_bands", {})
    return bands if isinstance(bands, dict) else {}


def error_band(framework: str, gpu_name: str, moe: bool = False) -> float:
    """Relative iteration-time error to expect (0.07 = +-7 %) for ``framework`` on ``gpu_name``; for
    a mixture of experts (``moe``) at least the error measured on the published MoE runs, and at
    least the worst source's while those are fewer than :data:`MIN_RUNS`."""
    dense = _dense_band(framework, gpu_name)
    if not moe:
        return dense
    measured = _bands().get("moe") or {}
    worst = float(_bands().get("worst_source", FALLBACK_BAND))
    if measured.get("n", 0) >= MIN_RUNS:
        return max(dense, float(measured["mape"]))
    return max(dense, worst, float(measured.get("mape", 0.0)))


def _dense_band(framework: str, gpu_name: str) -> float:
    bands = _bands()
    by_pair = bands.get("by_runtime_gpu", {})
    pair = by_pair.get(f"{framework}/{gpu_family(gpu_name)}")
    if pair and pair.get("n", 0) >= MIN_RUNS:
        return float(pair["mape"])
    runtime = bands.get("by_runtime", {}).get(framework)
    if runtime and runtime.get("n", 0) >= MIN_RUNS:
        return float(runtime["mape"])
    return float(bands.get("worst_source", FALLBACK_BAND))


def within_band(score: float, best: float, band: float) -> bool:
    """Whether ``score`` is indistinguishable from ``best`` given a relative error of ``band``."""
    return abs(best - score) <= band * max(abs(best), abs(score))


__all__ = ["error_band", "gpu_family", "within_band"]
