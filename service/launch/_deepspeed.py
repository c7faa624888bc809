"""DeepSpeed's ds_config.json for one ranked configuration.

Facts (key names, defaults, what DeepSpeed refuses and what it silently accepts) are in
``shared/reference/frameworks.md`` sections 1 and 10. Emission needs nothing but this module:
:func:`refuse_ds_config` applies the rules of DeepSpeed's config classes that a configuration can
break (the batch triple at the real data-parallel size, stages, offload devices, precision) and
those DeepSpeed accepts but cannot run. :func:`check_ds_config` adds DeepSpeed's own
``DeepSpeedZeroConfig`` and ``DeepSpeedConfig``; it imports deepspeed (and torch), so it runs
where DeepSpeed is installed: in the tests and under ``autopar search --emit ... --check``.

The optimizer is defined once, where the framework expects it: for plain DeepSpeed (the user's
own training script) in the ds_config (AdamW with the recipe's learning rate, and the schedule
as a DeepSpeed scheduler); for Megatron-DeepSpeed in Megatron's arguments (``--lr`` ...), which
build the optimizer it hands to ``deepspeed.initialize``, so the ds_config has none.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from search import SpecError
from service.launch._base import EntryPoint, LaunchFiles, LaunchRequest
from service.launch._recipe import REQUIRED
from service.launch._shell import in_launch_dir

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
_SCHEDULERS = {"cosine": "WarmupCosineLR", "linear": "WarmupDecayLR", "constant": "WarmupLR"}


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
        if c.optimizer_offload_fraction < 1.0:  # ZeRO-Offload++: the rest updates on the GPU (ZeRO-3 only)
            opt["ratio"] = c.optimizer_offload_fraction
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
    r = request.recipe
    cfg: dict[str, Any] = {
        "train_batch_size": t.global_batch, "train_micro_batch_size_per_gpu": c.micro_batch,
        "gradient_accumulation_steps": gas, "gradient_clipping": r.clip_grad, "steps_per_print": r.log_interval,
        "zero_optimization": zero,
    }
    if t.framework == "deepspeed":
        cfg.update(_optimizer(request))
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


def _optimizer(request: LaunchRequest) -> dict[str, Any]:
    """Plain DeepSpeed: AdamW and its schedule from the recipe (none without a learning rate: the
    user's script then passes its own optimizer to ``deepspeed.initialize``), and TensorBoard."""
    r, out = request.recipe, {}
    if r.tensorboard_dir is not None:
        out["tensorboard"] = {"enabled": True, "output_path": r.tensorboard_dir, "job_name": request.job_name}
    if r.lr is None:
        return out
    out["optimizer"] = {"type": "AdamW", "params": {"lr": r.lr, "betas": [r.adam_beta1, r.adam_beta2],
                                                    "eps": r.adam_eps, "weight_decay": r.weight_decay}}
    steps = r.iterations(request.training.global_batch, request.model.seq_len)
    if steps is None:
        return out
    warmup = max(1, r.warmup(steps))  # DeepSpeed's schedulers refuse 0 warmup steps
    params: dict[str, Any] = {"warmup_num_steps": warmup, "warmup_type": "linear"}
    if r.lr_schedule == "cosine":
        params.update(total_num_steps=steps, warmup_min_ratio=0.0, cos_min_ratio=r.min_lr / r.lr)
    else:
        params.update(warmup_min_lr=0.0, warmup_max_lr=r.lr)
        if r.lr_schedule == "linear":
            params["total_num_steps"] = steps
    out["scheduler"] = {"type": _SCHEDULERS[r.lr_schedule], "params": params}
    return out


def deepspeed_notes(request: LaunchRequest) -> tuple[str, ...]:
    """What plain DeepSpeed's ds_config cannot carry: the user's own script takes it."""
    r, notes = request.recipe, []
    if r.lr is None:
        notes.append(f"ds_config.json has no optimizer: give --lr ({REQUIRED['lr'][1]}), or have your training "
                     "script pass its optimizer to deepspeed.initialize")
    elif r.iterations(request.training.global_batch, request.model.seq_len) is None:
        notes.append("ds_config.json has no learning-rate schedule: give --train-iters or --tokens")
    own = [name for name, given in (("data", r.data_path), ("tokenizer", r.tokenizer), ("checkpoints", r.save))
           if given]
    if own:
        notes.append(f"plain DeepSpeed has no {', '.join(own)} options: pass your script's own arguments after "
                     "the launch script (they are forwarded)")
    if request.config.tiles > 1:
        notes.append(tiling_note(request.config.tiles))
    return tuple(notes)


def deepspeed_entry(request: LaunchRequest) -> EntryPoint:
    """What the launchers run for plain DeepSpeed: the user's script, given the emitted ``ds_config.json``."""
    return EntryPoint(args=("--deepspeed", "--deepspeed_config", in_launch_dir("ds_config.json")),
                      notes=deepspeed_notes(request))


def tiling_note(tiles: int) -> str:
    """What memory-centric tiling asks of the model code: ds_config has no key for it
    (``deepspeed.zero.TiledLinear``, deepspeed/runtime/zero/tiling.py; frameworks_2.md sec. 4.1)."""
    return (f"memory-centric tiling (tiles={tiles}) is in the model code, not in ds_config.json: build each linear "
            "layer as deepspeed.zero.TiledLinear(in_features, out_features, in_splits=a, out_splits=b) with "
            f"a*b = {tiles}; without it the gathered layers do not fit the GPU")


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


def refuse_ds_config(cfg: dict[str, Any], dp: int) -> None:
    """The rules of DeepSpeed's config classes that a configuration can break, and what DeepSpeed
    accepts but cannot run; SpecError naming the key. Needs no DeepSpeed."""
    _refuse_silent(cfg)
    zero = cfg.get("zero_optimization", {})
    if zero.get("stage", 0) not in (0, 1, 2, 3):
        raise SpecError("ds_config.zero_optimization.stage", f"{zero.get('stage')!r} is not 0-3", _FIX)
    for name in ("offload_param", "offload_optimizer"):
        body = zero.get(name)
        if isinstance(body, dict) and body.get("device", "none") not in ("none", "cpu", "nvme"):
            raise SpecError(f"ds_config.zero_optimization.{name}.device", f"{body.get('device')!r} is not "
                            "none, cpu or nvme", _FIX)
    triple = [cfg.get(k) for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                   "train_batch_size")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in triple):
        raise SpecError("ds_config.train_batch_size", "the batch triple needs three positive integers", _FIX)
    micro, gas, total = (v if isinstance(v, int) else 0 for v in triple)
    if total != micro * gas * dp:  # DeepSpeedConfig._batch_assertion, at the real data-parallel size
        raise SpecError("ds_config.train_batch_size", f"{total} != micro-batch {micro} x gradient accumulation "
                        f"{gas} x data-parallel size {dp}", "make the global batch micro * gas * dp")
    enabled = [k for k in ("fp16", "bf16", "bfloat16") if isinstance(cfg.get(k), dict) and cfg[k].get("enabled")]
    if len(enabled) > 1:
        raise SpecError("ds_config.bf16", "bfloat16 and fp16 modes cannot be simultaneously enabled", "enable one")


def check_ds_config(cfg: dict[str, Any], dp: int) -> None:
    """:func:`refuse_ds_config`, then DeepSpeed's own classes at data-parallel size ``dp``; raise SpecError.

    Imports deepspeed: ModuleNotFoundError where it is not installed (callers that can do without
    say so in a note, see :func:`service.launch.verify`)."""
    refuse_ds_config(cfg, dp)
    deepspeed_classes_check(cfg, dp)


def deepspeed_classes_check(cfg: dict[str, Any], dp: int) -> None:
    """DeepSpeed's ``DeepSpeedZeroConfig`` and ``DeepSpeedConfig`` alone (no autopar rule first); SpecError."""
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
    """ds_config.json for ``request``, checked by :func:`refuse_ds_config`; launchers build the command."""
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
    refuse_ds_config(cfg, c.dp)
    notes = deepspeed_notes(request) if framework == "deepspeed" else ()
    return LaunchFiles(files={"ds_config.json": json.dumps(cfg, indent=2, sort_keys=True) + "\n"}, notes=notes)
