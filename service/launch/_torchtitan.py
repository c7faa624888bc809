"""torchtitan 0.3.0: a Python config module (``Trainer.Config``) and the torchrun line that runs it.

torchtitan 0.3.0 (PyPI) takes its configuration from a Python function, not from TOML:
``torchrun ... -m torchtitan.train --module M --config F`` imports ``M`` (a short model name,
or any importable module; ``config/manager.py:125-141``) and calls ``F()`` for a
``Trainer.Config``. The emitted module ``autopar_torchtitan.py`` starts from torchtitan's own
registry function for the matching llama3 flavor (``models/llama3/config_registry.py``:
``llama3_8b``, ``llama3_70b``, ``llama3_405b``) and sets what autopar decided. Facts, with
lines of the 0.3.0 wheel:

* degrees: ``dp*tp*pp*cp == world size`` with ``dp = data_parallel_shard_degree`` and
  replicate 1 (``distributed/parallel_dims.py:170-189``); tp divides heads and kv heads
  (``models/common/decoder.py:144-158``); ZeRO-3 = ``fsdp_reshard_after_forward
  "always"``, ZeRO-2 = ``"never"`` (``distributed/fsdp.py:54-78``);
* pipeline: ``1F1B`` (one stage per rank) or ``Interleaved1F1B`` (vp stages per rank);
  ``pipeline_parallel_layers_per_stage`` counts the embedding and the output head as
  ``pipeline_parallel_{first,last}_stage_less_layers`` layers (default 1 each), so both are
  set to 0 to get ``layers / (pp*vp)`` blocks on every stage like autopar's cost model
  (``distributed/pipeline_parallel.py:194-262, 366-476``); torch's ``Schedule1F1B`` refuses
  fewer micro-batches than stages and ``ScheduleInterleaved1F1B`` a count that is not a
  multiple of ``max(1, n // pp)`` (torch 2.13 ``distributed/pipelining/schedules.py:1020,
  2936-2941``); CUDA graphs (on by default) refuse pp > 1 (``trainer.py:179-190``);
* batch: ``local_batch_size`` per data-parallel rank and forward-backward step, split into
  ``local_batch_size / pipeline_parallel_microbatch_size`` micro-batches under pp;
  ``global_batch_size / (local_batch_size * dp)`` gradient-accumulation steps
  (``trainer.py:413-439``); ``seq_len`` divisible by tp (with SP) times 2*cp (``trainer.py:306-315``);
* activation checkpointing: ``None``, ``SelectiveAC.Config()``, ``FullAC.Config()``
  (``distributed/activation_checkpoint.py:166-185, 332-337``); torchtitan's selective AC is
  per-op (it keeps every second matmul output and recomputes the rest), more recomputation than
  the attention-core recomputation autopar's cost model calls selective;
* precision: FSDP2 mixed precision, bf16 parameters with fp32 master weights and fp32
  reductions (``config/configs.py:78-97``); fp8 = torchao Float8 linears via
  ``Float8LinearConverter`` as ``llama3_405b()`` does (lm_head kept in bf16, compiled), which
  needs torchao and an SM89+ GPU when the config is built
  (``components/quantization/float8.py:75-97``); no fp16 mode exists;
* CPU offload: ``enable_cpu_offload`` moves parameters, gradients and optimizer states together
  (FSDP2 ``CPUOffloadPolicy``), nothing goes to NVMe.

The module then sets the model spec's RoPE and norm settings and the training recipe
(:mod:`service.launch._torchtitan_recipe`). The command is torchrun with a c10d rendezvous running
``-m torchtitan.train --module autopar_torchtitan --config autopar``; the launch directory (the
scripts' ``LAUNCH_DIR``) goes first on ``PYTHONPATH`` (``env``). Values from the request reach the
module only as ``repr`` literals or integers, and the shell only through :func:`service.launch.quote`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import search
from search import SpecError

from ._base import EntryPoint, LaunchFiles, LaunchRequest
from ._launchers import with_torchrun
from ._pipeline_split import torchtitan_less_layers
from ._shell import python_path
from ._torchtitan_recipe import ENV_HELPER, model_lines, recipe_lines

TORCHTITAN_RELEASE = "0.3.0"
CONFIG_MODULE = "autopar_torchtitan"
"""Name of the emitted module (``--module``): the file is ``autopar_torchtitan.py``."""
CONFIG_FUNCTION = "autopar"
"""The function in it that returns ``Trainer.Config`` (``--config``)."""
TRAIN_MODULE = "torchtitan.train"
MAX_SEQ_LEN = 131072
"""RoPE ``max_seq_len`` of every llama3 flavor (``models/llama3/__init__.py:138``); longer is refused
(``models/common/decoder.py:166-173``)."""


@dataclass(frozen=True, slots=True)
class Flavor:
    """A torchtitan llama3 flavor that has a registry function."""

    flavor: str
    """``model_registry`` key, e.g. ``"70B"``."""
    registry: str
    """Registry function in ``torchtitan.models.llama3.config_registry``, e.g. ``"llama3_70b"``."""
    preset: str
    """autopar's model preset with the same shape, e.g. ``"llama3-70b"``."""


FLAVORS = (Flavor("8B", "llama3_8b", "llama3-8b"), Flavor("70B", "llama3_70b", "llama3-70b"),
           Flavor("405B", "llama3_405b", "llama3-405b"))
_SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "activation", "norm", "position_embedding",
          "bias", "tied_embeddings", "attention", "dropout", "qkv_bias", "qk_norm", "rotary_percent",
          "parallel_residual")
_SET_HERE = ("name", "seq_len", "norm_eps", "rope_theta", "rope_scaling_factor")
"""ModelSpec fields the module sets itself (or that are not part of the flavor)."""
_AC = {"none": ("None", None), "selective": ("SelectiveAC.Config()", "SelectiveAC"),
       "full": ("FullAC.Config()", "FullAC")}
_RESHARD = {2: ("never", "ZeRO-2: parameters stay gathered from forward to backward"),
            3: ("always", "ZeRO-3: parameters are resharded after each forward")}


def match_flavor(model: search.ModelSpec) -> Flavor:
    """The torchtitan llama3 flavor with ``model``'s shape (every field but name, seq_len and the RoPE and
    norm settings the module sets), or SpecError."""
    for flavor in FLAVORS:
        preset = search.model_preset(flavor.preset)
        if dataclasses.replace(preset, **{f: getattr(model, f) for f in _SET_HERE}) == model:
            return flavor
    known = ", ".join(f"{f.registry} ({f.preset})" for f in FLAVORS)
    fix = (f"use the shape of one of torchtitan {TORCHTITAN_RELEASE}'s llama3 registry functions: {known}; "
           "or another launch target")
    for flavor in FLAVORS:
        preset = search.model_preset(flavor.preset)
        if (preset.layers, preset.hidden) == (model.layers, model.hidden):
            name = next(f for f in _SHAPE if getattr(model, f) != getattr(preset, f))
            raise SpecError(f"ModelSpec.{name}", f"{getattr(model, name)!r} differs from torchtitan's llama3 "
                            f"{flavor.flavor} ({flavor.preset}: {getattr(preset, name)!r})", fix)
    raise SpecError("ModelSpec", f"{model.name!r} ({model.layers} layers, hidden {model.hidden}) matches no "
                    "torchtitan llama3 flavor", fix)


def _check(request: LaunchRequest) -> Flavor:
    """Refuse what torchtitan 0.3.0 cannot run or what its config cannot express."""
    c, m, t, gpu = request.config, request.model, request.training, request.cluster.gpu
    if t.framework != "fsdp":
        raise SpecError("TrainingSpec.framework", f"{t.framework!r} is not run by torchtitan",
                        "use framework='fsdp' (torchtitan's FSDP2), or the emitter of that framework")
    if t.precision == "fp16":
        raise SpecError("TrainingSpec.precision", "torchtitan has no fp16 mode (mixed precision is bf16 or fp32)",
                        "use precision 'bf16' or 'fp8'")
    if t.precision == "fp8" and gpu.fp8_flop_per_s is None:
        raise SpecError("TrainingSpec.precision", f"{gpu.name} has no fp8 tensor cores; torchtitan's "
                        "Float8LinearConverter refuses GPUs before SM89", "use precision 'bf16'")
    if t.precision in ("bf16", "fp8") and gpu.bf16_flop_per_s is None:
        raise SpecError("TrainingSpec.precision", f"{gpu.name} has no bf16 tensor cores, and torchtitan "
                        "trains in bf16 mixed precision", "use a GPU with bf16 (A100, H100, ...)")
    if "nvme" in (c.offload_optimizer, c.offload_param):
        raise SpecError("ParallelConfig.offload_optimizer", "torchtitan offloads only to CPU memory (FSDP2 "
                        "CPUOffloadPolicy), not to NVMe",
                        "use offload_optimizer='cpu' and offload_param='cpu' with zero_stage=3, or no offload")
    flavor = match_flavor(m)
    if m.seq_len > MAX_SEQ_LEN:
        raise SpecError("ModelSpec.seq_len", f"{m.seq_len} exceeds the llama3 RoPE maximum of {MAX_SEQ_LEN}",
                        f"use seq_len <= {MAX_SEQ_LEN}")
    search.check_compatible(m, request.cluster.world_size, c, t)  # degrees = GPUs, divisibility, FSDP rules
    divisor = (c.tp if c.sp else 1) * (2 * c.cp if c.cp > 1 else 1)
    if m.seq_len % divisor:
        raise SpecError("ModelSpec.seq_len", f"{m.seq_len} is not divisible by {divisor} "
                        "(tp with sequence parallelism times 2*cp), which torchtitan requires",
                        "choose tp, cp (or sp=false) that divide the sequence length")
    if c.pp > 1:
        n = t.global_batch // (c.dp * c.micro_batch)
        if c.vp == 1 and n < c.pp:
            raise SpecError("TrainingSpec.global_batch", f"{n} micro-batches per step for pp={c.pp}: torch's "
                            "1F1B schedule needs at least as many micro-batches as stages",
                            f"use a global batch >= {c.pp * c.dp * c.micro_batch} (pp*dp*micro_batch)")
        rounds = max(1, n // c.pp)
        if c.vp > 1 and n % rounds:
            raise SpecError("TrainingSpec.global_batch", f"{n} micro-batches per step is not a multiple of "
                            f"{rounds} rounds (n // pp), which torch's Interleaved1F1B schedule requires",
                            f"use a global batch giving a multiple of pp={c.pp} micro-batches per dp rank")
    return flavor


# torchtitan 0.3.0 llama3_405b() (models/llama3/config_registry.py:295-346) minus its Float8 converter.
_LLAMA3_405B_BF16 = '''

def _llama3_405b_bf16() -> Trainer.Config:
    """torchtitan 0.3.0's llama3_405b() without its Float8LinearConverter.

    llama3_405b() builds that converter even for a bf16 run, and building it needs torchao and
    an SM89+ GPU; every other field is copied from it (models/llama3/config_registry.py:295-346).
    """
    compile_config = CompileConfig(enable=True, enable_async_tensor_parallel=True)
    model_spec = model_registry("405B")
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec)),
        ),
        hf_assets_path="./assets/hf/Llama-3.1-405B",
        profiler=Profiler.Config(enable_profiling=True, profile_freq=100),
        metrics=MetricsProcessor.Config(enable_tensorboard=True),
        model_spec=model_spec,
        optimizer=default_adamw(lr=8e-5),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=600),
        training=TrainingConfig(local_batch_size=2, seq_len=8192, steps=3000),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        parallelism=ParallelismConfig(tensor_parallel_degree=8),
        checkpoint=CheckpointManager.Config(interval=500),
        activation_checkpoint=FullAC.Config(),
        compile=compile_config,
        validator=Validator.Config(freq=500, steps=1200),
    )
'''
_LLAMA3_405B_BF16_IMPORTS: dict[str, tuple[str, ...]] = {
    "torchtitan.components.checkpoint": ("CheckpointManager",),
    "torchtitan.components.loss": ("ChunkedLossWrapper", "CrossEntropyLoss"),
    "torchtitan.components.metrics": ("MetricsProcessor",),
    "torchtitan.components.optimizer": ("LRSchedulersContainer", "default_adamw"),
    "torchtitan.components.validate": ("Validator",),
    "torchtitan.config": ("CompileConfig", "ParallelismConfig", "TrainingConfig"),
    "torchtitan.distributed.activation_checkpoint": ("FullAC",),
    "torchtitan.hf_datasets.text_datasets": ("HuggingFaceTextDataLoader",),
    "torchtitan.models.common.config_utils": ("decoder_vocab_size",),
    "torchtitan.models.llama3": ("model_registry",),
    "torchtitan.tools.profiler": ("Profiler",),
}


class _Imports:
    """``from module import names`` lines, sorted like isort (modules, then classes before functions)."""

    def __init__(self) -> None:
        self._names: dict[str, set[str]] = {}

    def add(self, module: str, *names: str) -> None:
        self._names.setdefault(module, set()).update(names)

    def lines(self) -> list[str]:
        def order(name: str) -> tuple[bool, str]:
            return (name[:1].islower(), name)
        return [f"from {module} import {', '.join(sorted(names, key=order))}"
                for module, names in sorted(self._names.items())]


def _base(flavor: Flavor, fp8: bool, imports: _Imports) -> tuple[str, str, str]:
    """(helper text, the function that builds the starting config, how to name it); adds their imports."""
    if flavor.flavor == "405B" and not fp8:
        for module, names in _LLAMA3_405B_BF16_IMPORTS.items():
            imports.add(module, *names)
        return _LLAMA3_405B_BF16, "_llama3_405b_bf16", "llama3_405b() without its Float8 converter"
    imports.add("torchtitan.models.llama3.config_registry", flavor.registry)
    return "", flavor.registry, f"{flavor.registry}()"


def torchtitan_config(request: LaunchRequest) -> str:
    """The text of ``autopar_torchtitan.py``: ``autopar()`` returns the run's ``Trainer.Config``."""
    flavor = _check(request)
    c, m, t = request.config, request.model, request.training
    fp8 = t.precision == "fp8"
    try:
        ac_expr, ac_class = _AC[c.recompute]
        reshard, reshard_why = _RESHARD[c.zero_stage]
    except KeyError:
        raise SpecError("ParallelConfig", f"recompute {c.recompute!r} / zero_stage {c.zero_stage!r} has no torchtitan "
                        "setting", "use recompute none|selective|full and zero_stage 2 or 3") from None
    imports = _Imports()
    helper, start, base = _base(flavor, fp8, imports)
    imports.add("torchtitan.trainer", "Trainer")
    imports.add("torchtitan.components.optimizer", "default_adamw")
    recipe, reads_env, _ = recipe_lines(request)
    if ac_class:
        imports.add("torchtitan.distributed.activation_checkpoint", ac_class)
    offload = c.offload_optimizer == "cpu" and c.offload_param == "cpu"
    world, nodes, gpn = request.cluster.world_size, request.cluster.num_nodes, request.cluster.node.gpus_per_node
    steps = t.global_batch // (c.dp * c.micro_batch)
    local = t.global_batch // c.dp if c.pp > 1 else c.micro_batch
    p = [
        "    parallelism = config.parallelism",
        "    parallelism.data_parallel_replicate_degree = 1",
        f"    parallelism.data_parallel_shard_degree = {c.dp:d}",
        f'    parallelism.fsdp_reshard_after_forward = "{reshard}"  # {reshard_why}',
        f"    parallelism.tensor_parallel_degree = {c.tp:d}",
        f"    parallelism.enable_sequence_parallel = {bool(c.sp and c.tp > 1)}",
        f"    parallelism.context_parallel_degree = {c.cp:d}",
        f"    parallelism.pipeline_parallel_degree = {c.pp:d}",
    ]
    if c.pp > 1 and c.stage_layers is not None:
        schedule = "Interleaved1F1B" if c.vp > 1 else "1F1B"
        first_less, last_less = torchtitan_less_layers(m, c)
        if c.vp not in (1, 2):
            raise SpecError("ParallelConfig.vp", f"torchtitan's uneven split runs 1 or 2 stages per rank, not {c.vp}",
                            "use vp 1 or 2 with an uneven layout")
        p += [
            f'    parallelism.pipeline_parallel_schedule = "{schedule}"',
            f"    # {c.pp * c.vp:d} stages (torchtitan's default for {schedule}); per rank "
            f"{', '.join(str(n) for n in c.stage_layers)} layers",
            f"    parallelism.pipeline_parallel_first_stage_less_layers = {first_less:d}",
            f"    parallelism.pipeline_parallel_last_stage_less_layers = {last_less:d}",
            f"    parallelism.pipeline_parallel_microbatch_size = {c.micro_batch:d}",
        ]
    elif c.pp > 1:
        schedule = "Interleaved1F1B" if c.vp > 1 else "1F1B"
        p += [
            f'    parallelism.pipeline_parallel_schedule = "{schedule}"',
            f"    parallelism.pipeline_parallel_layers_per_stage = {m.layers // (c.pp * c.vp):d}"
            f"  # {m.layers:d} layers / (pp {c.pp:d} x vp {c.vp:d})",
            "    # Embedding and output head count as no layer, so every stage gets the same number of",
            "    # blocks (torchtitan's default of 1 each would make an extra stage).",
            "    parallelism.pipeline_parallel_first_stage_less_layers = 0",
            "    parallelism.pipeline_parallel_last_stage_less_layers = 0",
            f"    parallelism.pipeline_parallel_microbatch_size = {c.micro_batch:d}",
        ]
    batch_note = (f"{steps:d} pipeline micro-batches of {c.micro_batch:d} in one step" if c.pp > 1
                  else f"one micro-batch; {steps:d} gradient-accumulation step(s)")
    tr = [
        "    training = config.training",
        f"    training.seq_len = {m.seq_len:d}",
        f"    training.local_batch_size = {local:d}  # {batch_note}",
        f"    training.global_batch_size = {t.global_batch:d}",
        f"    training.enable_cpu_offload = {offload}",
        '    training.dtype = "float32"  # fp32 master weights and optimizer states',
        '    training.mixed_precision_param = "bfloat16"',
        '    training.mixed_precision_reduce = "float32"',
    ]
    if c.pp > 1:
        tr.append("    training.disable_cuda_graphs = True  # torchtitan's CUDA graphs refuse pipeline parallelism")
    extra = [f"    config.activation_checkpoint = {ac_expr}"]
    if fp8 and flavor.flavor != "405B":  # llama3_405b() already converts to fp8 (and compiles)
        imports.add("torchtitan.components.quantization", "Float8LinearConverter")
        imports.add("torchtitan.models.llama3", "model_registry")
        extra += [
            "    # fp8: torchao Float8 linears (lm_head stays bf16) under torch.compile, as llama3_405b() does",
            "    config.compile.enable = True",
            '    model_compile_enabled = config.compile.enable and "model" in config.compile.components',
            "    config.model_spec = model_registry(",
            f'        "{flavor.flavor}",',
            '        converters=[Float8LinearConverter.Config(filter_fqns=["lm_head"], '
            "model_compile_enabled=model_compile_enabled)],",
            "    )",
        ]
    sp = ", sequence parallel" if c.sp and c.tp > 1 else ""
    doc = [
        '"""torchtitan 0.3.0 training config written by autopar (generated: emit it again rather than edit it).',
        "",
        f"Starts from torchtitan's {base}",
        f"and sets autopar's configuration for {world:d} GPUs ({nodes:d} nodes x {gpn:d}):",
        f"dp_shard {c.dp:d}, tp {c.tp:d}{sp}, pp {c.pp:d}, vp {c.vp:d}, cp {c.cp:d};",
        f"ZeRO-{c.zero_stage:d}; micro-batch {c.micro_batch:d}, global batch {t.global_batch:d}, "
        f"sequence {m.seq_len:d}; recompute {c.recompute}; {t.precision}"
        + ("; CPU offload" if offload else "") + ".",
        "",
        "Run on every node, with this file's directory on PYTHONPATH:",
        f"    torchrun ... -m {TRAIN_MODULE} --module {CONFIG_MODULE} --config {CONFIG_FUNCTION}",
        "The model spec's RoPE and norm settings and the training recipe (tokenizer, dataset, steps,",
        "optimizer, schedule, checkpoints, logging) are set at the end; a recipe value autopar was not",
        "given is read from the environment. The rest is the registry function's; relative paths are",
        "relative to the working directory.",
        '"""',
        "",
        *(["import os", ""] if reads_env else []),
        *imports.lines(),
        "",
        f"AUTOPAR_MODEL = {m.name!r}",
        f"AUTOPAR_WORLD_SIZE = {world:d}",
        *(helper.rstrip("\n").split("\n") if helper else []),
        *(ENV_HELPER.rstrip("\n").split("\n") if reads_env else []),
        "",
        "",
        f"def {CONFIG_FUNCTION}() -> Trainer.Config:",
        f'    """{base}, then autopar\'s layout, batch, memory policy and precision."""',
        f"    config = {start}()",
        "",
        *p,
        "",
        *tr,
        "",
        *extra,
        "",
        *model_lines(request),
        "",
        *recipe,
        "    return config",
    ]
    return "\n".join(doc) + "\n"


def emit_torchtitan(request: LaunchRequest) -> LaunchFiles:
    """``autopar_torchtitan.py`` and the torchrun line that runs ``-m torchtitan.train`` with it.

    ``env`` puts the launch directory (the scripts' ``LAUNCH_DIR``, where the module lies) first on
    ``PYTHONPATH``, so every worker imports the module whatever its working directory.
    """
    text = torchtitan_config(request)
    return with_torchrun(request, {f"{CONFIG_MODULE}.py": text}, _entry(request))


def torchtitan_entry(request: LaunchRequest) -> EntryPoint:
    """What the launchers run for torchtitan: ``-m torchtitan.train`` with the emitted config module, which
    must lie on ``PYTHONPATH`` (refused like :func:`emit_torchtitan` when torchtitan cannot run it)."""
    torchtitan_config(request)
    return _entry(request)


def _entry(request: LaunchRequest) -> EntryPoint:
    return EntryPoint(args=("--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION), module=TRAIN_MODULE,
                      env={"PYTHONPATH": python_path()}, notes=tuple(recipe_lines(request)[2]))
