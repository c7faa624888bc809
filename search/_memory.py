"""Per-GPU memory (model states, activations, buffers) and per-node CPU / NVMe bytes.

Model states follow each runtime's own accounting (bytes per parameter of the GPU's
model-parallel shard ``P``, data-parallel sharding degree ``d``):

============================  ==========  ==================  ===========
runtime, ZeRO stage           weights     gradients           optimizer
============================  ==========  ==================  ===========
Megatron 0 / 1 / 2 / 3        2,2,2,2/d   4,4,4/d,4/d         12,12/d,..
DeepSpeed 0 / 1 / 2 / 3       2,2,2,2/d   6,2+4/d,6/d,4/d     12,12/d,..
FSDP (fp32 flat params) 2/3   4/d (+2)    4/d                 8/d
============================  ==========  ==================  ===========

Megatron: ``theoretical_memory_usage.py`` (18 bytes/param, or 6 + 12/d with the distributed
optimizer). DeepSpeed: ``estimate_zero2_model_states_mem_needs`` (2P + 18P/d) and
``estimate_zero3_model_states_mem_needs`` (18P/d + 4 x largest layer). ZeRO paper
(Rajbhandari et al. 2020, arXiv:1910.02054 Sec. 3.1, 5): 2P + 2P + K*P with K = 12.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from search._model_spec import ModelSpec
from search._units import BYTES_16BIT

DEEPSPEED_BUCKET_ELEMENTS = 5e8
"""DeepSpeed default ``reduce_bucket_size`` and ``allgather_bucket_size`` (elements)."""

QUANTIZED_LINEAR_INPUT_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32, "nvfp4": 0.5 + 1.0 / 16}
"""Bytes per element of a linear layer's input that Transformer Engine keeps for the backward pass
under each low-precision recipe: the quantized copy the weight-gradient GEMM reads, not the 16-bit
input. ``transformer_engine/pytorch/module/linear.py`` ``_Linear.forward``: under FP8 the input is
quantized, its row-wise data discarded ("not needed in backward pass",
``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)``) and ``saved_inputmat =
inputmat``; ``LayerNormLinear`` saves its quantized ``ln_out`` the same way. FP8 (per-tensor scale):
1 byte; MXFP8: 1 byte plus one E8M0 scale per 32 elements; NVFP4: 4 bits plus one E4M3 scale per 16
elements (Transformer Engine ``MXFP8BlockScaling`` / ``NVFP4BlockScaling`` recipes, common API)."""


def saved_linear_input_bytes(framework: str, precision: str) -> float:
    """Bytes per element of the linear-layer inputs stored for backward: the quantized copy under
    Megatron-Core's Transformer Engine layers with a low-precision recipe
    (:data:`QUANTIZED_LINEAR_INPUT_BYTES`), else the 16-bit input. The other runtimes' FP8 paths
    (torchao ``Float8Linear`` under torchtitan, DeepSpeed) are costed with the 16-bit input kept."""
    if framework == "megatron":
        return QUANTIZED_LINEAR_INPUT_BYTES.get(precision, BYTES_16BIT)
    return BYTES_16BIT


def main_grad_bytes(framework: str, precision: str, grad_reduce_in_bf16: bool) -> float:
    """Bytes per parameter of the gradient buffer a runtime accumulates and reduces in (what the
    data-parallel reduction sends per element, and Megatron's gradient memory per parameter).

    Megatron-LM accumulates and reduces bf16 gradients in an fp32 ``main_grad`` buffer
    (``accumulate_allreduce_grads_in_fp32`` is set for bf16 in ``megatron/training/arguments.py``)
    unless ``--grad-reduce-in-bf16`` (Megatron-Bridge ``ddp.grad_reduce_in_fp32=False``), and
    fp16 in fp16 (the buffer takes the parameter dtype, ``distributed_data_parallel.py``);
    DeepSpeed reduces in the 16-bit type (``communication_data_type``); FSDP as configured by
    Composer's DEFAULT mixed precision and torchtitan reduces in fp32.
    """
    if framework == "fsdp":
        return 4.0
    if framework == "megatron" and precision != "fp16" and not grad_reduce_in_bf16:
        return 4.0
    return BYTES_16BIT


@dataclass(frozen=True, slots=True)
class ModelStateBytes:
    """Model-state bytes on one GPU."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    gathered_params_bytes: float
    """ZeRO-3 / FSDP working buffers for gathered (unsharded) parameters."""


@lru_cache(maxsize=65536)
def model_state_bytes(*, framework: str, zero_stage: int, shard_degree: int, params: float,
                      largest_layer_params: float, layer_params: float,
                      offload_optimizer: str, offload_param: str, pipelined: bool = False,
                      offload_fraction: float = 1.0, megatron_grad_bytes: float = 4.0) -> ModelStateBytes:
    """Weights, gradients and Adam states of ``params`` parameters on one GPU.

    ``params`` is this GPU's model-parallel share (after TP and PP); ``shard_degree`` the
    data-parallel group ZeRO shards over. Offloading the optimizer moves the fp32 master
    weights, moments and fp32 gradients to the host (ZeRO-Offload, Ren et al. 2021 Sec. 4);
    offloading parameters leaves only the gathered working set (ZeRO-Infinity Sec. 5).
    FSDP2 under torch pipelining (``pipelined``) keeps the stage's parameters gathered and its
    gradients unsharded across the step's micro-batches (``set_reshard_after_backward(False)``,
    ``set_requires_gradient_sync(False)`` in ``torch/distributed/pipelining/stage.py``): 2 bytes
    of unsharded 16-bit parameters and 4 of fp32-accumulated gradients (FSDP2's
    ``unsharded_accumulated_grad`` in the reduce dtype) per parameter of the stage.
    A partial optimizer offload (``offload_fraction`` < 1: DeepSpeed ``offload_optimizer.ratio``,
    Megatron ``--optimizer-offload-fraction``) keeps the rest of the optimizer states, and with
    DeepSpeed the rest of the fp32 gradient partition, on the GPU: the all-or-nothing figures
    scaled by the fraction. Megatron's gradient buffer holds ``megatron_grad_bytes`` per parameter
    (:func:`main_grad_bytes`: 4 in fp32, 2 with fp16 or ``--grad-reduce-in-bf16``).
    """
    d = float(shard_degree)
    p = params
    if framework == "fsdp":
        sharded = zero_stage >= 2
        weights = 4.0 * p / d if sharded else 4.0 * p
        if zero_stage == 2:
            weights += 2.0 * p  # SHARD_GRAD_OP keeps the unsharded bf16 copy between fwd and bwd
        grads = 4.0 * p / d if sharded else 4.0 * p
        optimizer = 8.0 * p / d if sharded else 8.0 * p
        # FULL_SHARD keeps the unsharded 16-bit parameters of the running block and of the
        # prefetched next one, and the unsharded gradient of one block before its
        # reduce-scatter (PyTorch FSDP ``backward_prefetch``/``forward_prefetch``; 3 x 2 bytes).
        gathered = 3.0 * 2.0 * layer_params if zero_stage == 3 else 0.0
        if offload_optimizer != "none" or offload_param != "none":
            weights, grads, optimizer = (2.0 * p if zero_stage == 2 else 0.0), 0.0, 0.0
        if pipelined and sharded:
            gathered = (2.0 * p if zero_stage == 3 else 0.0) + 4.0 * p
        return ModelStateBytes(weights, grads, optimizer, gathered)
    stage = zero_stage
    weights = 2.0 * p / d if stage == 3 else 2.0 * p
    if framework == "megatron":
        grads = megatron_grad_bytes * p / d if stage >= 2 else megatron_grad_bytes * p
    else:  # DeepSpeed and Megatron-DeepSpeed: 16-bit grads plus an fp32 partition
        grads = {0: 6.0 * p, 1: 2.0 * p + 4.0 * p / d, 2: 6.0 * p / d, 3: 4.0 * p / d}[stage]
    optimizer = 12.0 * p / d if stage >= 1 else 12.0 * p
    if offload_optimizer != "none":
        kept = 1.0 - offload_fraction
        optimizer *= kept
        # ZeRO-Offload streams the gradients to the host; Megatron's --optimizer-cpu-offload keeps the
        # fp32 main-gradient buffer on the GPU and copies it out for the CPU step
        # (megatron/core/optimizer/cpu_offloading/README.md: the optimizer states move).
        grads = grads if framework == "megatron" else grads * kept
    if offload_param != "none":
        weights = 0.0
    gathered = 4.0 * largest_layer_params if stage == 3 and framework != "megatron" else 0.0
    if stage == 3 and framework == "megatron":
        # Megatron-FSDP: the gathered 16-bit parameters of the running and the prefetched block.
        gathered = 2.0 * 2.0 * layer_params
    return ModelStateBytes(weights, grads, optimizer, gathered)


def mlp_saved_bytes_per_token(model: ModelSpec, ffn: float, linear_input_bytes: float = BYTES_16BIT) -> float:
    """Bytes one token keeps for the backward of an MLP of width ``ffn``: the first linear's 16-bit
    outputs (two with a GLU, the activation's input) and the second linear's input at
    ``linear_input_bytes`` (Korthikanti et al. 2022 Sec. 4.1; :func:`saved_linear_input_bytes`)."""
    return ((2.0 * BYTES_16BIT if model.gated_mlp else BYTES_16BIT) + linear_input_bytes) * ffn


def layer_activation_bytes(model: ModelSpec, micro_batch: int, tp: int, cp: int, sp: bool, recompute: str,
                           ffn: float | None = None, linear_input_bytes: float = BYTES_16BIT) -> float:
    """Activation bytes one block keeps for backward, per micro-batch, on one GPU.

    Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4, eqs. 1-6: ``sbh(34 + 5as/h)`` without
    parallelism; ``sbh(10 + 24/t + 5as/(ht))`` with TP; all divided by t with SP; the
    ``5as/h`` score term dropped by selective recomputation or FlashAttention. The 24 of a
    GPT block is generalised to GQA (K, V of width kv_dim) and to SwiGLU (three f-wide
    tensors): split = 4h + 4*kv_dim + (4 or 6)*f per token. Without dropout the two 1-byte
    hidden masks (2sbh) and the score mask (as^2b) are not stored. Full recomputation keeps
    only the block input, ``2sbh`` (``/t`` with SP).

    The inputs of three linear layers are kept at ``linear_input_bytes`` per element
    (:func:`saved_linear_input_bytes`; 2 in 16-bit training): the QKV projection's and the first
    MLP linear's (the layer-norm outputs, ``sbh`` each, in the replicated part) and the second MLP
    linear's (``sbf``). The attention output stays 16-bit: the fused attention kernel keeps it for
    its own backward, so the output projection's quantized copy saves nothing.
    """
    s = model.seq_len / cp
    sb = s * micro_batch
    h = model.hidden
    if recompute == "full":
        return 2.0 * sb * h / (tp if sp else 1)
    masks = 1.0 if model.dropout else 0.0
    lb = linear_input_bytes
    # Two layer-norm inputs (16-bit), the QKV and first-MLP inputs, the dropout masks.
    replicated = (2.0 * BYTES_16BIT + 2.0 * lb + 2.0 * masks) * sb * h
    f = model.ffn if ffn is None else ffn  # an MoE block's TP-split MLP: its shared experts
    # Q, K, V and the attention output; the first MLP linear's outputs (two with SwiGLU) and the
    # second's input.
    split = sb * (4.0 * h + 4.0 * model.kv_dim + mlp_saved_bytes_per_token(model, f, lb))
    scores = 0.0
    if model.attention == "standard" and recompute == "none":
        scores = (4.0 + masks) * model.heads * s * model.seq_len * micro_batch
    if sp:
        return (replicated + split + scores) / tp
    return replicated + (split + scores) / tp


def working_layer_bytes(model: ModelSpec, micro_batch: int, tp: int, cp: int, sp: bool,
                        linear_input_bytes: float = BYTES_16BIT) -> float:
    """Peak extra bytes while one recomputed block runs its backward (full activations of one
    block, Korthikanti et al. 2022 Sec. 4.2)."""
    return layer_activation_bytes(model, micro_batch, tp, cp, sp, "none", linear_input_bytes=linear_input_bytes)


def in_flight_micro_batches(pp: int, vp: int, num_micro_batches: int) -> float:
    """Micro-batches whose activations the first stage holds at its peak.

    1F1B: the first stage holds ``pp`` micro-batches (Narayanan et al. 2021 Sec. 2.2.1), never
    more than exist; the interleaved schedule multiplies the stored activations by
    ``1 + (p-1)/(p*v)`` (Korthikanti et al. 2022 Sec. 4.2.3).
    """
    held = float(min(pp, num_micro_batches))
    if vp > 1:
        held *= 1.0 + (pp - 1) / (pp * vp)
    return held


def pipeline_buffer_bytes(model: ModelSpec, micro_batch: int, cp: int, held: float, sp_tp: int = 1) -> float:
    """Stage input and output tensors kept for each in-flight micro-batch, ``2 x 2sbh`` each
    (``/t`` with sequence parallelism, ``sp_tp`` = t, where the stage boundary tensor is sharded).

    DeepSpeed's pipeline engine keeps ``inputs`` and ``outputs`` buffers per pipe buffer
    (``num_pipe_buffers`` = in-flight micro-batches, ``deepspeed/runtime/pipe/engine.py``);
    Megatron's 1F1B keeps ``input_tensors`` / ``output_tensors`` lists for backward.
    """
    return held * 2.0 * 2.0 * micro_batch * model.seq_len / cp * model.hidden / sp_tp


def logits_bytes(model: ModelSpec, micro_batch: int, tp: int, cp: int) -> float:
    """Last stage: 16-bit logits plus the fp32 copy the cross-entropy keeps, ``6*s*b*V/t``."""
    return 6.0 * model.seq_len / cp * micro_batch * model.vocab / tp


def deepspeed_bucket_bytes(framework: str, zero_stage: int, precision_bytes: int) -> float:
    """ZeRO gradient-reduction and all-gather buckets (DeepSpeed defaults, 16-bit)."""
    if framework in ("deepspeed", "megatron-deepspeed") and zero_stage >= 1:
        return 2.0 * DEEPSPEED_BUCKET_ELEMENTS * precision_bytes
    return 0.0
