"""search._fit: a per-cluster calibration from a prior, its cross-validated error, and the published fit's core."""

from __future__ import annotations

from dataclasses import replace

import pytest

from search import (
    Calibration,
    ParallelConfig,
    SpecError,
    TrainingSpec,
    cluster_preset,
    default_calibration,
    model_preset,
)
from search._calibration import calibration_fingerprint, calibration_from_dict
from search._fit import (
    MIN_RUNS,
    TIME_BOUNDS,
    MeasuredRun,
    calibrate,
    cross_validate,
    fit_time_constants,
    folds,
    predicted_time_s,
    prior_penalty,
    scale_gpu_rates,
    time_mape,
    time_objective,
)

PRIOR = default_calibration()
SLOWER = replace(PRIOR, hbm_efficiency=0.4, microbatch_overhead_s=0.04)
"""The hidden truth of the synthetic cluster: slower memory-bound kernels and host overhead."""


def _runs(truth: Calibration, n: int = 6) -> list[MeasuredRun]:
    """Megatron runs of gpt-1.7b on 1-2 DGX A100 nodes (no ZeRO-3, no FP8, no DeepSpeed pipeline)
    whose measured time is what ``truth`` predicts."""
    model = model_preset("gpt-1.7b")
    shapes = [(1, 1, 1, 1, 64), (1, 2, 1, 2, 64), (1, 1, 2, 1, 128), (2, 2, 1, 1, 128), (2, 1, 2, 2, 256),
              (2, 4, 1, 1, 256), (1, 2, 2, 4, 128), (2, 8, 1, 1, 64)][:n]
    out = []
    for nodes, tp, pp, mb, batch in shapes:
        cluster = cluster_preset("dgx-a100-80gb", nodes)
        config = ParallelConfig(dp=cluster.world_size // (tp * pp), tp=tp, pp=pp, micro_batch=mb)
        training = TrainingSpec(global_batch=batch, precision="bf16", framework="megatron")
        run = MeasuredRun(model, cluster, training, (config,), 1.0, "synthetic")
        out.append(replace(run, iteration_time_s=predicted_time_s(run, truth)))
    return out


def test_the_prior_scores_zero_on_its_own_predictions_and_the_penalty_is_zero_at_the_prior() -> None:
    runs = _runs(PRIOR, 3)
    assert time_mape(runs, PRIOR) == pytest.approx(0.0, abs=1e-12)
    assert time_objective(PRIOR, runs) == pytest.approx(0.0, abs=1e-9)
    assert prior_penalty(PRIOR, PRIOR) == 0.0
    low, high = TIME_BOUNDS["hbm_efficiency"]
    moved = replace(PRIOR, hbm_efficiency=PRIOR.hbm_efficiency - (high - low) / 10)
    assert prior_penalty(moved, PRIOR) == pytest.approx(0.01)


def test_a_local_fit_moves_what_the_runs_inform_and_keeps_the_rest_at_the_prior() -> None:
    runs = _runs(SLOWER)
    before = time_mape(runs, PRIOR)
    fitted = fit_time_constants(runs, PRIOR, max_evaluations=200)
    assert before > 0.05
    assert time_mape(runs, fitted) < before / 3
    # no ZeRO-3, no FP8, no DeepSpeed pipeline engine: nothing informs these, the penalty keeps them
    for name in ("zero3_efficiency", "deepspeed_zero3_efficiency", "zero3_overlap", "fp8_gemm_speedup",
                 "pipeline_engine_microbatch_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(PRIOR, name), rel=1e-3), name
    # constants outside TIME_BOUNDS are the prior's exactly
    assert fitted.memory_overhead_bytes == PRIOR.memory_overhead_bytes
    assert fitted.collective_latency_s == PRIOR.collective_latency_s
    assert fit_time_constants(runs, PRIOR, max_evaluations=200) == fitted  # deterministic


def test_cross_validation_reports_the_prior_and_the_held_out_error() -> None:
    runs = _runs(SLOWER)
    fit = calibrate(runs, PRIOR, k=3, max_evaluations=150)
    cv = fit.cross_validation
    assert cv.k == 3
    assert cv.mape_before == pytest.approx(time_mape(runs, PRIOR))
    assert cv.mape_after < cv.mape_before / 2
    assert fit.in_sample_mape <= cv.mape_after + 1e-9  # held out is never better than in sample here
    assert "hbm_efficiency" in fit.moved and "zero3_efficiency" not in fit.moved
    assert fit.seconds > 0
    assert cross_validate(runs, PRIOR, k=3, max_evaluations=150) == cv


def test_too_few_runs_are_refused_with_the_number_needed() -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_RUNS} timed runs, got 2"):
        calibrate(_runs(SLOWER, 2), PRIOR)
    with pytest.raises(ValueError, match="no run with a measured iteration time"):
        fit_time_constants([], PRIOR)
    with pytest.raises(ValueError, match="method 'newton'"):
        fit_time_constants(_runs(PRIOR, 1), PRIOR, method="newton")


def test_folds_partition_the_runs_evenly_and_repeatably() -> None:
    parts = folds(11, 5, seed=3)
    assert sorted(i for p in parts for i in p) == list(range(11))
    assert sorted(len(p) for p in parts) == [2, 2, 2, 2, 3]
    assert folds(11, 5, seed=3) == parts and folds(11, 5, seed=4) != parts


def test_a_calibration_is_rebuilt_from_its_constants_and_fingerprinted() -> None:
    cal = calibration_from_dict({"hbm_efficiency": 0.5, "microbatch_overhead_s": 0})
    assert cal == replace(PRIOR, hbm_efficiency=0.5, microbatch_overhead_s=0.0)
    with pytest.raises(SpecError, match="not a constant") as err:
        calibration_from_dict({"hbm_speed": 0.5})
    assert err.value.field == "Calibration.hbm_speed"
    with pytest.raises(SpecError, match="outside"):
        calibration_from_dict({"hbm_efficiency": 1.5})
    with pytest.raises(SpecError, match="not a number"):
        calibration_from_dict({"hbm_efficiency": "fast"})
    assert calibration_fingerprint(cal, ["b", "a"]) == calibration_fingerprint(cal, ["a", "b"])
    assert calibration_fingerprint(cal, ["a"]) != calibration_fingerprint(cal, ["a", "b"])
    assert calibration_fingerprint(cal) != calibration_fingerprint(PRIOR)


def test_a_uniformly_slower_cluster_is_fitted_by_its_gpu_rate() -> None:
    """GEMMs 20 % slower (the cluster's matmul and attention rates x 0.8): no global constant scales
    GEMM throughput, the cluster's GPU rate factor does."""
    slow = [replace(r, iteration_time_s=predicted_time_s(replace(r, cluster=scale_gpu_rates(r.cluster, 0.8)), PRIOR))
            for r in _runs(PRIOR)]
    fit = calibrate(slow, PRIOR, k=3, max_evaluations=150)
    assert 0.75 <= fit.gpu_rate_scale < 0.97 and "gpu_rate_scale" in fit.moved  # shared with the overheads
    assert fit.cross_validation.mape_after < fit.cross_validation.mape_before / 3
    cluster = cluster_preset("dgx-a100-80gb")
    scaled = scale_gpu_rates(cluster, 0.5)
    assert scaled.gpu.matmul_efficiency == pytest.approx(cluster.gpu.matmul_efficiency / 2)
    assert scale_gpu_rates(cluster, 1.5).gpu.matmul_efficiency == 1.0  # a fraction stays a fraction
    assert scale_gpu_rates(cluster, 1.0) is cluster
