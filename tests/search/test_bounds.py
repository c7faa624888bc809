"""The branch and bound's throughput bound never falls below a configuration's prediction, whatever
order the candidates are bounded in (its cache must not hand one runtime another's terms)."""

from __future__ import annotations

import pytest

from search import cluster_preset, model_preset
from search._calibration import default_calibration
from search._evaluator import Evaluator
from search._space import enumerate_space


@pytest.mark.parametrize("reverse", [False, True])
def test_bound_is_above_every_prediction_in_any_order(reverse: bool) -> None:
    model, cluster = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1)
    batch = 64
    ev = Evaluator(model, cluster, batch, "bf16", default_calibration(), "throughput", None)
    space = enumerate_space(model, cluster.world_size, batch, "any")
    fitting = ev.scan_memory(space.blocks)
    assert {c.framework for c in fitting} >= {"megatron", "deepspeed", "fsdp"}
    # Runtimes' kernels differ (attention): bound them in an order where each runtime's first
    # entry for a layer shape may follow another runtime's.
    ordered = sorted(fitting, key=lambda c: c.framework, reverse=reverse)
    bounds = [ev.upper_bound_tokens_per_s(c) for c in ordered]
    for cand, bound in zip(ordered[::7], bounds[::7], strict=True):
        pred, _plan = ev(cand)
        assert pred is not None
        assert bound >= pred.tokens_per_s * (1 - 1e-9), (cand, bound, pred.tokens_per_s)


@pytest.mark.parametrize("dispatcher", ["alltoall", "flex-hybridep"])
def test_bound_is_above_every_prediction_of_an_interleaved_moe_with_dense_first_layers(dispatcher: str) -> None:
    """With dense first layers the interleaved chunks put them on other ranks than one stage per rank
    does, and a host-synchronizing dispatcher pays per chunk: the bound must key vp for both."""
    import dataclasses

    from search import ParallelConfig, TrainingSpec, predict
    from search._space import Candidate

    base = model_preset("qwen3-30b-a3b")
    assert base.moe is not None
    model = dataclasses.replace(base, moe=dataclasses.replace(base.moe, first_dense_layers=8))
    cluster, batch = cluster_preset("dgx-h100", 8), 512
    ev = Evaluator(model, cluster, batch, "fp8", default_calibration(), "throughput", None)
    checked = 0
    for vp in (1, 2, 3, 6):
        for layers in (None, (7, 7, 7, 27)):
            if layers is not None and vp > 1:
                continue  # Megatron spells an uneven split with vp through other forms: the even one is enough
            c = ParallelConfig(dp=16, pp=4, vp=vp, ep=8, micro_batch=1, zero_stage=1, recompute="full",
                               stage_layers=layers, moe_dispatcher=dispatcher)
            pred = predict(model, cluster, c, TrainingSpec(batch, "fp8"))
            assert ev.upper_bound_tokens_per_s(Candidate("megatron", c)) >= pred.tokens_per_s * (1 - 1e-9), c
            checked += 1
    assert checked == 5


@pytest.mark.parametrize("first_dense", [0, 3])
def test_row_bounds_are_the_scalar_bounds_bit_for_bit(first_dense: int) -> None:
    """row_bounds computes a layout's keys at once with numpy (search._bounds): each float must be
    the one time_lower_bound_s gives the configuration alone, block recomputation's shares included."""
    import dataclasses

    from search import time_lower_bound_s
    from search._bounds import ThroughputBounds

    base = model_preset("qwen3-30b-a3b")
    assert base.moe is not None
    model = dataclasses.replace(base, moe=dataclasses.replace(base.moe, first_dense_layers=first_dense))
    cluster, batch = cluster_preset("dgx-h100", 4), 256
    ev = Evaluator(model, cluster, batch, "fp8", default_calibration(), "throughput", None)
    fitting = ev.scan_memory(enumerate_space(model, cluster.world_size, batch, "megatron").blocks)
    bounds = ev.row_bounds(fitting)
    assert len(bounds) > 1000
    tokens = batch * model.seq_len
    for cand, bound in zip(fitting[::13], bounds[::13], strict=True):
        training = ev.trainings[cand.framework]
        assert bound == tokens / time_lower_bound_s(model, cluster, cand.config, training, ev.cal), cand
    # Block recomputation (recompute_layers) reaches the shares branch: many keys at once, then one by one.
    full = [c for c in fitting if c.config.recompute == "full" and c.config.pp > 1][::5]
    keys = [ev.bounds.key(c.framework, c.config.tp, c.config.pp, c.config.vp, c.config.cp, c.config.sp,
                          c.config.micro_batch, "full", c.config.tp_comm_overlap, c.config.stage_layers,
                          c.config.ep, c.config.etp, 1, (c.config.moe_dispatcher, c.config.moe_a2a_overlap))
            for c in full]
    assert keys
    slowest, others = ThroughputBounds(model, cluster, ev.cal, ev.trainings).many(keys)
    alone = ThroughputBounds(model, cluster, ev.cal, ev.trainings)
    assert [alone.terms(k) for k in keys] == list(zip(slowest.tolist(), others.tolist(), strict=True))
