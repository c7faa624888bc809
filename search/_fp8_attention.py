"""FP8 attention (Transformer Engine's ``fp8_dpa``, :attr:`search.TrainingSpec.fp8_attention`): the precisions
and GPUs it runs on, and what it costs next to BF16 attention, from NVIDIA's published cuDNN timings.

A windowed layer's FP8 backward is charged the whole causal triangle
(:func:`search._compute_time.attention_core_times`): cuDNN's FP8 attention backward does not skip a
sliding window's masked blocks. NVIDIA/cudnn-frontend's SDPA benchmark
(``results/gpt_oss/gb300/gpt_oss_20260424_100022.csv`` and
the GB200 file, cuDNN 9.22, 128-token window, 64-wide heads, batch 2 x 128 heads): MXFP8 backward 0.58,
1.87, 6.65, 25.0 and 96.9 ms at 2K, 4K, 8K, 16K and 32K tokens (FP8 0.47-74.8), growing as the square of
the sequence, where BF16's 0.23, 0.44, 0.86, 1.71 and 3.45 ms grow with it; its forward keeps the window
(0.175 ms MXFP8 against 0.202 BF16 at 4K)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search._errors import SpecError
from search._model_spec import ModelSpec

if TYPE_CHECKING:
    from search._cluster_spec import GPUSpec
    from search._parallel_spec import TrainingSpec

FP8_ATTENTION_PRECISIONS = ("fp8", "mxfp8")
"""Precisions whose FP8 attention (Transformer Engine's ``fp8_dpa``) is costed: per-tensor FP8 and MXFP8, whose
cuDNN kernels NVIDIA published timings for (:data:`FP8_ATTENTION_TIME_FACTOR`). Megatron
passes ``fp8_dpa`` into its NVFP4 recipe too (fp4_utils.py:225); which FP8 attention that runs is not costed."""

FP8_ATTENTION_TIME_FACTOR: dict[tuple[bool, str], float] = {
    (True, "mxfp8"): 0.754, (True, "fp8"): 0.609,
    (False, "mxfp8"): 1.028, (False, "fp8"): 0.890,
}
"""Forward + backward time of cuDNN's FP8 attention over BF16's on Blackwell, by (MLA shape, recipe): the
geometric mean over causal 2K, 4K and 8K tokens on GB200 and GB300 of NVIDIA/cudnn-frontend's SDPA training
benchmark (``benchmark/sdpa_benchmark_training/results/*/gb200|gb300/*_20260424_*.csv`` @ 3929da2, cuDNN
9.22). MLA's 192-wide queries and keys with 128-wide values (DeepSeek-V3, Kimi K2.6, 12 points each): MXFP8
0.708-0.799, per-tensor FP8 0.564-0.661; 128-wide heads (Llama 3.1, 6 points): MXFP8 0.951-1.103, FP8
0.767-0.994. Other widths take the 128-wide figure (none published)."""
HOPPER_FP8_ATTENTION_TIME_FACTOR = 0.971
"""The same on Hopper (per-tensor FP8, 128-wide heads: the only FP8 attention it runs): H200, cuDNN 9.19
(``results/h200_919_only_cudnn/llama3.1_20260227_034703.csv``), Llama 3.1 causal 0.883, 0.930 and 1.109 at
2K, 4K and 8K (1.32-1.34 at 16K-32K, where its FP8 backward runs slower than BF16's)."""


def fp8_attention_time_factors(blackwell: bool, recipe: str) -> tuple[float, float]:
    """(128-wide heads, MLA) factors of FP8 attention's time over BF16's under ``recipe`` (``fp8`` or
    ``mxfp8``) on Blackwell (:data:`FP8_ATTENTION_TIME_FACTOR`) or Hopper
    (:data:`HOPPER_FP8_ATTENTION_TIME_FACTOR`; MLA does not run FP8 there, :func:`check_fp8_attention`)."""
    if not blackwell:
        return HOPPER_FP8_ATTENTION_TIME_FACTOR, HOPPER_FP8_ATTENTION_TIME_FACTOR
    return FP8_ATTENTION_TIME_FACTOR[(False, recipe)], FP8_ATTENTION_TIME_FACTOR[(True, recipe)]


HOPPER_FP8_ATTENTION_HEAD_DIM = 128
"""The only head dim cuDNN's FP8 attention backward runs on Hopper: NVIDIA/cudnn-frontend's SDPA benchmark on
H200 (cuDNN 9.19, ``results/h200_919_only_cudnn/gpt_oss_20260227_034819.csv``) fails GPT-OSS's 64-wide heads
in FP8 with "hidden_dim shoud be equal to 128" and runs Llama 3.1's 128-wide ones."""


def check_fp8_attention(model: ModelSpec, gpu: GPUSpec, training: TrainingSpec) -> None:
    """Raise :class:`SpecError` for FP8 attention (:attr:`TrainingSpec.fp8_attention`) on a GPU or model shape
    cuDNN has no FP8 kernel for: fused (flash) attention only; on Hopper head dim 128 only
    (:data:`HOPPER_FP8_ATTENTION_HEAD_DIM`); Blackwell (block-scaled tensor cores) ran 64-, 128- and 192-wide
    heads in the same benchmark."""
    if not training.fp8_attention:
        return
    if model.attention != "flash":
        raise SpecError("TrainingSpec.fp8_attention", f"with attention {model.attention!r}: FP8 attention is "
                        "Transformer Engine's fused attention (FusedAttention, cuDNN)",
                        "use attention 'flash', or leave it false")
    if gpu.fp4_flop_per_s is not None:
        return
    if model.dim_per_head != HOPPER_FP8_ATTENTION_HEAD_DIM:
        raise SpecError("TrainingSpec.fp8_attention", f"{model.name}'s {model.dim_per_head}-wide attention heads on "
                        f"{gpu.name}: cuDNN's FP8 attention on Hopper runs 128-wide heads only (NVIDIA/cudnn-frontend "
                        "SDPA benchmark, H200, cuDNN 9.19)", "set fp8_attention false (BF16 attention)")
