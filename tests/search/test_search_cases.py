"""Issue 11's bar on the benchmark questions: every configuration the search lists first is one its
runtime really runs (supported in the support matrix, never merely accepted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.search_speed import cases  # noqa: E402
from search._search import search  # noqa: E402
from search._support import support_status  # noqa: E402

CASES = {c.name: c for c in cases()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_first_ten_are_supported_by_their_runtime(name: str) -> None:
    case = CASES[name]
    result = search(case.model, case.cluster, case.global_batch, precision=case.precision,
                    framework=case.framework, top_k=10)
    assert result.top, f"{name}: nothing feasible"
    for r in result.top:
        assert support_status(r.framework, r.config) == "supported", (name, r.framework, r.config)
        assert not any("not shown to run" in w for w in r.prediction.warnings)
