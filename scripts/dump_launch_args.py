"""Write the Megatron-LM and Megatron-DeepSpeed arguments autopar emits for many configurations.

The cases go to a JSON file that ``scripts/check_framework_parsers.py`` feeds to the
frameworks' own ``parse_args`` / ``validate_args`` (in an environment where they import). Each
case carries the values the framework should derive (dp, vp, ...), so the check covers
meaning as well as acceptance.

Usage: ``python scripts/dump_launch_args.py OUT.json [--per-space 40] [--seed 0]``
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import search
from service.launch import LaunchRequest, TrainingRecipe, framework_env, megatron_args, megatron_deepspeed_args

# A complete recipe: without one the arguments hold placeholders the shell fills in at launch, which
# parse_args would read literally.
RECIPE = TrainingRecipe(data_path=("/data/corpus_text_document",), tokenizer="gpt2", lr=3e-4, train_iters=1000)

# (model preset, cluster preset, nodes, global batch): shapes from GPT-3 to Llama 3 with GQA and SwiGLU
# (GPT-OSS 120B's window, sinks, GLU and YaRN: gpt_oss_cases).
CASES = [("gpt-7.5b", "dgx-a100-80gb", 8, 256, "bf16"), ("gpt3-175b", "dgx-a100-80gb", 32, 1536, "fp16"),
         ("llama3-8b", "dgx-h100", 4, 512, "fp8"), ("llama3-70b", "dgx-h100", 8, 512, "bf16"),
         ("llama2-70b", "dgx-a100-80gb", 16, 1024, "bf16")]


def _expect(c: search.ParallelConfig, model: search.ModelSpec, batch: int, framework: str) -> dict[str, object]:
    out: dict[str, object] = {
        "tensor_model_parallel_size": c.tp, "pipeline_model_parallel_size": c.pp, "data_parallel_size": c.dp,
        "micro_batch_size": c.micro_batch, "global_batch_size": batch, "sequence_parallel": c.sp,
        "num_layers": model.layers, "hidden_size": model.hidden, "num_attention_heads": model.heads,
        "ffn_hidden_size": model.ffn, "seq_length": model.seq_len,
        "recompute_granularity": None if c.recompute == "none" else c.recompute,
    }
    if framework == "megatron":
        out |= {"context_parallel_size": c.cp, "use_distributed_optimizer": c.zero_stage >= 1,
                "virtual_pipeline_model_parallel_size": c.vp if c.vp > 1 else None}
    else:
        out |= {"zero_stage": c.zero_stage, "no_pipeline_parallel": c.pp == 1, "deepspeed": True}
    return out


def policy_cases() -> list[dict[str, object]]:
    """Megatron-LM cases with the fine-grained memory policies and the second placement (issues 15
    and 18): what the searches of memory-tight questions derive, and one hand-made case each."""
    import dataclasses

    out: list[dict[str, object]] = []
    llama70 = dataclasses.replace(search.model_preset("llama3-70b"), seq_len=8192)
    llama8 = dataclasses.replace(search.model_preset("llama3-8b"), seq_len=131072)
    questions = [(llama70, search.cluster_preset("dgx-a100-40gb", 2), 512),
                 (llama70, search.cluster_preset("dgx-a100-40gb", 4), 512),
                 (llama8, search.cluster_preset("dgx-a100-80gb", 1), 8)]
    configs: list[tuple[search.ModelSpec, search.ClusterSpec, int, search.ParallelConfig]] = []
    for model, cluster, batch in questions:
        result = search.search(model, cluster, batch, framework="megatron", top_k=40)
        configs += [(model, cluster, batch, r.config) for r in result.top]
    base = search.ParallelConfig(dp=2, tp=8, sp=True, zero_stage=1)
    cluster = search.cluster_preset("dgx-a100-40gb", 2)
    configs += [(llama70, cluster, 512, dataclasses.replace(base, activation_offload_layers=40)),
                (llama70, cluster, 512, dataclasses.replace(base, offload_optimizer="cpu",
                                                            optimizer_offload_fraction=0.35, recompute="full",
                                                            recompute_layers=30)),
                (llama70, search.cluster_preset("dgx-h100", 4), 512,
                 search.ParallelConfig(dp=2, tp=8, pp=2, sp=True, zero_stage=1, placement="tp-cp-ep-pp-dp"))]
    for model, cluster, batch, c in configs:
        req = LaunchRequest(model=model, cluster=cluster, config=c, training=search.TrainingSpec(batch),
                            recipe=RECIPE)
        expect = _expect(c, model, batch, "megatron")
        if c.recompute == "full":
            expect |= {"recompute_method": "uniform" if c.recompute_layers is None else "block",
                       "recompute_num_layers": 1 if c.recompute_layers is None else c.recompute_layers}
        if c.offload_optimizer == "cpu":
            expect |= {"optimizer_cpu_offload": True, "optimizer_offload_fraction": c.optimizer_offload_fraction}
        if c.activation_offload_layers:
            expect |= {"cpu_offloading_num_layers": c.activation_offload_layers}
        if c.placement != "tp-cp-ep-dp-pp":
            expect |= {"use_tp_pp_dp_mapping": True}
        out.append({"framework": "megatron", "name": f"{model.name} {c}", "world_size": cluster.world_size,
                    "argv": megatron_args(req), "env": framework_env(req), "expect": expect})
    return out


GPT_OSS_EXPECT = {  # Megatron-Bridge gpt_oss_provider.py @ v0.3.0 (GPTOSSProvider120B), as validate_args leaves them
    "quick_geglu": True, "swiglu": False, "glu_linear_offset": 1.0, "activation_func_clamp_value": 7.0,
    "window_size": (127, 0), "window_attn_skip_freq": 2, "softmax_type": "learnable",
    "position_embedding_type": "yarn", "rotary_base": 150000, "rotary_scaling_factor": 32.0,
    "yarn_original_max_position_embeddings": 4096, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0,
    "yarn_correction_range_round_to_int": False, "add_bias_linear": True, "kv_channels": 64,
    "num_query_groups": 8, "num_experts": 128, "moe_router_topk": 4, "moe_ffn_hidden_size": 2880,
    "untie_embeddings_and_output_weights": True,
}


def gpt_oss_cases(per_space: int, rng: random.Random) -> list[dict[str, object]]:
    """GPT-OSS 120B: the layouts of its published Megatron-Bridge rows (H100 tp1 pp4 ep8, GB300 ep64) and a
    sample of what autopar's search enumerates on 64 H100s, with the provider's window, sinks, GLU and YaRN."""
    model = search.model_preset("gpt-oss-120b")
    h100 = search.cluster_preset("dgx-h100", 8)
    configs = [(h100, 512, search.ParallelConfig(dp=16, pp=4, ep=8, micro_batch=4, zero_stage=1)),
               (search.cluster_preset("gb300-nvl72", 16), 1280,
                search.ParallelConfig(dp=64, ep=64, micro_batch=4, zero_stage=1))]
    cands = [c for c in search.enumerate_space(model, h100.world_size, 512, "megatron").candidates
             if c.framework == "megatron"]
    configs += [(h100, 512, c.config) for c in rng.sample(cands, min(per_space, len(cands)))]
    out: list[dict[str, object]] = []
    for cluster, batch, c in configs:
        req = LaunchRequest(model=model, cluster=cluster, config=c, training=search.TrainingSpec(batch),
                            recipe=RECIPE)
        expect = _expect(c, model, batch, "megatron") | GPT_OSS_EXPECT | {"expert_model_parallel_size": c.ep}
        out.append({"framework": "megatron", "name": f"{model.name} {c}", "world_size": cluster.world_size,
                    "argv": megatron_args(req), "env": framework_env(req), "expect": expect})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--per-space", type=int, default=40, help="configurations sampled per (case, framework)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = random.Random(a.seed)
    cases: list[dict[str, object]] = []
    for model_name, cluster_name, nodes, batch, precision in CASES:
        model, cluster = search.model_preset(model_name), search.cluster_preset(cluster_name, nodes)
        for framework in ("megatron", "megatron-deepspeed"):
            # autopar emits fp8 for Megatron-LM only
            prec = "bf16" if framework == "megatron-deepspeed" and precision == "fp8" else precision
            space = search.enumerate_space(model, cluster.world_size, batch, framework)
            cands = [c for c in space.candidates if c.framework == framework]
            for cand in rng.sample(cands, min(a.per_space, len(cands))):
                training = search.TrainingSpec(batch, prec, framework=framework)  # type: ignore[arg-type]
                req = LaunchRequest(model=model, cluster=cluster, config=cand.config, training=training,
                                    recipe=RECIPE)
                argv = megatron_args(req) if framework == "megatron" else megatron_deepspeed_args(req)
                cases.append({"framework": framework, "name": f"{model_name} {cand.config}",
                              "world_size": cluster.world_size, "argv": argv, "env": framework_env(req),
                              "expect": _expect(cand.config, model, batch, framework)})
    cases += policy_cases()
    cases += gpt_oss_cases(a.per_space, rng)
    a.out.write_text(json.dumps(cases, indent=1))
    print(f"wrote {len(cases)} cases to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
