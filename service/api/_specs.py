"""Moved to :mod:`service.request` (turning request bodies into specs is shared by the API, the
worker and the CLI); kept so ``service.api._specs`` imports of other modules and tests keep working."""

from service.request._specs import cluster_spec, fabric_spec, load_profile, model_shape, model_spec, parallel_config

__all__ = ["cluster_spec", "fabric_spec", "load_profile", "model_shape", "model_spec", "parallel_config"]
