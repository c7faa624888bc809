"""The training recipe: validation, recipe files and flags, placeholders, and the model settings each
Megatron fork can or cannot express."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import search
from search import SpecError
from service.cli import main
from service.launch import LaunchRequest, TrainingRecipe, emit_target, placeholder, recipe_from_dict
from service.launch._megatron import megatron_args
from service.launch._megatron_checks import check_megatron_args
from service.launch._megatron_deepspeed import megatron_deepspeed_args

ROOT = Path(__file__).parents[3]
EXAMPLE = ROOT / "examples" / "recipe-llama3-8b.json"


@pytest.mark.parametrize(("values", "field"), [
    ({"lr": 0}, "recipe.lr"), ({"lr": 1e-4, "min_lr": 1e-3}, "recipe.min_lr"),
    ({"train_iters": 0}, "recipe.train_iters"), ({"train_iters": 10, "train_tokens": 1e9}, "recipe.train_tokens"),
    ({"lr_schedule": "step"}, "recipe.lr_schedule"),
    ({"adam_beta2": 1.0}, "recipe.adam_beta2"), ({"data_path": "/one/string"}, "recipe.data_path"),
    ({"data_path": ["/a", "x\nrm -rf /"]}, "recipe.data_path[1]"), ({"tokenizer": "--lr"}, "recipe.tokenizer"),
    ({"save": ""}, "recipe.save"),
])
def test_recipe_refusals_name_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        recipe_from_dict(values)
    assert err.value.field == field


def test_recipe_file_keys_and_length() -> None:
    with pytest.raises(SpecError, match="learning_rate") as err:
        recipe_from_dict({"learning_rate": 1e-4}, "--recipe r.json")
    assert err.value.field == "--recipe r.json learning_rate"
    recipe = recipe_from_dict(json.loads(EXAMPLE.read_text()))
    assert recipe.iterations(global_batch=512, seq_len=8192) == 238419  # 1e12 / (512 x 8192), rounded up
    assert recipe.resume_from == "/checkpoints/llama3-8b" and recipe.warmup(1000) == 2000
    assert TrainingRecipe(warmup_fraction=0.01).warmup(5000) == 50


def test_placeholders_are_built_from_safe_parts_only() -> None:
    assert placeholder("LR", "the peak learning rate") == (
        "${LR:?autopar: set LR to the peak learning rate; or emit the launch files again with it}")
    for name, what in (("L R", "x"), ("LR", "a } b"), ("LR", "$(id)"), ("LR", 'a"b')):
        with pytest.raises(ValueError, match="unsafe"):
            placeholder(name, what)


def _request(model: search.ModelSpec, framework: str = "megatron", tp: int = 1,
             recipe: TrainingRecipe | None = None) -> LaunchRequest:
    return LaunchRequest(model=model, cluster=search.cluster_preset("dgx-h100"),
                         config=search.ParallelConfig(dp=8 // tp, tp=tp, sp=tp > 1, micro_batch=1),
                         training=search.TrainingSpec(64, framework=framework),  # type: ignore[arg-type]
                         recipe=recipe or TrainingRecipe())


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_model_settings_in_each_fork() -> None:
    qwen2 = search.model_from_hf_config(json.loads((ROOT / "examples/hf/qwen2.5-7b/config.json").read_text()),
                                        name="qwen2.5-7b", seq_len=4096)[0]
    args = megatron_args(_request(qwen2, tp=4))
    assert "--add-qkv-bias" in args and "--disable-bias-linear" in args
    assert (_value(args, "--rotary-base"), _value(args, "--norm-epsilon"), _value(args, "--padded-vocab-size")) == (
        "1000000", "1e-06", "152064")
    check_megatron_args(args, 8)
    with pytest.raises(SpecError, match="qkv_bias") as err:
        megatron_deepspeed_args(_request(qwen2, "megatron-deepspeed"))
    assert err.value.field == "ModelSpec.qkv_bias"
    llama2 = search.model_preset("llama2-7b")
    md = megatron_deepspeed_args(_request(llama2, "megatron-deepspeed", tp=8))
    # the fork pads the tokenizer's size to a multiple of this x tp: 4000 x 8 = exactly the 32000 rows
    assert (_value(md, "--make-vocab-size-divisible-by"), _value(md, "--rotary-position-embeddings-theta"),
            _value(md, "--layernorm-epsilon"), _value(md, "--tokenizer-type")) == ("4000", "10000", "1e-05",
                                                                                  "HFTokenizer")
    scaled = dataclasses.replace(search.model_preset("llama3-8b"), rope_scaling_factor=8.0)
    with pytest.raises(SpecError, match="RoPE scaling") as err:
        megatron_deepspeed_args(_request(scaled, "megatron-deepspeed"))
    assert err.value.field == "ModelSpec.rope_scaling_factor"
    neox = dataclasses.replace(search.model_preset("gpt-1.7b"), position_embedding="rope", parallel_residual=True)
    with pytest.raises(SpecError, match="parallel") as err:
        megatron_args(_request(neox))
    assert err.value.field == "ModelSpec.parallel_residual"
    odd = dataclasses.replace(search.model_preset("gpt-1.7b"), vocab=50257)
    out = emit_target(_request(odd, tp=8), "megatron")
    assert _value(out.files["megatron_args.txt"].splitlines(), "--padded-vocab-size") == "50264"
    assert any("50264 rows, not 50257" in note for note in out.notes)


def test_recipe_file_and_flags_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "launch"
    argv = ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "512", "--top", "1",
            "--framework", "megatron", "--emit", "megatron", "--out", str(out), "--recipe", str(EXAMPLE),
            "--lr", "1e-4", "--tokens", "2e12"]
    assert main(argv) == 0
    args = (out / "megatron_args.txt").read_text().splitlines()
    assert _value(args, "--lr") == "0.0001"  # the flag wins over the file
    assert _value(args, "--train-iters") == "476838"  # --tokens 2e12 also replaces the file's train_tokens
    assert _value(args, "--tensorboard-dir") == "/checkpoints/llama3-8b/tensorboard"
    assert "${" not in "".join(args)  # nothing left to the environment
    check_megatron_args(args, 16)  # the pinned flag list and validate_args' rules
    bad = tmp_path / "bad.json"
    bad.write_text('{"lr": 3e-4, "epochs": 3}')
    assert main([*argv[:-6], "--recipe", str(bad)]) == 2
    assert "--recipe" in capsys.readouterr().err
