"""Moved to :mod:`service.request` (request bodies are shared by the API, the worker and the CLI);
the names other modules and tests still import from here are re-exported until they move."""

from service.request import ClusterIn, ConfigIn, GPUIn, ModelIn, NodeIn, TrainingIn

__all__ = ["ClusterIn", "ConfigIn", "GPUIn", "ModelIn", "NodeIn", "TrainingIn"]
