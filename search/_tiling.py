"""Memory-centric tiling (ZeRO-Infinity, Rajbhandari et al. 2021 Sec. 5.1.3; DeepSpeed
``deepspeed.zero.TiledLinear``, ``deepspeed/runtime/zero/tiling.py``; frameworks_2.md sec. 4.1).

ZeRO-3 gathers a module's parameters before it runs and releases them after. A linear layer
split into ``tiles`` sub-linears (``in_splits x out_splits``) run one after another is gathered
and released tile by tile, so the gathered working set, DeepSpeed's ``4 x largest_layer_params``
(16-bit parameter and gradient, ``docs/code-docs/source/memory.rst``), shrinks by the tile
count for the linear layers. The embedding is not a linear layer and is not tiled. Each extra
tile costs collective launches: an all-gather in the forward, one in the backward and a
reduce-scatter of its gradient (DeepSpeed's docstring: "We recommend using as few tiles as
necessary ... can reduce throughput for inexpensive layers").
"""

from __future__ import annotations

from search._model_spec import ModelSpec

TILE_COUNTS: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
"""Tile counts the search tries when tiling is allowed (the paper's largest runs use 16)."""
COLLECTIVES_PER_TILE = 3
"""All-gather in the forward, all-gather in the backward, reduce-scatter of the gradient."""


def largest_module_params(model: ModelSpec, tiles: int) -> float:
    """DeepSpeed's "largest layer" with every linear split into ``tiles``: the embedding
    (``vocab x hidden``, not tiled) or the widest linear over ``tiles``."""
    widest = max(i * o for i, o, _ in model.attention_linears() + model.mlp_linears())
    return float(max(model.vocab * model.hidden, widest / tiles))


def tiling_launch_s(model: ModelSpec, tiles: int, layers: int, latency_s: float) -> float:
    """Per micro-batch: the collective launches the extra tiles of ``layers`` blocks add,
    ``(tiles - 1) x linears per block x layers x 3`` latencies (Hockney alpha term)."""
    if tiles <= 1:
        return 0.0
    linears = len(model.attention_linears()) + len(model.mlp_linears())
    return (tiles - 1) * linears * layers * COLLECTIVES_PER_TILE * latency_s


def tiles_that_fit(gathered_bytes: float, excess_bytes: float, model: ModelSpec, tp: int) -> int | None:
    """The fewest tiles (of :data:`TILE_COUNTS`) whose smaller gathered working set removes
    ``excess_bytes`` from a GPU whose untiled gathered parameters are ``gathered_bytes`` (None:
    tiling alone does not make it fit)."""
    for tiles in TILE_COUNTS:
        tiled = gathered_bytes * largest_module_params(model, tiles) / largest_module_params(model, 1)
        if gathered_bytes - tiled >= excess_bytes:
            return tiles
    return None


__all__ = ["TILE_COUNTS", "largest_module_params", "tiles_that_fit", "tiling_launch_s"]
