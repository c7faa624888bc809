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


def _moe_record(**config: Any) -> dict[str, Any]:
    """A Megatron-Bridge Qwen3-235B-A22B row of runs_2024_2026.json (64 experts per GPU group, ep 16)."""
    rows = json.loads((ROOT / "benchmarks" / "data" / "runs_2024_2026.json").read_text())
    rec = copy.deepcopy(next(r for r in rows if r["id"].startswith("mbridge-25.11-gb300-qwen3-235b")))
    rec["config"].update(config)
    return rec


def test_an_unknown_dispatcher_is_tuned_over_megatrons_dispatchers_and_a_known_one_is_kept() -> None:
    from search._parallel_spec import MOE_DISPATCHERS

    run = run_from_record(_moe_record(moe_dispatcher="unknown", recompute="none", vp=12))
    assert "moe_dispatcher" in run.unknown and run.config.moe_dispatcher == "alltoall"
    assert field_values(run, "moe_dispatcher") == ("alltoall", *(d for d in MOE_DISPATCHERS if d != "alltoall"))
    configs = completions(run)
    assert {c.moe_dispatcher for c in configs} == set(MOE_DISPATCHERS)
    tuned = predict_tuned(run)
    each = {c.moe_dispatcher: predict(run.model, run.cluster, c, run.training) for c in configs}
    fastest = min((p.iteration_time_s, d) for d, p in each.items() if p.feasible)[1]
    assert tuned.config.moe_dispatcher == fastest
    assert tuned.prediction.iteration_time_s == min(p.iteration_time_s for p in each.values() if p.feasible)
    # A row that states its dispatcher is predicted with it, whatever is faster.
    pinned = run_from_record(_moe_record(moe_dispatcher="alltoall", recompute="none", vp=12))
    assert "moe_dispatcher" not in pinned.unknown
    assert {c.moe_dispatcher for c in completions(pinned)} == {"alltoall"}
    assert predict_tuned(pinned).prediction.iteration_time_s > tuned.prediction.iteration_time_s


def test_an_open_split_no_listed_form_gives_keeps_the_loaders_split_and_tunes_the_rest() -> None:
    """DeepSeek-V3's 61 layers on pp 4 with vp 4: the runtime's listed forms give no split at that vp, so the
    loader's stands, and the open recomputation is still tried at every value (it was left at 'none')."""
    rows = json.loads((ROOT / "benchmarks" / "data" / "runs_2024_2026.json").read_text())
    rec = next(r for r in rows if r["id"] == "mbridge-26.02-gb200-deepseek-v3-mxfp8-256g-gbs4096-mbs1-tp1pp4cp1vp4ep64")
    run = run_from_record(rec)
    assert {"stage_layers", "recompute"} <= set(run.unknown)
    configs = completions(run)
    assert {c.stage_layers for c in configs} == {run.config.stage_layers}
    assert {c.recompute for c in configs} == {"none", "selective", "full"}


def test_a_dispatcher_the_model_does_not_know_is_refused_naming_the_field() -> None:
    from search._runs_file import RecordRefused

    with pytest.raises(RecordRefused, match=r"config\.moe_dispatcher.*'allgather' is not modelled.*'unknown'"):
        run_from_record(_moe_record(moe_dispatcher="allgather"))
