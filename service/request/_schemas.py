"""Request bodies shared by several endpoints (pydantic v2; unknown fields are refused).

Bounds here are the service's limits (a body a CI pipeline could send by mistake, not a
physical limit); the search specs then check the physics (a tp that does not divide the heads,
...) and answer 422 through :class:`search.SpecError`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from search._cluster_spec import BOUNDS as HARDWARE_BOUNDS  # not re-exported by search: one definition
from search._fabric import OVERSUBSCRIPTION, RAIL_BYTES_PER_S
from search._parallel_spec import CudaGraphs, Framework, MoEDispatcher, Placement, Precision

Positive = Annotated[int, Field(ge=1)]
Name = Annotated[str, Field(min_length=1, max_length=100)]


class _In(BaseModel):
    # strict: JSON true is not the integer 1, "64" is not 64 (what the schema says is what is accepted)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class MoEShape(_In):
    """A mixture of experts in place of the MLP of every layer after ``first_dense_layers`` (the
    fields of search.MoESpec; Megatron-Core ``--num-experts``, ``--moe-router-topk``,
    ``--moe-ffn-hidden-size``, ``--moe-shared-expert-intermediate-size``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [{
        "experts": 256, "topk": 8, "expert_ffn": 2048, "shared_experts": 1, "shared_expert_ffn": 2048,
        "first_dense_layers": 3, "capacity_factor": None, "pad_to_capacity": False, "router_load": "learned"}]})
    experts: int = Field(ge=1, le=16_384, description="Routed experts per MoE layer.")
    topk: int = Field(ge=1, le=1024, description="Routed experts each token goes to (at most experts).")
    expert_ffn: int = Field(ge=1, le=1_048_576, description="Inner size of one expert's MLP (the model's "
                            "activation, so SwiGLU experts have three matrices).")
    shared_experts: int = Field(default=0, ge=0, le=1024, description="Experts every token goes to besides the "
                                "routed ones (DeepSeek-V3: 1); 0: none.")
    shared_expert_ffn: int = Field(default=0, ge=0, le=1_048_576, description="Inner size of all shared experts "
                                   "together; 0 exactly when shared_experts is 0.")
    first_dense_layers: int = Field(default=0, ge=0, le=2047, description="The first layers keep a dense MLP of "
                                    "the model's ffn (DeepSeek-V3: 3); fewer than layers.")
    capacity_factor: float | None = Field(default=None, ge=1, le=64, allow_inf_nan=False, description="Tokens an "
                                          "expert takes relative to an even share, the rest dropped; null: "
                                          "dropless (the busiest expert paces the layer).")
    pad_to_capacity: bool = Field(default=False, description="Pad every expert's input to its capacity (Megatron "
                                  "--moe-pad-expert-input-to-capacity): each expert computes capacity_factor times an "
                                  "even share; needs capacity_factor.")
    router_load: Literal["learned", "force-balanced"] = Field(default="learned", description="learned: a trained "
                                                              "router's load imbalance; force-balanced: the even "
                                                              "assignment benchmarks force.")


class MLAShape(_In):
    """Multi-head latent attention (the fields of search.MLASpec; DeepSeek-V2/V3, Kimi K2): queries and
    keys/values through low-rank latents, each head a no-RoPE and a RoPE part."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [{
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}]})
    q_lora_rank: int | None = Field(default=None, ge=1, le=262_144, description="Query latent width; null: "
                                    "queries projected directly from the hidden state.")
    kv_lora_rank: int = Field(ge=1, le=262_144, description="Key/value latent width.")
    qk_head_dim: int = Field(ge=1, le=65_536, description="Per-head query/key width without RoPE.")
    qk_rope_head_dim: int = Field(ge=1, le=65_536, description="Per-head RoPE width (one RoPE key for all heads).")
    v_head_dim: int = Field(ge=1, le=65_536, description="Per-head value width.")


class YarnShape(_In):
    """YaRN scaling of the RoPE frequencies (the fields of search's YarnSpec; GPT-OSS: factor 32 over 4096,
    betas 32 / 1, no rounding; Megatron-Core ``--position-embedding-type yarn``). Launch-only: no effect on the
    cost."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [{
        "factor": 32.0, "original_max_positions": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
        "correction_range_round_to_int": False}]})
    factor: float = Field(ge=1, le=1024, allow_inf_nan=False, description="Context extension factor (HF "
                          "rope_scaling.factor; Megatron --rotary-scaling-factor).")
    original_max_positions: int = Field(ge=1, le=4_194_304, description="The context the RoPE frequencies were "
                                        "made for (HF original_max_position_embeddings).")
    beta_fast: float = Field(default=32.0, gt=0, le=1e6, allow_inf_nan=False, description="Dimensions rotating "
                             "more often over that context are kept as RoPE; above beta_slow.")
    beta_slow: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False, description="Dimensions rotating "
                             "less often are interpolated by factor.")
    correction_range_round_to_int: bool = Field(default=True, description="Round the ramp's end dimensions (HF "
                                                "truncate; GPT-OSS false).")


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
    activation: Literal["gelu", "swiglu", "quick-geglu"] = Field(default="gelu", description="gelu (2 matrices), "
                                                                 "or a gated linear unit of 3: swiglu, quick-geglu "
                                                                 "(GPT-OSS; costed like swiglu).")
    tied_embeddings: bool = False
    position_embedding: Literal["learned", "rope", "alibi"] = "learned"
    bias: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    attention: Literal["flash", "standard"] = "flash"
    dropout: bool = False
    qkv_bias: bool = Field(default=False, description="Only Q/K/V carry biases (Qwen2).")
    qk_norm: bool = Field(default=False, description="RMSNorm on query and key heads (Qwen3).")
    norm_eps: float = Field(default=1e-5, gt=0, lt=1, description="Epsilon of every LayerNorm/RMSNorm.")
    rope_theta: float = Field(default=10000.0, gt=0, le=1e12, description="RoPE base (Llama 3: 500000).")
    rope_scaling_factor: float | None = Field(default=None, ge=1, le=1024,
                                              description="Llama 3.1 RoPE scaling factor (null: none).")
    rotary_percent: float = Field(default=1.0, gt=0, le=1, description="Share of each head RoPE rotates.")
    parallel_residual: bool = Field(default=False, description="GPT-NeoX parallel attention/MLP block.")
    head_dim: int | None = Field(default=None, ge=1, le=65_536, description="Per-head width of queries, keys and "
                                 "values; null: hidden / heads (Qwen3-30B-A3B: 128 on hidden 2048). With mla: "
                                 "null or qk_head_dim + qk_rope_head_dim. Served resolved.")
    moe: MoEShape | None = Field(default=None, description="Mixture of experts; null: a dense model.")
    mla: MLAShape | None = Field(default=None, description="Multi-head latent attention in place of the Q/K/V "
                                 "projections (kv_heads then null or heads); null: none.")
    mtp_layers: int = Field(default=0, ge=0, le=64, description="Multi-token-prediction modules trained with the "
                            "model (DeepSeek-V3: 1); needs moe or mla. Not counted in params.")
    attention_window: int | None = Field(default=None, ge=1, le=4_194_304, description="Sliding window in tokens, "
                                         "the query included (GPT-OSS: 128); null: full causal attention.")
    window_skip_freq: int | None = Field(default=None, ge=2, le=4096, description="With attention_window: every "
                                         "N-th layer attends to all tokens (GPT-OSS: 2); null: every layer windowed.")
    softmax_sinks: bool = Field(default=False, description="A learnable softmax offset per head (GPT-OSS).")
    glu_linear_offset: float = Field(default=0.0, ge=-1e6, le=1e6, allow_inf_nan=False, description="Added to the "
                                     "GLU's linear half (GPT-OSS 1.0); quick-geglu only.")
    glu_clamp: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False, description="Clamp of the GLU's "
                                    "inputs (GPT-OSS swiglu_limit 7.0); quick-geglu only; null: none.")
    rope_yarn: YarnShape | None = Field(default=None, description="YaRN RoPE scaling (needs position_embedding "
                                        "rope); null: plain RoPE.")


class ModelIn(_In):
    """A model preset (GET /v1/presets/models), a custom shape, or a Hugging Face ``config.json``
    (``hf_config``: its JSON object, of a llama, mistral, qwen2, qwen3, gpt2, gpt_neox or bloom model, or
    of the mixtures of experts mixtral, qwen3_moe, deepseek_v3, kimi_k2 or gpt_oss): exactly one; ``seq_len``
    replaces its sequence length (a config.json's default is its max_position_embeddings)."""

    model_config = ConfigDict(extra="forbid", frozen=True,
                              json_schema_extra={"examples": [{"preset": "llama3-70b"}]})
    preset: Name | None = None
    shape: ModelShape | None = None
    hf_config: dict[str, Any] | None = Field(default=None, description="A Hugging Face config.json object.")
    name: Name | None = Field(default=None, description="Name of an hf_config model (default: its "
                              "_name_or_path, else hf-<model_type>).")
    seq_len: int | None = Field(default=None, ge=1, le=4_194_304, description="Training sequence length.")

    @model_validator(mode="after")
    def _one(self) -> ModelIn:
        if sum(x is not None for x in (self.preset, self.shape, self.hf_config)) != 1:
            raise ValueError("give exactly one of preset, shape or hf_config")
        if self.name is not None and self.hf_config is None:
            raise ValueError("name is for hf_config models (a preset has its name, a shape its name field)")
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
    fp4_flop_per_s: float | None = _figure("fp4_flop_per_s", "dense FLOP/s (null: no fp4 tensor cores; mxfp8 and "
                                           "nvfp4 need them)", None)
    matmul_efficiency: float = _figure("matmul_efficiency", "achievable fraction of peak for large GEMMs", 0.8)
    attention_efficiency: float = _figure("attention_efficiency", "achievable fraction of peak for attention", 0.6)
    fused_attention_efficiency: float | None = _figure(
        "fused_attention_efficiency", "achievable fraction of peak of the GPU's own fused attention "
        "(FlashAttention-3/4, cuDNN), which Megatron-Core runs; null: FlashAttention-2's is used", None)


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
    nvlink_domain_gpus: int = Field(default=0, ge=0, le=65_536, description="GPUs reachable over NVLink when more "
                                    "than one node (72 for an NVL72 rack of 4-GPU trays); 0 means the node.")
    nvls: bool = Field(default=False, description="The NVLink switches reduce (NVLink SHARP: H100/H200, B200/B300, "
                       "NVL72), so intra_node_bytes_per_s is NCCL's NVLS all-reduce bus bandwidth.")


class FabricTierIn(_In):
    """One tier of the scale-out fabric (the fields of search's FabricTier)."""

    name: Literal["leaf", "spine", "core"]
    nodes: int = Field(default=0, ge=0, le=65_536, description="Nodes under one switch group of this tier, "
                       "consecutive in rank order; 0 means every node (the top tier).")
    oversubscription: float = Field(default=1.0, ge=OVERSUBSCRIPTION[0], le=OVERSUBSCRIPTION[1],
                                    description="Down:up bandwidth ratio of the uplinks into this tier (2 for 2:1; "
                                    "1 non-blocking; the leaf's is 1).")
    bus_bytes_per_s: float | None = Field(default=None, ge=RAIL_BYTES_PER_S[0], le=RAIL_BYTES_PER_S[1],
                                          description="Measured bus bandwidth per GPU rail of a group whose highest "
                                          "tier is this one, bytes/s; null: the node's NICs over the oversubscription.",
                                          json_schema_extra={"x-unit": "bytes/s"})


class FabricIn(_In):
    """The scale-out network above the nodes: tiers bottom up (leaf, spine, core) and in-network reduction."""

    tiers: list[FabricTierIn] = Field(min_length=1, max_length=3)
    sharp: bool = Field(default=False, description="In-network (SHARP) reduction of all-reduces across nodes.")


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
    fabric: FabricIn | None = Field(default=None, description="The scale-out fabric; null: the preset's (DGX "
                                    "SuperPOD, NVL72 racks, ...) or, for a custom node, one non-blocking tier.")

    @model_validator(mode="after")
    def _one(self) -> ClusterIn:
        custom = self.gpu is not None or self.node is not None
        if self.preset is not None and custom:
            raise ValueError("give either preset or gpu + node, not both")
        if self.preset is None and (self.gpu is None or self.node is None):
            raise ValueError("give a preset, or both gpu and node")
        return self


class TrainingIn(_In):
    """Sequences per optimizer step, the mixed precision and how the gradients are reduced."""

    global_batch: int = Field(ge=1, le=10_000_000)
    precision: Precision = Field(
        default="bf16", description="bf16, fp16, or low-precision GEMMs: fp8 (one scale per tensor), mxfp8 and "
        "nvfp4 (block scales; Blackwell and Megatron-Core only).")
    grad_reduce_in_bf16: bool = Field(
        default=False, description="Megatron-Core only (--grad-reduce-in-bf16; Megatron-Bridge "
        "ddp.grad_reduce_in_fp32=false, which its performance recipes set): accumulate and reduce the gradients "
        "in bf16 instead of fp32, a 2-byte gradient buffer and half the data-parallel traffic. Not with fp16 "
        "(already reduced in fp16); a search with it ranks Megatron-Core configurations only.")


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
    stage_layers: list[int] | None = Field(default=None, max_length=1024, description="Transformer layers on each "
                                           "pipeline rank, first to last (pp entries adding up to the model's "
                                           "layers); null for the even split.")
    ep: int = Field(default=1, ge=1, le=65_536, description="Expert-parallel degree (MoE models; Megatron-Core "
                    "folds it into tp x cp x dp).")
    etp: int = Field(default=1, ge=1, le=1024, description="Expert tensor-parallel degree (MoE models).")
    micro_batch: int = Field(default=1, ge=1, le=65_536)
    zero_stage: int = Field(default=0, ge=0, le=3)
    offload_optimizer: Literal["none", "cpu", "nvme"] = "none"
    offload_param: Literal["none", "cpu", "nvme"] = "none"
    recompute: Literal["none", "selective", "full"] = "none"
    placement: Placement = Field(default="tp-cp-ep-dp-pp", description="Order of the groups on consecutive ranks, "
                                 "innermost first: Megatron's default tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp "
                                 "(--use-tp-pp-dp-mapping).")
    tiles: int = Field(default=1, ge=1, le=256, description="Memory-centric tiling: each linear split into this "
                       "many tiles (DeepSpeed ZeRO-3 with deepspeed.zero.TiledLinear in the model code); 1 means off.")
    optimizer_offload_fraction: float = Field(default=1.0, gt=0.0, le=1.0, description="Share of the optimizer "
                                              "states on the host when offload_optimizer is cpu (Megatron "
                                              "--optimizer-offload-fraction; DeepSpeed ZeRO-3 ratio).")
    recompute_layers: int | None = Field(default=None, ge=1, le=100_000, description="With recompute full: layers "
                                         "recomputed per (virtual) pipeline stage (Megatron --recompute-method block); "
                                         "null for every layer.")
    activation_offload_layers: int = Field(default=0, ge=0, le=100_000, description="Layers whose activations go to "
                                           "host memory (Megatron --cpu-offloading-num-layers; pp 1, no recompute).")
    moe_dispatcher: MoEDispatcher = Field(default="alltoall", description="MoE token dispatcher with ep > 1: "
                                          "Megatron's alltoall, or the flex dispatcher with the DeepEP or HybridEP "
                                          "backend (one copy per destination GPU; the package must be installed).")
    moe_a2a_overlap: bool = Field(default=False, description="Megatron-Core --overlap-moe-expert-parallel-comm: one "
                                  "micro-batch's dispatch and combine behind another's compute (ep > 1; vp > 1 "
                                  "when pp > 1; no full recompute).")
    cuda_graphs: CudaGraphs = Field(default="none", description="Megatron-Core's full-iteration CUDA graph "
                                    "(--cuda-graph-impl full_iteration): the step's forward and backward replayed "
                                    "from one graph, no host overhead per micro-batch; an MoE model needs ep > 1 "
                                    "on flex-hybridep.")


class RecipeIn(BaseModel):
    """The training recipe of a launch (query parameters; see service.launch.TrainingRecipe): what it
    leaves out becomes a placeholder the launch stops at, naming the environment variable to set."""

    model_config = ConfigDict(frozen=True)
    data_path: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        default=None, max_length=256, description="Megatron --data-path words (repeat the parameter); torchtitan "
        "dataset_path.")
    dataset: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="torchtitan's registered dataset, e.g. c4.")
    tokenizer: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(
        default=None, description="Hugging Face tokenizer: a hub id or a directory.")
    lr: float | None = Field(default=None, gt=0, le=10, description="Peak learning rate.")
    min_lr: float | None = Field(default=None, ge=0, le=10, description="Final learning rate (default 0).")
    lr_schedule: Literal["cosine", "linear", "constant"] | None = None
    warmup_iters: int | None = Field(default=None, ge=0, le=100_000_000)
    train_iters: int | None = Field(default=None, ge=1, le=100_000_000)
    train_tokens: float | None = Field(default=None, gt=0, le=1e16)
    save: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    load: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    save_interval: int | None = Field(default=None, ge=1, le=100_000_000)
    log_interval: int | None = Field(default=None, ge=1, le=100_000_000)
    tensorboard_dir: Annotated[str, Field(min_length=1, max_length=4096)] | None = None


Runtime = Framework
"""search's runtimes (one definition: ``search._parallel_spec.Framework``)."""
FrameworkTarget = Literal[Framework, "any"]
