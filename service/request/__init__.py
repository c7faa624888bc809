"""Request bodies and the specs they become: the pydantic bodies the API validates and the database
stores (``ModelIn``, ``ClusterIn``, ``SearchIn``, ...), and their conversion to search specs (every
problem a :class:`search.SpecError` naming the request's field). Shared by the API, the worker and
the CLI, so none of them imports the others' internals."""

from search._cluster_spec import BOUNDS as HARDWARE_BOUNDS  # the specs' physical ranges, as the schema states them
from service.request._run_in import Id, RunIn
from service.request._schemas import (
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
    YarnShape,
)
from service.request._search_in import BudgetIn, SearchIn
from service.request._specs import (
    cluster_spec,
    derived_dp,
    fabric_spec,
    load_profile,
    model_shape,
    model_spec,
    parallel_config,
)

__all__ = [
    "HARDWARE_BOUNDS",
    "BudgetIn",
    "ClusterIn",
    "ConfigIn",
    "FabricIn",
    "FabricTierIn",
    "FrameworkTarget",
    "GPUIn",
    "Id",
    "MLAShape",
    "MoEShape",
    "ModelIn",
    "ModelShape",
    "NodeIn",
    "RecipeIn",
    "RunIn",
    "Runtime",
    "SearchIn",
    "TrainingIn",
    "YarnShape",
    "cluster_spec",
    "derived_dp",
    "fabric_spec",
    "load_profile",
    "model_shape",
    "model_spec",
    "parallel_config",
]
