"""Which parameters sit on which pipeline stage."""

from __future__ import annotations

from search._model_spec import ModelSpec
from search._parallel_spec import ParallelConfig


def stage_params_per_gpu(model: ModelSpec, config: ParallelConfig) -> tuple[float, float]:
    """Parameters on one GPU of the first and of the last pipeline stage (after the TP split).

    Megatron places the embedding on the first stage and the LM head on the last; with tied
    embeddings and pp > 1 the last stage keeps its own copy of the embedding, synchronised
    by an extra all-reduce (Shoeybi et al. 2019; Megatron-LM ``setup_embeddings_and_output_layer``).
    With pp = 1 both are the same GPU.
    """
    tp = config.tp
    body = model.layers // config.pp * model.params_per_layer / tp
    embedding = model.embedding_params / tp
    head = model.vocab * model.hidden / tp if (model.tied_embeddings is False or config.pp > 1) else 0.0
    final_norm = float(model.norm_params)
    if config.pp == 1:
        everything = body + embedding + head + final_norm
        return everything, everything
    return body + embedding, body + head + final_norm
