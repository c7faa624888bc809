"""FLOP counts: per layer, per iteration, model vs hardware (MFU / HFU conventions).

All counts are multiply-adds x 2 (one FMA = 2 FLOP). The sequence length ``s`` is the full
training sequence; ``tokens = b * s`` is the work of ``b`` sequences.
"""

from __future__ import annotations

from search._model_spec import ModelSpec


def layer_gemm_flop(model: ModelSpec, tokens: float) -> float:
    """Forward FLOPs of one block's weight GEMMs for ``tokens`` tokens (no TP split).

    Q/K/V/output projections ``2*tokens*h*(2h + 2*kv_dim)`` plus the MLP
    ``2*tokens*h*f*mlp_matrices``. For MHA and f = 4h this is ``24*tokens*h^2``, the first
    term of Narayanan et al. 2021 (arXiv:2104.04473) Sec. 5.1 (per layer ``24*B*s*h^2``).
    """
    h = model.hidden
    attn = 2.0 * tokens * h * (2 * h + 2 * model.kv_dim)
    mlp = 2.0 * tokens * h * model.ffn * model.mlp_matrices
    return attn + mlp


def layer_attention_flop(model: ModelSpec, tokens: float, kv_len: float) -> float:
    """Forward FLOPs of the attention core (Q K^T and scores x V), full (non-causal) count.

    ``4*tokens*kv_len*h``: Narayanan et al. 2021 Sec. 5.1 per-layer ``4*B*s^2*h`` with
    ``kv_len = s``. Causal kernels that skip masked blocks execute about half of it; the
    MFU convention (Megatron, MosaicML) counts all of it.
    """
    return 4.0 * tokens * kv_len * model.hidden


def logits_flop(model: ModelSpec, tokens: float) -> float:
    """Forward FLOPs of the LM head ``2*tokens*h*V`` (Narayanan et al. 2021 Sec. 5.1)."""
    return 2.0 * tokens * model.hidden * model.vocab


def model_flop_per_iteration(model: ModelSpec, global_batch: int) -> float:
    """Model FLOPs of one optimizer step: forward + backward (x3), no recomputation.

    Megatron-LM ``num_floating_point_operations`` (training.py): for f = 4h, MHA, GeLU it is
    ``72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h))``; generalised through :func:`layer_gemm_flop`
    (GQA, SwiGLU). This is the numerator of MFU (Chowdhery et al. 2022 App. B, 6N + attention).
    """
    tokens = float(global_batch) * model.seq_len
    per_layer = layer_gemm_flop(model, tokens) + layer_attention_flop(model, tokens, model.seq_len)
    return 3.0 * (model.layers * per_layer + logits_flop(model, tokens))


def hardware_flop_per_iteration(model: ModelSpec, global_batch: int, recompute: str) -> float:
    """FLOPs executed per step including activation recomputation (HFU numerator).

    Narayanan et al. 2021 eq. (3): with full recomputation each layer runs its forward twice,
    ``96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h))``, i.e. factor 4 on the layers and 3 on the
    logits. Selective recomputation (Korthikanti et al. 2022, arXiv:2205.05198 Sec. 5) adds
    one forward of the attention core only; with FlashAttention that recomputation is part of
    its backward kernel already, so nothing is added.
    """
    tokens = float(global_batch) * model.seq_len
    gemm = layer_gemm_flop(model, tokens)
    attn = layer_attention_flop(model, tokens, model.seq_len)
    if recompute == "full":
        layer = 4.0 * (gemm + attn)
    elif recompute == "selective" and model.attention == "standard":
        layer = 3.0 * (gemm + attn) + attn
    else:
        layer = 3.0 * (gemm + attn)
    return model.layers * layer + 3.0 * logits_flop(model, tokens)
