"""Memory-bound work of the Megatron-Core code paths a few architectures take unfused (GPT-OSS's).

Three features send Megatron-Core (0.15-0.19, the megatron-core of the Megatron-Bridge releases
25.11-26.08) down eager PyTorch code instead of a fused kernel; each pass reads and writes HBM:

* YaRN RoPE: Transformer Engine's fused RoPE takes no attention factor (``mscale``), so with one
  other than 1 Megatron falls back to ``_apply_rotary_pos_emb_bshd`` (megatron-core ``rope_utils.py``
  ``apply_rotary_pos_emb``: "mscale=... is not supported by TE's fused RoPE. Using unfused
  implementation"; core_r0.16.0 lines 279-284). YaRN's default factor ``0.1 ln(s) + 1`` (1.35 at
  GPT-OSS's s = 32; :mod:`search._rope_spec`) is never 1 for s > 1.
* The GLU clamp (``activation_func_clamp_value``, GPT-OSS's 7): ``weighted_bias_quick_geglu_impl``
  chunks the first expert GEMM's output, clamps both halves and concatenates them before its fused
  kernel (megatron-core ``fusions/fused_bias_geglu.py:424-432``, core_r0.15-0.19).
* Expert biases (``add_bias_linear``): the second expert GEMM skips its bias, which
  ``TEGroupedMLP._apply_bias`` adds scaled by each copy's router probability, one expert at a time
  (``torch.split`` per expert, ``t + b * p``, ``torch.cat``; megatron-core ``moe/experts.py``
  ``_apply_bias``, core_r0.16.0 lines 608-626).

Bytes are counted op by op for 16-bit tensors, forward and backward together (``*_total_bytes``): the
block's elementwise term, which charges its forward bytes once and ``BACKWARD_TO_FORWARD`` times again
in backward, adds them divided by ``1 + BACKWARD_TO_FORWARD`` (:mod:`search._compute_time`,
:mod:`search._moe_terms`).
Transformer Engine's op fuser (``--use-transformer-engine-op-fuser``, megatron-core 0.18+), which
fuses the clamp and the bias into its grouped MLP, is not modelled: what autopar launches takes the
paths above.
"""

from __future__ import annotations

from typing import Literal

from search._cluster_spec import GPUSpec
from search._model_spec import ModelSpec
from search._units import BYTES_16BIT

ExpertPath = Literal["eager", "te-ops", "fused"]
"""How Megatron-Core runs the routed experts' elementwise work (:func:`expert_path`)."""

FUSED_ROPE_BYTES_PER_ELEMENT = 12.0
"""What :func:`search._compute_time.attention_elementwise_bytes` charges per rotated element for
Transformer Engine's fused RoPE: read + write (4) forward, twice that in backward."""
UNFUSED_ROPE_BYTES_PER_ELEMENT = 44.0
"""``_apply_rotary_pos_emb_bshd`` per element of q or k: forward 24 (``t * cos`` 4, ``_rotate_half``'s
negation of one half 2 and ``cat`` 4, ``* sin`` 4, the sum 6, the closing ``cat`` with the empty
pass-through part 4), backward 20 (the two products' gradients 4 + 4, the negation 2, the chunk's
gradient ``cat`` 4, the two gradients' sum 6)."""
CLAMP_BYTES_PER_ELEMENT = 18.0
"""The GLU clamp per element of the first expert GEMM's output: forward 8 (two clamps of a half each
4, ``cat`` 4), backward 10 (each clamp's masked gradient reads its input and the gradient and writes
one: 6; the chunk's gradient ``cat`` 4)."""
EXPERT_BIAS_BYTES_PER_ELEMENT = 28.0
"""``_apply_bias`` per element of the experts' output (16-bit probabilities; float32 ones move more):
forward 12 (``b * p`` writes 2, the sum reads 4 and writes 2, ``cat`` 4), backward 16 (the bias's
gradient ``(g * p).sum`` 4 + 2, the probability's ``(g * b).sum`` 4 + 2, the split's gradient ``cat`` 4)."""
SAVES_PER_CLAMPED_ELEMENT = 1
"""Tensors of the first expert GEMM's output shape the clamp keeps beyond the fused kernel's own input:
the clamps' backward keeps the unclamped output and the fused GLU the clamped copy (``cat``'s result)."""


def runs_op_fuser(model: ModelSpec, cuda_graphs: str) -> bool:
    """Whether autopar's Megatron launch runs Transformer Engine's op fuser on the experts: an MoE model's
    full-iteration CUDA graph, whose per-rank token budget needs it (``--use-transformer-engine-op-fuser``,
    with ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``: :mod:`service.launch._megatron`, ``_launchers.framework_env``)."""
    return model.moe is not None and cuda_graphs == "full-iteration"


def expert_path(model: ModelSpec, gpu: GPUSpec, precision: str, cuda_graphs: str, framework: str) -> ExpertPath:
    """How Megatron-Core runs the experts of ``model``:

    * ``eager``: ``TEGroupedMLP``'s own forward, whose activation is one fused kernel after the eager clamp,
      and whose second bias is added per expert in Python (the paths above);
    * ``te-ops``: Transformer Engine's op fuser (``--use-transformer-engine-op-fuser``), which autopar's
      Megatron launch of an MoE model's full-iteration CUDA graph runs (the graph's per-rank token budget
      needs it): the clamped GLU and the probabilities in one TE kernel (``ops/basic/swiglu.py``
      ``ClampedSwiGLU``: ``tex.clamped_swiglu``), FC2's probability-scaled bias still added per expert
      (``ops/basic/grouped_linear.py:1272-1277``);
    * ``fused``: the op fuser on Blackwell (compute capability 10: the GPUs with FP4 tensor cores here) with
      an MXFP8 or NVFP4 recipe, where TE replaces FC1, the GLU and FC2 with its CuTe DSL grouped GEMMs, the
      GLU with its clamp and the probabilities in FC1's epilogue and FC2's scaled bias in its own
      (``ops/fused/grouped_mlp.py`` ``fuse_grouped_mlp_ops``, ``_GroupedMLP_CuTeGEMMBase.is_supported``).
    """
    if framework != "megatron" or not runs_op_fuser(model, cuda_graphs):
        return "eager"
    if gpu.fp4_flop_per_s is not None and precision in ("mxfp8", "nvfp4"):
        return "fused"
    return "te-ops"


EXPERT_PATH_WARNINGS: dict[str, str] = {
    "fused": "experts costed as Transformer Engine's fused grouped MLP, which the full-iteration graph's op fuser "
             "runs on Blackwell with MXFP8/NVFP4: the GLU, its clamp, the router probabilities and FC2's bias in the "
             "grouped GEMMs' epilogues (ops/fused/grouped_mlp.py); the launch needs Transformer Engine >= 2.14, "
             "cuDNN frontend >= 1.23 and NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, which autopar's launchers export",
    "te-ops": "experts costed as Transformer Engine's op fuser runs them off Blackwell block-scaled recipes: its "
              "ops one by one, the clamp inside the GLU kernel, FC2's bias added per expert",
}
"""Said on every prediction whose experts run under the op fuser (:func:`expert_path`)."""


def expert_path_warnings(path: ExpertPath) -> tuple[str, ...]:
    """:data:`EXPERT_PATH_WARNINGS` of ``path``; none for the eager path."""
    return (EXPERT_PATH_WARNINGS[path],) if path in EXPERT_PATH_WARNINGS else ()


def unfused_rope(model: ModelSpec) -> bool:
    """Whether Megatron-Core applies this model's RoPE unfused: YaRN with a factor above 1 (its attention
    factor is then not 1, which Transformer Engine's fused RoPE refuses)."""
    return model.position_embedding == "rope" and model.rope_yarn is not None and model.rope_yarn.factor > 1.0


def unfused_rope_total_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """Bytes (forward and backward) per token on one of ``tp`` ranks that the unfused RoPE adds to the
    fused one's (queries and keys; values are not rotated); 0 where the fused kernel runs."""
    if not unfused_rope(model):
        return 0.0
    return (UNFUSED_ROPE_BYTES_PER_ELEMENT - FUSED_ROPE_BYTES_PER_ELEMENT) * (model.q_dim + model.kv_dim) / tp


def clamp_total_bytes_per_copy(model: ModelSpec, expert_ffn: float, path: ExpertPath = "eager") -> float:
    """Bytes (forward and backward) per routed token copy of the unfused GLU clamp on the first expert GEMM's
    output (``(mlp_matrices - 1) * expert_ffn`` wide); 0 without a clamp, or where Transformer Engine clamps
    inside its GLU kernel (``path`` other than ``eager``)."""
    if model.glu_clamp is None or path != "eager":
        return 0.0
    return CLAMP_BYTES_PER_ELEMENT * (model.mlp_matrices - 1) * expert_ffn


def expert_bias_total_bytes_per_copy(model: ModelSpec, path: ExpertPath = "eager") -> float:
    """Bytes (forward and backward) per routed token copy of the per-expert bias of the second expert GEMM
    (``h`` wide); 0 without biases or experts, or where the fused grouped GEMM adds it (``path`` ``fused``;
    TE's unfused ``GroupedLinear`` op adds it per expert too: charged alike)."""
    if not model.bias or model.moe is None or path == "fused":
        return 0.0
    return EXPERT_BIAS_BYTES_PER_ELEMENT * model.hidden


def clamp_saved_bytes_per_copy(model: ModelSpec, expert_ffn: float) -> float:
    """Activation bytes per routed token copy the clamp keeps for backward beyond the unclamped path
    (:data:`SAVES_PER_CLAMPED_ELEMENT` 16-bit tensors of the first expert GEMM's output); 0 without one."""
    if model.glu_clamp is None:
        return 0.0
    return SAVES_PER_CLAMPED_ELEMENT * BYTES_16BIT * (model.mlp_matrices - 1) * expert_ffn


__all__ = ["CLAMP_BYTES_PER_ELEMENT", "EXPERT_BIAS_BYTES_PER_ELEMENT", "FUSED_ROPE_BYTES_PER_ELEMENT",
           "UNFUSED_ROPE_BYTES_PER_ELEMENT", "ExpertPath", "clamp_saved_bytes_per_copy", "clamp_total_bytes_per_copy",
           "expert_bias_total_bytes_per_copy", "expert_path", "expert_path_warnings", "runs_op_fuser", "unfused_rope",
           "unfused_rope_total_bytes_per_token"]
