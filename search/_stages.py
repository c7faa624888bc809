"""Which layers and parameters sit on which pipeline rank."""

from __future__ import annotations

from functools import lru_cache

from search._model_spec import ModelSpec
from search._parallel_spec import ParallelConfig


def stage_layer_counts(model: ModelSpec, config: ParallelConfig) -> tuple[int, ...]:
    """Transformer layers on each pipeline rank: ``config.stage_layers``, or the even split."""
    if config.stage_layers is not None:
        return config.stage_layers
    return (model.layers // config.pp,) * config.pp


def stage_moe_layer_counts(model: ModelSpec, config: ParallelConfig) -> tuple[int, ...]:
    """MoE layers on each pipeline rank (0s for a dense model); see :func:`_moe_counts`."""
    if model.moe is None:
        return (0,) * config.pp
    return _moe_counts(model.moe.first_dense_layers, stage_layer_counts(model, config), config.vp)


@lru_cache(maxsize=4096)
def _moe_counts(first_dense: int, counts: tuple[int, ...], vp: int) -> tuple[int, ...]:
    """MoE layers per rank when the first ``first_dense`` layers are dense.

    Layers are laid out in model order over the virtual stages: chunk v of rank r follows chunk
    v of rank r - 1 and chunk v - 1 of the last rank (Megatron-Core's interleaved layout,
    ``get_transformer_layer_offset``); a rank's ``counts[r]`` layers split into ``vp`` chunks of
    ``counts[r] // vp``, the remainder in its last chunk.
    """
    pp = len(counts)
    chunks: list[tuple[int, int]] = []  # (rank, layers) in model order
    for v in range(vp):
        for r in range(pp):
            size = counts[r] // vp + (counts[r] % vp if v == vp - 1 else 0)
            chunks.append((r, size))
    dense = [0] * pp
    left = first_dense
    for r, size in chunks:
        take = min(left, size)
        dense[r] += take
        left -= take
    return tuple(n - d for n, d in zip(counts, dense, strict=True))


def stage_params_per_rank(model: ModelSpec, config: ParallelConfig) -> tuple[float, ...]:
    """Parameters on one GPU of each pipeline rank (after the TP split, and for the routed experts
    the ep x etp split); see :func:`_params_per_rank` and :func:`stage_expert_params_per_rank`."""
    c = config
    return _stage_params(model, c.tp, c.pp, c.vp, c.ep, c.etp, c.stage_layers)[0]


def stage_expert_params_per_rank(model: ModelSpec, config: ParallelConfig) -> tuple[float, ...]:
    """Routed-expert parameters on one GPU of each pipeline rank: E/ep experts of each MoE layer,
    each split over etp (Megatron ``theoretical_memory_usage.py``: experts / (ETP x EP)); the MTP
    modules' experts on the last rank. Expert gradients reduce, and their optimizer states shard,
    over the expert data-parallel group (``config.edp``) instead of dp x cp."""
    c = config
    return _stage_params(model, c.tp, c.pp, c.vp, c.ep, c.etp, c.stage_layers)[1]


@lru_cache(maxsize=65536)
def _stage_params(model: ModelSpec, tp: int, pp: int, vp: int, ep: int, etp: int,
                  stage_layers: tuple[int, ...] | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(all parameters, routed-expert parameters) on one GPU of each pipeline rank (a search asks
    for the same layouts hundreds of thousands of times)."""
    counts = stage_layers if stage_layers is not None else (model.layers // pp,) * pp
    moe_counts = _moe_counts(model.moe.first_dense_layers, counts, vp) if model.moe is not None else (0,) * pp
    dense = _params_per_rank(model, tp, pp, counts, moe_counts)
    if model.moe is None:
        return dense, (0.0,) * pp
    per_layer = model.expert_params_per_layer / (ep * etp)
    experts = [n * per_layer for n in moe_counts]
    experts[-1] += model.mtp_layers * per_layer
    return tuple(d + e for d, e in zip(dense, experts, strict=True)), tuple(experts)


@lru_cache(maxsize=16384)
def _params_per_rank(model: ModelSpec, tp: int, pp: int, counts: tuple[int, ...],
                     moe_counts: tuple[int, ...]) -> tuple[float, ...]:
    """Parameters on one GPU of each pipeline rank after the TP split, routed experts left out.

    Megatron places the embedding on the first rank and the LM head (+ final norm) on the last;
    with tied embeddings and pp > 1 the last rank keeps its own copy of the embedding,
    synchronised by an extra all-reduce (Shoeybi et al. 2019; Megatron-LM
    ``setup_embeddings_and_output_layer``). With pp = 1 both are the same GPU. MoE layers hold
    their attention, router and shared experts (split by tp like a dense block; the router and
    norms are replicated in Megatron but small); MTP modules sit on the last rank.
    """
    embedding = model.embedding_params / tp
    head = model.vocab * model.hidden / tp if (model.tied_embeddings is False or pp > 1) else 0.0
    final_norm = float(model.norm_params)
    dense_layer = model.params_per_layer / tp
    moe_layer = model.moe_layer_dense_params / tp
    out = [(n - k) * dense_layer + k * moe_layer for n, k in zip(counts, moe_counts, strict=True)]
    out[0] += embedding
    out[-1] += head + final_norm + model.mtp_layers * (moe_layer + 2 * model.hidden * model.hidden / tp)
    return tuple(out)


def stage_params_per_gpu(model: ModelSpec, config: ParallelConfig) -> tuple[float, float]:
    """Parameters on one GPU of the first and of the last pipeline rank (the same GPU with pp = 1)."""
    ranks = stage_params_per_rank(model, config)
    return ranks[0], ranks[-1]


def stage_recompute_shares(model: ModelSpec, config: ParallelConfig) -> tuple[float, ...]:
    """Share of each pipeline rank's layers that run the recomputation ``config.recompute`` names:
    every layer (1.0), except with ``recompute_layers = k`` (Megatron ``--recompute-method block``),
    where the first k layers of each of the rank's vp chunks recompute in full and the others keep
    their activations, ``min(n, k * vp) / n`` (megatron/core/transformer/transformer_block.py
    ``_checkpointed_forward``, block method)."""
    counts = stage_layer_counts(model, config)
    k = config.recompute_layers
    if config.recompute != "full" or k is None:
        return (1.0,) * config.pp
    return tuple(min(n, k * config.vp) / n if n else 0.0 for n in counts)
