"""torchtitan 0.3.0 training config written by autopar (generated: emit it again rather than edit it).

Starts from torchtitan's llama3_70b()
and sets autopar's configuration for 64 GPUs (8 nodes x 8):
dp_shard 8, tp 8, sequence parallel, pp 1, vp 1, cp 1;
ZeRO-3; micro-batch 8, global batch 64, sequence 8192; recompute full; bf16.

Run on every node, with this file's directory on PYTHONPATH:
    torchrun ... -m torchtitan.train --module autopar_torchtitan --config autopar
What is not set here (dataset, hf_assets_path, optimizer, learning-rate schedule, steps,
checkpointing) is the registry function's; its paths are relative to the working directory.
"""

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
    return config
