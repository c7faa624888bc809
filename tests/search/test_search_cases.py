"""Issue 11's bar on the benchmark questions: every configuration the search lists first is one its
runtime really runs (supported in the support matrix, never merely accepted)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.search_speed import cases  # noqa: E402
from search._search import search  # noqa: E402
from search._support import entries_for, support_status  # noqa: E402

CASES = {c.name: c for c in cases()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_first_ten_are_supported_by_their_runtime(name: str, case_search: Callable[[str], Any]) -> None:
    case = CASES[name]
    result = case_search(name)
    assert result.top, f"{name}: nothing feasible"
    for r in result.top:
        unproven = [w for w in r.prediction.warnings if "not shown to run" in w]
        if case.allow_untested:  # BLOOM: only what the BigScience fork adds (ALiBi, its partition) is unproven
            assert {e.name for e in entries_for(r.framework, r.config)} <= {"deepspeed-partition-not-type-transformer"}
            assert all("ALiBi" in w or "BigScience" in w for w in unproven)
        else:
            assert support_status(r.framework, r.config) == "supported", (name, r.framework, r.config)
            assert not unproven


def test_bloom_without_its_fork_says_which_rule_leaves_nothing_valid() -> None:
    case = CASES["bloom-176b-384xa100"]
    result = search(case.model, case.cluster, case.global_batch, precision=case.precision, framework=case.framework)
    assert result.n_valid == 0 and result.best is None
    assert any("ALiBi" in h and "--allow-untested" in h for h in result.hints)


def test_bloom_published_layout_is_among_the_answers() -> None:
    """Issue 13: BLOOM's own layout (tp 4, pp 12, dp 8, micro-batch 2, the type:transformer|embedding
    split (5, 6 x 10, 5)) is a valid, feasible answer to its question; its rank is reported in the README."""
    case = CASES["bloom-176b-384xa100"]
    result = search(case.model, case.cluster, case.global_batch, precision=case.precision, framework=case.framework,
                    top_k=5000, allow_untested=True)
    bloom = [r for r in result.top if (r.config.tp, r.config.pp, r.config.dp, r.config.micro_batch) == (4, 12, 8, 2)
             and r.config.stage_layers == (5,) + (6,) * 10 + (5,)]
    assert bloom
