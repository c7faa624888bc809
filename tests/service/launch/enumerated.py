"""Configurations autopar's search enumerates, sampled (seeded) for the launch tests: each framework's own
test checks its emitter on them, and ``test_targets.py`` runs every launch target over all of them."""

from __future__ import annotations

import random
from functools import lru_cache

import search
from search import ModelSpec, ParallelConfig, TrainingSpec
from search._moe_spec import MLASpec, MoESpec
from search._space import Block, Space, Variant
from service.launch import LaunchRequest


class _Refs:
    """A space's candidates of one runtime (all runtimes: ``None``), in :attr:`search.Space.candidates`'s
    order, as references whose configuration is built only when asked for: a seeded sample of a
    million-configuration space (DeepSeek-V3 on 1,024 GPUs) then builds the configurations it picks, not all
    of them (which took most of the launch tests' collection time). ``random.Random(seed).sample`` picks by
    index, so it picks what it picked from the built list."""

    def __init__(self, space: Space, runtime: str | None = None) -> None:
        self._refs: list[tuple[Block, int, Variant]] = [
            (block, mb, variant)
            for block in space.blocks for mb, variants in block.entries
            for variant in variants if runtime is None or variant[0] == runtime]

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, i: int) -> ParallelConfig:
        block, mb, (_runtime, placement, tiles) = self._refs[i]
        return block.config(mb, placement, tiles)

    def sample(self, rng: random.Random, n: int) -> list[ParallelConfig]:
        return [self[i] for i in rng.sample(range(len(self)), min(n, len(self)))]


DEEPSPEED_MODEL = search.model_preset("gpt-1.7b")
DEEPSEEK_V3 = ModelSpec(
    "deepseek-v3-like", layers=61, hidden=7168, heads=128, ffn=18432, vocab=129280, seq_len=4096,
    activation="swiglu", position_embedding="rope", bias=False, norm="rmsnorm", norm_eps=1e-6,
    mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    moe=MoESpec(experts=256, topk=8, expert_ffn=2048, shared_experts=1, shared_expert_ffn=2048,
                first_dense_layers=3),
    mtp_layers=1)
QWEN3_30B_A3B = ModelSpec(
    "qwen3-30b-a3b-like", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=6144, vocab=151936,
    seq_len=4096, activation="swiglu", position_embedding="rope", rope_theta=1e6, bias=False, norm="rmsnorm",
    norm_eps=1e-6, qk_norm=True, moe=MoESpec(experts=128, topk=8, expert_ffn=768))
MIXTRAL = ModelSpec(
    "mixtral-8x7b-like", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, seq_len=4096,
    activation="swiglu", position_embedding="rope", rope_theta=1e6, bias=False, norm="rmsnorm",
    moe=MoESpec(experts=8, topk=2, expert_ffn=14336))


def deepspeed_grid() -> list[tuple[str, search.ParallelConfig]]:
    """(framework, config): 25 of GPT 1.7B's configurations on one DGX H100 at batch 32 for each of DeepSpeed
    and Megatron-DeepSpeed."""
    picked: list[tuple[str, search.ParallelConfig]] = []
    for framework in ("deepspeed", "megatron-deepspeed"):
        space = search.enumerate_space(DEEPSPEED_MODEL, 8, 32, framework, micro_batches=(1, 2, 4))
        picked += [(framework, c) for c in _Refs(space).sample(random.Random(5), 25)]
    return picked


def deepspeed_requests() -> list[LaunchRequest]:
    """:func:`deepspeed_grid` as requests (fp16 at micro-batch 2, else bf16)."""
    return [LaunchRequest(model=DEEPSPEED_MODEL, cluster=search.cluster_preset("dgx-h100"), config=config,
                          training=TrainingSpec(32, "fp16" if config.micro_batch == 2 else "bf16",
                                                framework=framework))  # type: ignore[arg-type]
            for framework, config in deepspeed_grid()]


def megatron_sample() -> list[LaunchRequest]:
    """20 Megatron-LM configurations each of GPT 7.5B and Llama 3 8B on 8 DGX A100 at batch 256."""
    rng = random.Random(5)
    out = []
    for name in ("gpt-7.5b", "llama3-8b"):
        model = search.model_preset(name)
        space = search.enumerate_space(model, 64, 256, "megatron")
        for config in _Refs(space, "megatron").sample(rng, 20):
            out.append(LaunchRequest(model=model, cluster=search.cluster_preset("dgx-a100-80gb", 8),
                                     config=config, training=TrainingSpec(256)))
    return out


def megatron_deepspeed_sample() -> list[LaunchRequest]:
    """20 Megatron-DeepSpeed configurations each of GPT 7.5B (8 DGX A100, batch 256) and Llama 2 70B (16, 1024)."""
    framework = "megatron-deepspeed"
    rng = random.Random(7)
    out = []
    for name, nodes, batch in (("gpt-7.5b", 8, 256), ("llama2-70b", 16, 1024)):
        model = search.model_preset(name)
        cluster = search.cluster_preset("dgx-a100-80gb", nodes)
        refs = _Refs(search.enumerate_space(model, cluster.world_size, batch, framework))
        for config in refs.sample(rng, 20):
            out.append(LaunchRequest(model=model, cluster=cluster, config=config,
                                     training=TrainingSpec(batch, framework=framework)))
    return out


def expert_sample(model: ModelSpec, gpus: int, batch: int, n: int) -> list[LaunchRequest]:
    """``n`` Megatron-LM configurations of a mixture-of-experts ``model`` on ``gpus`` H100s."""
    cluster = search.cluster_preset("dgx-h100", gpus // 8)
    space = search.enumerate_space(model, gpus, batch, "megatron")
    picked = _Refs(space, "megatron").sample(random.Random(7), n)
    return [LaunchRequest(model=model, cluster=cluster, config=c, training=TrainingSpec(batch)) for c in picked]


@lru_cache(maxsize=1)
def _expert_samples() -> tuple[LaunchRequest, ...]:
    return (*expert_sample(MIXTRAL, 64, 256, 15), *expert_sample(QWEN3_30B_A3B, 64, 256, 15),
            *expert_sample(search.model_preset("deepseek-v3"), 1024, 2048, 10),
            *expert_sample(search.model_preset("gpt-oss-120b"), 64, 512, 10))


def expert_samples() -> list[LaunchRequest]:
    """Mixtral- and Qwen3-30B-A3B-like models on 64 GPUs, DeepSeek-V3-like on 1024, GPT-OSS 120B on 64
    (built once per process: two test modules use them)."""
    return list(_expert_samples())


def torchtitan_sample() -> list[LaunchRequest]:
    """Every 151st configuration autopar's search enumerates for Llama 3 8B on 8 DGX H100 with FSDP."""
    model, cluster = search.model_preset("llama3-8b"), search.cluster_preset("dgx-h100", 8)
    refs = _Refs(search.enumerate_space(model, cluster.world_size, 256, "fsdp"))
    return [LaunchRequest(model=model, cluster=cluster, config=refs[i], training=TrainingSpec(256, framework="fsdp"))
            for i in range(0, len(refs), 151)]


def request_id(request: LaunchRequest) -> str:
    """A test id: framework, model and configuration."""
    return f"{request.training.framework}-{request.model.name}-{request.config}"


def every_framework() -> list[LaunchRequest]:
    """All the samples above: every framework's enumerated configurations."""
    return [*deepspeed_requests(), *megatron_sample(), *megatron_deepspeed_sample(), *expert_samples(),
            *torchtitan_sample()]
