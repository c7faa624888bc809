"""torchtitan 0.3.0 launch target: the config module's settings, refusals, the torchrun line, quoting, the
training recipe, and (when torchtitan is installed) the module loaded by torchtitan's own ConfigManager and
ParallelDims."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import search
from search import SpecError
from service.launch._base import LaunchRequest
from service.launch._launchers import slurm, torchrun
from service.launch._recipe import REQUIRED, TrainingRecipe
from service.launch._shell import export_lines
from service.launch._torchtitan import (
    CONFIG_FUNCTION,
    CONFIG_MODULE,
    FLAVORS,
    emit_torchtitan,
    match_flavor,
    torchtitan_config,
)
from tests.service.launch.enumerated import torchtitan_sample

GOLDEN = Path(__file__).parent / "golden" / "torchtitan_llama3_70b_dp8_tp8.py"
PYTHONPATH = "${LAUNCH_DIR:-.}${PYTHONPATH:+:$PYTHONPATH}"
# What torchtitan's llama3_70b() itself sets (models/llama3/config_registry.py), as a recipe.
REGISTRY_70B = TrainingRecipe(tokenizer="./assets/hf/Llama-3.1-70B", dataset="c4", lr=1.5e-4, train_iters=1000,
                              warmup_iters=200, lr_schedule="linear")
# Stand-ins for the recipe placeholders while torchtitan builds a config emitted without a recipe.
STAND_INS = {"DATASET": "c4_test", "TOKENIZER": "./tests/assets/tokenizer", "LR": "0.0003", "TRAIN_ITERS": "100",
             "DATA_PATH": "/data"}


def request(model: str = "llama3-70b", cluster: str = "dgx-h100", nodes: int = 8, global_batch: int = 64,
            precision: str = "bf16", **config: Any) -> LaunchRequest:
    """Default: Llama 3 70B on 64 H100, dp_shard 8 x tp 8, micro-batch 8, ZeRO-3, full recompute (llama3_70b())."""
    layout: dict[str, Any] = dict(dp=8, tp=8, sp=True, micro_batch=8, zero_stage=3, recompute="full")
    layout.update(config)
    return LaunchRequest(model=search.model_preset(model), cluster=search.cluster_preset(cluster, nodes),
                         config=search.ParallelConfig(**layout),
                         training=search.TrainingSpec(global_batch, precision, framework="fsdp"))  # type: ignore[arg-type]


def settings_of(text: str) -> dict[str, Any]:
    """What ``autopar()`` sets: ``{"parallelism.x": value, "training.x": ..., "config.x": source, "base": call,
    "steps": ..., "rope.theta": ... (in the loop over layers)}``."""
    tree = ast.parse(text)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == CONFIG_FUNCTION)
    out: dict[str, Any] = {}
    for node in ast.walk(fn):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == "config":
                out["base"] = ast.unparse(node.value)
            elif isinstance(target, ast.Attribute | ast.Name):
                try:
                    value: Any = ast.literal_eval(node.value)
                except ValueError:
                    value = ast.unparse(node.value)
                out[ast.unparse(target)] = value
    return out


# (request, expected settings) for layouts covering each branch: pp/vp/cp, ZeRO 2/3, offload, AC, fp8, 405B.
CASES: dict[str, tuple[LaunchRequest, dict[str, Any]]] = {
    "70b-dp8-tp8": (request(), {
        "base": "llama3_70b()", "parallelism.data_parallel_replicate_degree": 1,
        "parallelism.data_parallel_shard_degree": 8, "parallelism.fsdp_reshard_after_forward": "always",
        "parallelism.tensor_parallel_degree": 8, "parallelism.enable_sequence_parallel": True,
        "parallelism.context_parallel_degree": 1, "parallelism.pipeline_parallel_degree": 1,
        "training.seq_len": 8192, "training.local_batch_size": 8, "training.global_batch_size": 64,
        "training.enable_cpu_offload": False, "training.dtype": "float32",
        "training.mixed_precision_param": "bfloat16", "training.mixed_precision_reduce": "float32",
        "config.activation_checkpoint": "FullAC.Config()"}),
    "70b-dp64-zero2-accumulate": (request(global_batch=256, dp=64, tp=1, sp=False, micro_batch=1, zero_stage=2,
                                          recompute="none"),
                                  {"parallelism.data_parallel_shard_degree": 64,
                                   "parallelism.fsdp_reshard_after_forward": "never",
                                   "parallelism.tensor_parallel_degree": 1,
                                   "parallelism.enable_sequence_parallel": False,
                                   "training.local_batch_size": 1, "training.global_batch_size": 256,
                                   "config.activation_checkpoint": None}),
    "8b-pp2-cp2-offload": (request("llama3-8b", nodes=2, global_batch=16, dp=2, tp=2, sp=False, pp=2, cp=2,
                                   micro_batch=2, zero_stage=3, recompute="none", offload_optimizer="cpu",
                                   offload_param="cpu"), {
        "base": "llama3_8b()", "parallelism.pipeline_parallel_degree": 2, "parallelism.context_parallel_degree": 2,
        "parallelism.pipeline_parallel_schedule": "1F1B", "parallelism.pipeline_parallel_layers_per_stage": 16,
        "parallelism.pipeline_parallel_first_stage_less_layers": 0,
        "parallelism.pipeline_parallel_last_stage_less_layers": 0,
        "parallelism.pipeline_parallel_microbatch_size": 2, "training.local_batch_size": 8,
        "training.global_batch_size": 16, "training.enable_cpu_offload": True,
        "training.disable_cuda_graphs": True, "config.activation_checkpoint": None}),
    "405b-pp7-vp2-a100": (request("llama3-405b", "dgx-a100-80gb", 56, 448, pp=7, vp=2, micro_batch=1, zero_stage=2,
                                  recompute="selective"), {
        "base": "_llama3_405b_bf16()", "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
        "parallelism.pipeline_parallel_layers_per_stage": 9, "parallelism.pipeline_parallel_microbatch_size": 1,
        "parallelism.fsdp_reshard_after_forward": "never", "training.local_batch_size": 56,
        "training.global_batch_size": 448, "training.disable_cuda_graphs": True,
        "config.activation_checkpoint": "SelectiveAC.Config()"}),
    "8b-fp8": (request("llama3-8b", nodes=2, precision="fp8", dp=4, tp=4, micro_batch=1, recompute="selective"), {
        "base": "llama3_8b()", "config.compile.enable": True, "training.local_batch_size": 1,
        "config.model_spec": "model_registry('8B', converters=[Float8LinearConverter.Config(filter_fqns=['lm_head'], "
                             "model_compile_enabled=model_compile_enabled)])"}),
    "405b-fp8": (request("llama3-405b", nodes=32, global_batch=256, precision="fp8", dp=32, micro_batch=1), {
        "base": "llama3_405b()", "parallelism.data_parallel_shard_degree": 32}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_settings(name: str) -> None:
    req, expected = CASES[name]
    text = torchtitan_config(req)
    got = settings_of(text)
    assert {k: got.get(k, "<unset>") for k in expected} == expected
    assert ("training.disable_cuda_graphs" in got) == (req.config.pp > 1)
    assert ("parallelism.pipeline_parallel_schedule" in got) == (req.config.pp > 1)
    # fp8 is set up once: by llama3_405b() itself, or by a Float8 model_registry call here
    assert ("config.model_spec" in got) == (req.training.precision == "fp8" and req.model.name != "llama3-405b")
    module = ast.parse(text)
    top = {t.id: ast.literal_eval(n.value) for n in module.body if isinstance(n, ast.Assign)
           for t in n.targets if isinstance(t, ast.Name)}
    assert top == {"AUTOPAR_MODEL": req.model.name, "AUTOPAR_WORLD_SIZE": req.cluster.world_size}


def golden_request() -> LaunchRequest:
    """Llama 3.1 70B (Llama 3 70B with its RoPE scaling x8) and the recipe of torchtitan's llama3_70b()."""
    model = replace(search.model_preset("llama3-70b"), rope_scaling_factor=8.0)
    return replace(request(), model=model, recipe=REGISTRY_70B)


def test_golden_llama3_70b_dp8_tp8() -> None:
    """Llama 3.1 70B on 64 H100 (8 DGX nodes): dp_shard 8 x tp 8 with SP, local batch 8, global 64, full AC,
    ZeRO-3, bf16 -- the run torchtitan's own llama3_70b() describes on 64 GPUs (see the torchtitan test below)."""
    text = torchtitan_config(golden_request())
    if os.environ.get("AUTOPAR_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_flavors_match_presets_and_others_refused() -> None:
    for flavor in FLAVORS:
        model = search.model_preset(flavor.preset)
        assert match_flavor(replace(model, name="mine", seq_len=4096)) == flavor
    with pytest.raises(SpecError) as err:
        match_flavor(replace(search.model_preset("llama3-70b"), ffn=28000))
    assert err.value.field == "ModelSpec.ffn" and "28672" in err.value.problem
    assert "llama3_8b (llama3-8b), llama3_70b (llama3-70b), llama3_405b (llama3-405b)" in err.value.fix
    with pytest.raises(SpecError) as err:
        match_flavor(replace(search.model_preset("llama2-70b"), name="l2"))
    assert err.value.field == "ModelSpec.vocab"
    with pytest.raises(SpecError) as err:
        match_flavor(search.model_preset("gpt3-175b"))
    assert err.value.field == "ModelSpec" and "matches no torchtitan llama3 flavor" in err.value.problem


# --- refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize(("req", "field", "needle"), [
    (replace(request(), training=search.TrainingSpec(64, framework="megatron")), "TrainingSpec.framework",
     "not run by torchtitan"),
    (request(precision="fp16"), "TrainingSpec.precision", "no fp16 mode"),
    (request(cluster="dgx-a100-80gb", precision="fp8"), "TrainingSpec.precision", "SM89"),
    (request(cluster="dgx-2", nodes=4), "TrainingSpec.precision", "no bf16 tensor cores"),
    (request(model="gpt3-175b"), "ModelSpec", "matches no torchtitan llama3 flavor"),
    (replace(request(), model=replace(search.model_preset("llama3-70b"), seq_len=262144)), "ModelSpec.seq_len",
     "RoPE maximum"),
    (request(zero_stage=3, offload_optimizer="nvme", offload_param="nvme"), "ParallelConfig.offload_optimizer",
     "not to NVMe"),
    (request(zero_stage=3, offload_optimizer="cpu"), "ParallelConfig.offload_optimizer", "together"),
    (request(zero_stage=1), "ParallelConfig.zero_stage", "ZeRO-2 or ZeRO-3"),
    (request(dp=4), "ParallelConfig", "cluster has 64 GPUs"),
    (request(dp=4, tp=16, sp=True), "ParallelConfig.tp", "kv_heads"),
    (request(global_batch=60), "TrainingSpec.global_batch", "divisible by dp*micro_batch"),
    (replace(request(tp=8, sp=True), model=replace(search.model_preset("llama3-70b"), seq_len=8196)),
     "ModelSpec.seq_len", "tp with sequence parallelism"),
    (request(dp=2, pp=4, micro_batch=16), "TrainingSpec.global_batch", "1F1B schedule"),
    (request(global_batch=36, dp=2, pp=4, vp=2, micro_batch=2), "TrainingSpec.global_batch", "Interleaved1F1B"),
])
def test_refusals(req: LaunchRequest, field: str, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        torchtitan_config(req)
    assert err.value.field == field
    assert needle in str(err.value)
    with pytest.raises(SpecError):
        emit_torchtitan(req)


def test_recipe_and_model_settings_in_the_module() -> None:
    """The recipe's values land in torchtitan's names; what is missing is read from the environment by name."""
    recipe = TrainingRecipe(tokenizer="/models/llama3-8b", dataset="c4", data_path=("/data/c4-en",), lr=3e-4,
                            min_lr=3e-5, train_tokens=1e9, save="/ckpt/run", load="/ckpt/base", save_interval=250,
                            log_interval=5, tensorboard_dir="tb", clip_grad=0.5)
    req = replace(request("llama3-8b", nodes=1, dp=8, tp=1, sp=False, micro_batch=1), recipe=recipe)
    got = settings_of(torchtitan_config(req))
    expected = {"config.hf_assets_path": "/models/llama3-8b", "config.dataloader.dataset": "c4",
                "config.dataloader.dataset_path": "/data/c4-en", "steps": 1908,  # 1e9 / (64 x 8192), rounded up
                "config.training.max_norm": 0.5, "lr": 3e-4,
                "config.lr_scheduler.warmup_steps": "max(1, round(0.01 * steps))",
                "config.lr_scheduler.min_lr_factor": "3e-05 / lr", "config.lr_scheduler.decay_type": "cosine",
                "config.checkpoint.enable": True, "config.checkpoint.folder": "/ckpt/run",
                "config.checkpoint.interval": 250, "config.checkpoint.initial_load_path": "/ckpt/base",
                "config.checkpoint.initial_load_model_only": False, "config.metrics.log_freq": 5,
                "config.metrics.enable_tensorboard": True, "config.metrics.save_tb_folder": "tb",
                "rope.theta": 500000, "rope.scaling": "none", "model.norm.eps": 1e-5}
    assert {k: got.get(k, "<unset>") for k in expected} == expected
    assert "import os" not in torchtitan_config(req)  # nothing left to the environment
    bare = torchtitan_config(request("llama3-8b", nodes=1, dp=8, tp=1, sp=False, micro_batch=1))
    for field in ("dataset", "tokenizer", "lr", "train_iters"):
        assert f"_from_environment({REQUIRED[field][0]!r}" in bare
    notes = emit_torchtitan(request()).notes
    assert notes and all(name in notes[0] for name in ("DATASET", "TOKENIZER", "LR", "TRAIN_ITERS"))
    with pytest.raises(SpecError, match="one") as err:
        torchtitan_config(replace(req, recipe=replace(recipe, data_path=("a", "b"))))
    assert err.value.field == "recipe.data_path"


# --- the command ---------------------------------------------------------------------------

def expected_argv(nnodes: int, gpn: int, endpoint: str, job: str) -> list[str]:
    return ["torchrun", "--nnodes", str(nnodes), "--nproc-per-node", str(gpn), "--rdzv-id", job,
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
            "-m", "torchtitan.train", "--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION]


def test_emit_files_command_and_env() -> None:
    out = emit_torchtitan(request())
    assert set(out.files) == {f"{CONFIG_MODULE}.py"}
    assert out.files[f"{CONFIG_MODULE}.py"] == torchtitan_config(request())
    assert shlex.split(out.command) == expected_argv(8, 8, "node0:29500", "autopar")
    assert out.env == {"PYTHONPATH": PYTHONPATH}  # the scripts' own directory, not the emitting machine's
    two = emit_torchtitan(replace(request("llama3-8b", nodes=2, dp=2), hosts=("gpu-a", "gpu-b"), master_port=1234))
    assert shlex.split(two.command) == expected_argv(2, 8, "gpu-a:1234", "autopar")


def test_launchers_run_a_module(tmp_path: Path) -> None:
    """torchrun / slurm with ``module=`` and ``env=``: ``-m MODULE args`` and the exports, train_script unused."""
    req = replace(request(), hosts=tuple(f"h{i}" for i in range(8)), train_script="ignored.py")
    args = ["--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION]
    out = torchrun(req, args, module="torchtitan.train", env={"PYTHONPATH": "/l d"})
    assert shlex.split(out.command) == expected_argv(8, 8, "h0:29500", "autopar")
    assert out.env == {"PYTHONPATH": "/l d"}
    assert "export PYTHONPATH='/l d'\n" in out.files["launch_torchrun.sh"]
    argv, env = run_script(tmp_path, out.files["launch_torchrun.sh"])
    assert argv == expected_argv(8, 8, "h0:29500", "autopar") and env == "/l d"
    job = slurm(req, args, module="torchtitan.train", env={"PYTHONPATH": "/l d"}).files["job.sbatch"]
    argv, env = run_script(tmp_path, job)
    assert argv == expected_argv(2, 8, "gpu-a:29500", "77") and env == "/l d"
    for bad in ("-x", "a b", "a.", "$(x)", ""):
        with pytest.raises(SpecError) as err:
            torchrun(req, args, module=bad)
        assert err.value.field == "module"
    plain = torchrun(req, ["--x"])  # without module: the train script, as before
    assert shlex.split(plain.command)[-2:] == ["ignored.py", "--x"]


# --- property tests: no injection ------------------------------------------------------------

MARKER = "MARKER_FILE"
PAYLOADS = ["$(touch {m})", "; touch {m}", "`touch {m}`", "'; touch {m}; '", "\"$(touch {m})\"",
            "\ntouch {m}\n", "a b", "&& touch {m} #", "| touch {m}", "$HOME", "\\", "'"]


def texts(marker: str) -> st.SearchStrategy[str]:
    plain = st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20)
    return st.one_of(plain, st.sampled_from([p.format(m=marker) for p in PAYLOADS]),
                     st.tuples(plain, st.sampled_from(PAYLOADS)).map(lambda t: t[0] + t[1].format(m=marker)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=texts(MARKER), host=texts(MARKER), tokenizer=texts(MARKER).filter(lambda s: s.strip() != ""))
@example(job=f"$(touch {MARKER})", host=f"`touch {MARKER}`", tokenizer=f"$(touch {MARKER})")
@example(job=f"'; touch {MARKER}; '", host="a b", tokenizer=f"x'\nimport os; os.system('touch {MARKER}')")
def test_no_shell_injection(tmp_path: Path, job: str, host: str, tokenizer: str) -> None:
    if job.startswith("-") or host.startswith("-"):  # a value the launcher would read as an option is refused
        with pytest.raises(SpecError, match=r"LaunchRequest\.(job_name|hosts)"):
            replace(request("llama3-8b", nodes=1, dp=1), job_name=job, hosts=(host,))
        return
    req = replace(request("llama3-8b", nodes=1, dp=1), job_name=job, hosts=(host,))
    if "\n" in tokenizer or "\0" in tokenizer or tokenizer.startswith("-"):
        with pytest.raises(SpecError, match=r"recipe\.tokenizer"):
            TrainingRecipe(tokenizer=tokenizer)
        tokenizer = "tok"
    req = replace(req, recipe=TrainingRecipe(tokenizer=tokenizer))
    out = emit_torchtitan(req)
    assert settings_of(out.files[f"{CONFIG_MODULE}.py"])["config.hf_assets_path"] == tokenizer  # a literal only
    want = expected_argv(1, 8, f"{host}:29500", job)
    assert shlex.split(out.command) == want
    script = "#!/bin/bash\nset -euo pipefail\nLAUNCH_DIR=/l\n" + export_lines(out.env) + out.command + "\n"
    assert run_script(tmp_path, script) == (want, "/l")
    if not any(ord(ch) < 32 or ord(ch) == 127 for ch in job):  # else slurm refuses the #SBATCH job name
        args = ["--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION]
        job_script = slurm(req, args, module="torchtitan.train", env=out.env).files["job.sbatch"]
        assert run_script(tmp_path, job_script) == (expected_argv(2, 8, "gpu-a:29500", "77"), str(tmp_path))
    assert not (tmp_path / MARKER).exists()


@settings(max_examples=40, deadline=None)
@given(name=texts(MARKER).filter(lambda s: s.strip() != ""))
@example(name='x"""\nimport os\nos.system("touch MARKER_FILE")\n"""')
@example(name="x'\nimport os #")
def test_model_name_cannot_inject_python(name: str) -> None:
    """The model name reaches the module only as a repr literal: the module parses, with nothing added."""
    req = replace(request(), model=replace(search.model_preset("llama3-70b"), name=name))
    tree = ast.parse(torchtitan_config(req))
    kinds = [type(n).__name__ for n in tree.body]
    assert kinds == ["Expr", "Import", *["ImportFrom"] * 4, "Assign", "Assign", "FunctionDef", "FunctionDef"]
    assert ast.literal_eval(tree.body[6].value) == name  # type: ignore[attr-defined]


def run_script(tmp_path: Path, script: str) -> tuple[list[str], str | None]:
    """Run ``script`` with bash, torchrun/srun/scontrol stubbed; return torchrun's argv and its PYTHONPATH."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "torchrun").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                                          "print(json.dumps([sys.argv[1:], os.environ.get('PYTHONPATH')]))\n",
                                          encoding="utf-8")
        (bin_dir / "srun").write_text('#!/bin/bash\nexec "$@"\n', encoding="utf-8")
        (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\n'\n", encoding="utf-8")
        for f in bin_dir.iterdir():
            f.chmod(0o755)
    path = tmp_path / "script.sh"
    path.write_text(script, encoding="utf-8")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "LC_ALL": "C.UTF-8",
           "SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_NNODES": "2", "SLURM_JOB_ID": "77"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    argv, pythonpath = json.loads(done.stdout.decode("utf-8", "surrogateescape"))
    return ["torchrun", *argv], pythonpath


# --- torchtitan itself ---------------------------------------------------------------------
# torchtitan==0.3.0 (plus triton, which the llama3 model code imports) in the test environment;
# skipped where it is absent. Everything below runs on CPU: no process group, no model built.

@pytest.fixture(scope="module")
def titan() -> ModuleType:
    with warnings.catch_warnings():
        # torch's own import-time notice (torch.utils.mkldnn uses torch.jit.script_method), reached
        # through torchtitan's FlexAttention torch.compile wrapper; not ours to fix.
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script_method.* is deprecated",
                                category=DeprecationWarning)
        return pytest.importorskip("torchtitan.models.llama3.config_registry")


@pytest.fixture
def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, titan: ModuleType) -> Iterator[Any]:
    """``load(text)``: write the module, import it through torchtitan's ConfigManager, return Trainer.Config
    (with stand-ins in the environment for the recipe values a module reads from it)."""
    from torchtitan.config import ConfigManager

    monkeypatch.syspath_prepend(str(tmp_path))
    for name, value in STAND_INS.items():
        monkeypatch.setenv(name, value)

    def _load(text: str) -> Any:
        sys.modules.pop(CONFIG_MODULE, None)
        (tmp_path / f"{CONFIG_MODULE}.py").write_text(text)
        try:
            return ConfigManager().parse_args(["--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION])
        except SystemExit as exc:  # tyro reports Trainer.Config.__post_init__ errors by exiting
            pytest.fail(f"torchtitan refused the config (exit {exc.code}); see the captured stderr")

    yield _load
    sys.modules.pop(CONFIG_MODULE, None)


def check_with_torchtitan(cfg: Any, req: LaunchRequest) -> None:
    """torchtitan's own checks that need no GPU: ParallelDims, the model's update_from_config, the PP split."""
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.fsdp import get_fsdp_reshard_after_forward_policy
    from torchtitan.distributed.pipeline_parallel import _generate_llm_fqn_per_model_part, _get_pipeline_metadata

    c, m, t = req.config, req.model, req.training
    dims = ParallelDims.from_config(cfg.parallelism, req.cluster.world_size)  # asserts dp*tp*pp*cp == world
    assert (dims.dp_replicate, dims.dp_shard, dims.tp, dims.pp, dims.cp) == (1, c.dp, c.tp, c.pp, c.cp)
    cfg.model_spec.model.update_from_config(config=cfg)  # tp | heads and kv heads, seq_len <= RoPE max
    model = cfg.model_spec.model
    assert (len(model.layers), model.dim, model.vocab_size) == (m.layers, m.hidden, m.vocab)
    assert get_fsdp_reshard_after_forward_policy(cfg.parallelism.fsdp_reshard_after_forward, dims.pp_enabled) == (
        c.zero_stage == 3)
    assert cfg.parallelism.enable_sequence_parallel == c.sp or c.tp == 1
    assert cfg.training.seq_len == m.seq_len and cfg.training.global_batch_size == t.global_batch
    assert cfg.training.enable_cpu_offload == (c.offload_param == "cpu")
    assert type(cfg.activation_checkpoint).__qualname__ == {"none": "NoneType", "selective": "SelectiveAC.Config",
                                                             "full": "FullAC.Config"}[c.recompute]
    # trainer.py: gradient-accumulation steps and pipeline micro-batches per step
    accumulation = t.global_batch // (cfg.training.local_batch_size * c.dp)
    assert t.global_batch == accumulation * cfg.training.local_batch_size * c.dp
    if c.pp == 1:
        assert cfg.training.local_batch_size == c.micro_batch
        assert accumulation == t.global_batch // (c.dp * c.micro_batch)
        return
    assert accumulation == 1 and cfg.parallelism.pipeline_parallel_microbatch_size == c.micro_batch
    stages, layers, first, last = _get_pipeline_metadata(dims, cfg.parallelism, model)
    assert (stages, layers) == (c.pp * c.vp, m.layers)
    parts = _generate_llm_fqn_per_model_part(stages, layers, first, last)
    per_stage = [sum(n.startswith("layers.") for n in p) for p in parts]
    if c.stage_layers is None:
        assert per_stage == [m.layers // (c.pp * c.vp)] * stages
    else:  # torchtitan's own split, stage s on rank s % pp ("loop"), is the layout the search costed
        assert [sum(per_stage[r::c.pp]) for r in range(c.pp)] == list(c.stage_layers)
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]


@pytest.mark.parametrize("name", [n for n in CASES if "fp8" not in n])
def test_torchtitan_loads_and_validates(load: Any, name: str) -> None:
    req, _ = CASES[name]
    cfg = load(torchtitan_config(req))
    check_with_torchtitan(cfg, req)


def test_enumerated_configs(titan: ModuleType, load: Any) -> None:
    """Each sampled search candidate either loads in torchtitan and passes its checks, or is a 1F1B
    layout with fewer micro-batches than stages, which torch's Schedule1F1B refuses."""
    loaded = 0
    for req in torchtitan_sample():
        c = req.config
        if c.pp > 1 and c.vp == 1 and 256 // (c.dp * c.micro_batch) < c.pp:
            with pytest.raises(SpecError, match="1F1B"):
                torchtitan_config(req)
            continue
        check_with_torchtitan(load(torchtitan_config(req)), req)
        loaded += 1
    assert loaded >= 60


def test_golden_is_torchtitans_llama3_70b_on_64_gpus(titan: ModuleType, load: Any) -> None:
    """The golden layout against torchtitan's llama3_70b() at 64 GPUs: every field is the same once
    torchtitan resolves its defaults (dp_shard -1 -> 8, global batch -1 -> 8 * 8, reshard "default" ->
    True without pp); only what autopar spells out differs in spelling."""
    from torchtitan.distributed.fsdp import get_fsdp_reshard_after_forward_policy

    ours, theirs = load(GOLDEN.read_text()), titan.llama3_70b()
    assert ours.training.steps == 1000 and ours.dataloader.dataset == "c4"  # the recipe, not the environment's
    for f in dataclasses.fields(ours):
        if f.name not in ("model_spec", "parallelism", "training"):
            assert getattr(ours, f.name) == getattr(theirs, f.name), f.name
    assert ours.model_spec.flavor == theirs.model_spec.flavor == "70B"
    assert shape(ours.model_spec) == shape(theirs.model_spec)
    spelled = {"data_parallel_shard_degree": (8, -1), "fsdp_reshard_after_forward": ("always", "default")}
    for f in dataclasses.fields(ours.parallelism):
        a, b = getattr(ours.parallelism, f.name), getattr(theirs.parallelism, f.name)
        assert (a, b) == spelled[f.name] if f.name in spelled else a == b, f.name
    assert get_fsdp_reshard_after_forward_policy("default", pp_enabled=False) is True
    assert (ours.training.global_batch_size, theirs.training.global_batch_size) == (64, -1)
    assert replace(ours.training, global_batch_size=-1) == theirs.training


def shape(spec: Any) -> str:
    """A ModelSpec's model config as text, without the addresses of its parameter-init closures."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(spec.model))


def _no_float8(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Build Float8LinearConverter without torchao or an SM89 GPU (recording its configs, converting nothing)."""
    from torchtitan.components.quantization import Float8LinearConverter

    built: list[Any] = []

    def init(self: Any, config: Any) -> None:
        self.config, self.enabled = config, False
        built.append(config)

    monkeypatch.setattr(Float8LinearConverter, "__init__", init)
    return built


def test_405b_bf16_base_is_registry_llama3_405b(titan: ModuleType, load: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """_llama3_405b_bf16() in the module equals torchtitan's llama3_405b() minus the Float8 converter."""
    built = _no_float8(monkeypatch)
    theirs = titan.llama3_405b()
    assert [(c.filter_fqns, c.model_compile_enabled) for c in built] == [(["lm_head"], True)]
    load(torchtitan_config(CASES["405b-pp7-vp2-a100"][0]))
    ours = sys.modules[CONFIG_MODULE]._llama3_405b_bf16()
    for f in dataclasses.fields(ours):
        if f.name != "model_spec":
            assert getattr(ours, f.name) == getattr(theirs, f.name), f.name

    assert (ours.model_spec.flavor, shape(ours.model_spec)) == (theirs.model_spec.flavor, shape(theirs.model_spec))
    assert len(built) == 1  # ours built no converter


@pytest.mark.parametrize("name", ["8b-fp8", "405b-fp8"])
def test_fp8_uses_float8_converter(titan: ModuleType, load: Any, monkeypatch: pytest.MonkeyPatch,
                                   name: str) -> None:
    built = _no_float8(monkeypatch)
    req, _ = CASES[name]
    cfg = load(torchtitan_config(req))
    check_with_torchtitan(cfg, req)
    assert cfg.compile.enable is True
    # llama3_8b() without fp8 converts nothing; ours converts once, like llama3_405b(): lm_head stays bf16
    assert [(c.filter_fqns, c.model_compile_enabled) for c in built] == [(["lm_head"], True)]


def test_llama3_8b_recipe_loads_in_torchtitan(titan: ModuleType, load: Any) -> None:
    """Llama 3 8B with a full recipe: torchtitan builds the config with the recipe's data, tokenizer, length and
    schedule and the spec's RoPE (base 500000, no Llama 3.1 scaling), and its own checks pass."""
    recipe = TrainingRecipe(tokenizer="/models/llama3-8b", dataset="c4", lr=3e-4, min_lr=3e-5, train_iters=5000,
                            warmup_iters=50, lr_schedule="cosine", save="ckpt", save_interval=500)
    req = replace(request("llama3-8b", nodes=1, dp=8, tp=1, sp=False, micro_batch=1, zero_stage=2,
                          recompute="none"), recipe=recipe)
    cfg = load(torchtitan_config(req))
    check_with_torchtitan(cfg, req)
    assert (cfg.hf_assets_path, cfg.dataloader.dataset, cfg.training.steps) == ("/models/llama3-8b", "c4", 5000)
    assert cfg.optimizer.param_groups[0].optimizer_kwargs["lr"] == 3e-4
    assert (cfg.lr_scheduler.warmup_steps, cfg.lr_scheduler.decay_type) == (50, "cosine")
    assert cfg.lr_scheduler.min_lr_factor == pytest.approx(0.1)
    assert (cfg.checkpoint.enable, cfg.checkpoint.folder, cfg.checkpoint.interval) == (True, "ckpt", 500)
    ropes = {(layer.attention.rope.theta, layer.attention.rope.scaling) for layer in cfg.model_spec.model.layers}
    assert ropes == {(500000, "none")}
