"""Launchers: torchrun, deepspeed launcher + hostfile, Slurm sbatch; quoting against shell injection."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import search
from search import SpecError
from service.launch._base import LaunchRequest
from service.launch._launchers import deepspeed_launcher, framework_env, slurm, torchrun
from service.launch._recipe import TrainingRecipe
from service.launch._shell import command, export_lines, in_launch_dir, placeholder, quote

ARGS = ["--tensor-model-parallel-size", "4", "--save", "/ckpt dir/run 1"]
HOSTFILE = "${LAUNCH_DIR:-.}/hostfile"


def request(**kw: object) -> LaunchRequest:
    base = LaunchRequest(model=search.model_preset("gpt-7.5b"), cluster=search.cluster_preset("dgx-a100-80gb", 2),
                         config=search.ParallelConfig(dp=4, tp=4), training=search.TrainingSpec(64))
    return replace(base, **kw)  # type: ignore[arg-type]


def expected_torchrun(nnodes: int, endpoint: str, job: str, script: str, args: list[str]) -> list[str]:
    return ["torchrun", "--nnodes", str(nnodes), "--nproc-per-node", "8", "--rdzv-id", job,
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, script, *args]


# --- plain outputs -------------------------------------------------------------------------

def test_torchrun_command_and_script(tmp_path: Path) -> None:
    out = torchrun(request(hosts=("gpu-a", "gpu-b")), ARGS)
    assert shlex.split(out.command) == expected_torchrun(2, "gpu-a:29500", "autopar", "pretrain_gpt.py", ARGS)
    script = out.files["launch_torchrun.sh"]
    assert set(out.files) == {"launch_torchrun.sh"}
    assert "set -euo pipefail" in script
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script
    assert '# node 0: "gpu-a"' in script and '# node 1: "gpu-b"' in script
    assert script.rstrip("\n").splitlines()[-1] == out.command + ' "$@"'  # the script's arguments pass through
    bash_n(tmp_path, script)


def test_torchrun_placeholders_and_master_addr() -> None:
    out = torchrun(request(), [])
    assert shlex.split(out.command)[-3:] == ["--rdzv-endpoint", "node0:29500", "pretrain_gpt.py"]
    out = torchrun(request(master_addr="10.0.0.1", master_port=1234), [])
    assert "10.0.0.1:1234" in shlex.split(out.command)


def test_deepspeed_launcher_hostfile_and_command() -> None:
    out = deepspeed_launcher(request(hosts=("gpu-a", "gpu-b")), ARGS)
    assert out.files["hostfile"].splitlines() == ["gpu-a slots=8", "gpu-b slots=8"]
    assert shlex.split(out.command) == ["deepspeed", "--hostfile", HOSTFILE, "--master_addr", "gpu-a",
                                        "--master_port", "29500", "pretrain_gpt.py", *ARGS]
    # pdsh carries only NCCL*/PYTHON*/...: the framework's environment reaches the other nodes' ranks
    # through .deepspeed_env, which DS_ENV_FILE points the launcher at
    assert out.files[".deepspeed_env"] == "CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    script = out.files["launch_deepspeed.sh"]
    assert 'export DS_ENV_FILE="${LAUNCH_DIR:-.}/.deepspeed_env"' in script
    assert script.rstrip("\n").splitlines()[-1] == out.command + ' "$@"'
    assert ".deepspeed_env" not in deepspeed_launcher(request(config=search.ParallelConfig(dp=16)), []).files
    placeholder = deepspeed_launcher(request(), [])
    assert placeholder.files["hostfile"] == "node0 slots=8\nnode1 slots=8\n"


def test_slurm_script(tmp_path: Path) -> None:
    out = slurm(request(job_name="my job"), ARGS)
    assert out.command == "sbatch job.sbatch"
    script = out.files["job.sbatch"]
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in ("--job-name='my job'", "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8",
                      "--exclusive"):
        assert f"#SBATCH {directive}" in lines
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in lines
    assert 'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"' in lines
    srun = next(line for line in lines if line.startswith("srun "))
    assert shlex.split(srun, posix=True) == [
        "srun", "torchrun", "--nnodes", "$SLURM_NNODES", "--nproc-per-node", "8", "--rdzv-id", "$SLURM_JOB_ID",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "$MASTER_ADDR:29500", "pretrain_gpt.py", *ARGS, "$@"]
    assert 'LAUNCH_DIR="${SLURM_SUBMIT_DIR:-$PWD}"' in lines  # sbatch runs a copy: the submit directory
    bash_n(tmp_path, script)


def test_slurm_script_runs_with_stubs(tmp_path: Path) -> None:
    out = slurm(request(), ARGS)
    argv = run_script(tmp_path, out.files["job.sbatch"])
    assert argv == expected_torchrun(2, "gpu-a:29500", "77", "pretrain_gpt.py", ARGS)


def test_scripts_pass_arguments_on_and_find_their_own_directory(tmp_path: Path) -> None:
    """Run from elsewhere with extra arguments: they reach the entry point, and files next to the script are
    found through LAUNCH_DIR (its own directory), not a path of the machine that emitted it."""
    launch = tmp_path / "launch dir"
    launch.mkdir()
    out = torchrun(request(), ["--deepspeed_config", in_launch_dir("ds_config.json")])
    (launch / "launch_torchrun.sh").write_text(out.files["launch_torchrun.sh"])
    argv = run_script(tmp_path, f"exec bash {shlex.quote(str(launch / 'launch_torchrun.sh'))} --seed 7 'a b'\n")
    assert argv[-4:] == [f"{launch}/ds_config.json", "--seed", "7", "a b"]
    req = request(recipe=TrainingRecipe(), training=search.TrainingSpec(64, framework="megatron"))
    with_placeholder = torchrun(req, ["--lr", placeholder("LR", "the peak learning rate")])
    done = run_script(tmp_path, with_placeholder.files["launch_torchrun.sh"], check=False)
    assert isinstance(done, subprocess.CompletedProcess) and done.returncode != 0
    assert b"LR: autopar: set LR to the peak learning rate" in done.stderr
    assert run_script(tmp_path, with_placeholder.files["launch_torchrun.sh"], env={"LR": "3e-4"})[-2:] == [
        "--lr", "3e-4"]


def test_plain_deepspeed_needs_its_training_script(tmp_path: Path) -> None:
    ds = request(config=search.ParallelConfig(dp=16), training=search.TrainingSpec(64, framework="deepspeed"))
    script = torchrun(ds, []).files["launch_torchrun.sh"]
    done = run_script(tmp_path, script, check=False)
    assert isinstance(done, subprocess.CompletedProcess) and b"set TRAIN_SCRIPT" in done.stderr
    assert run_script(tmp_path, script, env={"TRAIN_SCRIPT": "train.py"})[-1] == "train.py"


def test_framework_env() -> None:
    assert framework_env(request()) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    mds = request(training=search.TrainingSpec(64, framework="megatron-deepspeed"))
    assert framework_env(mds) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert framework_env(request(config=search.ParallelConfig(dp=16, tp=1))) == {}
    ds = request(config=search.ParallelConfig(dp=16), training=search.TrainingSpec(64, framework="deepspeed"))
    assert framework_env(ds) == {}
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in torchrun(ds, []).files["launch_torchrun.sh"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in slurm(ds, []).files["job.sbatch"]


# --- refusals ------------------------------------------------------------------------------

def test_nul_refused_naming_field() -> None:
    with pytest.raises(SpecError) as e:
        quote("a\0b", field="hosts")
    assert e.value.field == "hosts"
    for kw, field in ((dict(hosts=("a\0", "b")), "LaunchRequest.hosts"),
                      (dict(job_name="j\0"), "LaunchRequest.job_name"),
                      (dict(train_script="t\0.py"), "LaunchRequest.train_script"),
                      (dict(master_addr="m\0"), "LaunchRequest.master_addr")):
        for emit in (torchrun, deepspeed_launcher, slurm):
            with pytest.raises(SpecError) as e:
                emit(request(**kw), [])
            assert e.value.field == field
    with pytest.raises(SpecError) as e:
        torchrun(request(), ["ok", "bad\0"])
    assert e.value.field == "script_args"


def test_bad_env_name_refused() -> None:
    assert export_lines({"A_1": "x y"}) == "export A_1='x y'\n"
    for name in ("1A", "A-B", "A B", "", "A;touch x", "$(x)"):
        with pytest.raises(SpecError):
            export_lines({name: "1"})


def test_other_refusals() -> None:
    with pytest.raises(SpecError, match="hosts"):
        torchrun(request(hosts=("only-one",)), [])
    with pytest.raises(SpecError, match="hosts"):
        deepspeed_launcher(request(hosts=("a b", "c")), [])
    with pytest.raises(SpecError, match="hosts"):
        deepspeed_launcher(request(hosts=("", "c")), [])
    with pytest.raises(SpecError, match="job_name"):
        slurm(request(job_name="x\ntouch /tmp/pwned\n#"), [])


def test_command_quotes_each_part() -> None:
    assert shlex.split(command(["a b", "$(x)", 3, "'"])) == ["a b", "$(x)", "3", "'"]


# --- property tests: no injection ------------------------------------------------------------

PAYLOADS = ["$(touch {m})", "; touch {m}", "`touch {m}`", "'; touch {m}; '", "\"$(touch {m})\"",
            "\ntouch {m}\n", "a b", "&& touch {m} #", "| touch {m}", "$HOME", "\\", "'"]


def texts(marker: str) -> st.SearchStrategy[str]:
    plain = st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20)
    return st.one_of(plain, st.sampled_from([p.format(m=marker) for p in PAYLOADS]),
                     st.tuples(plain, st.sampled_from(PAYLOADS)).map(lambda t: t[0] + t[1].format(m=marker)))


MARKER = "MARKER_FILE"  # relative: resolved in the script's working directory (tmp_path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=texts(MARKER), hosts=st.tuples(texts(MARKER), texts(MARKER)), script=texts(MARKER),
       args=st.lists(texts(MARKER), max_size=4))
@example(job=f"\ntouch {MARKER}\n", hosts=(f"\ntouch {MARKER}\n", f"; touch {MARKER}"),
         script=f"`touch {MARKER}`", args=[f"$(touch {MARKER})", f"'; touch {MARKER}; '", "a\nb"])
@example(job=f"$(touch {MARKER})", hosts=(f"x\rtouch {MARKER}\n#", f"\\\ntouch {MARKER}"),
         script=f"a b\ntouch {MARKER}", args=[f"\"$(touch {MARKER})\"", "$HOME", "\\"])
def test_torchrun_no_injection(tmp_path: Path, job: str, hosts: tuple[str, str], script: str,
                               args: list[str]) -> None:
    assume(not any(v.startswith("-") for v in (job, script, *hosts)))  # refused: see the option test below
    req = request(hosts=hosts, job_name=job, train_script=script)
    out = torchrun(req, args)
    # master_addr is the first host, even an empty one (placeholders only when no hosts are given)
    want = expected_torchrun(2, f"{hosts[0]}:29500", job, script, args)
    assert shlex.split(out.command) == want
    assert run_script(tmp_path, out.files["launch_torchrun.sh"]) == want
    assert not (tmp_path / MARKER).exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hosts=st.tuples(texts(MARKER), texts(MARKER)), script=texts(MARKER), args=st.lists(texts(MARKER), max_size=4))
def test_deepspeed_no_injection(hosts: tuple[str, str], script: str, args: list[str]) -> None:
    assume(not any(v.startswith("-") for v in (script, *hosts)))  # refused: see the option test below
    req = request(hosts=hosts, train_script=script)
    if any(not h or any(c.isspace() for c in h) for h in hosts):
        with pytest.raises(SpecError, match="hosts"):
            deepspeed_launcher(req, args)
        return
    out = deepspeed_launcher(req, args)
    assert shlex.split(out.command) == ["deepspeed", "--hostfile", HOSTFILE, "--master_addr", hosts[0],
                                        "--master_port", "29500", script, *args]
    assert out.files["hostfile"].splitlines() == [f"{h} slots=8" for h in hosts]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=texts(MARKER), script=texts(MARKER), args=st.lists(texts(MARKER), max_size=4))
@example(job=f"x\ntouch {MARKER}\n#", script="s", args=[])
@example(job=f"$(touch {MARKER}) `touch {MARKER}`; touch {MARKER}", script=f"\ntouch {MARKER}\n",
         args=[f"$(touch {MARKER})", f"'; touch {MARKER}; '", "a\nb"])
def test_slurm_no_injection(tmp_path: Path, job: str, script: str, args: list[str]) -> None:
    assume(not any(v.startswith("-") for v in (job, script)))  # refused: see the option test below
    req = request(job_name=job, train_script=script)
    if any(ord(c) < 32 or ord(c) == 127 for c in job):
        with pytest.raises(SpecError, match="job_name"):
            slurm(req, args)
        return
    text = slurm(req, args).files["job.sbatch"]
    # split("\n"), not splitlines(): bash ends lines only at \n, while splitlines also splits
    # at \x85 and friends that a job name may legitimately contain.
    directives = [line for line in text.split("\n") if line.startswith("#SBATCH")]
    assert len(directives) == 5
    assert shlex.split(directives[0][len("#SBATCH "):]) == [f"--job-name={job}"]
    argv = run_script(tmp_path, text)
    assert argv == expected_torchrun(2, "gpu-a:29500", "77", script, args)
    assert not (tmp_path / MARKER).exists()


# --- helpers ---------------------------------------------------------------------------------

def bash_n(tmp_path: Path, script: str) -> None:
    path = tmp_path / "syntax.sh"
    path.write_text(script, encoding="utf-8")
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def run_script(tmp_path: Path, script: str, *, check: bool = True,
               env: dict[str, str] | None = None) -> Any:
    """Run ``script`` with bash, with torchrun/srun/scontrol stubbed; return torchrun's argv (``check=False``:
    the finished process when it failed)."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        stub = bin_dir / "torchrun"
        stub.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n", encoding="utf-8")
        (bin_dir / "srun").write_text('#!/bin/bash\nexec "$@"\n', encoding="utf-8")
        (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\n'\n", encoding="utf-8")
        for f in bin_dir.iterdir():
            f.chmod(0o755)
    path = tmp_path / "script.sh"
    path.write_text(script, encoding="utf-8")
    full = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "LC_ALL": "C.UTF-8",
            "SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_NNODES": "2", "SLURM_JOB_ID": "77", **(env or {})}
    done = subprocess.run(["bash", str(path)], cwd=tmp_path, env=full, capture_output=True, check=False)
    if not check and done.returncode:
        return done
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    argv: list[str] = json.loads(done.stdout.decode("utf-8", "surrogateescape"))
    return ["torchrun", *argv]


@pytest.mark.parametrize("target", ["torchrun", "deepspeed-launcher", "slurm"])
@pytest.mark.parametrize(("field", "value"), [
    ("train_script", "--rdzv-endpoint=attacker.example:29400"), ("job_name", "--dependency=afterok:1"),
    ("master_addr", "-x"), ("nvme_path", "--help"), ("hosts", ("-oProxyCommand=x", "b")),
])
def test_values_cannot_act_as_options_for_any_launcher(target: str, field: str, value: str) -> None:
    """Issue 17 item 6: torchrun takes the last --rdzv-endpoint, so a quoted train_script starting with
    '-' still moved the rendezvous. Every value that becomes a path or argument is refused instead."""
    import dataclasses

    from search import ParallelConfig, TrainingSpec, cluster_preset, model_preset
    from service.launch import LaunchRequest, emit_target

    base = dict(model=model_preset("gpt-7.5b"), cluster=cluster_preset("dgx-a100-80gb", 1),
                config=ParallelConfig(dp=8, zero_stage=1), training=TrainingSpec(64, framework="megatron"))
    with pytest.raises(SpecError, match=f"LaunchRequest.{field}"):
        request = LaunchRequest(**base, **{field: value})  # type: ignore[arg-type]
        emit_target(request, target)
    ok = LaunchRequest(**base, train_script="./-x.py")  # type: ignore[arg-type]
    assert "./-x.py" in emit_target(dataclasses.replace(ok), target).command + "".join(
        emit_target(ok, target).files.values())
