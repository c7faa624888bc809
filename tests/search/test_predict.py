"""Behaviour of ``search.predict`` on presets: sums, rates, feasibility and the direction of each lever."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import NamedTuple

import pytest

from search import (
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    Prediction,
    SpecError,
    TrainingSpec,
    cluster_preset,
    model_preset,
    predict,
)

GiB = 2**30
A100 = "dgx-a100-80gb"
MODEL_STATES = ("weights", "gradients", "optimizer_states", "gathered_params")

# (model, cluster, nodes, config, training): a spread of policies that predict must handle.
CASES = [
    ("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=1), TrainingSpec(global_batch=512)),
    ("gpt-39b", A100, 2, ParallelConfig(dp=2, tp=4, pp=2, vp=2, sp=True, recompute="selective"),
     TrainingSpec(global_batch=512)),
    ("gpt3-175b", A100, 8, ParallelConfig(dp=1, tp=8, pp=8, sp=True, recompute="full"),
     TrainingSpec(global_batch=256)),
    ("llama3-70b", "dgx-h100", 4, ParallelConfig(dp=4, tp=8, cp=1, sp=True, zero_stage=1, recompute="selective"),
     TrainingSpec(global_batch=64)),
    ("llama3-8b", "dgx-h100", 1, ParallelConfig(dp=4, tp=2, sp=True, zero_stage=3),
     TrainingSpec(global_batch=64, framework="fsdp")),
    ("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                                         recompute="full"),
     TrainingSpec(global_batch=64, framework="deepspeed")),
    ("mpt-7b", "dgx-h100", 1, ParallelConfig(dp=8, zero_stage=3, offload_optimizer="nvme"),
     TrainingSpec(global_batch=64, framework="deepspeed", precision="fp8")),
    ("bloom-176b", A100, 10, ParallelConfig(dp=4, tp=4, pp=5, micro_batch=2, zero_stage=1),
     TrainingSpec(global_batch=192, framework="megatron-deepspeed")),
]
CASE_IDS = [f"{m}-{c}x{n}-{t.framework}" for m, c, n, _, t in CASES]


def run(model: str, cluster: str, nodes: int, config: ParallelConfig, training: TrainingSpec) -> Prediction:
    return predict(model_preset(model), cluster_preset(cluster, nodes), config, training)


class Case(NamedTuple):
    model: ModelSpec
    cluster: ClusterSpec
    config: ParallelConfig
    training: TrainingSpec
    prediction: Prediction


@pytest.fixture(scope="module", params=CASES, ids=CASE_IDS)
def case(request: pytest.FixtureRequest) -> Case:
    model, cluster, nodes, config, training = request.param
    spec, hardware = model_preset(model), cluster_preset(cluster, nodes)
    return Case(spec, hardware, config, training, predict(spec, hardware, config, training))


# ---------------------------------------------------------------- accounting identities


def test_time_breakdown_sums_to_iteration_time(case: Case) -> None:
    p = case.prediction
    assert sum(p.time_breakdown_s.values()) == pytest.approx(p.iteration_time_s, rel=1e-9)
    assert p.iteration_time_s > 0
    assert all(v >= 0 and math.isfinite(v) for v in p.time_breakdown_s.values()), p.time_breakdown_s


def test_memory_breakdown_sums_to_peak(case: Case) -> None:
    p = case.prediction
    assert sum(p.memory_breakdown_bytes.values()) == pytest.approx(p.peak_memory_bytes_per_gpu, rel=1e-9)
    assert all(v >= 0 and math.isfinite(v) for v in p.memory_breakdown_bytes.values())
    assert p.memory_headroom_bytes == pytest.approx(p.gpu_memory_bytes - p.peak_memory_bytes_per_gpu, rel=1e-12)
    assert p.gpu_memory_bytes == case.cluster.gpu.memory_bytes


def test_tokens_per_second(case: Case) -> None:
    p = case.prediction
    expected = case.training.global_batch * case.model.seq_len / p.iteration_time_s
    assert p.tokens_per_s == pytest.approx(expected, rel=1e-12)


def test_mfu_and_hfu_definitions(case: Case) -> None:
    """MFU = model FLOPs / (time x GPUs x dense peak of the training precision)."""
    p = case.prediction
    world = case.cluster.world_size
    peak = case.cluster.gpu.peak_flop_per_s(case.training.precision)
    assert p.mfu == pytest.approx(p.model_flop_per_iteration / (p.iteration_time_s * world * peak), rel=1e-12)
    assert p.hfu == pytest.approx(p.hardware_flop_per_iteration / (p.iteration_time_s * world * peak), rel=1e-12)
    assert p.model_tflop_per_s_per_gpu == pytest.approx(
        p.model_flop_per_iteration / p.iteration_time_s / world / 1e12, rel=1e-12)
    assert 0 < p.mfu <= p.hfu < 1
    if case.config.recompute == "none":
        assert p.hfu == p.mfu


def test_num_micro_batches(case: Case) -> None:
    c = case.config
    assert case.prediction.num_micro_batches == case.training.global_batch // (c.dp * c.micro_batch)


def test_prediction_is_deterministic(case: Case) -> None:
    again = predict(case.model, case.cluster, case.config, case.training)
    assert again == case.prediction
    assert again.to_dict() == case.prediction.to_dict()


def test_to_dict_is_json_and_names_the_bottleneck(case: Case) -> None:
    p = case.prediction
    data = p.to_dict()
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back["bottleneck"] == p.bottleneck == max(p.time_breakdown_s, key=p.time_breakdown_s.__getitem__)
    assert back["bottleneck"] in back["time_breakdown_s"]
    assert back["iteration_time_s"] == p.iteration_time_s
    assert back["memory_headroom_bytes"] == p.memory_headroom_bytes
    assert isinstance(back["reasons"], list) and isinstance(back["warnings"], list)
    assert back["feasible"] is p.feasible


def test_explain_is_text(case: Case) -> None:
    p = case.prediction
    text = p.explain()
    assert "iteration time" in text and "peak GPU memory" in text
    assert ("NOT feasible" in text) is (not p.feasible)


def test_feasible_means_it_fits(case: Case) -> None:
    p = case.prediction
    assert p.feasible is (not p.reasons)
    if p.feasible:
        assert p.peak_memory_bytes_per_gpu <= p.gpu_memory_bytes


# ---------------------------------------------------------------- feasibility


def test_one_trillion_parameters_on_one_node_without_zero_is_infeasible() -> None:
    p = run("gpt-1t", A100, 1, ParallelConfig(dp=8), TrainingSpec(global_batch=64))
    assert not p.feasible
    assert p.reasons
    assert "GiB" in p.reasons[0]
    assert p.peak_memory_bytes_per_gpu > 10 * p.gpu_memory_bytes
    assert p.memory_headroom_bytes < 0
    # The time is still predicted, so a search can rank it.
    assert p.iteration_time_s > 0


def test_cpu_memory_shortfall_is_a_reason() -> None:
    """ZeRO-3 with optimizer and parameter offload of a 175B model on one 1 TiB node."""
    p = run("gpt3-175b", A100, 1, ParallelConfig(dp=8, zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                                                recompute="full"),
            TrainingSpec(global_batch=64, framework="deepspeed"))
    assert not p.feasible
    assert any("CPU memory" in r and "GiB" in r for r in p.reasons)


def test_incompatible_config_raises_spec_error() -> None:
    with pytest.raises(SpecError, match=r"^ParallelConfig: dp\*tp\*pp\*cp"):
        run("gpt-7.5b", A100, 2, ParallelConfig(dp=8), TrainingSpec(global_batch=64))
    with pytest.raises(SpecError, match=r"^ParallelConfig\.tp"):
        run("llama3-70b", "dgx-h100", 2, ParallelConfig(tp=16), TrainingSpec(global_batch=64))


# ---------------------------------------------------------------- the levers


def test_doubling_dp_halves_micro_batches_and_reduces_compute_time() -> None:
    training = TrainingSpec(global_batch=512)
    one = run("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=1, recompute="full"), training)
    two = run("gpt-7.5b", A100, 2, ParallelConfig(dp=16, zero_stage=1, recompute="full"), training)
    assert two.num_micro_batches * 2 == one.num_micro_batches
    assert two.time_breakdown_s["compute"] < one.time_breakdown_s["compute"]
    assert two.time_breakdown_s["compute"] == pytest.approx(one.time_breakdown_s["compute"] / 2, rel=1e-9)
    assert two.iteration_time_s < one.iteration_time_s
    assert two.tokens_per_s > one.tokens_per_s
    # Same work, same FLOPs.
    assert two.model_flop_per_iteration == one.model_flop_per_iteration


@pytest.mark.parametrize(("model", "cluster", "nodes", "config"), [
    ("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=1)),
    ("gpt-39b", A100, 2, ParallelConfig(dp=2, tp=4, pp=2, sp=True)),
    ("llama3-8b", "dgx-h100", 1, ParallelConfig(dp=4, tp=2, zero_stage=1)),
])
def test_full_recompute_costs_time_and_saves_activation_memory(model: str, cluster: str, nodes: int,
                                                                config: ParallelConfig) -> None:
    training = TrainingSpec(global_batch=64)
    base = run(model, cluster, nodes, config, training)
    full = run(model, cluster, nodes, _with(config, recompute="full"), training)
    assert full.iteration_time_s > base.iteration_time_s
    assert full.time_breakdown_s["recompute"] > 0 == base.time_breakdown_s["recompute"]
    assert full.memory_breakdown_bytes["activations"] < base.memory_breakdown_bytes["activations"]
    assert full.hardware_flop_per_iteration > base.hardware_flop_per_iteration
    assert full.model_flop_per_iteration == base.model_flop_per_iteration
    assert full.hfu > full.mfu


def test_zero_stages_reduce_model_state_memory_monotonically() -> None:
    training = TrainingSpec(global_batch=64, framework="deepspeed")
    states = []
    for stage in (0, 1, 2, 3):
        p = run("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=stage), training)
        states.append(sum(p.memory_breakdown_bytes[k] for k in MODEL_STATES))
    assert states[0] > states[1] > states[2] > states[3], [s / GiB for s in states]
    # DeepSpeed accounting, P parameters over 8 GPUs: 20P, 4P + 16P/8, 2P + 18P/8, 18P/8 + 4 x largest layer.
    m = model_preset("gpt-7.5b")
    P = m.params
    assert states[0] == pytest.approx(20 * P, rel=1e-12)
    assert states[2] == pytest.approx(2 * P + 18 * P / 8, rel=1e-12)
    assert states[3] == pytest.approx(18 * P / 8 + 4 * m.largest_layer_params, rel=1e-12)


@pytest.mark.parametrize("pp", [2, 4])
def test_interleaving_shrinks_the_pipeline_bubble(pp: int) -> None:
    """Narayanan et al. 2021 Sec. 2.2: bubble = (p - 1)/v x (time of one micro-batch on a stage)."""
    training = TrainingSpec(global_batch=512)
    model, cluster = "gpt-39b", A100  # 48 layers
    nodes = pp  # tp = 8, dp = 1
    results = {vp: run(model, cluster, nodes, ParallelConfig(tp=8, pp=pp, vp=vp, sp=True), training)
               for vp in (1, 2, 4)}
    bubbles = {vp: p.time_breakdown_s["pipeline_bubble"] for vp, p in results.items()}
    assert bubbles[1] > bubbles[2] > bubbles[4] > 0
    # Undo the (p-1)/v factor: what remains is the stage time of one micro-batch (plus its
    # point-to-point transfers, which interleaving multiplies by v) and must not depend on v.
    # Without interleaving every transfer is exposed, so vp = 1's pp_p2p gives one micro-batch's.
    p2p_1 = results[1].time_breakdown_s["pp_p2p"] / results[1].num_micro_batches
    assert p2p_1 > 0
    stage_times = {vp: bubbles[vp] * vp / (pp - 1) - vp * p2p_1 for vp in results}
    assert stage_times[2] == pytest.approx(stage_times[1], rel=1e-9)
    assert stage_times[4] == pytest.approx(stage_times[1], rel=1e-9)
    # Megatron-Core's interleaved schedule overlaps the steady state's transfers with the next chunk
    # (overlap_p2p_comm): a 39B chunk hides them.
    assert results[2].time_breakdown_s["pp_p2p"] == 0.0 and results[4].time_breakdown_s["pp_p2p"] == 0.0


def test_no_pipeline_no_bubble() -> None:
    p = run("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=1), TrainingSpec(global_batch=64))
    assert p.time_breakdown_s["pipeline_bubble"] == 0.0
    assert p.time_breakdown_s["pp_p2p"] == 0.0


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_optimizer_offload_moves_optimizer_states_to_the_host(stage: int) -> None:
    training = TrainingSpec(global_batch=64, framework="deepspeed")
    on_gpu = run("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=stage), training)
    offloaded = run("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=stage, offload_optimizer="cpu"), training)
    assert on_gpu.memory_breakdown_bytes["optimizer_states"] > 0
    assert offloaded.memory_breakdown_bytes["optimizer_states"] == 0.0
    assert on_gpu.cpu_memory_bytes_per_node == 0.0
    # fp32 master, m, v and fp32 gradient (16 bytes) of each GPU's P/8 shard, 8 GPUs, plus the OS's and
    # the 8 ranks' processes' allowance; DeepSpeed's estimator would add half the states again.
    P = model_preset("gpt-7.5b").params
    host = offloaded.cpu_memory_breakdown_bytes
    assert host["optimizer_states"] == pytest.approx(16 * P, rel=1e-12)
    assert offloaded.cpu_memory_bytes_per_node == pytest.approx(16 * P + (32 + 8 * 6) * 2**30, rel=1e-12)
    assert offloaded.host_estimator_margin_bytes == pytest.approx(0.5 * 16 * P, rel=1e-12)
    assert offloaded.peak_memory_bytes_per_gpu < on_gpu.peak_memory_bytes_per_gpu
    assert offloaded.time_breakdown_s["offload_transfer"] + offloaded.time_breakdown_s["optimizer"] > 0


def test_nvme_offload_uses_nvme_not_host_memory_for_states() -> None:
    training = TrainingSpec(global_batch=64, framework="deepspeed")
    cpu = run("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=3, offload_optimizer="cpu"), training)
    nvme = run("gpt-7.5b", A100, 1, ParallelConfig(dp=8, zero_stage=3, offload_optimizer="nvme"), training)
    P = model_preset("gpt-7.5b").params
    assert nvme.nvme_bytes_per_node == pytest.approx(16 * P, rel=1e-12)
    assert cpu.nvme_bytes_per_node == 0.0
    assert nvme.cpu_memory_bytes_per_node < cpu.cpu_memory_bytes_per_node


def test_more_gpus_for_tensor_parallelism_cut_per_gpu_weights() -> None:
    training = TrainingSpec(global_batch=64)
    tp1 = run("llama3-70b", "dgx-h100", 1, ParallelConfig(dp=8, zero_stage=1), training)
    tp8 = run("llama3-70b", "dgx-h100", 8, ParallelConfig(dp=8, tp=8, zero_stage=1), training)
    # (the final norm is not split by tp: a 1e-7 effect)
    assert tp8.memory_breakdown_bytes["weights"] == pytest.approx(tp1.memory_breakdown_bytes["weights"] / 8, rel=1e-6)
    assert tp8.time_breakdown_s["tp_comm"] > 0 == tp1.time_breakdown_s["tp_comm"]


def _with(config: ParallelConfig, **changes: object) -> ParallelConfig:
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]


# ---------------------------------------------------------------- runtime-true traffic (issue 11)


def _dp_time_s(p: Prediction) -> float:
    """Data-parallel time on the critical path: the step's reduction/gather and the per-micro-batch part."""
    return p.time_breakdown_s["dp_comm"] + p.time_breakdown_s["zero3_comm"]


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "megatron-deepspeed"])
def test_zero2_reduces_every_micro_batch_so_it_costs_more_dp_time_than_zero1(framework: str) -> None:
    """DeepSpeed ZeRO-2 (partition_gradients) and Megatron-FSDP optim_grads reduce-scatter in every
    backward; ZeRO-1 / the distributed optimizer once per step (frameworks_2.md sec. 2.3)."""
    model, cluster = model_preset("gpt-7.5b"), cluster_preset(A100, 4)
    training = TrainingSpec(global_batch=256, framework=framework)  # type: ignore[arg-type]
    z1 = predict(model, cluster, ParallelConfig(dp=32, micro_batch=2, zero_stage=1), training)
    z2 = predict(model, cluster, ParallelConfig(dp=32, micro_batch=2, zero_stage=2), training)
    assert z1.num_micro_batches == z2.num_micro_batches == 4
    assert _dp_time_s(z2) > _dp_time_s(z1) > 0
    one = TrainingSpec(global_batch=64, framework=framework)  # type: ignore[arg-type]
    z2_one = predict(model, cluster, ParallelConfig(dp=32, micro_batch=2, zero_stage=2), one)
    assert _dp_time_s(z2) > 2 * _dp_time_s(z2_one)  # it grows with the micro-batches


def test_fsdp_under_torch_pipelining_reduces_once_per_step_and_holds_unsharded_state() -> None:
    """torch pipelining turns gradient sync and resharding off for all but the last backward:
    no per-micro-batch traffic, and the stage's 16-bit parameters and fp32 gradients stay unsharded."""
    model, cluster = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    training = TrainingSpec(global_batch=64, framework="fsdp")
    piped = predict(model, cluster, ParallelConfig(dp=8, pp=2, zero_stage=3), training)
    flat = predict(model, cluster, ParallelConfig(dp=16, zero_stage=3), training)
    assert piped.time_breakdown_s["zero3_comm"] == 0.0 and piped.time_breakdown_s["dp_comm"] > 0
    assert flat.time_breakdown_s["zero3_comm"] > 0
    stage_params = model.params / 2  # about half the model per stage
    assert piped.memory_breakdown_bytes["gathered_params"] >= 6.0 * stage_params * 0.9


def test_context_parallelism_is_not_free() -> None:
    """Ring attention exposes what the per-step attention does not hide and merges partial results:
    at 8K tokens, cp 8 costs more than cp 2 for the same tokens per GPU (Llama 3 8B, 16 H100)."""
    model, cluster = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    training = TrainingSpec(global_batch=512)
    cp2 = predict(model, cluster, ParallelConfig(dp=8, cp=2, micro_batch=1, zero_stage=1), training)
    cp8 = predict(model, cluster, ParallelConfig(dp=2, cp=8, micro_batch=4, zero_stage=1), training)
    assert 0 < cp2.time_breakdown_s["cp_comm"] < cp8.time_breakdown_s["cp_comm"]
    assert cp2.iteration_time_s < cp8.iteration_time_s


def test_tp_comm_overlap_hides_tp_traffic_inside_a_node_only() -> None:
    model, training = model_preset("gpt3-175b"), TrainingSpec(global_batch=1536)
    cluster = cluster_preset(A100, 128)
    for tp, hidden in ((8, True), (16, False)):
        dp = 1024 // (tp * 8)
        plain = predict(model, cluster, ParallelConfig(dp=dp, tp=tp, pp=8, sp=True, zero_stage=1), training)
        overlapped = predict(model, cluster, ParallelConfig(dp=dp, tp=tp, pp=8, sp=True, zero_stage=1,
                                                            tp_comm_overlap=True), training)
        if hidden:
            assert 0 < overlapped.time_breakdown_s["tp_comm"] <= plain.time_breakdown_s["tp_comm"] / 4
        else:  # userbuffers exchange over NVLink peer memory: a TP group across nodes overlaps nothing
            assert overlapped.time_breakdown_s["tp_comm"] == pytest.approx(plain.time_breakdown_s["tp_comm"])


def test_deepspeed_pipeline_engine_pays_per_micro_batch_and_exposes_the_reduction() -> None:
    """DeepSpeed's PipelineEngine: ReduceGrads after the last backward (no overlap) and its own
    per-micro-batch cost; Megatron's schedule of the same layout pays neither."""
    model, cluster = model_preset("gpt-39b"), cluster_preset(A100, 4)
    config = ParallelConfig(dp=4, tp=4, pp=2, micro_batch=1, zero_stage=1)
    ds = predict(model, cluster, config, TrainingSpec(global_batch=64, framework="megatron-deepspeed"))
    mg = predict(model, cluster, config, TrainingSpec(global_batch=64, framework="megatron"))
    assert ds.time_breakdown_s["dp_comm"] > mg.time_breakdown_s["dp_comm"]
    assert ds.time_breakdown_s["host_overhead"] >= mg.time_breakdown_s["host_overhead"]


def test_parallel_residual_halves_tensor_parallel_traffic() -> None:
    """GPT-NeoX's parallel residual sums attention and MLP outputs before one all-reduce."""
    base = model_preset("gpt-7.5b")
    neox = dataclasses.replace(base, parallel_residual=True)
    cluster, config, training = cluster_preset(A100, 1), ParallelConfig(dp=2, tp=4), TrainingSpec(global_batch=64)
    seq = predict(base, cluster, config, training).time_breakdown_s["tp_comm"]
    par = predict(neox, cluster, config, training).time_breakdown_s["tp_comm"]
    assert par == pytest.approx(seq / 2, rel=1e-9)


def test_chunked_overlap_hides_traffic_behind_compute_but_one_chunk() -> None:
    from search._schedule import chunked_overlap_s

    assert chunked_overlap_s(3.0, 1.0, 0.1) == pytest.approx(3.1)  # hidden, one chunk exposed
    assert chunked_overlap_s(1.0, 3.0, 0.1) == pytest.approx(3.1)  # traffic-bound: the traffic and a chunk
    assert chunked_overlap_s(3.0, 0.05, 0.1) == pytest.approx(3.05)  # never more than the traffic itself
    assert chunked_overlap_s(3.0, 0.0, 0.1) == 3.0


def _fsdp_exposure(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig,
                   training: TrainingSpec) -> tuple[float, float, float, bool]:
    """(exposed ZeRO traffic, traffic, compute) per micro-batch, and whether the traffic stays on NVLink."""
    from search._calibration import default_calibration
    from search._comm_terms import step_comm_s
    from search._stages import stage_expert_params_per_rank, stage_params_per_rank

    p = predict(model, cluster, config, training)
    experts = stage_expert_params_per_rank(model, config) if model.moe is not None else ()
    comm = step_comm_s(cluster, config, training, default_calibration(), stage_params_per_rank(model, config),
                       model.params_per_layer / config.tp, experts)
    b = p.time_breakdown_s
    compute_mb_s = (p.iteration_time_s - b["zero3_comm"] - b["optimizer"] - b.get("dp_comm", 0.0)
                    - b.get("offload_transfer", 0.0)) / p.num_micro_batches
    return b["zero3_comm"] / p.num_micro_batches, comm.per_micro_batch_s, compute_mb_s, comm.on_nvlink


@pytest.mark.parametrize(("name", "ep"), [("llama3-70b", 1), ("qwen3-30b-a3b", 8)])
def test_megatron_fsdp_hides_its_traffic_inside_an_nvlink_domain_only(name: str, ep: int) -> None:
    """Megatron-FSDP (Megatron ZeRO-3) prefetches and reduces unit by unit behind compute: inside one
    NVL72 rack only one layer's unit of each micro-batch's gathers and reduce-scatters is exposed (for
    an MoE model, routed experts included); the same layout across two racks, or on 8-GPU nodes, keeps
    the fitted ZeRO-3 overlap, and so does PyTorch FSDP."""
    from search._calibration import default_calibration
    from search._schedule import overlapped_s

    model = model_preset(name)
    cal = default_calibration()
    training = TrainingSpec(global_batch=288, precision="fp8", framework="megatron")
    one_rack, two_racks = cluster_preset("gb200-nvl72", 18), cluster_preset("gb200-nvl72", 36)
    # Micro-batches of 2: enough compute per micro-batch to cover its traffic (the case the overlap is for).
    inside = ParallelConfig(dp=72, micro_batch=2, zero_stage=3, recompute="full", ep=ep, sp=False)
    exposed, traffic, compute, on_nvlink = _fsdp_exposure(model, one_rack, inside, training)
    assert on_nvlink and 0 < traffic < compute
    assert exposed == pytest.approx(traffic / model.layers, rel=1e-9)  # one layer's unit (pp = 1)
    across = ParallelConfig(dp=144, micro_batch=2, zero_stage=3, recompute="full", ep=ep, sp=False)
    for cluster, config in ((two_racks, across), (cluster_preset("dgx-h100", 9), inside)):
        exposed, traffic, compute, on_nvlink = _fsdp_exposure(model, cluster, config, training)
        assert not on_nvlink and traffic > 0
        assert exposed == pytest.approx(overlapped_s(compute, traffic, cal.zero3_overlap) - compute, rel=1e-9)
    if model.moe is None:  # torchtitan's MoE models are refused
        torch_fsdp = predict(model, one_rack, inside, dataclasses.replace(training, framework="fsdp"))
        exposed_mb_s = torch_fsdp.time_breakdown_s["zero3_comm"] / torch_fsdp.num_micro_batches
        assert exposed_mb_s > 2 * _fsdp_exposure(model, one_rack, inside, training)[0]
