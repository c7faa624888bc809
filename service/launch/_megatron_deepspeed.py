"""Megatron-DeepSpeed: ``pretrain_gpt.py`` arguments plus the ds_config they point at.

Facts from ``shared/reference/frameworks.md`` §5 (Megatron-DeepSpeed) and the fork's own
``megatron/arguments.py``, ``pretrain_gpt.py``, ``megatron/model/gpt_model.py`` and
``examples_deepspeed/pretrain_llama2_distributed.sh`` at the pinned commit (first line of
``megatron_deepspeed_flags.txt``; regenerate with
``scripts/extract_megatron_flags.py --megatron-deepspeed DIR --commit SHA``):

* ``--deepspeed --deepspeed_config "${LAUNCH_DIR:-.}/ds_config.json" --zero-stage N`` (``N`` must equal the
  ds_config's stage: ``pretrain_gpt.py`` wraps model construction in ``deepspeed.zero.Init``
  only when ``args.zero_stage == 3``);
* with pp == 1, ``--no-pipeline-parallel`` selects the plain ``GPTModel`` that takes any ZeRO
  stage; without it the DeepSpeed pipeline engine (``GPTModelPipe``) runs even at pp == 1 and
  refuses ZeRO-2/3;
* full recomputation: ``--deepspeed-activation-checkpointing --recompute-granularity full
  --recompute-method uniform --recompute-num-layers 1`` (the pipe model reads the interval from
  ``--recompute-num-layers``; "deepspeed's pipeline doesn't support the block recompute
  method"); selective: ``--recompute-granularity selective`` without a method;
* ZeRO-3 parameter offload: ``--remote-device cpu|nvme`` (passed to ``deepspeed.zero.Init``)
  and ``--use-pin-memory``;
* the model shape in this fork's spelling: ``--num-key-value-heads`` (not
  ``--num-query-groups``), ``--use-rotary-position-embeddings --no-position-embedding``,
  ``--normalization rmsnorm``, ``--use-flash-attn-v2``;
* no ``--context-parallel-size``, ``--overlap-grad-reduce`` or ``--overlap-param-gather``
  (DeepSpeed's ``overlap_comm`` in the ds_config does that work), and no
  ``--use-distributed-optimizer`` (ZeRO shards the optimizer);
* the optimizer once: Megatron's (``--lr``, ``--weight-decay``, ``--adam-beta*``, from the
  recipe), handed to ``deepspeed.initialize`` (``megatron/training.py``
  ``setup_model_and_optimizer``); the ds_config has no ``optimizer`` section.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from search import SpecError

from ._base import EntryPoint, LaunchFiles, LaunchRequest
from ._deepspeed import emit_deepspeed
from ._launchers import with_torchrun
from ._megatron import ShapeSpelling, check_request, shape_args
from ._megatron_args import arg_values, check_known_flags, int_value
from ._megatron_checks import check_recipe_args
from ._megatron_flags import read_flag_file
from ._megatron_recipe import MEGATRON_DEEPSPEED_RECIPE, model_settings, recipe_args
from ._pipeline_split import deepspeed_partition_method
from ._shell import in_launch_dir

FLAGS_FILE = Path(__file__).with_name("megatron_deepspeed_flags.txt")
SPELLING = ShapeSpelling(gqa=("--num-key-value-heads",), rmsnorm=("--normalization", "rmsnorm"),
                         rope=("--use-rotary-position-embeddings", "--no-position-embedding"),
                         flash=("--use-flash-attn-v2",))
_FIELD = "megatron_deepspeed_args"
DS_CONFIG_NAME = "ds_config.json"


def megatron_deepspeed_flags() -> frozenset[str]:
    """Every long option of the pinned Megatron-DeepSpeed parser (with DeepSpeed's config options)."""
    return read_flag_file(FLAGS_FILE)[1]


def megatron_deepspeed_release() -> str:
    """The commit the flag list was extracted from."""
    return read_flag_file(FLAGS_FILE)[0]


def megatron_deepspeed_args(request: LaunchRequest, ds_config_path: str | None = None) -> list[str]:
    """The Megatron-DeepSpeed ``pretrain_gpt.py`` arguments for ``request`` (the ds_config in the
    launch directory unless ``ds_config_path`` is given)."""
    return megatron_deepspeed_args_and_notes(request, ds_config_path)[0]


def megatron_deepspeed_args_and_notes(request: LaunchRequest,
                                      ds_config_path: str | None = None) -> tuple[list[str], list[str]]:
    """:func:`megatron_deepspeed_args` and what the user still has to know."""
    if request.training.framework != "megatron-deepspeed":
        raise SpecError("TrainingSpec.framework", f"{request.training.framework!r} is not run by Megatron-DeepSpeed",
                        "use the emitter of that framework, or framework='megatron-deepspeed'")
    c, m, t = request.config, request.model, request.training
    check_request(request)
    if c.cp > 1:
        raise SpecError("ParallelConfig.cp", "Megatron-DeepSpeed has no --context-parallel-size",
                        "set cp=1, or use framework='megatron'")
    if c.vp > 1:
        raise SpecError("ParallelConfig.vp", "DeepSpeed's pipeline engine has no interleaved schedule",
                        "set vp=1, or use framework='megatron'")
    if c.pp > 1 and c.zero_stage >= 2:
        raise SpecError("ParallelConfig.zero_stage", f"DeepSpeed's pipeline engine refuses ZeRO-{c.zero_stage}",
                        "use zero_stage 0 or 1 with pp > 1, or pp=1")
    if t.precision == "fp8":
        raise SpecError("TrainingSpec.precision", "autopar emits fp8 only for Megatron-LM (Transformer Engine); "
                        "DeepSpeed's config has no fp8 mode", "use bf16 or fp16, or framework='megatron'")
    deepspeed_partition_method(m, c)  # the pinned fork's type:transformer split, or a SpecError saying why not
    args = ["--tensor-model-parallel-size", str(c.tp), "--pipeline-model-parallel-size", str(c.pp)]
    if c.pp == 1:
        args.append("--no-pipeline-parallel")
    if c.sp:
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(c.micro_batch), "--global-batch-size", str(t.global_batch)]
    if c.recompute == "full":
        args += ["--deepspeed-activation-checkpointing", "--recompute-granularity", "full",
                 "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif c.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    if c.offload_param != "none":
        args += ["--remote-device", c.offload_param, "--use-pin-memory"]
    args.append("--fp16" if t.precision == "fp16" else "--bf16")
    args += shape_args(m, SPELLING)
    settings, notes = model_settings(m, c.tp, MEGATRON_DEEPSPEED_RECIPE)
    recipe, recipe_notes = recipe_args(request, MEGATRON_DEEPSPEED_RECIPE)
    args += [*settings, *recipe]
    config = in_launch_dir(DS_CONFIG_NAME) if ds_config_path is None else ds_config_path
    args += ["--deepspeed", "--deepspeed_config", config, "--zero-stage", str(c.zero_stage)]
    return args, [*notes, *recipe_notes]


def check_megatron_deepspeed_args(argv: Sequence[str], world_size: int, ds_zero_stage: int | None = None) -> None:
    """Raise SpecError unless every flag exists at the pinned commit and the values pass the
    rules of the fork's ``validate_args`` and of DeepSpeed's pipeline engine.

    ``ds_zero_stage``: the ds_config's ``zero_optimization.stage``, which ``--zero-stage`` must equal.
    """
    check_known_flags(argv, megatron_deepspeed_flags(), _FIELD,
                      f"Megatron-DeepSpeed ({megatron_deepspeed_release()})", "commit")
    v = arg_values(argv)
    tp = int_value(v, "--tensor-model-parallel-size", 1, _FIELD) or 1
    pp = int_value(v, "--pipeline-model-parallel-size", 1, _FIELD) or 1
    if world_size % (tp * pp):
        raise SpecError(_FIELD, f"world size ({world_size}) is not divisible by tensor parallel size ({tp}) "
                        f"times pipeline parallel size ({pp})", "choose degrees whose product divides the GPU count")
    dp = world_size // (tp * pp)
    if "--no-pipeline-parallel" in v and pp != 1:
        raise SpecError(_FIELD, "pipeline_model_parallel_size must be 1 if pipeline parallel is disabled",
                        "drop --no-pipeline-parallel or set --pipeline-model-parallel-size 1")
    micro = int_value(v, "--micro-batch-size", None, _FIELD)
    if micro is None or micro <= 0:
        raise SpecError(_FIELD, "--micro-batch-size must be a positive integer", "give --micro-batch-size N")
    glob = int_value(v, "--global-batch-size", micro * dp, _FIELD) or micro * dp
    if glob % (micro * dp):
        raise SpecError(_FIELD, f"global batch size ({glob}) is not divisible by micro batch size ({micro}) "
                        f"times data parallel size ({dp})", "make the global batch a multiple of micro * dp")
    if "--deepspeed" not in v or "--deepspeed_config" not in v:
        raise SpecError(_FIELD, "Megatron-DeepSpeed runs DeepSpeed only with --deepspeed --deepspeed_config FILE",
                        "add both")
    zero = int_value(v, "--zero-stage", 1, _FIELD)
    if ds_zero_stage is not None and zero != ds_zero_stage:
        raise SpecError(_FIELD, f"--zero-stage {zero} differs from the ds_config's stage {ds_zero_stage} "
                        "(pretrain_gpt.py enables zero.Init from --zero-stage)", "give both the same stage")
    stage = ds_zero_stage if ds_zero_stage is not None else zero
    if "--no-pipeline-parallel" not in v and stage is not None and stage >= 2:
        raise SpecError(_FIELD, f"without --no-pipeline-parallel the DeepSpeed pipeline engine runs, which refuses "
                        f"ZeRO-{stage}", "add --no-pipeline-parallel (pp=1) or use ZeRO 0-1")
    if "--num-layers-per-virtual-pipeline-stage" in v:
        raise SpecError(_FIELD, "DeepSpeed's pipeline engine has no interleaved schedule",
                        "drop --num-layers-per-virtual-pipeline-stage")
    if v.get("--recompute-granularity") == "selective" and "--recompute-method" in v:
        raise SpecError(_FIELD, "recompute method is not yet supported for selective recomputing granularity",
                        "drop --recompute-method with --recompute-granularity selective")
    if v.get("--recompute-granularity") == "full" and v.get("--recompute-method") != "uniform" and pp > 1:
        raise SpecError(_FIELD, "DeepSpeed's pipeline model supports only --recompute-method uniform",
                        "use --recompute-method uniform")
    if "--sequence-parallel" in v and tp == 1:
        raise SpecError(_FIELD, "--sequence-parallel needs --tensor-model-parallel-size > 1 "
                        "(Megatron-DeepSpeed silently turns it off)", "drop --sequence-parallel or use tp > 1")
    if "--fp16" in v and "--bf16" in v:
        raise SpecError(_FIELD, "--fp16 and --bf16 are exclusive", "give one")
    heads = int_value(v, "--num-attention-heads", None, _FIELD)
    kv = int_value(v, "--num-key-value-heads", heads, _FIELD)
    if heads is not None and heads % tp:
        raise SpecError(_FIELD, f"attention heads ({heads}) are not divisible by tp ({tp})",
                        "choose a tp that divides the head count")
    if heads is not None and kv and heads % kv:
        raise SpecError(_FIELD, f"num_attention_heads ({heads}) must be divisible by num_key_value_heads ({kv})",
                        "give a key/value head count that divides the head count")
    seq, pos = int_value(v, "--seq-length", None, _FIELD), int_value(v, "--max-position-embeddings", None, _FIELD)
    if seq is not None and pos is not None and pos < seq:
        raise SpecError(_FIELD, f"--max-position-embeddings ({pos}) is below --seq-length ({seq})",
                        "give at least the sequence length")
    check_recipe_args(v, _FIELD)
    int_value(v, "--rotary-position-embeddings-theta", None, _FIELD)  # type=int


def megatron_deepspeed_entry(request: LaunchRequest) -> EntryPoint:
    """What the launchers run for Megatron-DeepSpeed: ``pretrain_gpt.py`` with :func:`megatron_deepspeed_args`."""
    args, notes = megatron_deepspeed_args_and_notes(request)
    return EntryPoint(args=tuple(args), notes=tuple(notes))


def emit_megatron_deepspeed(request: LaunchRequest) -> LaunchFiles:
    """``ds_config.json`` (checked by DeepSpeed), ``megatron_deepspeed_args.txt`` and the torchrun command."""
    entry = megatron_deepspeed_entry(request)  # first: it names the framework a config needs
    ds = emit_deepspeed(request)
    check_megatron_deepspeed_args(entry.args, request.config.world_size, request.config.zero_stage)
    files = {**ds.files, "megatron_deepspeed_args.txt": "".join(f"{a}\n" for a in entry.args)}
    out = with_torchrun(request, files, entry)
    return dataclasses.replace(out, notes=(*ds.notes, *out.notes))
