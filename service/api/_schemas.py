"""Request bodies shared by several endpoints (pydantic v2; unknown fields are refused).

Bounds here are the service's limits (a body a CI pipeline could send by mistake, not a
physical limit); the search specs then check the physics (a tp that does not divide the heads,
...) and answer 422 through :class:`search.SpecError`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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


class GPUIn(_In):
    """A custom GPU (the fields of search.GPUSpec)."""

    name: Name = "custom-gpu"
    memory_bytes: float = Field(gt=0, le=1e13)
    hbm_bytes_per_s: float = Field(gt=0, le=1e15)
    fp16_flop_per_s: float = Field(gt=0, le=1e18)
    bf16_flop_per_s: float | None = Field(default=None, gt=0, le=1e18)
    tf32_flop_per_s: float | None = Field(default=None, gt=0, le=1e18)
    fp32_flop_per_s: float = Field(gt=0, le=1e18)
    fp8_flop_per_s: float | None = Field(default=None, gt=0, le=1e18)
    matmul_efficiency: float = Field(default=0.8, gt=0, le=1)
    attention_efficiency: float = Field(default=0.6, gt=0, le=1)


class NodeIn(_In):
    """A custom node (the fields of search.NodeSpec)."""

    name: Name = "custom-node"
    gpus_per_node: int = Field(ge=1, le=1024)
    intra_node_bytes_per_s: float = Field(gt=0, le=1e15)
    inter_node_bytes_per_s: float = Field(gt=0, le=1e15)
    pcie_bytes_per_s: float = Field(gt=0, le=1e15)
    cpu_memory_bytes: float = Field(gt=0, le=1e16)
    nvme_bytes: float = Field(gt=0, le=1e17)
    nvme_read_bytes_per_s: float = Field(gt=0, le=1e14)
    nvme_write_bytes_per_s: float = Field(gt=0, le=1e14)
    cpu_adam_params_per_s: float = Field(gt=0, le=1e14)


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
