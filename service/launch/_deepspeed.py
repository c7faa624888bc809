"""DeepSpeed's ds_config.json for one ranked configuration, checked by DeepSpeed's own classes.

Facts (key names, defaults, what DeepSpeed refuses and what it silently accepts) are in
``shared/reference/frameworks.md`` sections 1 and 10. deepspeed and torch are imported only by
:func:`check_ds_config`, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from search import SpecError
from service.launch._base import LaunchFiles, LaunchRequest

# DeepSpeed's aio defaults (deepspeed/runtime/swap_tensor/constants.py), the keys the runtime reads.
AIO_DEFAULTS: dict[str, Any] = {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1,
                                "single_submit": False, "overlap_events": True}
_AIO_KEYS = (*AIO_DEFAULTS, "use_gds")

# Top-level keys this emitter writes or that DeepSpeed documents; anything else is a typo DeepSpeed ignores.
_TOP_LEVEL_KEYS = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "steps_per_print",
    "gradient_clipping", "optimizer", "scheduler", "fp16", "bf16", "bfloat16", "amp", "zero_optimization", "aio",
    "activation_checkpointing", "wall_clock_breakdown", "prescale_gradients", "gradient_predivide_factor",
    "sparse_gradients", "communication_data_type", "seq_parallel_communication_data_type",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comms_logger",
    "checkpoint", "data_types", "memory_breakdown", "dump_state", "elasticity", "pipeline", "autotuning",
    "compression_training", "data_efficiency", "curriculum_learning", "disable_allgather", "compile", "timers",
})
_STEPS_PER_PRINT = 10


def _largest_param(request: LaunchRequest) -> int:
    """Elements of the largest single weight on one model-parallel rank (embedding or FFN matrix)."""
    m = request.model
    return max(m.vocab * m.hidden, m.hidden * m.ffn) // request.config.tp


def ds_config(request: LaunchRequest) -> dict[str, Any]:
    """The complete DeepSpeed config for ``request.config`` / ``request.training``."""
    c, t, h = request.config, request.training, request.model.hidden
    if t.precision == "fp8":
        raise SpecError("TrainingSpec.precision", "DeepSpeed's config has no fp8 mode",
                        "use precision 'bf16' or 'fp16' for DeepSpeed (fp8 needs Transformer Engine via Megatron)")
    if t.global_batch % (c.dp * c.micro_batch):
        raise SpecError("TrainingSpec.global_batch",
                        f"{t.global_batch} is not a multiple of dp * micro_batch = {c.dp * c.micro_batch}",
                        "choose a global batch divisible by dp * micro_batch")
    gas = t.global_batch // (c.dp * c.micro_batch)
    zero: dict[str, Any] = {
        "stage": c.zero_stage, "overlap_comm": True, "contiguous_gradients": True,
        "reduce_bucket_size": h * h, "allgather_bucket_size": h * h,
    }
    if c.zero_stage == 3:
        zero.update({
            "stage3_prefetch_bucket_size": int(0.9 * h * h), "stage3_param_persistence_threshold": 10 * h,
            "stage3_max_live_parameters": 10**9, "stage3_max_reuse_distance": 10**9, "sub_group_size": 10**9,
        })
    nvme = "nvme" in (c.offload_optimizer, c.offload_param)
    if c.offload_optimizer != "none":
        opt: dict[str, Any] = {"device": c.offload_optimizer, "pin_memory": True, "buffer_count": 4}
        if c.offload_optimizer == "nvme":
            opt["nvme_path"] = request.nvme_path
        zero["offload_optimizer"] = opt
    if c.offload_param != "none":
        param: dict[str, Any] = {"device": c.offload_param, "pin_memory": True}
        if c.offload_param == "nvme":
            # Swapped tensors are dp-partitioned; one buffer must hold the largest partition.
            part = -(-_largest_param(request) // c.dp)
            param.update({"nvme_path": request.nvme_path, "buffer_count": 5,
                          "buffer_size": max(10**8, -(-part // 10**8) * 10**8)})
        zero["offload_param"] = param
    cfg: dict[str, Any] = {
        "train_batch_size": t.global_batch, "train_micro_batch_size_per_gpu": c.micro_batch,
        "gradient_accumulation_steps": gas, "gradient_clipping": 1.0, "steps_per_print": _STEPS_PER_PRINT,
        "zero_optimization": zero,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    }
    if t.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    else:
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                       "hysteresis": 2, "min_loss_scale": 1}
    if nvme:
        measured = request.profile.aio if request.profile is not None else {}
        cfg["aio"] = {**AIO_DEFAULTS, **{k: v for k, v in measured.items() if k in _AIO_KEYS}}
    if c.recompute != "none":
        cfg["activation_checkpointing"] = {
            "partition_activations": c.tp > 1, "contiguous_memory_optimization": True,
            "cpu_checkpointing": c.offload_param != "none",
        }
    return cfg


class _DataParallelMpu:
    """The slice of Megatron's mpu interface DeepSpeedConfig reads."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_model_parallel_world_size(self) -> int:
        return 1

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_model_parallel_rank(self) -> int:
        return 0


_FIX = "see https://www.deepspeed.ai/docs/config-json/ for the key's allowed values"


def _refuse_silent(cfg: dict[str, Any]) -> None:
    """What DeepSpeed accepts but cannot run (frameworks.md section 10)."""
    unknown = sorted(set(cfg) - _TOP_LEVEL_KEYS)
    if unknown:
        raise SpecError(f"ds_config.{unknown[0]}", "unknown top-level key (DeepSpeed would ignore it)",
                        "remove it or fix its spelling")
    for section in ("fp16", "bf16", "bfloat16", "activation_checkpointing"):
        body = cfg.get(section)
        if isinstance(body, dict) and "enabled" in body and not isinstance(body["enabled"], bool):
            raise SpecError(f"ds_config.{section}.enabled", f"{body['enabled']!r} is not a boolean",
                            "use true or false")
    zero = cfg.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise SpecError("ds_config.zero_optimization", "is not an object", "give a JSON object")
    stage = zero.get("stage", 0)
    param, opt = zero.get("offload_param"), zero.get("offload_optimizer")
    if isinstance(param, dict) and param.get("device", "none") != "none" and stage != 3:
        raise SpecError("ds_config.zero_optimization.offload_param", f"needs ZeRO stage 3, got stage {stage}",
                        "set stage 3 or remove offload_param")
    if isinstance(opt, dict) and opt.get("device", "none") != "none" and stage == 0:
        raise SpecError("ds_config.zero_optimization.offload_optimizer", "needs ZeRO stage 1-3, got stage 0",
                        "set stage 1, 2 or 3, or remove offload_optimizer")
    for name, body in (("offload_param", param), ("offload_optimizer", opt)):
        if isinstance(body, dict) and body.get("device") == "nvme" and not body.get("nvme_path"):
            raise SpecError(f"ds_config.zero_optimization.{name}.nvme_path", "NVMe offload without a swap path",
                            "set nvme_path to a directory on a local NVMe drive")


def check_ds_config(cfg: dict[str, Any], dp: int) -> None:
    """Validate ``cfg`` with DeepSpeed's own classes at data-parallel size ``dp``; raise SpecError."""
    _refuse_silent(cfg)
    import deepspeed.runtime.config as ds_runtime_config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    dist = ds_runtime_config.dist
    saved = dist.get_rank
    dist.get_rank = lambda group=None: 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DeepSpeed's deprecation notices, local to this check
            DeepSpeedZeroConfig(**cfg.get("zero_optimization", {}))
            ds_runtime_config.DeepSpeedConfig(json.loads(json.dumps(cfg)), mpu=_DataParallelMpu(dp))
    except SpecError:
        raise
    except Exception as exc:  # DeepSpeed raises ValidationError, AssertionError, ValueError, ...
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise SpecError("ds_config", f"DeepSpeed refuses it: {message}", _FIX) from None
    finally:
        dist.get_rank = saved


def emit_deepspeed(request: LaunchRequest) -> LaunchFiles:
    """ds_config.json for ``request``, accepted by DeepSpeed; launchers build the command."""
    c, framework = request.config, request.training.framework
    if framework == "deepspeed" and (c.tp > 1 or c.pp > 1 or c.cp > 1):
        raise SpecError("TrainingSpec.framework", "DeepSpeed alone has no tensor, pipeline or context parallelism",
                        "use framework 'megatron-deepspeed' for tp/pp with DeepSpeed, or tp=pp=cp=1")
    if framework not in ("deepspeed", "megatron-deepspeed"):
        raise SpecError("TrainingSpec.framework", f"{framework!r} does not run a ds_config",
                        "use framework 'deepspeed' or 'megatron-deepspeed'")
    if c.cp > 1:
        raise SpecError("ParallelConfig.cp", "Megatron-DeepSpeed has no context parallelism", "set cp=1")
    cfg = ds_config(request)
    check_ds_config(cfg, c.dp)
    return LaunchFiles(files={"ds_config.json": json.dumps(cfg, indent=2, sort_keys=True) + "\n"})
