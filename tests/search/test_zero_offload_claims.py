"""DeepSpeed's published ZeRO-3 Offload and ZeRO-Infinity claims, held by the memory model (issue 20).

* ZeRO-3 Offload: "over 2 Trillion parameters on 512 GPUs" (32 DGX-2 nodes, 16 x V100 32 GB and
  1.5 TB of host memory each), DeepSpeed blog ``docs/_posts/2021-03-08-zero3-offload.md``
  (frameworks_2.md sec. 4.2). Shape: 160 layers, hidden 32768 (2.07T).
* ZeRO-Infinity: "32T params on 512 GPUs" / "32T params on 32 nodes", DeepSpeed's SC21 slides
  (``docs/assets/files/SC21-ZeRO-Infinity.pdf``) and Rajbhandari et al. 2021 (arXiv:2104.07857),
  with NVMe offload and memory-centric tiling (frameworks_2.md sec. 4.1). The paper's exact shape
  is not in the stored text: hidden 64K (the paper's tiled width, factor 16) and 624 layers (32.2T)
  are assumed; sequences of 1024 tokens, one per GPU.
"""

from __future__ import annotations

import dataclasses

import pytest

from search import ModelSpec, ParallelConfig, SpecError, TrainingSpec, check_compatible, cluster_preset, predict
from search import search as run_search
from search._profile import Fingerprint, HardwareProfile, apply_profile
from search._units import GiB

NODES = 32
GPT_2T = ModelSpec(name="gpt-2t", layers=160, hidden=32768, heads=256, ffn=4 * 32768, seq_len=1024, vocab=51200)
GPT_32T = ModelSpec(name="gpt-32t", layers=624, hidden=65536, heads=512, ffn=4 * 65536, seq_len=1024, vocab=51200)
TRAINING = TrainingSpec(global_batch=512, precision="fp16", framework="deepspeed")


def _zero3(offload: str, tiles: int = 1) -> ParallelConfig:
    return ParallelConfig(dp=512, zero_stage=3, offload_optimizer=offload, offload_param=offload, recompute="full",
                          tiles=tiles)


def test_models_are_the_claimed_sizes() -> None:
    assert GPT_2T.params == pytest.approx(2.07e12, rel=0.01)
    assert GPT_32T.params == pytest.approx(32.2e12, rel=0.01)


def test_2t_fits_512_v100_with_zero3_cpu_offload_and_not_without() -> None:
    cluster = cluster_preset("dgx-2", NODES)
    offloaded = predict(GPT_2T, cluster, _zero3("cpu"), TRAINING)
    assert offloaded.feasible, offloaded.reasons
    host = offloaded.cpu_memory_breakdown_bytes
    # 18 bytes per parameter on the host: fp32 master, m, v, fp32 gradient and the fp16 parameters.
    assert host["optimizer_states"] + host["parameters"] == pytest.approx(18 * GPT_2T.params / NODES, rel=1e-9)
    assert offloaded.cpu_memory_bytes_per_node <= 1.5 * 1024 * GiB
    on_gpu = predict(GPT_2T, cluster, _zero3("none"), TRAINING)
    assert not on_gpu.feasible and "per GPU" in on_gpu.reasons[0]


def test_the_estimators_safety_factor_is_what_refused_the_2t_claim() -> None:
    """With DeepSpeed's 1.5x buffer factor required, the states alone (1.6 TiB) exceed the node."""
    cluster = cluster_preset("dgx-2", NODES)
    relaxed = predict(GPT_2T, cluster, _zero3("cpu"), TRAINING)
    strict = predict(GPT_2T, cluster, _zero3("cpu"), TRAINING, host_safety_factor=1.5)
    assert not strict.feasible
    assert "CPU memory per node" in " ".join(strict.reasons)
    assert strict.cpu_memory_breakdown_bytes["safety_margin"] == pytest.approx(relaxed.host_estimator_margin_bytes)
    with pytest.raises(SpecError, match="host_safety_factor"):
        predict(GPT_2T, cluster, _zero3("cpu"), TRAINING, host_safety_factor=0.5)


def test_32t_fits_with_nvme_offload_and_tiling_only() -> None:
    cluster = cluster_preset("dgx-2", NODES)
    untiled = predict(GPT_32T, cluster, _zero3("nvme"), TRAINING)
    assert not untiled.feasible
    assert any("tiles=" in r for r in untiled.reasons), "the refusal names tiling as the knob that fits"
    tiles = int(next(r for r in untiled.reasons if "tiles=" in r).split("tiles=")[1].split()[0])
    tiled = predict(GPT_32T, cluster, _zero3("nvme", tiles), TRAINING)
    assert tiled.feasible, tiled.reasons
    assert tiled.memory_breakdown_bytes["gathered_params"] < untiled.memory_breakdown_bytes["gathered_params"] / 3
    # NVMe end to end: 18 bytes per parameter per node against the node's drives; the host keeps
    # the swappers' pinned buffers and the activation checkpoints.
    assert tiled.nvme_bytes_per_node == pytest.approx(18 * GPT_32T.params / NODES, rel=1e-9)
    assert tiled.nvme_bytes_per_node <= cluster.node.nvme_bytes
    assert tiled.cpu_memory_breakdown_bytes["swap_buffers"] > 0
    assert tiled.cpu_memory_breakdown_bytes["optimizer_states"] == 0.0
    # The extra tiles cost launches, not memory only.
    assert tiled.time_breakdown_s["zero3_comm"] >= untiled.time_breakdown_s["zero3_comm"]
    cpu_only = predict(GPT_32T, cluster, _zero3("cpu", tiles), TRAINING)
    assert not cpu_only.feasible and any("CPU memory per node" in r for r in cpu_only.reasons)


def test_nvme_swap_time_follows_the_profiles_aio_figures() -> None:
    cluster = cluster_preset("dgx-2", NODES)
    fingerprint = Fingerprint(gpu_name="v100-sxm3-32gb", gpu_count=512, gpus_per_node=16,
                              created_at="2026-12-01T00:00:00Z")
    node = cluster.node
    slow = HardwareProfile(fingerprint, nvme_read_bytes_per_s=node.nvme_read_bytes_per_s / 2,
                           nvme_write_bytes_per_s=node.nvme_write_bytes_per_s / 2,
                           aio={"block_size": 1048576, "queue_depth": 32})
    measured, _ = apply_profile(cluster, slow)
    base = predict(GPT_32T, cluster, _zero3("nvme", 16), TRAINING)
    halved = predict(GPT_32T, measured, _zero3("nvme", 16), TRAINING)
    # The optimizer swap (read + write around the CPU step) takes twice as long at half the bandwidth.
    assert halved.time_breakdown_s["offload_step"] > 1.5 * base.time_breakdown_s["offload_step"]
    assert halved.iteration_time_s > base.iteration_time_s


def test_tiling_is_deepspeed_zero3_only() -> None:
    with pytest.raises(SpecError, match="ZeRO-3"):
        ParallelConfig(dp=8, zero_stage=2, tiles=4)
    config = ParallelConfig(dp=512, zero_stage=3, tiles=4)
    for framework in ("megatron", "megatron-deepspeed", "fsdp"):
        with pytest.raises(SpecError, match="tiling") as info:
            check_compatible(GPT_2T, 512, config, dataclasses.replace(TRAINING, framework=framework))
        assert info.value.field == "ParallelConfig.tiles"


def test_search_ranks_tiling_only_when_allowed_and_names_it_otherwise() -> None:
    cluster = cluster_preset("dgx-2", NODES)
    plain = run_search(GPT_32T, cluster, 512, precision="fp16", framework="deepspeed", top_k=3)
    assert not plain.top
    assert any("tiling" in h and "allow" in h for h in plain.hints)
    allowed = run_search(GPT_32T, cluster, 512, precision="fp16", framework="deepspeed", top_k=3,
                         allow_tiling=True)
    assert allowed.top, allowed.hints
    best = allowed.top[0].config
    assert best.tiles > 1 and best.offload_param == "nvme"
