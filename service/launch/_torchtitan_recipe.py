"""The training recipe and the model's RoPE and norm settings in torchtitan 0.3.0's ``Trainer.Config``.

Names (0.3.0 wheel): ``hf_assets_path`` (the tokenizer directory, ``trainer.py:567``);
``dataloader.dataset`` / ``dataset_path`` (a dataset registered in ``hf_datasets/text_datasets.py``
``DATASETS``: its loader and text field, optionally from another path); ``training.steps`` and
``max_norm``; ``optimizer = default_adamw(lr=..., betas=..., eps=..., weight_decay=...)``
(``components/optimizer/optimizer.py:378``); ``lr_scheduler.warmup_steps``, ``decay_type``
(linear, sqrt, cosine), ``decay_ratio`` (0: no decay, a constant rate after the warmup) and
``min_lr_factor`` (``components/optimizer/lr_scheduler.py:52-82``); ``checkpoint.enable``,
``folder``, ``interval``, ``initial_load_path`` / ``initial_load_model_only``;
``metrics.log_freq``, ``enable_tensorboard``, ``save_tb_folder``.

The llama3 registry flavors are Llama 3.1 (``ComplexRoPE.Config(theta=500000, scaling="llama")``,
RMSNorm eps 1e-5, ``models/llama3/__init__.py``); the module sets every layer's RoPE base and
scaling and every norm's epsilon from the model spec, so a Llama 3 (unscaled) spec trains as one.

A value the recipe lacks is read from the environment when the config is built, by
``_from_environment``, which stops with a message naming the variable when it is unset.
"""

from __future__ import annotations

from search import SpecError

from ._base import LaunchRequest
from ._recipe import REQUIRED

ENV_HELPER = '''

def _from_environment(name: str, what: str) -> str:
    """A recipe value autopar was not given: environment variable ``name``, or a stop naming it."""
    value = os.environ.get(name, "")
    if not value:
        raise SystemExit(f"autopar: set {name} to {what}; or emit the launch files again with it")
    return value
'''


def _value(given: object, field: str, convert: str = "") -> str:
    """``repr(given)``, or the call that reads the placeholder's variable (through ``convert``: int, float)."""
    if given is not None:
        return repr(given)
    name, what = REQUIRED[field]
    call = f"_from_environment({name!r}, {what!r})"
    return f"{convert}({call})" if convert else call


def model_lines(request: LaunchRequest) -> list[str]:
    """Every layer's RoPE base and scaling and every norm's epsilon, from the model spec."""
    m = request.model
    scaling = ('"llama"', f"{float(m.rope_scaling_factor)!r}") if m.rope_scaling_factor is not None else ('"none"',)
    lines = [
        "    # The model spec's RoPE and norms (torchtitan's llama3 flavors are Llama 3.1: RoPE scaling \"llama\" x8)",
        "    model = config.model_spec.model",
        "    for layer in model.layers:",
        "        rope = layer.attention.rope",
        f"        rope.theta = {int(m.rope_theta) if float(m.rope_theta).is_integer() else float(m.rope_theta)!r}",
        f"        rope.scaling = {scaling[0]}",
    ]
    if len(scaling) > 1:
        lines += [f"        rope.scaling_factor = {scaling[1]}", "        rope.low_freq_factor = 1.0",
                  "        rope.high_freq_factor = 4.0", "        rope.original_max_position_embeddings = 8192"]
    lines += [f"        layer.attention_norm.eps = layer.ffn_norm.eps = {float(m.norm_eps)!r}",
              f"    model.norm.eps = {float(m.norm_eps)!r}"]
    return lines


def recipe_lines(request: LaunchRequest) -> tuple[list[str], bool, list[str]]:
    """(lines of ``autopar()``, whether they read the environment, notes) for the recipe."""
    r, t, m = request.recipe, request.training, request.model
    if len(r.data_path) > 1:
        raise SpecError("recipe.data_path", f"{len(r.data_path)} paths: torchtitan's dataloader reads one "
                        "dataset_path", "give one path (a blend is a registered torchtitan dataset)")
    iters = r.iterations(t.global_batch, m.seq_len)
    lines = [
        "    # Training recipe (autopar search --emit flags or --recipe); what it lacks comes from the environment",
        f"    config.hf_assets_path = {_value(r.tokenizer, 'tokenizer')}  # tokenizer directory",
        f"    config.dataloader.dataset = {_value(r.dataset, 'dataset')}",
    ]
    if r.data_path:
        lines.append(f"    config.dataloader.dataset_path = {r.data_path[0]!r}")
    lines += [f"    steps = {_value(iters, 'train_iters', 'int')}",
              "    config.training.steps = steps",
              f"    config.training.max_norm = {float(r.clip_grad)!r}",
              f"    lr = {_value(None if r.lr is None else float(r.lr), 'lr', 'float')}",
              f"    config.optimizer = default_adamw(lr=lr, betas=({float(r.adam_beta1)!r}, {float(r.adam_beta2)!r}), "
              f"eps={float(r.adam_eps)!r}, weight_decay={float(r.weight_decay)!r})"]
    warmup = (repr(r.warmup_iters) if r.warmup_iters is not None
              else f"max(1, round({float(r.warmup_fraction)!r} * steps))")
    lines += [f"    config.lr_scheduler.warmup_steps = {warmup}",
              f"    config.lr_scheduler.min_lr_factor = {float(r.min_lr)!r} / lr"]
    if r.lr_schedule == "constant":
        lines.append("    config.lr_scheduler.decay_ratio = 0.0  # constant after the warmup")
    else:
        lines += [f'    config.lr_scheduler.decay_type = "{r.lr_schedule}"',
                  "    config.lr_scheduler.decay_ratio = None  # decay from the end of the warmup"]
    if r.save is not None:
        lines += ["    config.checkpoint.enable = True", f"    config.checkpoint.folder = {r.save!r}",
                  f"    config.checkpoint.interval = {r.save_interval:d}"]
    if r.load is not None and r.load != r.save:
        lines += [f"    config.checkpoint.initial_load_path = {r.load!r}",
                  "    config.checkpoint.initial_load_model_only = False  # resume: optimizer and step too"]
    lines.append(f"    config.metrics.log_freq = {r.log_interval:d}")
    if r.tensorboard_dir is not None:
        lines += ["    config.metrics.enable_tensorboard = True",
                  f"    config.metrics.save_tb_folder = {r.tensorboard_dir!r}"]
    missing = r.missing("dataset", "tokenizer", "lr", "train_iters")
    notes = []
    if missing:
        notes.append(f"set {', '.join(REQUIRED[f][0] for f in missing)} in the environment at launch, or emit "
                     "again with " + ", ".join("--" + f.replace("_", "-") for f in missing))
    if r.data_path and r.dataset is None:
        notes.append("torchtitan reads --data-path with a registered dataset's loader: give --dataset too")
    return lines, bool(missing), notes
