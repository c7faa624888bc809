"""Response bodies of ``/v1/searches`` (pydantic v2); the request body, ``SearchIn``, is
``service.request``'s (re-exported here). Response models refuse unknown fields, so a test that
validates a served body against them proves the body and the published schema agree.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from search._parallel_spec import CudaGraphs, MoEDispatcher, Placement
from search._search import Objective
from service.api._calibration_models import CalibrationUsedOut
from service.request import BudgetIn, Runtime, SearchIn

__all__ = ["BUSY", "CONFLICT", "FORBIDDEN", "INVALID", "NOT_FOUND", "UNAUTHORIZED", "BudgetIn", "ConfigsOut",
           "ErrorItem", "ErrorOut", "LaunchOut", "ParallelConfigOut", "PredictionOut", "RankedConfigOut",
           "SearchCounts", "SearchIn", "SearchLinks", "SearchListOut", "SearchOut", "SearchTimings", "Status"]

Status = Literal["queued", "running", "done", "failed", "cancelled"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchCounts(_Out):
    """How much of the space the search saw (null until it is done)."""

    space_size: int | None = Field(description="Raw product of the per-dimension choices.")
    n_valid: int | None = Field(description="Configurations the model, batch and runtime allow.")
    n_feasible: int | None = Field(description="Valid configurations that fit in memory (all of them when "
                                   "exhaustive; among the evaluated ones when sampled).")
    n_evaluated: int | None = Field(description="Configurations checked (an exact sweep skips those its bound "
                                    "proves cannot enter the top k).")
    exhaustive: bool | None = Field(description="True when the ranking is exact (not sampled).")


class SearchTimings(_Out):
    """When the search moved, in UTC, and how long each phase took in seconds."""

    created_at: datetime
    started_at: datetime | None = Field(description="First claim by a worker.")
    finished_at: datetime | None
    queued_s: float | None = Field(description="started_at - created_at.")
    search_s: float | None = Field(description="Seconds the search itself took on the worker (last attempt).")
    total_s: float | None = Field(description="finished_at - created_at.")


class SearchLinks(_Out):
    self: str
    configs: str
    launch: str = Field(description="A URI template: fill in rank and target.")


class SearchOut(_Out):
    """A search: its queue state, progress, counts, timings and the request it answers."""

    id: str
    status: Status
    progress: float = Field(ge=0, le=1)
    model: str = Field(description="The model's name.")
    cluster: str = Field(description="The cluster's name.")
    nodes: int
    counts: SearchCounts
    timings: SearchTimings
    attempts: int = Field(description="Times a worker claimed it (more than 1 after a worker died).")
    worker_id: str | None = Field(description="The worker that holds (or last held) it.")
    error: str | None = Field(description="Why it failed.")
    hints: list[str] = Field(description="When few or no configurations fit: why the closest fail and what "
                             "would fit.")
    notes: list[str] = Field(description="Why the hardware profile may not describe this cluster (\"stale profile: "
                                         "...\": age, GPU, node size) and figures it did not measure (preset "
                                         "values used).")
    calibration: CalibrationUsedOut = Field(description="The constants the search ranks with and their "
                                            "cross-validated error (also in notes).")
    request: SearchIn
    links: SearchLinks


class SearchListOut(_Out):
    """A page of searches, newest first."""

    data: list[SearchOut]
    count: int = Field(description="Searches matching the filters, over all pages.")
    limit: int
    offset: int | None = Field(description="The offset of this page (null when paging by cursor).")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")


class ParallelConfigOut(_Out):
    """One parallel configuration (search.ParallelConfig)."""

    dp: int
    tp: int
    pp: int
    vp: int
    cp: int
    sp: bool
    tp_comm_overlap: bool = Field(default=False, description="Megatron-Core --tp-comm-overlap (needs sp).")
    stage_layers: list[int] | None = Field(default=None, description="Transformer layers on each pipeline rank, "
                                           "first to last; null for the even split.")
    ep: int = Field(default=1, description="Expert-parallel degree (1 for a dense model).")
    etp: int = Field(default=1, description="Expert tensor-parallel degree (1 for a dense model).")
    micro_batch: int
    zero_stage: int
    offload_optimizer: Literal["none", "cpu", "nvme"]
    offload_param: Literal["none", "cpu", "nvme"]
    recompute: Literal["none", "selective", "full"]
    placement: Placement = Field(default="tp-cp-ep-dp-pp", description="Order of the groups on consecutive ranks, "
                                 "innermost first.")
    tiles: int = Field(default=1, description="Memory-centric tiling: each linear split into this many tiles "
                       "(DeepSpeed ZeRO-3 with deepspeed.zero.TiledLinear in the model code); 1 means off.")
    optimizer_offload_fraction: float = Field(default=1.0, description="Share of the optimizer states on the host "
                                              "when offload_optimizer is cpu (Megatron --optimizer-offload-fraction, "
                                              "DeepSpeed ZeRO-3 offload_optimizer.ratio).")
    recompute_layers: int | None = Field(default=None, description="With full recomputation: layers recomputed per "
                                         "(virtual) pipeline stage (Megatron --recompute-method block); null for all.")
    activation_offload_layers: int = Field(default=0, description="Layers whose activations go to host memory "
                                           "(Megatron --cpu-offloading-num-layers); 0 for none.")
    moe_dispatcher: MoEDispatcher = Field(default="alltoall", description="MoE token dispatcher: alltoall, "
                                          "flex-deepep or flex-hybridep.")
    moe_a2a_overlap: bool = Field(default=False, description="Megatron-Core --overlap-moe-expert-parallel-comm.")
    cuda_graphs: CudaGraphs = Field(default="none", description="Megatron-Core's full-iteration CUDA graph "
                                    "(--cuda-graph-impl full_iteration), or none.")


class PredictionOut(_Out):
    """A configuration's predicted step (search.Prediction.to_dict)."""

    iteration_time_s: float
    time_breakdown_s: dict[str, float] = Field(description="Exposed seconds per term; they add up to "
                                               "iteration_time_s.")
    tokens_per_s: float
    model_flop_per_iteration: float
    hardware_flop_per_iteration: float
    model_tflop_per_s_per_gpu: float
    mfu: float
    hfu: float
    peak_memory_bytes_per_gpu: float
    memory_breakdown_bytes: dict[str, float] = Field(description="Peak GPU memory components; they add up to "
                                                     "peak_memory_bytes_per_gpu.")
    gpu_memory_bytes: float
    cpu_memory_bytes_per_node: float
    cpu_memory_breakdown_bytes: dict[str, float] = Field(default_factory=dict, description="Host memory per node "
                                                         "by component; adds up to cpu_memory_bytes_per_node.")
    host_estimator_margin_bytes: float = Field(default=0.0, description="What DeepSpeed's memory estimators "
                                               "(additional_buffer_factor 1.5) add on top of the offloaded states: "
                                               "a safety margin, required only with host_safety_factor.")
    nvme_bytes_per_node: float
    num_micro_batches: int
    feasible: bool
    reasons: list[str]
    warnings: list[str]
    bottleneck: str
    memory_headroom_bytes: float
    stage_layers: list[int] = Field(default_factory=list, description="Transformer layers on each pipeline rank.")
    stage_times_s: list[float] = Field(default_factory=list, description="Per-micro-batch time of each pipeline "
                                       "rank; the slowest paces the pipeline.")
    stage_peak_memory_bytes: list[float] = Field(default_factory=list, description="Peak GPU memory of each "
                                                 "pipeline rank.")
    error_band: float = Field(default=0.0, description="Relative iteration-time error to expect (0.07 = +-7 %): "
                              "the model's measured error on published runs of this runtime and GPU family.")


class RankedConfigOut(_Out):
    rank: int = Field(ge=1)
    framework: Runtime
    config: ParallelConfigOut
    score: float = Field(description="The objective value it was ranked by (tokens/s, or $ per million tokens).")
    equivalent_to_best: bool = Field(default=False, description="Within the model's error band of the best score: "
                                     "the model cannot order them; the simpler ones are ranked first.")
    note: str = Field(default="", description="Why it stands where it does when that is not its score alone.")
    explanation: str
    prediction: PredictionOut
    launch: str = Field(description="The launch endpoint of this configuration (add ?target=...).")


class ConfigsOut(_Out):
    """The ranked configurations of a done search, best first."""

    search_id: str
    objective: Objective
    exhaustive: bool | None
    count: int
    configs: list[RankedConfigOut]


class LaunchOut(_Out):
    """The files and command that run one ranked configuration with one launch target."""

    search_id: str
    rank: int
    target: str
    framework: Runtime
    files: dict[str, str] = Field(description="Relative path -> text; write them, then run the command.")
    command: str = Field(description="A shell command line, every value quoted.")
    env: dict[str, str] = Field(description="Environment the framework needs (the command exports it).")
    notes: list[str] = Field(default_factory=list, description="What the files leave to you: recipe values read "
                             "from the environment at launch, rounding, ...")


class ErrorItem(_Out):
    field: str = Field(description="What to change: a dotted request path, a header or a spec field.")
    msg: str
    fix: str = Field(description="How to fix it.")
    type: str
    loc: list[Any]


class ErrorOut(_Out):
    """Every 4xx answer: one item per problem."""

    detail: list[ErrorItem]


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


Responses = dict[int | str, dict[str, Any]]
UNAUTHORIZED: Responses = {401: _error("No token, or an unknown or revoked one.")}
FORBIDDEN: Responses = {403: _error("The token lacks the write scope.")}
NOT_FOUND: Responses = {404: _error("No search with this id (or no such rank).")}
INVALID: Responses = {422: _error("The request is invalid; `detail` names the field and the fix.")}
CONFLICT: Responses = {409: _error("The search is not in a state that allows this; `fix` says what to do.")}
BUSY: Responses = {429: _error("The queue holds AUTOPAR_MAX_QUEUED searches already; retry after Retry-After "
                               "seconds.")}
