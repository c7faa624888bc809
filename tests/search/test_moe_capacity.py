"""Token dropping at a capacity factor, with and without padding every expert's input to its capacity
(Megatron ``--moe-expert-capacity-factor``, ``--moe-pad-expert-input-to-capacity``): what each expert
computes, what the alltoall dispatcher sends, whether it synchronizes the host, what megatron-core
refuses, and the launch flags (megatron-core 0.19.0 ``token_dispatcher.py:511-535``)."""

from __future__ import annotations

import dataclasses
import json

import pytest

import search
from search import ModelSpec, ParallelConfig, SpecError, TrainingSpec, check_compatible, cluster_preset, predict
from search._calibration import default_calibration
from search._moe_dispatch import moe_sync_overhead_s, syncs_host
from search._moe_spec import MoESpec
from search._moe_terms import DROPLESS_IMBALANCE, dispatch_forward_s, expert_load_factor, moe_layer_times
from search._predict import _kernels
from search._runs_file import read_records
from service.launch._base import LaunchRequest
from service.launch._megatron import megatron_args
from service.launch._megatron_checks import arg_values, check_megatron_args

QWEN = search.model_preset("qwen3-30b-a3b")
CLUSTER = cluster_preset("dgx-h100", 2)
TRAINING = TrainingSpec(global_batch=1024, precision="bf16")
CONFIG = ParallelConfig(dp=16, pp=1, ep=8, micro_batch=1, zero_stage=1)


def _moe(**kw: object) -> ModelSpec:
    assert QWEN.moe is not None
    return dataclasses.replace(QWEN, moe=dataclasses.replace(QWEN.moe, **kw))


def test_padding_needs_a_capacity_and_a_boolean() -> None:
    with pytest.raises(SpecError) as err:
        MoESpec(experts=8, topk=2, expert_ffn=512, pad_to_capacity=True)
    assert err.value.field == "ModelSpec.moe.pad_to_capacity" and "capacity_factor" in err.value.fix
    with pytest.raises(SpecError, match="not true or false"):
        MoESpec(experts=8, topk=2, expert_ffn=512, capacity_factor=1.0, pad_to_capacity=1)  # type: ignore[arg-type]


def test_a_padded_expert_computes_its_whole_capacity_an_unpadded_one_at_most_the_busiest_load() -> None:
    assert expert_load_factor(_moe(capacity_factor=1.5, pad_to_capacity=True)) == 1.5
    assert expert_load_factor(_moe(capacity_factor=1.5)) == DROPLESS_IMBALANCE  # the cap is above the load
    assert expert_load_factor(_moe(capacity_factor=1.0)) == 1.0  # the cap trims the busiest expert
    # Padding computes the capacity even when the benchmark forces an even load.
    assert expert_load_factor(_moe(capacity_factor=1.25, pad_to_capacity=True, router_load="force-balanced")) == 1.25
    cal = default_calibration()
    kernels, _ = _kernels(CLUSTER.gpu, "bf16", cal, "megatron")
    times = {cf: moe_layer_times(_moe(capacity_factor=cf, pad_to_capacity=True), 1, 1, 1, False, 8, 1, kernels,
                                 CLUSTER, cal).gemm_s for cf in (1.0, 2.0)}
    assert times[2.0] > times[1.0]


def test_the_padded_alltoall_sends_capacity_times_experts_rows() -> None:
    cal = default_calibration()

    def sent(model: ModelSpec) -> float:
        return dispatch_forward_s(model, 1, 1, 1, False, 8, 1, CLUSTER, cal) - 2.0 * 2.0 * cal.collective_latency_s

    dropless, padded_1, padded_2 = sent(QWEN), sent(_moe(capacity_factor=1.0, pad_to_capacity=True)), sent(
        _moe(capacity_factor=2.0, pad_to_capacity=True))
    assert padded_1 == pytest.approx(dropless)  # at factor 1 the padded split is the even one
    assert padded_2 > 1.5 * padded_1
    assert sent(_moe(capacity_factor=2.0)) == pytest.approx(dropless)  # unpadded: dropped copies are not sent


def test_only_the_unpadded_alltoall_and_deepep_synchronize_the_host() -> None:
    assert syncs_host("alltoall") and syncs_host("flex-deepep") and not syncs_host("flex-hybridep")
    assert not syncs_host("alltoall", pad_to_capacity=True)
    assert moe_sync_overhead_s(8, 4, "alltoall", 0.02, pad_to_capacity=True) == 0.0
    assert moe_sync_overhead_s(8, 4, "alltoall", 0.02) == pytest.approx(0.08)
    padded = predict(_moe(capacity_factor=1.0, pad_to_capacity=True), CLUSTER, CONFIG, TRAINING)
    dropping = predict(_moe(capacity_factor=1.0), CLUSTER, CONFIG, TRAINING)
    m = padded.num_micro_batches
    gap = dropping.time_breakdown_s["host_overhead"] - padded.time_breakdown_s["host_overhead"]
    assert gap == pytest.approx(m * default_calibration().moe_sync_chunk_s)


def test_deepep_cannot_pad_and_the_search_says_so() -> None:
    model = _moe(capacity_factor=1.0, pad_to_capacity=True)
    with pytest.raises(SpecError) as err:
        check_compatible(model, 16, dataclasses.replace(CONFIG, moe_dispatcher="flex-deepep"), TRAINING)
    assert err.value.field == "ParallelConfig.moe_dispatcher" and "1600-1607" in err.value.problem
    check_compatible(model, 16, dataclasses.replace(CONFIG, moe_dispatcher="flex-hybridep"), TRAINING)
    with pytest.raises(SpecError) as err:
        search.search(model, CLUSTER, 1024, framework="megatron", moe_dispatcher="flex-deepep")
    assert err.value.field == "moe_dispatcher"


def test_the_launch_pads_what_was_costed() -> None:
    req = LaunchRequest(model=_moe(capacity_factor=1.0, pad_to_capacity=True), cluster=CLUSTER, config=CONFIG,
                        training=TRAINING)
    argv = megatron_args(req)
    check_megatron_args(argv, CONFIG.world_size)
    v = arg_values(argv)
    assert float(v["--moe-expert-capacity-factor"] or 0) == 1.0 and "--moe-pad-expert-input-to-capacity" in v
    assert v["--moe-token-dispatcher-type"] == "alltoall"
    unpadded = arg_values(megatron_args(dataclasses.replace(req, model=_moe(capacity_factor=1.0))))
    assert "--moe-pad-expert-input-to-capacity" not in unpadded


def test_a_runs_record_reads_and_refuses_its_padding(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.fit_constants import DATA

    rows = json.loads((DATA / "runs_2024_2026.json").read_text())
    row = next(r for r in rows if r["id"].endswith("-tokendrop") and "h100" in r["id"])
    assert read_records([row], "x").runs == ()  # as printed: the capacity is not stated
    row["model"]["moe"].update(capacity_factor=1.0, pad_to_capacity=True)
    (run,) = read_records([row], "x").runs
    assert run.model.moe is not None and run.model.moe.pad_to_capacity
    row["model"]["moe"].update(capacity_factor=None)
    (refused,) = read_records([row], "x").refused
    assert any("capacity" in r.field or "capacity" in r.problem for r in refused.refusals)
