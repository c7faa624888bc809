"""Compute time of one micro-batch: GEMMs, attention core and memory-bound kernels.

Times are per GPU after the tensor-parallel split (``tp``) and context-parallel split of the
sequence (``tokens`` = tokens this rank processes). A GEMM costs the longer of its FLOP time
at the achievable matmul throughput and its HBM traffic time (roofline; Williams et al.
2009), plus a fixed kernel overhead; memory-bound kernels cost their bytes at the achievable
HBM bandwidth.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from search._calibration import Calibration
from search._model_spec import ModelSpec
from search._unfused_paths import unfused_rope_total_bytes_per_token
from search._units import BYTES_16BIT

REPLICATED_ELEMENTWISE_BYTES_PER_TOKEN_PER_H = 22.0
"""Forward HBM bytes per token per unit of h outside the TP-split region: two LayerNorms
(read 2h + write 2h bytes each = 8h) and two fused bias-dropout-residual-adds (read 4h, write
2h + a 1-byte mask h, = 7h each). Tensors follow Korthikanti et al. 2022 Sec. 4.1."""
STANDARD_SCORE_BYTES_FWD = 13.0
"""Forward HBM bytes per attention-score element without FlashAttention: write Q K^T (2),
fused scale-mask-softmax read+write (4), dropout read + write + 1-byte mask (5), read by the
scores x V GEMM (2). Korthikanti et al. 2022 Sec. 4.1 stores 5 bytes of these per element."""
CROSS_ENTROPY_FWD_BYTES_PER_LOGIT = 26.0
"""Forward HBM bytes per logit element of Megatron's fp32 vocab-parallel cross-entropy:
cast (2 + 4), max (4), exp-sub (4 + 4), sum (4), log-softmax (4)."""
CROSS_ENTROPY_BWD_BYTES_PER_LOGIT = 14.0
"""Backward bytes per logit: softmax - one-hot (4 + 4) and the cast back to 16 bits (4 + 2)."""
BACKWARD_TO_FORWARD = 2.0
"""A linear layer's backward is two GEMMs of its forward's size (data and weight gradients);
memory-bound kernels read saved inputs and gradients (~2x forward traffic)."""
FLASH_BACKWARD_TO_FORWARD = 2.5
"""FlashAttention backward runs 5 matmuls against 2 forward (Dao 2023, arXiv:2307.08691 Sec. 3)."""
CAUSAL_EXECUTED_FRACTION = 0.5
"""Causal FlashAttention skips fully masked blocks: it executes about half the full count."""
ATTENTION_KEY_TILE = 128
"""Keys per block of a tiled attention kernel (FlashAttention-2's and cuDNN's 128-row blocks, Dao 2023,
arXiv:2307.08691 Sec. 3.1): a query block runs every key block its rows touch, whole."""
FUSED_ATTENTION_HEAD_DIM_64_FACTOR = 0.6
"""Throughput of cuDNN's fused attention at head dim 64 over its rate at head dim 128 (where the fused
share was fitted), from NVIDIA/cudnn-frontend's SDPA training benchmark
(``benchmark/sdpa_benchmark_training/results`` @ 3929da2): on H200 (cuDNN 9.19, bf16, 2026-02-27) GPT-OSS's
64-wide heads ran 358 / 299 TFLOP/s forward / backward at 32K tokens next to Llama 3.1's 128-wide 688 / 581
(0.52, 0.51; 0.58 once its 1,024-token window's block edges are charged); on GB300 (cuDNN 9.22, MXFP8,
2026-04-24) the 64-wide backward, which runs the whole causal triangle under FP8, did 734 and 827 TFLOP/s at
4K and 8K tokens next to Llama's 1,143 and 1,404 (0.64, 0.59). Head dims 192 (DeepSeek-V3's MLA) and 256
ran at 0.92-1.0 of 128's: 1.0 from 128 up."""


@dataclass(frozen=True, slots=True)
class Kernels:
    """Achievable throughputs for one GPU and precision (inputs of every compute term)."""

    matmul_flop_per_s: float
    """Peak x achievable matmul fraction (x FP8 speed-up when GEMMs run in FP8)."""
    cuda_core_flop_per_s: float
    """Rate of 16-bit GEMMs that cannot use tensor cores (a dimension not a multiple of 8)."""
    attention_flop_per_s: float
    hbm_bytes_per_s: float
    """Achievable HBM bandwidth of memory-bound kernels."""
    gemm_overhead_s: float
    measured_gemm: tuple[tuple[float, float], ...] = ()
    """(log FLOPs, FLOP/s) of measured GEMMs, sorted; used instead of the roofline when present."""
    fused_attention: bool = False
    """``attention_flop_per_s`` is a fused (cuDNN) kernel's rate at head dim 128, scaled per model by
    :func:`fused_attention_head_dim_factor`; FlashAttention-2's fitted rate is taken as is."""
    fp8_attention: bool = False
    """The attention core runs in FP8 (:attr:`search.TrainingSpec.fp8_attention`): at
    :attr:`fp8_attention_time_factors`, and a sliding-window layer's backward over the whole causal
    triangle (:func:`attention_core_times`)."""
    fp8_attention_time_factors: tuple[float, float] = (1.0, 1.0)
    """The attention core's time in FP8 over BF16, for 128-wide heads and for MLA
    (:func:`search._fp8_attention.fp8_attention_time_factors`); (1, 1) for BF16 attention."""


def measured_gemm_flop_per_s(flop: float, table: tuple[tuple[float, float], ...]) -> float:
    """Throughput at ``flop`` by linear interpolation in log(FLOPs) between measured GEMMs,
    clamped to the smallest and largest measured sizes."""
    x = math.log(flop)
    if x <= table[0][0]:
        return table[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(table):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return table[-1][1]


def make_kernels(peak_flop_per_s: float, matmul_efficiency: float, attention_efficiency: float,
                 hbm_bytes_per_s: float, cal: Calibration, gemm_speedup: float, fp32_flop_per_s: float,
                 measured_gemm: tuple[tuple[float, float], ...] = (), attention_share: float | None = None,
                 fused_attention: bool = False,
                 fp8_attention_time_factors: tuple[float, float] | None = None) -> Kernels:
    """Combine datasheet peaks with the achievable fractions (measured, or fitted globally).

    FlashAttention runs at the GPU's best attention fraction times the fitted share of it
    reached by causal training shapes (``attention_share``: :attr:`Calibration.attention_efficiency`
    for FlashAttention-2, :attr:`Calibration.fused_attention_share` for a fused kernel). ``gemm_speedup``
    is the precision recipe's speed-up over 16-bit GEMMs (:func:`search._predict.gemm_speedup`);
    ``fused_attention`` marks the attention rate as the fused kernel's (:attr:`Kernels.fused_attention`),
    ``fp8_attention_time_factors``, FP8 attention's measured time over BF16's, marks the attention core as
    run in FP8 (:attr:`Kernels.fp8_attention`; None: BF16).
    """
    speedup = gemm_speedup
    matmul = peak_flop_per_s * matmul_efficiency * speedup
    return Kernels(
        matmul_flop_per_s=matmul,
        cuda_core_flop_per_s=fp32_flop_per_s * matmul_efficiency,
        attention_flop_per_s=peak_flop_per_s * attention_efficiency * (
            cal.attention_efficiency if attention_share is None else attention_share),
        hbm_bytes_per_s=hbm_bytes_per_s * cal.hbm_efficiency,
        gemm_overhead_s=cal.gemm_overhead_s,
        measured_gemm=tuple((math.log(f), r * speedup) for f, r in measured_gemm),
        fused_attention=fused_attention,
        fp8_attention=fp8_attention_time_factors is not None,
        fp8_attention_time_factors=fp8_attention_time_factors or (1.0, 1.0),
    )


TENSOR_CORE_ALIGNMENT = 8
"""16-bit GEMM dimensions must be multiples of 8 elements for tensor cores."""
TILE_M = 128
TILE_N = 128
TILE_K = 64
"""cuBLAS tensor-core tile sizes for 16-bit GEMMs: output tiles of 128 x 128 and a K step of
64. Dimensions that are not multiples of them waste the remainder of the last tile (NVIDIA
Deep Learning Performance Guide, 'Matrix Multiplication Background': tile quantization)."""


def tile_efficiency(m: float, n: float, k: float) -> float:
    """Fraction of the launched tile work that is useful: ``x / ceil(x / tile) / tile`` per dim."""
    return (m / (-(-m // TILE_M) * TILE_M)) * (n / (-(-n // TILE_N) * TILE_N)) * (k / (-(-k // TILE_K) * TILE_K))


def gemm_work_s(m: float, n: float, k: float, kernels: Kernels) -> float:
    """One (m x k) @ (k x n) GEMM in 16-bit on the GPU: roofline of 2mnk FLOPs (tile-quantised)
    and 2(mk + kn + mn) bytes, or the measured GEMM table's rate at its FLOPs; no fixed overhead."""
    if kernels.measured_gemm:
        flop = 2.0 * m * n * k
        return flop / measured_gemm_flop_per_s(flop, kernels.measured_gemm)
    flop = 2.0 * m * n * k / tile_efficiency(m, n, k)
    traffic = BYTES_16BIT * (m * k + k * n + m * n)
    return max(flop / kernels.matmul_flop_per_s, traffic / kernels.hbm_bytes_per_s)


def gemm_time_s(m: float, n: float, k: float, kernels: Kernels) -> float:
    """One GEMM on its own (the LM head): :func:`gemm_work_s` plus the fixed overhead."""
    return gemm_work_s(m, n, k, kernels) + kernels.gemm_overhead_s


DENSE_BLOCK_GEMMS = 4
"""Weight GEMMs of the dense transformer blocks ``gemm_overhead_s`` was fitted on (fused QKV,
attention output, MLP in, MLP out: every block of runs.json)."""


def block_overhead_s(kernels: Kernels) -> float:
    """Fixed time per transformer block's forward outside its kernels' work: the fitted
    ``gemm_overhead_s`` x :data:`DENSE_BLOCK_GEMMS`. The constant was fitted per GEMM on blocks
    that all have four, and settles at its 100 us bound, far above a kernel launch (~5 us): it
    stands for the block's framework time, not the GEMMs'. Charged per block, so blocks with more
    GEMMs (MLA's five projections, an MoE block's shared and grouped expert GEMMs) do not multiply
    it; an MoE block's router pays one more (:func:`search._moe_terms.moe_layer_times`). Measured on
    the 34 published MoE rows of runs_2024_2026.json (docs/cost-model.md, 'GEMMs'): per GEMM,
    DeepSeek-V3 (10 per block) came out 24.1 % slow on average; per block without the router's,
    Qwen3's host-sync residuals stop being one constant per chunk (1.57x apart, 1.42x with it)."""
    return DENSE_BLOCK_GEMMS * kernels.gemm_overhead_s


@dataclass(frozen=True, slots=True)
class LayerTimes:
    """Forward times of one transformer block on one GPU, per kind of kernel."""

    gemm_s: float
    attention_s: float
    attention_backward_s: float
    elementwise_s: float

    @property
    def forward_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s

    @property
    def backward_s(self) -> float:
        return BACKWARD_TO_FORWARD * (self.gemm_s + self.elementwise_s) + self.attention_backward_s


def linears_work_s(linears: tuple[tuple[int, int, str], ...], tokens: float, tp: int, kernels: Kernels) -> float:
    """Forward GPU work (:func:`gemm_work_s`, the block's fixed time apart) of weight GEMMs
    ``(input width, output width, split)`` for ``tokens`` tokens on one
    of ``tp`` ranks: column-parallel splits the output, row-parallel the input (Shoeybi et al. 2019,
    arXiv:1909.08053 Sec. 3); replicated ones run whole on every rank."""
    total = 0.0
    for i, o, split in linears:
        if split == "column":
            total += gemm_work_s(tokens, o / tp, i, kernels)
        elif split == "row":
            total += gemm_work_s(tokens, o, i / tp, kernels)
        else:
            total += gemm_work_s(tokens, o, i, kernels)
    return total


def windowed_keys_per_query(window: int, kv_len: float) -> float:
    """Keys a query executes on a sliding-window layer, averaged over ``kv_len`` causal queries.

    A query sees min(i + 1, w) keys, which averages ``w - w^2 / (2 kv_len)`` (Beltagy et al. 2020,
    arXiv:2004.05150 Sec. 3.1, a band of w keys). A tiled kernel runs the band's key blocks only
    (FlashAttention-2 local attention via ``window_size``, Dao 2023, arXiv:2307.08691), but whole: a
    block of query rows spans w/B + 1 blocks of B = :data:`ATTENTION_KEY_TILE` keys, its diagonal one
    half masked as on a full causal layer (whose count, half the keys, leaves that half-block out:
    the fitted shares hold it). So the band is charged ``w + B/2`` wide; once that spans the sequence,
    the causal half."""
    w = min(float(window) + ATTENTION_KEY_TILE / 2, kv_len)
    return w - w * w / (2.0 * kv_len)


def executed_keys_per_query(model: ModelSpec, kv_len: float) -> float:
    """Keys a causal FlashAttention query executes, averaged over the model's layers: the causal
    half (:data:`CAUSAL_EXECUTED_FRACTION`) on full layers, :func:`windowed_keys_per_query` on the
    :attr:`ModelSpec.windowed_layer_share` of windowed ones (one average per block: a pipeline
    stage's own mix of the two is not tracked)."""
    full = CAUSAL_EXECUTED_FRACTION * kv_len
    if model.attention_window is None:
        return full
    share = model.windowed_layer_share
    return share * windowed_keys_per_query(model.attention_window, kv_len) + (1.0 - share) * full


def fused_attention_head_dim_factor(dim_per_head: int) -> float:
    """The fused kernel's rate at ``dim_per_head`` over its rate at 128 (:data:`FUSED_ATTENTION_HEAD_DIM_64_FACTOR`
    at 64 and below, 1.0 from 128; linear between, where no measurement was published)."""
    if dim_per_head >= 128:
        return 1.0
    if dim_per_head <= 64:
        return FUSED_ATTENTION_HEAD_DIM_64_FACTOR
    return FUSED_ATTENTION_HEAD_DIM_64_FACTOR + (1.0 - FUSED_ATTENTION_HEAD_DIM_64_FACTOR) * (dim_per_head - 64) / 64


def attention_core_times(model: ModelSpec, tokens: float, kv_len: float, tp: int,
                         kernels: Kernels) -> tuple[float, float]:
    """Forward and backward time of the attention core (Q K^T, softmax, scores x V) on one of ``tp`` ranks.

    A sliding window (:attr:`ModelSpec.attention_window`) shortens FlashAttention's work per query
    (:func:`executed_keys_per_query`), except the backward of FP8 attention, which runs the causal
    half (measured: :mod:`search._fp8_attention`); materialised scores are computed whole and masked.
    A fused kernel's rate follows the head dim (:func:`fused_attention_head_dim_factor`), FP8 attention's
    its measured speed (:attr:`Kernels.fp8_attention_time_factors`)."""
    full_attention_flop = 2.0 * tokens * kv_len * (model.q_dim + model.attention_out_dim) / tp
    rate = kernels.attention_flop_per_s / kernels.fp8_attention_time_factors[model.mla is not None]
    if kernels.fused_attention:
        rate *= fused_attention_head_dim_factor(model.dim_per_head)
    if model.attention == "flash" and model.attention_window is not None:
        executed_flop = 2.0 * tokens * executed_keys_per_query(model, kv_len) * (
            model.q_dim + model.attention_out_dim) / tp
        attention = executed_flop / rate
        if kernels.fp8_attention:  # cuDNN's FP8 backward skips no windowed-out block
            return attention, FLASH_BACKWARD_TO_FORWARD * CAUSAL_EXECUTED_FRACTION * full_attention_flop / rate
        return attention, FLASH_BACKWARD_TO_FORWARD * attention
    if model.attention == "flash":
        attention = CAUSAL_EXECUTED_FRACTION * full_attention_flop / rate
        return attention, FLASH_BACKWARD_TO_FORWARD * attention
    # Materialised scores: two batched GEMMs (Q K^T with inner dimension head_dim, scores x V
    # with output width head_dim) plus the score traffic. 16-bit tensor cores need every GEMM
    # dimension to be a multiple of 8 (NVIDIA Deep Learning Performance Guide, "Tensor Core
    # Requirements"); otherwise cuBLAS runs them on CUDA cores.
    aligned = model.dim_per_head % TENSOR_CORE_ALIGNMENT == 0
    rate = kernels.matmul_flop_per_s if aligned else kernels.cuda_core_flop_per_s
    attention = full_attention_flop / rate
    score_bytes = STANDARD_SCORE_BYTES_FWD * tokens * kv_len * model.heads / tp
    attention += score_bytes / kernels.hbm_bytes_per_s
    return attention, BACKWARD_TO_FORWARD * attention


def attention_elementwise_bytes(model: ModelSpec, tokens: float, tp: int, sp: bool) -> float:
    """Forward HBM bytes of a block's memory-bound kernels outside its MLP: the norms and
    residual adds (:data:`REPLICATED_ELEMENTWISE_BYTES_PER_TOKEN_PER_H`, split by tp with SP) and
    RoPE's pass over the fused QKV output (read + write, 16-bit); where Megatron-Core applies RoPE
    unfused (YaRN), the eager path's extra passes (:func:`search._unfused_paths.unfused_rope_total_bytes_per_token`,
    a forward and backward total, charged here as its forward share)."""
    rope = 4.0 * (model.q_dim + 2 * model.kv_dim) / tp if model.position_embedding == "rope" else 0.0
    rope += unfused_rope_total_bytes_per_token(model, tp) / (1.0 + BACKWARD_TO_FORWARD)
    return tokens * (REPLICATED_ELEMENTWISE_BYTES_PER_TOKEN_PER_H * model.hidden / (tp if sp else 1) + rope)


def mlp_activation_bytes_per_token(model: ModelSpec, ffn: float) -> float:
    """Forward bytes of the MLP activation function per token: GeLU reads and writes an f-wide
    16-bit tensor (4f), a GLU (SwiGLU, quick-GeGLU) reads two and writes one (6f)."""
    return (6.0 if model.gated_mlp else 4.0) * ffn


def layer_times(model: ModelSpec, tokens: float, kv_len: float, tp: int, sp: bool, kernels: Kernels) -> LayerTimes:
    """Forward time of one dense block for ``tokens`` tokens on one of ``tp`` tensor-parallel ranks.

    GEMM shapes after Megatron's column/row split (Shoeybi et al. 2019, arXiv:1909.08053
    Sec. 3): QKV ``[tokens, h] x [h, (q_dim + 2 kv_dim)/tp]``, output ``[tokens, q_dim/tp] x
    [q_dim/tp, h]``, MLP in ``[tokens, h] x [h, f*(m-1)/tp]``, MLP out ``[tokens, f/tp] x [f/tp, h]``
    (:func:`linears_work_s`; MLA's projections per :meth:`ModelSpec.attention_linears`), plus the
    block's fixed time (:func:`block_overhead_s`).
    """
    gemm = (linears_work_s(model.attention_linears() + model.mlp_linears(), tokens, tp, kernels)
            + block_overhead_s(kernels))
    attention, attention_bwd = attention_core_times(model, tokens, kv_len, tp, kernels)
    elementwise_bytes = (attention_elementwise_bytes(model, tokens, tp, sp)
                         + tokens * mlp_activation_bytes_per_token(model, model.ffn / tp))
    return LayerTimes(gemm, attention, attention_bwd, elementwise_bytes / kernels.hbm_bytes_per_s)


def lm_head_time_s(model: ModelSpec, tokens: float, tp: int, kernels: Kernels) -> tuple[float, float]:
    """Forward and backward time of the LM head GEMM and the cross-entropy on the last stage.

    Logits ``[tokens, h] x [h, V/tp]`` (Megatron vocab-parallel output layer) and
    :data:`CROSS_ENTROPY_FWD_BYTES_PER_LOGIT` + :data:`CROSS_ENTROPY_BWD_BYTES_PER_LOGIT` bytes
    per logit for the fp32 loss.
    """
    gemm = gemm_time_s(tokens, model.vocab / tp, model.hidden, kernels)
    logits_per_byte_s = tokens * model.vocab / tp / kernels.hbm_bytes_per_s
    return (
        gemm + CROSS_ENTROPY_FWD_BYTES_PER_LOGIT * logits_per_byte_s,
        BACKWARD_TO_FORWARD * gemm + CROSS_ENTROPY_BWD_BYTES_PER_LOGIT * logits_per_byte_s,
    )


def optimizer_step_time_s(params_on_gpu: float, kernels: Kernels) -> float:
    """Fused Adam on the GPU: memory-bound, 30 bytes per parameter of the local shard.

    Reads fp32 master, m, v and the fp32 gradient (16 bytes), writes master, m, v (12) and the
    16-bit weight copy (2) (Rajbhandari et al. 2020 mixed-precision Adam, Sec. 3.1).
    """
    return 30.0 * params_on_gpu / kernels.hbm_bytes_per_s
