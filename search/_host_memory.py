"""Host memory and NVMe per node as ZeRO-Offload / ZeRO-Infinity allocate them.

What a node's host memory holds when states are offloaded (DeepSpeed 0.19,
``estimate_zero3_model_states_mem_needs`` in ``deepspeed/runtime/zero/stage3.py`` and
``docs/code-docs/source/memory.rst``; frameworks_2.md sec. 4.2):

* optimizer offload: fp32 master weights, Adam momentum and variance and the fp32 gradient
  partition, 16 bytes per parameter of each GPU's ZeRO shard;
* parameter offload: the 16-bit parameter shard, 2 bytes per parameter;
* NVMe offload: the states live on NVMe; the host keeps the swapper's pinned buffers
  (``offload_optimizer.buffer_count`` x ``buffer_size`` and ``offload_param.buffer_count`` x
  ``buffer_size``, DeepSpeed's defaults);
* activation checkpoints kept in host memory (``cpu_checkpointing``, ZeRO-Infinity Sec. 5.1.2);
* the operating system and each rank's process (a documented allowance, below).

DeepSpeed's estimator multiplies the states by ``additional_buffer_factor=1.5``, a safety margin
for its users, not memory the run allocates: ZeRO-3 Offload trained 2T parameters on 32 DGX-2
nodes whose 1.5 TB hold the 1.1 TB of states but not the estimator's 1.7 TB
(DeepSpeed blog 2021-03-08). Here the margin is reported apart
(:func:`estimator_margin_bytes`) and required only when the caller asks for a safety factor.
"""

from __future__ import annotations

from search._units import GiB

OPTIMIZER_HOST_BYTES_PER_PARAM = 16.0
"""fp32 master weight, momentum, variance and fp32 gradient (``estimate_zero3_model_states_mem_needs``:
``cpu_mem = total_params * 16`` with optimizer offload)."""
PARAM_HOST_BYTES_PER_PARAM = 2.0
"""16-bit parameters (the estimator's 18 = 16 + 2 with parameter offload)."""
DEEPSPEED_ESTIMATOR_BUFFER_FACTOR = 1.5
"""``additional_buffer_factor`` of DeepSpeed's memory estimators (stage3.py, stage_1_and_2.py)."""
NVME_OPTIMIZER_PINNED_BYTES_PER_GPU = 4 * 1e8 * 4
"""Pinned host buffers of DeepSpeed's optimizer swapper (``offload_optimizer.buffer_count`` 4 x
``buffer_size`` 1e8 fp32 elements, frameworks.md: DeepSpeedZeroOffloadOptimizerConfig defaults)."""
NVME_PARAM_PINNED_BYTES_PER_GPU = 5 * 1e8 * 2
"""Pinned host buffers of the parameter swapper (``offload_param.buffer_count`` 5 x ``buffer_size``
1e8 16-bit elements, DeepSpeedZeroOffloadParamConfig defaults)."""
HOST_RESERVED_BYTES_PER_NODE = 32 * GiB
"""Allowance for the operating system, page cache floor and daemons of one node (an allowance,
not a measurement: a compute node's OS and agents take a few to a few tens of GiB)."""
HOST_RESERVED_BYTES_PER_GPU = 6 * GiB
"""Allowance for each rank's own process: the CUDA context and PyTorch's host allocations, the
data loader's workers and pinned batches (an allowance, not a measurement)."""


def offloaded_state_bytes_per_gpu(params_on_gpu_shard: float, offload_optimizer: str,
                                  offload_param: str) -> tuple[float, float]:
    """(optimizer bytes, parameter bytes) one GPU moves to the host or NVMe: 16 and 2 bytes per
    parameter of its ZeRO shard (DeepSpeed's estimators: 16 and 18 bytes per parameter)."""
    opt = OPTIMIZER_HOST_BYTES_PER_PARAM * params_on_gpu_shard if offload_optimizer != "none" else 0.0
    prm = PARAM_HOST_BYTES_PER_PARAM * params_on_gpu_shard if offload_param != "none" else 0.0
    return opt, prm


def swap_buffer_bytes_per_gpu(offload_optimizer: str, offload_param: str) -> float:
    """Pinned host buffers of the NVMe swappers of one rank (DeepSpeed's default buffer counts
    and sizes)."""
    return ((NVME_OPTIMIZER_PINNED_BYTES_PER_GPU if offload_optimizer == "nvme" else 0.0)
            + (NVME_PARAM_PINNED_BYTES_PER_GPU if offload_param == "nvme" else 0.0))


def host_checkpoint_bytes_per_gpu(micro_batch: int, seq_len: int, cp: int, hidden: int, layers: int,
                                  held_micro_batches: float) -> float:
    """Activation checkpoints one rank keeps in host memory (DeepSpeed ``cpu_checkpointing``, which
    ZeRO-Infinity uses, Rajbhandari et al. 2021 Sec. 5.1.2): each layer's 16-bit input, ``2*s*b*h``
    bytes, for every micro-batch in flight."""
    return 2.0 * micro_batch * seq_len / cp * hidden * layers * held_micro_batches


def runtime_reserved_bytes_per_node(gpus_per_node: int) -> float:
    """The operating system's and the ranks' processes' share of host memory
    (:data:`HOST_RESERVED_BYTES_PER_NODE` + :data:`HOST_RESERVED_BYTES_PER_GPU` per rank)."""
    return HOST_RESERVED_BYTES_PER_NODE + HOST_RESERVED_BYTES_PER_GPU * gpus_per_node


def estimator_margin_bytes(host_state_bytes: float) -> float:
    """What DeepSpeed's estimator adds on top of the offloaded states, ``(1.5 - 1) x states``:
    reported apart from the requirement."""
    return (DEEPSPEED_ESTIMATOR_BUFFER_FACTOR - 1.0) * host_state_bytes


def safety_margin_bytes(host_state_bytes: float, safety_factor: float) -> float:
    """The host memory a caller's safety factor keeps free on top of the states,
    ``(factor - 1) x states`` (1.5 reproduces DeepSpeed's estimators)."""
    return max(0.0, safety_factor - 1.0) * host_state_bytes


__all__ = ["DEEPSPEED_ESTIMATOR_BUFFER_FACTOR", "estimator_margin_bytes", "host_checkpoint_bytes_per_gpu",
           "offloaded_state_bytes_per_gpu", "runtime_reserved_bytes_per_node", "safety_margin_bytes",
           "swap_buffer_bytes_per_gpu"]
