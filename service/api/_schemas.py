"""Request bodies shared by several endpoints (pydantic v2; unknown fields are refused).

Bounds here are the service's limits (a body a CI pipeline could send by mistake, not a
physical limit); the search specs then check the physics (a tp that does not divide the heads,
...) and answer 422 through :class:`search.SpecError`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from search._cluster_spec import BOUNDS as HARDWARE_BOUNDS  # not re-exported by search: one definition

Positive = Annotated[int, Field(ge=1)]
Name = Annotated[str, Field(min_length=1, max_length=100)]


class _In(BaseModel):
    # strict: JSON true is not the integer 1, "64" is not 64 (what the schema says is what is accepted)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ModelShape(_In):
    """A custom transformer shape (the fields of search.ModelSpec)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [{
        "name": "my-13b", "layers": 40, "hidden": 5120, "heads": 40, "ffn": 13824, "vocab": 32000,
        "seq_len": 4096, "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False}]})
    name: Name = "custom"
    layers: int = Field(ge=1, le=2048)
    hidden: int = Field(ge=1, le=262_144)
    heads: int = Field(ge=1, le=4096)
    ffn: int = Field(ge=1, le=1_048_576)
    vocab: int = Field(ge=1, le=4_194_304)
    seq_len: int = Field(ge=1, le=4_194_304)
    kv_heads: int | None = Field(default=None, ge=1, le=4096)
    activation: Literal["gelu", "swiglu"] = "gelu"
    tied_embeddings: bool = False
    position_embedding: Literal["learned", "rope", "alibi"] = "learned"
    bias: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    attention: Literal["flash", "standard"] = "flash"
    dropout: bool = False


class ModelIn(_In):
    """A model preset (GET /v1/presets/models) or a custom shape: exactly one."""

    model_config = ConfigDict(extra="forbid", frozen=True,
                              json_schema_extra={"examples": [{"preset": "llama3-70b"}]})
    preset: Name | None = None
    shape: ModelShape | None = None

    @model_validator(mode="after")
    def _one(self) -> ModelIn:
        if (self.preset is None) == (self.shape is None):
            raise ValueError("give exactly one of preset or shape")
        return self


def _figure(name: str, unit: str, default: Any = ...) -> Any:
    """A hardware figure bounded by its physical range (search's GPUSpec/NodeSpec BOUNDS, one
    definition): the schema shows the range, and a 422 names it."""
    low, high = HARDWARE_BOUNDS[name]
    return Field(default=default, ge=low, le=high, description=f"{unit}, in [{low:g}, {high:g}].",
                 json_schema_extra={"x-unit": unit})


class GPUIn(_In):
    """A custom GPU (the fields of search.GPUSpec). Every figure lies in a physical range (see each
    field): a near-zero FLOP/s or bytes/s would make every prediction infinite."""

    name: Name = "custom-gpu"
    memory_bytes: float = _figure("memory_bytes", "bytes")
    hbm_bytes_per_s: float = _figure("hbm_bytes_per_s", "bytes/s")
    fp16_flop_per_s: float = _figure("fp16_flop_per_s", "dense FLOP/s")
    bf16_flop_per_s: float | None = _figure("bf16_flop_per_s", "dense FLOP/s (null: no bf16 tensor cores)", None)
    tf32_flop_per_s: float | None = _figure("tf32_flop_per_s", "dense FLOP/s (null: none)", None)
    fp32_flop_per_s: float = _figure("fp32_flop_per_s", "dense FLOP/s")
    fp8_flop_per_s: float | None = _figure("fp8_flop_per_s", "dense FLOP/s (null: no fp8 tensor cores)", None)
    matmul_efficiency: float = _figure("matmul_efficiency", "achievable fraction of peak for large GEMMs", 0.8)
    attention_efficiency: float = _figure("attention_efficiency", "achievable fraction of peak for attention", 0.6)


class NodeIn(_In):
    """A custom node (the fields of search.NodeSpec), each figure in its physical range."""

    name: Name = "custom-node"
    gpus_per_node: int = Field(ge=1, le=1024)
    intra_node_bytes_per_s: float = _figure("intra_node_bytes_per_s", "bytes/s (NCCL bus bandwidth per GPU)")
    inter_node_bytes_per_s: float = _figure("inter_node_bytes_per_s", "bytes/s (the node's NICs together)")
    pcie_bytes_per_s: float = _figure("pcie_bytes_per_s", "bytes/s per GPU per direction")
    cpu_memory_bytes: float = _figure("cpu_memory_bytes", "bytes")
    nvme_bytes: float = _figure("nvme_bytes", "bytes")
    nvme_read_bytes_per_s: float = _figure("nvme_read_bytes_per_s", "bytes/s")
    nvme_write_bytes_per_s: float = _figure("nvme_write_bytes_per_s", "bytes/s")
    cpu_adam_params_per_s: float = _figure("cpu_adam_params_per_s", "parameter updates/s")


class ClusterIn(_In):
    """A cluster preset (GET /v1/presets/clusters) or a custom gpu + node, times ``nodes``;
    ``profile_id`` overlays a stored hardware profile's measurements."""

    model_config = ConfigDict(extra="forbid", frozen=True,
                              json_schema_extra={"examples": [{"preset": "dgx-h100", "nodes": 8}]})
    preset: Name | None = None
    gpu: GPUIn | None = None
    node: NodeIn | None = None
    nodes: int = Field(default=1, ge=1, le=65_536)
    profile_id: Annotated[str, Field(min_length=1, max_length=32)] | None = None

    @model_validator(mode="after")
    def _one(self) -> ClusterIn:
        custom = self.gpu is not None or self.node is not None
        if self.preset is not None and custom:
            raise ValueError("give either preset or gpu + node, not both")
        if self.preset is None and (self.gpu is None or self.node is None):
            raise ValueError("give a preset, or both gpu and node")
        return self


class TrainingIn(_In):
    """Sequences per optimizer step and the mixed precision."""

    global_batch: int = Field(ge=1, le=10_000_000)
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"


class ConfigIn(_In):
    """One parallel configuration (the fields of search.ParallelConfig); ``dp`` defaults to
    world size / (tp * pp * cp)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [{
        "tp": 8, "pp": 4, "sp": True, "micro_batch": 1, "zero_stage": 1, "recompute": "selective"}]})
    dp: int | None = Field(default=None, ge=1, le=1_048_576)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    vp: int = Field(default=1, ge=1, le=1024)
    cp: int = Field(default=1, ge=1, le=1024)
    sp: bool = False
    tp_comm_overlap: bool = Field(default=False, description="Megatron-Core --tp-comm-overlap: TP all-gathers "
                                  "and reduce-scatters pipelined with their GEMMs (needs sp and Transformer Engine).")
    micro_batch: int = Field(default=1, ge=1, le=65_536)
    zero_stage: int = Field(default=0, ge=0, le=3)
    offload_optimizer: Literal["none", "cpu", "nvme"] = "none"
    offload_param: Literal["none", "cpu", "nvme"] = "none"
    recompute: Literal["none", "selective", "full"] = "none"


Runtime = Literal["megatron", "deepspeed", "megatron-deepspeed", "fsdp"]
FrameworkTarget = Literal["megatron", "deepspeed", "megatron-deepspeed", "fsdp", "any"]
Objective = Literal["throughput", "cost", "pareto"]
