"""FLOP counts: per layer, per iteration, model vs hardware (MFU / HFU conventions).

All counts are multiply-adds x 2 (one FMA = 2 FLOP). The sequence length ``s`` is the full
training sequence; ``tokens = b * s`` is the work of ``b`` sequences.
"""

from __future__ import annotations

from search._model_spec import ModelSpec


def layer_gemm_flop(model: ModelSpec, tokens: float) -> float:
    """Forward FLOPs of one dense block's weight GEMMs for ``tokens`` tokens (no TP split).

    ``2*tokens*in*out`` over the attention projections and the MLP (:meth:`ModelSpec.attention_linears`,
    :meth:`ModelSpec.mlp_linears`). For MHA and f = 4h this is ``24*tokens*h^2``, the first term of
    Narayanan et al. 2021 (arXiv:2104.04473) Sec. 5.1 (per layer ``24*B*s*h^2``).
    """
    return 2.0 * tokens * sum(i * o for i, o, _ in model.attention_linears() + model.mlp_linears())


def moe_layer_gemm_flop(model: ModelSpec, tokens: float) -> float:
    """Forward FLOPs of one MoE block's weight GEMMs: the attention projections, the router
    (``2*tokens*h*E``), ``topk`` routed experts and the shared experts per token (DeepSeek-AI 2024,
    arXiv:2412.19437 Sec. 2.1.2; Megatron-LM ``num_floating_point_operations`` counts the same)."""
    moe = model.moe
    if moe is None:
        return layer_gemm_flop(model, tokens)
    attn = sum(i * o for i, o, _ in model.attention_linears())
    experts = (moe.topk * moe.expert_ffn + moe.shared_expert_ffn) * model.mlp_matrices * model.hidden
    return 2.0 * tokens * (attn + model.router_params_per_layer + experts)


def layer_attention_flop(model: ModelSpec, tokens: float, kv_len: float) -> float:
    """Forward FLOPs of the attention core (Q K^T and scores x V), full (non-causal) count.

    ``2*tokens*kv_len*heads*(d_qk + d_v)``, which is ``4*tokens*kv_len*h`` for heads of h / a
    (Narayanan et al. 2021 Sec. 5.1 per-layer ``4*B*s^2*h`` with ``kv_len = s``); MLA heads have
    d_qk = no-RoPE + RoPE width and their own d_v. Causal kernels that skip masked blocks execute
    about half of it; the MFU convention (Megatron, MosaicML) counts all of it.

    A sliding-window layer counts ``min(window, kv_len)`` keys per query instead of ``kv_len`` (the
    same unhalved convention over the band each query can see), averaged over the layers by
    :attr:`ModelSpec.windowed_layer_share`: counting the full s^2 would credit the model with work
    it does not do. Megatron-Bridge's GPT-OSS TFLOP/s of releases 26.06+ are consistent with such a
    discount (benchmarks/data/runs_2024_2026.json notes: 0.95 of the unwindowed count).
    """
    if model.attention_window is not None:
        share = model.windowed_layer_share
        keys = share * min(float(model.attention_window), kv_len) + (1.0 - share) * kv_len
        return 2.0 * tokens * keys * (model.q_dim + model.attention_out_dim)
    return 2.0 * tokens * kv_len * (model.q_dim + model.attention_out_dim)


def mtp_extra_gemm_flop(model: ModelSpec, tokens: float) -> float:
    """Forward FLOPs of the multi-token-prediction modules besides their blocks: each projects
    the concatenated [h; embedding] (2h) to h and runs the LM head once more (DeepSeek-AI 2024
    Sec. 2.2; Megatron ``--mtp-num-layers``)."""
    return model.mtp_layers * (2.0 * tokens * 2 * model.hidden * model.hidden + logits_flop(model, tokens))


def blocks_gemm_flop(model: ModelSpec, tokens: float) -> float:
    """Forward weight-GEMM FLOPs of every block (dense and MoE) and of the MTP modules' blocks."""
    return (model.dense_layers * layer_gemm_flop(model, tokens)
            + (model.moe_layers + model.mtp_layers) * moe_layer_gemm_flop(model, tokens))


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
    blocks = model.layers + model.mtp_layers
    attention = blocks * layer_attention_flop(model, tokens, model.seq_len)
    return 3.0 * (blocks_gemm_flop(model, tokens) + attention + logits_flop(model, tokens)
                  + mtp_extra_gemm_flop(model, tokens))


def hardware_flop_per_iteration(model: ModelSpec, global_batch: int, recompute: str) -> float:
    """FLOPs executed per step including activation recomputation (HFU numerator).

    Narayanan et al. 2021 eq. (3): with full recomputation each layer runs its forward twice,
    ``96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h))``, i.e. factor 4 on the layers and 3 on the
    logits. Selective recomputation (Korthikanti et al. 2022, arXiv:2205.05198 Sec. 5) adds
    one forward of the attention core only; with FlashAttention that recomputation is part of
    its backward kernel already, so nothing is added.
    """
    tokens = float(global_batch) * model.seq_len
    gemm = blocks_gemm_flop(model, tokens)
    attn = (model.layers + model.mtp_layers) * layer_attention_flop(model, tokens, model.seq_len)
    if recompute == "full":
        blocks = 4.0 * (gemm + attn)
    elif recompute == "selective" and model.attention == "standard":
        blocks = 3.0 * (gemm + attn) + attn
    else:
        blocks = 3.0 * (gemm + attn)
    return blocks + 3.0 * (logits_flop(model, tokens) + mtp_extra_gemm_flop(model, tokens))
