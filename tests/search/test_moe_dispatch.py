"""Megatron-Core's flex token dispatcher (DeepEP, HybridEP) and the EP all-to-all overlap: the traffic
they send, over which link, what the overlap leaves exposed, the rules the runtime sets, and the
published MoE runs that ran them."""

from __future__ import annotations

import statistics
from math import comb
from pathlib import Path

import pytest

from search import ParallelConfig, SpecError, TrainingSpec, check_compatible, cluster_preset, model_preset, predict
from search._calibration import default_calibration
from search._moe_dispatch import COMM_SM_SHARE, distinct_destinations, flex_dispatch_s, overlapped_ep_comm_s
from search._moe_terms import MOE_DISPATCH_WARNING, MOE_FLEX_WARNING
from search._support import entries_for, support_status
from search._units import BYTES_16BIT

QWEN = model_preset("qwen3-30b-a3b")  # 128 experts, top-8, hidden 2048
DSV3 = model_preset("deepseek-v3")  # 256 experts, top-8
FP8 = TrainingSpec(global_batch=1024, precision="fp8")
DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def _qwen(ep: int = 16, **kw: object) -> ParallelConfig:
    return ParallelConfig(dp=16, ep=ep, micro_batch=1, zero_stage=1, **kw)  # type: ignore[arg-type]


def test_distinct_destinations_is_the_hypergeometric_expectation() -> None:
    # One expert per group: every one of the k experts is its own destination.
    assert distinct_destinations(256, 8, 256) == pytest.approx(8.0)
    assert distinct_destinations(256, 8, 1) == 1.0
    # 8 GPUs of 32 experts each: 8 x (1 - C(224, 8) / C(256, 8)), about 5.3 of the 8 copies.
    expected = 8 * (1 - comb(224, 8) / comb(256, 8))
    assert distinct_destinations(256, 8, 8) == pytest.approx(expected) and 5.2 < expected < 5.4
    # Two nodes: a token almost always reaches both (1 - 2 x 0.5^8 roughly).
    assert 1.99 < distinct_destinations(128, 8, 2) < 2.0


def test_flex_inside_nvlink_sends_one_copy_per_destination_gpu() -> None:
    """Inside one NVLink domain the flex dispatcher's traffic is the alltoall's times distinct GPUs / k."""
    cluster = cluster_preset("dgx-h100", 2)
    cal = default_calibration()
    tokens, token_bytes = 4096.0, QWEN.hidden * BYTES_16BIT
    flex = flex_dispatch_s(token_bytes, tokens, 128, 8, 8, 1, "flex-deepep", cluster, cal) - cal.collective_latency_s
    alltoall = tokens * 8 * token_bytes * 7 / 8 / cluster.node.intra_node_bytes_per_s
    assert flex == pytest.approx(alltoall * distinct_destinations(128, 8, 8) / 8)


def test_across_nodes_a_token_crosses_the_network_once_per_destination_node() -> None:
    """ep=16 on two DGX H100: NCCL's all-to-all sends half of the 8 copies (4) through the NIC, the flex
    dispatcher one per remote node it reaches (< 1), then NVLink: about four times less network traffic."""
    cluster = cluster_preset("dgx-h100", 2)
    alltoall = predict(QWEN, cluster, _qwen(), FP8).time_breakdown_s["ep_comm"]
    flex = predict(QWEN, cluster, _qwen(moe_dispatcher="flex-deepep"), FP8).time_breakdown_s["ep_comm"]
    assert 3.5 < alltoall / flex < 4.5
    # Inside one node (ep=8) the gain is the deduplication only: 8 / 5.3 copies at most.
    inside = _qwen(ep=8)
    ratio = predict(QWEN, cluster, inside, FP8).time_breakdown_s["ep_comm"] / predict(
        QWEN, cluster, ParallelConfig(dp=16, ep=8, micro_batch=1, zero_stage=1, moe_dispatcher="flex-deepep"),
        FP8).time_breakdown_s["ep_comm"]
    assert 1.2 < ratio < 8 / 5.2


def test_hybridep_keeps_an_nvl72_rack_on_nvlink_where_deepep_takes_rdma() -> None:
    """DeepEP's NVLink side is one host's GPUs (at most 8; GB200 trays hold 4); HybridEP's the whole rack."""
    cluster = cluster_preset("gb200-nvl72", 16)  # 64 GPUs in one NVLink domain
    c = ParallelConfig(dp=64, pp=1, ep=64, micro_batch=1, zero_stage=1)
    times = {d: predict(DSV3, cluster, ParallelConfig(dp=64, ep=64, micro_batch=1, zero_stage=1, moe_dispatcher=d),
                        FP8).time_breakdown_s["ep_comm"] for d in ("flex-deepep", "flex-hybridep")}
    assert times["flex-hybridep"] < times["flex-deepep"] / 3
    alltoall = predict(DSV3, cluster, c, FP8).time_breakdown_s["ep_comm"]
    # 256 experts over 64 GPUs: 7.57 distinct GPUs of 8 copies, NVLink either way.
    assert times["flex-hybridep"] == pytest.approx(alltoall * distinct_destinations(256, 8, 64) / 8, rel=0.02)


def test_the_overlap_hides_what_the_block_computes_and_pays_the_sms_the_exchange_holds() -> None:
    assert overlapped_ep_comm_s(1.0, 3.0, "flex-hybridep") == pytest.approx(COMM_SM_SHARE["flex-hybridep"])
    assert overlapped_ep_comm_s(5.0, 3.0, "flex-deepep") == pytest.approx(2.0 + 3.0 * 20 / 132)
    cluster = cluster_preset("dgx-h100", 2)
    exposed = predict(QWEN, cluster, _qwen(), FP8)
    overlapped = predict(QWEN, cluster, _qwen(moe_a2a_overlap=True), FP8)
    assert overlapped.time_breakdown_s["ep_comm"] < exposed.time_breakdown_s["ep_comm"] / 3
    assert overlapped.iteration_time_s < exposed.iteration_time_s
    # Everything but the exchange is the same step.
    for term in ("compute", "pipeline_bubble", "dp_comm", "optimizer"):
        assert overlapped.time_breakdown_s[term] == exposed.time_breakdown_s[term]


def test_each_prediction_says_how_its_exchange_was_costed() -> None:
    cluster = cluster_preset("dgx-h100", 2)
    assert MOE_DISPATCH_WARNING in predict(QWEN, cluster, _qwen(), FP8).warnings
    for c in (_qwen(moe_dispatcher="flex-hybridep"), _qwen(moe_a2a_overlap=True)):
        warnings = predict(QWEN, cluster, c, FP8).warnings
        assert MOE_FLEX_WARNING in warnings and MOE_DISPATCH_WARNING not in warnings


@pytest.mark.parametrize(("kw", "field"), [
    ({"ep": 1, "moe_dispatcher": "flex-deepep"}, "ParallelConfig.moe_dispatcher"),
    ({"ep": 8, "etp": 2, "tp": 2, "sp": True, "moe_dispatcher": "flex-hybridep"}, "ParallelConfig.moe_dispatcher"),
    ({"ep": 8, "moe_dispatcher": "flex"}, "ParallelConfig.moe_dispatcher"),
    ({"ep": 1, "moe_a2a_overlap": True}, "ParallelConfig.moe_a2a_overlap"),
    ({"ep": 8, "moe_a2a_overlap": "yes"}, "ParallelConfig.moe_a2a_overlap"),
])
def test_a_dispatcher_or_overlap_without_its_expert_group_is_refused_naming_the_field(kw: dict[str, object],
                                                                                      field: str) -> None:
    with pytest.raises(SpecError) as err:
        ParallelConfig(dp=16, micro_batch=1, **kw)  # type: ignore[arg-type]
    assert err.value.field == field


@pytest.mark.parametrize(("kw", "name"), [
    ({"pp": 2, "dp": 8, "moe_a2a_overlap": True}, "megatron-ep-overlap-needs-vp"),
    ({"moe_a2a_overlap": True, "recompute": "full"}, "megatron-ep-overlap-full-recompute"),
])
def test_megatrons_overlap_rules_are_in_the_support_matrix(kw: dict[str, object], name: str) -> None:
    c = ParallelConfig(**{"dp": 16, "ep": 8, "micro_batch": 1, "zero_stage": 1, **kw})  # type: ignore[arg-type]
    assert support_status("megatron", c) == "refused"
    assert name in {e.name for e in entries_for("megatron", c)}
    with pytest.raises(SpecError, match="overlap-moe-expert-parallel-comm"):
        check_compatible(QWEN, 16, c, FP8)
    # The other runtimes have no expert parallelism at all.
    for runtime in ("deepspeed", "megatron-deepspeed", "fsdp"):
        assert support_status(runtime, c) == "refused"
    allowed = ParallelConfig(dp=8, pp=2, vp=2, ep=8, micro_batch=1, zero_stage=1, moe_a2a_overlap=True,
                             moe_dispatcher="flex-hybridep")
    assert support_status("megatron", allowed) == "supported"


def _family_mape() -> dict[str, float]:
    from benchmarks._errata import read_corrected
    from benchmarks._tuned import predict_tuned

    got, _ = read_corrected(DATA / "runs_2024_2026.json")
    errors: dict[str, list[float]] = {}
    for run in (r for r in got.runs if r.model.moe is not None):
        t = predict_tuned(run).prediction.iteration_time_s
        errors.setdefault(run.model.name, []).append(abs(t - run.iteration_time_s) / run.iteration_time_s)
    return {name: statistics.fmean(v) for name, v in errors.items()}


def test_the_published_moe_runs_are_read_with_the_dispatcher_their_recipe_ran() -> None:
    """The 2024-26 MoE rows on known GPUs, as their recipes ran them (benchmarks/data/errata.json):
    all 55 expressible (the 3 rows whose dispatcher no recipe pins leave it open, completed as tuned,
    since 2026-12-02; the 11 GPT-OSS rows read since its sliding window is modelled; the 7 token-dropping
    25.09 rows since their recipe's capacity, 1.0 padded, is), 34 of them flex or overlap as read;
    Qwen3-235B within the issue's 15 % per family (measured 2026-12-02: 5.1 %; docs/cost-model.md)."""
    from benchmarks._errata import read_corrected

    got, _ = read_corrected(DATA / "runs_2024_2026.json")
    moe = [r for r in got.runs if r.model.moe is not None]
    assert len(moe) == 55
    moe_fields = ("model.moe", "config.moe")
    assert not [row for row in got.refused if any(f.field.startswith(moe_fields) for f in row.refusals)]
    assert sum(r.model.attention_window is not None for r in moe) == 11
    assert sum(r.model.moe.pad_to_capacity for r in moe if r.model.moe is not None) == 7
    assert sum(r.config.moe_dispatcher != "alltoall" or r.config.moe_a2a_overlap for r in moe) == 34
    assert sum("moe_dispatcher" in r.unknown for r in moe) == 3
    assert _family_mape()["Qwen3-235B-A22B"] <= 0.15


def test_deepseek_v3_within_15_percent() -> None:
    """DeepSeek-V3's 17 rows (HybridEP on GB200, GB300 and B300, two of them completed as tuned) within the
    issue's 15 % per family: 7.5 % (measured 2026-12-02); 9.0 % over 14 (measured 2026-12-01, third session):
    24.1 % when the fitted fixed time was charged per GEMM,
    ten per MLA + shared-expert block, 13.6 % charged per block and the router's
    (search._compute_time.block_overhead_s), 9.0 % with the full-iteration CUDA graphs of its seven
    26.06+ rows read from their recipes (search._predict.microbatch_overhead_s)."""
    assert _family_mape()["DeepSeek-V3 671B"] <= 0.15


@pytest.mark.xfail(strict=True, reason="GPT-OSS 120B: 16.8 % over 11 rows (measured 2026-12-02 with the window's "
                   "edge blocks, the fused kernel's 64-wide-head rate, the 26.06+ recipe's FP8 attention, whose "
                   "backward runs the windowed layers' whole causal triangle, and the alltoall dispatcher's sorts by "
                   "local expert; 22.9 % before the first three, 29.8 % before its eager YaRN RoPE, GLU clamp and "
                   "per-expert bias were costed): its BF16 GB300/GB200 rows 8-11 % fast, the 26.06+ MXFP8 ones "
                   "14 %, the 26.06.01 row 47 % (a published cuDNN regression of the fused dGeGLU), the B300 row "
                   "38 % (ep 64 over 8 nodes), the H100 row 13 % slow "
                   "(docs/cost-model.md, Known limits)")
def test_gpt_oss_within_15_percent() -> None:
    """GPT-OSS 120B's 11 Megatron-Bridge rows with the sliding window on alternate layers costed, and the
    eager paths its YaRN RoPE, clamped GLU and expert biases take in Megatron-Core (search._unfused_paths)."""
    assert _family_mape()["GPT-OSS 120B"] <= 0.15


def test_qwen3_30b_within_15_percent() -> None:
    """Qwen3-30B-A3B's 16 rows within the issue's 15 % per family: 14.5 % (measured 2026-12-02) since its three
    26.06+ GB200 rows run the experts in Transformer Engine's fused grouped GEMMs (the op fuser their
    full-iteration graph needs, MXFP8 on Blackwell: search._unfused_paths.expert_path), which fold the SwiGLU
    into FC1's epilogue; 15.2 % before, 14.0 % over the 14 rows read before the two token-dropping 25.09
    rows. Its rows on one GB200/B200 NVLink domain before 26.06 still run 14-27 % slower than predicted
    (docs/cost-model.md, Known limits)."""
    assert _family_mape()["Qwen3-30B-A3B"] <= 0.15


def test_a_host_synchronizing_dispatcher_exposes_each_chunks_host_time() -> None:
    """The alltoall dispatcher and DeepEP read sizes back on the host in every MoE layer; HybridEP does
    not: the first two pay Calibration.moe_sync_chunk_s per micro-batch and virtual stage, the third
    nothing, and a dense model nothing."""
    cal = default_calibration()
    assert 0.015 < cal.moe_sync_chunk_s < 0.025
    cluster = cluster_preset("dgx-h100", 2)
    base = {"dp": 8, "pp": 2, "vp": 4, "ep": 8, "micro_batch": 1, "zero_stage": 1}
    host = {d: predict(QWEN, cluster, ParallelConfig(**base, moe_dispatcher=d), FP8)  # type: ignore[arg-type]
            for d in ("alltoall", "flex-deepep", "flex-hybridep")}
    m = host["alltoall"].num_micro_batches
    for d in ("alltoall", "flex-deepep"):
        extra = host[d].time_breakdown_s["host_overhead"] - host["flex-hybridep"].time_breakdown_s["host_overhead"]
        assert extra == pytest.approx(m * 4 * cal.moe_sync_chunk_s)
    dense = model_preset("llama3-8b")
    plain = predict(dense, cluster, ParallelConfig(dp=8, pp=2, vp=4, micro_batch=1), TrainingSpec(1024))
    assert plain.time_breakdown_s["host_overhead"] == pytest.approx(m * cal.microbatch_overhead_s)


def test_a_search_runs_the_asked_exchange_wherever_a_configuration_can_and_its_best_is_the_brute_forces() -> None:
    """With the flex dispatcher and the overlap asked for, every expert-parallel configuration runs the
    dispatcher (etp = 1) and the overlap where Megatron allows it; the exhaustive search's best equals a
    brute-force pass over the same space (the bounds know the exchange)."""
    from search import search
    from search._predict import predict_memory
    from search._space import enumerate_space, moe_exchange_of

    cluster, batch, asked = cluster_preset("dgx-h100", 2), 64, ("flex-deepep", True)
    result = search(QWEN, cluster, batch, precision="fp8", framework="megatron", top_k=5,
                    moe_dispatcher=asked[0], moe_a2a_overlap=asked[1])
    assert result.exhaustive and result.top
    for r in result.top:
        c = r.config
        assert (c.moe_dispatcher, c.moe_a2a_overlap) == moe_exchange_of(asked, c.pp, c.vp, c.ep, c.etp, c.recompute)
    training = TrainingSpec(batch, "fp8")
    best = 0.0
    for cand in enumerate_space(QWEN, cluster.world_size, batch, "megatron", moe_exchange=asked).candidates:
        if not predict_memory(QWEN, cluster, cand.config, training).reasons:
            best = max(best, predict(QWEN, cluster, cand.config, training).tokens_per_s)
    assert max(r.prediction.tokens_per_s for r in result.top) == pytest.approx(best, rel=1e-12)
    assert moe_exchange_of(asked, 2, 1, 8, 1, "none") == ("flex-deepep", False)  # pp without vp: no overlap
    assert moe_exchange_of(asked, 1, 1, 8, 2, "full") == ("alltoall", False)
    assert moe_exchange_of(asked, 1, 1, 1, 1, "none") == ("alltoall", False)


@pytest.mark.parametrize(("model", "framework", "kw"), [
    ("llama3-8b", "megatron", {"moe_dispatcher": "flex-deepep"}),
    ("qwen3-30b-a3b", "deepspeed", {"moe_a2a_overlap": True}),
    ("qwen3-30b-a3b", "megatron", {"moe_dispatcher": "flex"}),
])
def test_a_search_refuses_an_exchange_it_cannot_run(model: str, framework: str, kw: dict[str, object]) -> None:
    from search import search

    with pytest.raises(SpecError) as err:
        search(model_preset(model), cluster_preset("dgx-h100", 2), 64, framework=framework, **kw)  # type: ignore[arg-type]
    assert err.value.field in ("moe_dispatcher", "moe_a2a_overlap")


def test_on_a_two_tier_fabric_the_nodes_under_the_same_leaf_take_the_leaf_rate() -> None:
    """ep=32 over 4 DGX H100 with 2-node leaves and a 4:1 oversubscribed spine: of the 3 remote nodes one
    sits under rank 0's leaf. The flex network leg costs that share at the rail's rate and the rest at
    the spine's, as NCCL's all-to-all is costed; a non-blocking fabric costs everything at the rail's."""
    from search._fabric import Fabric, FabricTier

    cal = default_calibration()
    tiered = cluster_preset("dgx-h100", 4, Fabric((FabricTier("leaf", nodes=2), FabricTier("spine", 0, 4.0))))
    flat = cluster_preset("dgx-h100", 4)
    args = (DSV3.hidden * BYTES_16BIT, 4096.0, 256, 8, 32, 1, "flex-deepep")
    lat = cal.collective_latency_s
    flat_s = flex_dispatch_s(*args, flat, cal) - lat
    tiered_s = flex_dispatch_s(*args, tiered, cal) - lat
    # One third of the remote traffic at the rail's rate, two thirds at a quarter of it: 1/3 + 2/3 x 4 = 3x.
    assert tiered_s == pytest.approx(3.0 * flat_s, rel=1e-9)
    alltoall = predict(DSV3, tiered, ParallelConfig(dp=32, ep=32, micro_batch=1, zero_stage=1, recompute="full",
                                                    pp=1), FP8)
    flex = predict(DSV3, tiered, ParallelConfig(dp=32, ep=32, micro_batch=1, zero_stage=1, recompute="full",
                                                moe_dispatcher="flex-deepep"), FP8)
    assert flex.time_breakdown_s["ep_comm"] < alltoall.time_breakdown_s["ep_comm"]


def test_overlap_with_more_than_one_mtp_layer_is_refused_by_every_path() -> None:
    """Megatron overlaps the expert all-to-all with at most one MTP layer: predict, the search and the
    emitter's rule check all refuse two, naming the field."""
    import dataclasses

    from search import search
    from service.launch._megatron_checks import check_megatron_args

    two = dataclasses.replace(DSV3, mtp_layers=2)
    c = ParallelConfig(dp=64, ep=64, micro_batch=1, zero_stage=1, moe_a2a_overlap=True)
    with pytest.raises(SpecError) as err:
        check_compatible(two, 64, c, FP8)
    assert err.value.field == "ParallelConfig.moe_a2a_overlap"
    check_compatible(DSV3, 64, c, FP8)  # one MTP layer: allowed
    with pytest.raises(SpecError) as err:
        search(two, cluster_preset("dgx-h100", 8), 256, framework="megatron", moe_a2a_overlap=True)
    assert err.value.field == "moe_a2a_overlap"
    argv = ["--num-layers", "4", "--micro-batch-size", "1", "--global-batch-size", "8", "--num-attention-heads", "8",
            "--num-experts", "8", "--expert-model-parallel-size", "8", "--moe-token-dispatcher-type", "alltoall",
            "--overlap-moe-expert-parallel-comm"]
    check_megatron_args([*argv, "--mtp-num-layers", "1"], 8)
    with pytest.raises(SpecError, match="at most one MTP layer"):
        check_megatron_args([*argv, "--mtp-num-layers", "2"], 8)


def test_deepep_on_an_nvl72_rack_says_hybridep_spans_it() -> None:
    from search._moe_terms import MOE_DEEPEP_NVL_WARNING

    rack, dgx = cluster_preset("gb200-nvl72", 4), cluster_preset("dgx-h100", 2)
    c = ParallelConfig(dp=16, ep=16, micro_batch=1, zero_stage=1, moe_dispatcher="flex-deepep")
    assert MOE_DEEPEP_NVL_WARNING in predict(QWEN, rack, c, FP8).warnings
    assert MOE_DEEPEP_NVL_WARNING not in predict(QWEN, dgx, c, FP8).warnings
    hybrid = ParallelConfig(dp=16, ep=16, micro_batch=1, zero_stage=1, moe_dispatcher="flex-hybridep")
    assert MOE_DEEPEP_NVL_WARNING not in predict(QWEN, rack, hybrid, FP8).warnings


def test_the_asked_exchange_is_not_a_departure_that_ranks_configurations_without_it_first() -> None:
    from search._ranking import complexity

    plain = ParallelConfig(dp=16, ep=8, micro_batch=1, zero_stage=1)
    asked = ParallelConfig(dp=16, ep=8, micro_batch=1, zero_stage=1, moe_dispatcher="flex-hybridep",
                           moe_a2a_overlap=True)
    assert complexity("megatron", asked) == complexity("megatron", plain)
