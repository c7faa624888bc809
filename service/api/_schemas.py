"""Moved to :mod:`service.request` (request bodies are shared by the API, the worker and the CLI);
kept so ``service.api._schemas`` imports of other modules and tests keep working."""

from service.request import (
    ClusterIn,
    ConfigIn,
    FabricIn,
    FabricTierIn,
    FrameworkTarget,
    GPUIn,
    MLAShape,
    ModelIn,
    ModelShape,
    MoEShape,
    NodeIn,
    RecipeIn,
    Runtime,
    TrainingIn,
)

__all__ = ["ClusterIn", "ConfigIn", "FabricIn", "FabricTierIn", "FrameworkTarget", "GPUIn", "MLAShape", "MoEShape",
           "ModelIn", "ModelShape", "NodeIn", "RecipeIn", "Runtime", "TrainingIn"]
