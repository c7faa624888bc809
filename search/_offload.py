"""ZeRO-Offload / ZeRO-Infinity: PCIe, CPU optimizer and NVMe terms.

Ren et al. 2021 (ZeRO-Offload, arXiv:2101.06840) Sec. 4: gradients stream to the host during
backward, the fp32 Adam step runs on the CPU (all GPUs of a node share its cores), the
updated 16-bit parameters return over PCIe. Rajbhandari et al. 2021 (ZeRO-Infinity,
arXiv:2104.07857) Sec. 5-6: parameters are fetched from CPU/NVMe for every forward and
backward pass and prefetched to overlap compute; optimizer states swap_bytes in from NVMe and out
again around the CPU step.
"""

from __future__ import annotations

from dataclasses import dataclass

from search._cluster_spec import ClusterSpec
from search._memory import layer_activation_bytes
from search._model_spec import ModelSpec
from search._parallel_spec import ParallelConfig
from search._units import BYTES_16BIT

OPTIMIZER_SWAP_BYTES_PER_PARAM = 16.0
"""fp32 master weight, momentum, variance and gradient partition swapped per parameter."""
PARAM_BYTES = 2.0
"""16-bit parameters fetched by ZeRO-Infinity."""
MEGATRON_GRAD_BYTES = 4.0
"""Megatron reduces and keeps fp32 main gradients; its CPU optimizer copies them out at the step."""
PARAM_FETCHES_PER_MICRO_BATCH = 2.0
"""ZeRO-Infinity fetches each parameter for the forward and for the backward pass."""


@dataclass(frozen=True, slots=True)
class OffloadTerms:
    """Offload traffic per micro-batch (overlappable with compute) and per step (exposed)."""

    per_micro_batch_s: float
    per_step_s: float


def offload_terms(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, layers_per_stage: int,
                  stage_params: tuple[float, ...], framework: str = "deepspeed",
                  shard_params: float | None = None, linear_input_bytes: float = BYTES_16BIT) -> OffloadTerms:
    """PCIe, CPU-Adam and NVMe times of the offload policy in ``config`` for the largest stage
    (``stage_params``: per pipeline rank; ``layers_per_stage``: the most layers on a rank;
    ``shard_params``: the GPU's optimizer shard when it is not the largest stage over dp x cp, as
    with experts sharded over the expert data-parallel group)."""
    if config.offload_optimizer == "none" and config.offload_param == "none" and not config.activation_offload_layers:
        return OffloadTerms(0.0, 0.0)
    node = cluster.node
    if shard_params is None:
        shard_params = max(stage_params) / (config.dp * config.cp)
    node_params = shard_params * node.gpus_per_node
    per_micro_batch_s = activation_offload_s(model, cluster, config, linear_input_bytes)
    step_s = 0.0
    # A partial offload moves that share of the states and of their update (optimizer_offload_fraction).
    fraction = config.optimizer_offload_fraction
    shard_params_opt, node_params_opt = fraction * shard_params, fraction * node_params
    if config.offload_optimizer != "none" and framework == "megatron":
        # --optimizer-cpu-offload: at the step the fp32 main gradients of the shard go down, the CPU
        # Adam runs, the updated parameters come back (megatron/core/optimizer/cpu_offloading).
        step_s += MEGATRON_GRAD_BYTES * shard_params_opt / node.pcie_bytes_per_s
        step_s += node_params_opt / node.cpu_adam_params_per_s
        step_s += PARAM_BYTES * shard_params_opt / node.pcie_bytes_per_s
    elif config.offload_optimizer != "none":
        # 16-bit gradients of the shard_params go down during each backward; parameters come back once.
        per_micro_batch_s += 2.0 * shard_params_opt / node.pcie_bytes_per_s
        step_s += node_params_opt / node.cpu_adam_params_per_s
        step_s += PARAM_BYTES * shard_params_opt / node.pcie_bytes_per_s
        if config.offload_optimizer == "nvme":
            swap_bytes = OPTIMIZER_SWAP_BYTES_PER_PARAM * node_params
            step_s += swap_bytes / node.nvme_read_bytes_per_s + swap_bytes / node.nvme_write_bytes_per_s
    if config.offload_param != "none":
        # Fetched for the forward and again for the backward (which also serves the recomputed
        # forward), matching the two ZeRO-3 all-gathers per micro-batch.
        pcie_s = PARAM_FETCHES_PER_MICRO_BATCH * PARAM_BYTES * shard_params / node.pcie_bytes_per_s
        if config.offload_param == "nvme":
            nvme_s = PARAM_FETCHES_PER_MICRO_BATCH * PARAM_BYTES * node_params / node.nvme_read_bytes_per_s
            pcie_s = max(pcie_s, nvme_s)
        per_micro_batch_s += pcie_s
        if config.recompute == "full":
            # The activation checkpoints live in host memory (DeepSpeed cpu_checkpointing), as the
            # memory plan assumes: written in forward, read back in backward.
            ckpt_bytes = 2.0 * config.micro_batch * model.seq_len / config.cp * model.hidden * layers_per_stage
            per_micro_batch_s += 2.0 * ckpt_bytes / node.pcie_bytes_per_s
    return OffloadTerms(per_micro_batch_s, step_s)


def activation_offload_s(model: ModelSpec, cluster: ClusterSpec, config: ParallelConfig,
                         linear_input_bytes: float = BYTES_16BIT) -> float:
    """Per micro-batch: the activations of ``activation_offload_layers`` layers copied to pinned host
    memory after their forward and back before their backward (Megatron-Core
    ``--cpu-offloading-num-layers``, transformer/cpu_offload.py: a side stream, overlappable with the
    other layers' compute), over the GPU's share of the host link (``pcie_bytes_per_s``: all the
    node's GPUs copying at once, as the profiler measures it)."""
    n = config.activation_offload_layers
    if not n:
        return 0.0
    layer_bytes = layer_activation_bytes(model, config.micro_batch, config.tp, config.cp, config.sp, "none",
                                         linear_input_bytes=linear_input_bytes)
    return 2.0 * n * layer_bytes / cluster.node.pcie_bytes_per_s
