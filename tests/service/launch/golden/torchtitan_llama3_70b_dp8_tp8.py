"""torchtitan 0.3.0 training config written by autopar (generated: emit it again rather than edit it).

Starts from torchtitan's llama3_70b()
and sets autopar's configuration for 64 GPUs (8 nodes x 8):
dp_shard 8, tp 8, sequence parallel, pp 1, vp 1, cp 1;
ZeRO-3; micro-batch 8, global batch 64, sequence 8192; recompute full; bf16.

Run on every node, with this file's directory on PYTHONPATH:
    torchrun ... -m torchtitan.train --module autopar_torchtitan --config autopar
The model spec's RoPE and norm settings and the training recipe (tokenizer, dataset, steps,
optimizer, schedule, checkpoints, logging) are set at the end; a recipe value autopar was not
given is read from the environment. The rest is the registry function's; relative paths are
relative to the working directory.
"""

from torchtitan.components.optimizer import default_adamw
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.models.llama3.config_registry import llama3_70b
from torchtitan.trainer import Trainer

AUTOPAR_MODEL = 'llama3-70b'
AUTOPAR_WORLD_SIZE = 64


def autopar() -> Trainer.Config:
    """llama3_70b(), then autopar's layout, batch, memory policy and precision."""
    config = llama3_70b()

    parallelism = config.parallelism
    parallelism.data_parallel_replicate_degree = 1
    parallelism.data_parallel_shard_degree = 8
    parallelism.fsdp_reshard_after_forward = "always"  # ZeRO-3: parameters are resharded after each forward
    parallelism.tensor_parallel_degree = 8
    parallelism.enable_sequence_parallel = True
    parallelism.context_parallel_degree = 1
    parallelism.pipeline_parallel_degree = 1

    training = config.training
    training.seq_len = 8192
    training.local_batch_size = 8  # one micro-batch; 1 gradient-accumulation step(s)
    training.global_batch_size = 64
    training.enable_cpu_offload = False
    training.dtype = "float32"  # fp32 master weights and optimizer states
    training.mixed_precision_param = "bfloat16"
    training.mixed_precision_reduce = "float32"

    config.activation_checkpoint = FullAC.Config()

    # The model spec's RoPE and norms (torchtitan's llama3 flavors are Llama 3.1: RoPE scaling "llama" x8)
    model = config.model_spec.model
    for layer in model.layers:
        rope = layer.attention.rope
        rope.theta = 500000
        rope.scaling = "llama"
        rope.scaling_factor = 8.0
        rope.low_freq_factor = 1.0
        rope.high_freq_factor = 4.0
        rope.original_max_position_embeddings = 8192
        layer.attention_norm.eps = layer.ffn_norm.eps = 1e-05
    model.norm.eps = 1e-05

    # Training recipe (autopar search --emit flags or --recipe); what it lacks comes from the environment
    config.hf_assets_path = './assets/hf/Llama-3.1-70B'  # tokenizer directory
    config.dataloader.dataset = 'c4'
    steps = 1000
    config.training.steps = steps
    config.training.max_norm = 1.0
    lr = 0.00015
    config.optimizer = default_adamw(lr=lr, betas=(0.9, 0.95), eps=1e-08, weight_decay=0.1)
    config.lr_scheduler.warmup_steps = 200
    config.lr_scheduler.min_lr_factor = 0.0 / lr
    config.lr_scheduler.decay_type = "linear"
    config.lr_scheduler.decay_ratio = None  # decay from the end of the warmup
    config.metrics.log_freq = 10
    return config
