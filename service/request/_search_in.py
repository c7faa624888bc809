"""The body of ``POST /v1/searches`` (pydantic v2; unknown fields are refused), also what a stored
search's ``request.body`` holds for the worker to rebuild.

The limits a deployment can change (``Settings.max_top``, ``max_trials``, ``max_timeout_s``) are
checked when the request is resolved (``service._search_request``), not here, because the schema is
built once at import; the bounds below are the ones no deployment lifts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from search._parallel_spec import CudaGraphs, MoEDispatcher
from search._search import Objective
from service.request._schemas import ClusterIn, FrameworkTarget, ModelIn, TrainingIn

_EXAMPLE_REQUEST: dict[str, Any] = {
    "model": {"preset": "llama3-70b"}, "cluster": {"preset": "dgx-h100", "nodes": 8},
    "training": {"global_batch": 512, "precision": "bf16"}, "framework": "any", "objective": "throughput",
    "top": 10, "budget": {"n_trials": None, "timeout_s": None, "seed": 0}}


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BudgetIn(_In):
    """How much searching to do. Without ``n_trials`` a space of up to 1,000,000 valid configurations
    is swept exactly (branch and bound); ``n_trials`` makes Optuna sample instead."""

    model_config = ConfigDict(extra="forbid", frozen=True,
                              json_schema_extra={"examples": [{"n_trials": 400, "timeout_s": 60, "seed": 0}]})
    n_trials: int | None = Field(default=None, ge=1, description="Sampled trials (at most Settings.max_trials, "
                                 "default 5000); null sweeps exhaustively when the space allows.")
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                    description="Stop sampling after this many seconds (at most "
                                                "Settings.max_timeout_s, default 600); an exact sweep ignores it.")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Sampler seed.")


class SearchIn(_In):
    """A search: rank the parallel configurations of ``model`` on ``cluster`` for ``training``."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [_EXAMPLE_REQUEST]})
    model: ModelIn
    cluster: ClusterIn
    training: TrainingIn
    framework: FrameworkTarget = Field(default="any", description="The runtime the configurations must run on; "
                                       "any = megatron, deepspeed, megatron-deepspeed and fsdp.")
    objective: Objective = Field(default="throughput", description="throughput: max tokens/s; cost: min $ per "
                                 "million tokens (needs price_per_gpu_hour); pareto: tokens/s vs memory headroom.")
    top: int = Field(default=10, ge=1, description="Configurations to keep (at most Settings.max_top, default 100).")
    price_per_gpu_hour: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                             description="$ per GPU-hour; required for objective cost.")
    budget: BudgetIn = BudgetIn()
    min_headroom_gib: float = Field(default=0.0, ge=0, le=4096, allow_inf_nan=False,
                                    description="GPU memory every ranked configuration must leave free, in GiB "
                                    "(a safety margin over the predicted peak).")
    allow_untested: bool = Field(default=False, description="Also rank combinations the runtime's parser accepts "
                                 "but that no documentation, test or published run shows running (marked in "
                                 "each prediction's warnings).")
    allow_tiling: bool = Field(default=False, description="Also rank DeepSpeed ZeRO-3 with memory-centric tiling "
                               "(the model code must build its linear layers with deepspeed.zero.TiledLinear).")
    host_safety_factor: float = Field(default=1.0, ge=1.0, le=4.0, allow_inf_nan=False,
                                      description="Keep this multiple of the offloaded states' host memory free: 1 "
                                      "requires what the runtime allocates, 1.5 DeepSpeed's estimator margin.")
    moe_dispatcher: MoEDispatcher = Field(default="alltoall", description="MoE models, Megatron-Core: the token "
                                          "dispatcher every expert-parallel configuration runs where it can "
                                          "(flex-deepep / flex-hybridep need the DeepEP package installed).")
    moe_a2a_overlap: bool = Field(default=False, description="MoE models, Megatron-Core: run "
                                  "--overlap-moe-expert-parallel-comm wherever a configuration allows it (ep > 1, "
                                  "no full recompute, vp > 1 when pp > 1).")
    cuda_graphs: CudaGraphs = Field(default="none", description="Megatron-Core: capture each step in the "
                                    "full-iteration CUDA graph (--cuda-graph-impl full_iteration) wherever a "
                                    "configuration runs it (not with Megatron-FSDP; an MoE model only with ep > 1 "
                                    "on flex-hybridep); narrows framework any to megatron.")
    calibration_id: str | None = Field(default=None, min_length=1, max_length=32,
                                       description="The cost model's constants: a stored calibration (GET "
                                       "/v1/calibrations) or 'published'; default: the cluster's (or profile's) "
                                       "latest calibration when one exists, else the published constants.")
