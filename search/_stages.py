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


def stage_params_per_rank(model: ModelSpec, config: ParallelConfig) -> tuple[float, ...]:
    """Parameters on one GPU of each pipeline rank (after the TP split); see :func:`_params_per_rank`."""
    return _params_per_rank(model, config.tp, config.pp, stage_layer_counts(model, config))


@lru_cache(maxsize=16384)
def _params_per_rank(model: ModelSpec, tp: int, pp: int, counts: tuple[int, ...]) -> tuple[float, ...]:
    """Parameters on one GPU of each pipeline rank (after the TP split).

    Megatron places the embedding on the first rank and the LM head (+ final norm) on the last;
    with tied embeddings and pp > 1 the last rank keeps its own copy of the embedding,
    synchronised by an extra all-reduce (Shoeybi et al. 2019; Megatron-LM
    ``setup_embeddings_and_output_layer``). With pp = 1 both are the same GPU.
    """
    embedding = model.embedding_params / tp
    head = model.vocab * model.hidden / tp if (model.tied_embeddings is False or pp > 1) else 0.0
    final_norm = float(model.norm_params)
    per_layer = model.params_per_layer / tp
    if pp == 1:
        return (counts[0] * per_layer + embedding + head + final_norm,)
    out = [n * per_layer for n in counts]
    out[0] += embedding
    out[-1] += head + final_norm
    return tuple(out)


def stage_params_per_gpu(model: ModelSpec, config: ParallelConfig) -> tuple[float, float]:
    """Parameters on one GPU of the first and of the last pipeline rank (the same GPU with pp = 1)."""
    ranks = stage_params_per_rank(model, config)
    return ranks[0], ranks[-1]
