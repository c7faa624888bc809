"""Fine-grained memory policies (issue 18): partial optimizer offload, block recomputation of some
layers and activation offload, their known answers, the runtimes that run them, and the search."""

from __future__ import annotations

import dataclasses

import pytest

from search import (
    ParallelConfig,
    SpecError,
    TrainingSpec,
    check_compatible,
    cluster_preset,
    model_preset,
    predict,
    search,
)
from search._search import fine_grained_knobs
from search._support import support_status

LLAMA70_8K = dataclasses.replace(model_preset("llama3-70b"), seq_len=8192)
MEGATRON = TrainingSpec(global_batch=512, framework="megatron")


def _predict(config: ParallelConfig, training: TrainingSpec = MEGATRON, nodes: int = 2,
             node: str = "dgx-a100-40gb", model: object = LLAMA70_8K):  # type: ignore[no-untyped-def]
    return predict(model, cluster_preset(node, nodes), config, training)  # type: ignore[arg-type]


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.8])
def test_partial_megatron_offload_scales_the_all_or_nothing_bytes(fraction: float) -> None:
    layout = dict(dp=2, tp=8, sp=True, zero_stage=1, recompute="full")
    on_gpu = _predict(ParallelConfig(**layout))
    whole = _predict(ParallelConfig(**layout, offload_optimizer="cpu"))
    part = _predict(ParallelConfig(**layout, offload_optimizer="cpu", optimizer_offload_fraction=fraction))
    gpu_opt = on_gpu.memory_breakdown_bytes["optimizer_states"]
    assert part.memory_breakdown_bytes["optimizer_states"] == pytest.approx((1 - fraction) * gpu_opt, rel=1e-12)
    host = whole.cpu_memory_breakdown_bytes["optimizer_states"]
    assert part.cpu_memory_breakdown_bytes["optimizer_states"] == pytest.approx(fraction * host, rel=1e-12)
    # Megatron keeps its fp32 main gradients on the GPU whatever the fraction.
    assert part.memory_breakdown_bytes["gradients"] == whole.memory_breakdown_bytes["gradients"]
    # The CPU's share of the step shrinks with the fraction; the GPU updates the rest.
    assert part.time_breakdown_s["offload_step"] == pytest.approx(fraction * whole.time_breakdown_s["offload_step"],
                                                                  rel=1e-9)
    assert 0 < part.time_breakdown_s["optimizer"] < on_gpu.time_breakdown_s["optimizer"]


def test_partial_deepspeed_offload_keeps_the_rest_of_the_zero3_states_on_the_gpu() -> None:
    model = model_preset("gpt-7.5b")
    training = TrainingSpec(global_batch=64, framework="deepspeed")
    cluster = cluster_preset("dgx-a100-80gb", 1)
    none = predict(model, cluster, ParallelConfig(dp=8, zero_stage=3), training)
    whole = predict(model, cluster, ParallelConfig(dp=8, zero_stage=3, offload_optimizer="cpu"), training)
    half = predict(model, cluster, ParallelConfig(dp=8, zero_stage=3, offload_optimizer="cpu",
                                                  optimizer_offload_fraction=0.5), training)
    for part in ("optimizer_states", "gradients"):
        assert half.memory_breakdown_bytes[part] == pytest.approx(0.5 * none.memory_breakdown_bytes[part], rel=1e-12)
    assert half.cpu_memory_breakdown_bytes["optimizer_states"] == pytest.approx(
        0.5 * whole.cpu_memory_breakdown_bytes["optimizer_states"], rel=1e-12)
    # ZeRO-Offload++ updates both halves at once: the step is no slower than the CPU's half alone.
    assert half.time_breakdown_s["optimizer"] + half.time_breakdown_s["offload_step"] <= (
        whole.time_breakdown_s["offload_step"] * 0.5 + half.time_breakdown_s["optimizer"] + 1e-12)
    with pytest.raises(SpecError, match="Stage 3") as info:
        check_compatible(model, 8, ParallelConfig(dp=8, zero_stage=2, offload_optimizer="cpu",
                                                  optimizer_offload_fraction=0.5), training)
    assert info.value.field == "ParallelConfig.optimizer_offload_fraction"


@pytest.mark.parametrize("k", [1, 10, 40, 79])
def test_recomputing_k_of_l_layers_interpolates_none_and_full(k: int) -> None:
    layout = dict(dp=2, tp=8, sp=True, zero_stage=1, offload_optimizer="cpu")
    none = _predict(ParallelConfig(**layout, recompute="none"))
    full = _predict(ParallelConfig(**layout, recompute="full"))
    part = _predict(ParallelConfig(**layout, recompute="full", recompute_layers=k))
    share = k / 80
    act = "activations"
    # Stored activations: k layers keep only their inputs, 80 - k keep everything, plus one
    # recomputed layer's working bytes (full's activations minus its 80 stored inputs).
    working = full.memory_breakdown_bytes[act]  # at most: full = stored inputs + working bytes
    twice = _predict(ParallelConfig(**layout, recompute="full", recompute_layers=max(1, k // 2)))
    assert full.memory_breakdown_bytes[act] < part.memory_breakdown_bytes[act]
    assert part.memory_breakdown_bytes[act] < none.memory_breakdown_bytes[act] + working
    if k > 1:
        # Affine in k: the activations fall by the same bytes for every extra recomputed layer.
        per_layer = (twice.memory_breakdown_bytes[act] - part.memory_breakdown_bytes[act]) / (k - max(1, k // 2))
        end = part.memory_breakdown_bytes[act] - (80 - k) * per_layer
        assert end == pytest.approx(full.memory_breakdown_bytes[act], rel=1e-9)
    assert part.time_breakdown_s["recompute"] == pytest.approx(share * full.time_breakdown_s["recompute"], rel=1e-9)
    assert part.iteration_time_s == pytest.approx(
        none.iteration_time_s + share * (full.iteration_time_s - none.iteration_time_s), rel=0.01)


def test_recompute_layers_per_stage_and_its_runtimes() -> None:
    with pytest.raises(SpecError, match="recompute='full'"):
        ParallelConfig(recompute="selective", recompute_layers=2)
    config = ParallelConfig(dp=16, sp=False, recompute="full", recompute_layers=4)
    assert support_status("megatron", config) == "supported"
    for runtime in ("megatron-deepspeed", "deepspeed", "fsdp"):
        assert support_status(runtime, config) == "refused"


def test_activation_offload_moves_layers_to_the_host_with_megatrons_rules() -> None:
    layout = dict(dp=2, tp=8, sp=True, zero_stage=1)
    none = _predict(ParallelConfig(**layout))
    off = _predict(ParallelConfig(**layout, activation_offload_layers=40))
    fewer = _predict(ParallelConfig(**layout, activation_offload_layers=20))
    per_layer = (fewer.memory_breakdown_bytes["activations"] - off.memory_breakdown_bytes["activations"]) / 20
    # 40 layers leave the GPU; one of them is back ahead of its backward at any time.
    assert off.memory_breakdown_bytes["activations"] == pytest.approx(
        none.memory_breakdown_bytes["activations"] - 39 * per_layer, rel=1e-9)
    assert off.cpu_memory_breakdown_bytes["offloaded_activations"] == pytest.approx(
        8 * 40 * per_layer / 1.0, rel=0.25)  # 8 GPUs a node (the GPU side carries the fragmentation factor)
    assert off.cpu_memory_breakdown_bytes["offloaded_activations"] > 0
    assert off.time_breakdown_s["offload_transfer"] > 0
    with pytest.raises(SpecError, match="pp=1"):
        ParallelConfig(dp=1, tp=8, pp=2, activation_offload_layers=4)
    with pytest.raises(SpecError, match="recomputation"):
        ParallelConfig(dp=16, recompute="full", activation_offload_layers=4)
    with pytest.raises(SpecError, match="fewer layers"):
        check_compatible(LLAMA70_8K, 16, ParallelConfig(dp=2, tp=8, sp=True, activation_offload_layers=80), MEGATRON)


@pytest.mark.parametrize("nodes", [2, 4])
def test_memory_tight_llama3_70b_is_faster_with_a_partial_policy(nodes: int) -> None:
    """Llama 3 70B, 8K sequences, batch 512 on 2 and 4 nodes of 8 A100-40GB: the fastest supported
    configuration uses a fine-grained policy and beats the fastest all-or-nothing one, side by side."""
    cluster = cluster_preset("dgx-a100-40gb", nodes)
    result = search(LLAMA70_8K, cluster, 512, top_k=400)
    partial = [r for r in result.top if fine_grained_knobs([r.config]) is not None]
    plain = [r for r in result.top if fine_grained_knobs([r.config]) is None]
    assert partial and plain
    best_partial = max(partial, key=lambda r: r.prediction.tokens_per_s)
    best_plain = max(plain, key=lambda r: r.prediction.tokens_per_s)
    assert best_partial.prediction.tokens_per_s > best_plain.prediction.tokens_per_s
    training = TrainingSpec(512, framework=best_partial.framework)  # type: ignore[arg-type]
    check_compatible(LLAMA70_8K, cluster.world_size, best_partial.config, training)
    assert support_status(best_partial.framework, best_partial.config) == "supported"


def test_a_question_only_a_partial_policy_answers_names_the_knob() -> None:
    """A GPU just too small for any all-or-nothing policy Megatron-LM runs for Llama 3 8B at 128K tokens
    on one node, and big enough for a fine-grained one: the search answers, and its hint names the knob."""
    model = dataclasses.replace(model_preset("llama3-8b"), seq_len=131072)
    base = cluster_preset("dgx-a100-40gb", 1)
    plain_peak = min(r.prediction.peak_memory_bytes_per_gpu for r in search(model, base, 8, top_k=500,
                                                                                     framework="megatron").top
                     if fine_grained_knobs([r.config]) is None)
    small = dataclasses.replace(base, gpu=dataclasses.replace(base.gpu, memory_bytes=plain_peak - 2**28))
    result = search(model, small, 8, top_k=5, framework="megatron")
    assert result.top, result.hints
    assert all(fine_grained_knobs([r.config]) is not None for r in result.top)
    assert "only fine-grained memory policies fit" in result.hints[0]
    assert any(k in result.hints[0] for k in ("activation_offload_layers", "recompute_layers",
                                              "optimizer_offload_fraction"))
