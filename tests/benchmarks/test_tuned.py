"""benchmarks/_tuned.py: a run whose configuration leaves fields open is predicted at its best."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._tuned import completions, field_values, predict_tuned  # noqa: E402
from search import check_compatible, predict  # noqa: E402
from search._runs_file import run_from_record  # noqa: E402

BASE = json.loads((ROOT / "benchmarks" / "data" / "runs.json").read_text())[0]
"""Narayanan et al. 2021 Table 1, GPT 1.7B on 32 A100: tp 1, pp 1, dp 32, mb 16, global batch 512."""


def _record(model: dict[str, Any] | None = None, **config: Any) -> dict[str, Any]:
    rec = copy.deepcopy(BASE)
    rec["model"].update(model or {})
    rec["config"].update(config)
    return rec


def test_a_run_with_no_open_field_is_predicted_as_it_is() -> None:
    run = run_from_record(BASE)
    assert run.unknown == ()
    assert completions(run) == [run.config]
    tuned = predict_tuned(run)
    assert (tuned.config, tuned.n_completions) == (run.config, 1)
    assert tuned.prediction == predict(run.model, run.cluster, run.config, run.training)


def test_completions_fill_every_open_field_with_every_valid_value() -> None:
    # 8 GPUs as tp 2 x dp 4, global batch 64: 16 sequences per data-parallel rank.
    rec = _record(tp=2, dp=4, micro_batch=None, grad_accum=None, sp=None, recompute=None, global_batch=64)
    rec["cluster"]["num_gpus"] = 8
    run = run_from_record(rec)
    assert run.unknown == ("micro_batch", "sp", "recompute")
    assert field_values(run, "micro_batch") == (1, 2, 4, 8, 16)
    configs = completions(run)
    layers = run.model.layers  # pp 1: one stage; Megatron's block method recomputes 1..layers-1 of them too
    assert len(configs) == 5 * 2 * (3 + layers - 1)
    assert {(c.micro_batch, c.sp, c.recompute) for c in configs} == {
        (b, sp, r) for b in (1, 2, 4, 8, 16) for sp in (False, True) for r in ("none", "selective", "full")}
    partial = {c.recompute_layers for c in configs if c.recompute_layers is not None}
    assert partial == set(range(1, layers)) and all(
        c.recompute == "full" for c in configs if c.recompute_layers is not None)
    for c in configs:
        check_compatible(run.model, run.cluster.world_size, c, run.training)
        assert (c.dp, c.tp, c.pp, c.vp, c.cp, c.zero_stage) == (4, 2, 1, 1, 1, 0)


def test_an_open_vp_takes_the_divisors_of_the_layers_per_stage() -> None:
    rec = _record(pp=4, dp=8, vp=None, grad_accum=None)
    run = run_from_record(rec)
    assert run.unknown == ("vp",)
    assert run.config.vp == 1  # the loader's default
    assert field_values(run, "vp") == (1, 2, 3, 6)  # 24 layers / pp 4 = 6 per stage
    assert {c.vp for c in completions(run)} == {1, 2, 3, 6}


def test_a_framework_rule_removes_completions() -> None:
    # DeepSpeed's pipeline engine has no interleaved schedule: an open vp stays 1 there.
    rec = _record(pp=4, dp=8, vp=None, grad_accum=None, framework="megatron-deepspeed", zero_stage=1)
    run = run_from_record(rec)
    assert run.unknown == ("vp",)
    assert [c.vp for c in completions(run)] == [1]


def test_the_fastest_feasible_completion_is_taken() -> None:
    # 48 layers at micro-batch 16: no recomputation needs ~500 GiB per GPU, full fits in 80.
    run = run_from_record(_record({"layers": 48}, recompute=None, zero_stage=1))
    assert run.unknown == ("recompute",)
    predictions = {(c.recompute, c.recompute_layers): predict(run.model, run.cluster, c, run.training)
                   for c in completions(run)}
    assert not predictions[("none", None)].feasible
    tuned = predict_tuned(run)
    fastest = min((p for p in predictions.values() if p.feasible), key=lambda p: p.iteration_time_s)
    assert tuned.prediction == fastest and tuned.prediction.feasible
    assert tuned.n_completions == 3 + 47  # none, selective, full, and full on 1..47 of the 48 layers
    # The fastest is a partial recomputation: full recomputation of every layer is slower.
    assert tuned.config.recompute_layers is not None
    assert fastest.iteration_time_s < predictions[("full", None)].iteration_time_s


def test_when_nothing_fits_the_fastest_completion_is_reported_infeasible() -> None:
    run = run_from_record(_record({"layers": 288}, recompute=None, zero_stage=1))
    predictions = [predict(run.model, run.cluster, c, run.training) for c in completions(run)]
    assert not any(p.feasible for p in predictions)
    tuned = predict_tuned(run)
    assert not tuned.prediction.feasible
    assert tuned.prediction.iteration_time_s == min(p.iteration_time_s for p in predictions)


def test_a_tie_keeps_the_loaders_default() -> None:
    # sp is open (Megatron-LM, tp 2): with tp 2 on one node both may predict the same time; the
    # default (sp off) comes first and a tie keeps it.
    rec = _record(tp=2, dp=16, sp=None, grad_accum=None)
    run = run_from_record(rec)
    assert run.unknown == ("sp",) and field_values(run, "sp")[0] is False
    tuned = predict_tuned(run)
    times = {c.sp: predict(run.model, run.cluster, c, run.training).iteration_time_s for c in completions(run)}
    assert tuned.config.sp is (times[True] < times[False])


def test_an_unknown_field_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a configuration field"):
        field_values(run_from_record(BASE), "tp")
