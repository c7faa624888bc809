"""Launchers: torchrun (c10d rendezvous), the deepspeed launcher with a hostfile, a Slurm sbatch script.

Facts from ``shared/reference/frameworks.md`` §9. torchrun and Slurm run either the request's
train script or, given ``module=``, a Python module (``torchrun ... -m MODULE args``, like
``python -m``; torchtitan's entry point is ``-m torchtitan.train``), with optional extra
environment (``env=``) exported after the framework's own. Every value taken from the request
(host names, job name, train script, module, script arguments, environment) is quoted with
:func:`quote`. Values that land somewhere a shell quote does not protect are refused instead:

* comment lines (the per-node notes) carry host names JSON-escaped, so a newline cannot end
  the comment and start a command;
* ``#SBATCH`` directives are single lines read by sbatch, so a job name with a control
  character (newline, ...) is refused;
* the deepspeed hostfile is parsed with ``^(\\S+)\\s+slots=(\\d+)``, not by a shell, so a host
  name that is empty or contains whitespace is refused.

Every script sets ``LAUNCH_DIR`` to the directory that holds the emitted files (its own directory;
for Slurm, which runs a copy of the script, the directory it was submitted from), refers to the
other emitted files through it, and passes its own arguments on to the training entry point
(``"$@"``): ``bash launch_torchrun.sh --seed 7`` adds ``--seed 7``. The shell expands nothing else
but the recipe placeholders (:func:`service.launch._shell.placeholder`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from search import SpecError
from search._unfused_paths import runs_op_fuser

from ._base import EntryPoint, LaunchFiles, LaunchRequest
from ._shell import command, export_lines, in_launch_dir, placeholder, quote

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
PASS_THROUGH = '"$@"'
"""The script's own arguments, passed on to the training entry point."""
_SCRIPT_DIR = ('LAUNCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"'
               "  # the emitted files: this script's directory\n")
TRAIN_SCRIPT = "pretrain_gpt.py"
"""Megatron-LM's and Megatron-DeepSpeed's GPT entry point (relative: run from the framework's checkout)."""
DS_ENV_FILE = ".deepspeed_env"


def train_script(request: LaunchRequest) -> str:
    """The entry point the launchers run: the request's, else the framework's (plain DeepSpeed has
    none: a ``TRAIN_SCRIPT`` placeholder, set at launch)."""
    if request.train_script is not None:
        return request.train_script
    if request.training.framework == "deepspeed":
        return placeholder("TRAIN_SCRIPT", "your DeepSpeed training script, which takes --deepspeed "
                                           "--deepspeed_config FILE")
    return TRAIN_SCRIPT


def framework_env(request: LaunchRequest) -> dict[str, str]:
    """Environment the framework needs (no NCCL settings by default).

    ``CUDA_DEVICE_MAX_CONNECTIONS`` (one hardware queue, so kernels run in issue order and TP/CP
    communication overlaps as scheduled). Megatron-LM 0.19.2 ``validate_args`` asserts it is 1
    when tp > 1 or cp > 1 on GPUs before Blackwell, and asserts it is *not* 1 with Megatron-FSDP
    ("FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset"), so for Megatron-FSDP (our ZeRO-2/3
    for Megatron) it is set to CUDA's default of 8 explicitly, overriding a cluster-wide 1.
    Megatron-DeepSpeed raises without it when sequence parallelism is on (tp > 1).

    ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`` where the Megatron launch runs Transformer Engine's op fuser on the
    experts (``--use-transformer-engine-op-fuser``, which an MoE model's full-iteration CUDA graph needs:
    :func:`service.launch._megatron._graphed_expert_args`): megatron-core 0.19.0 ``TEGroupedMLP.__init__``
    asserts ``_is_fused_impl_supported()``, which is false for a GLU without it (``moe/experts.py:398``), as
    Megatron-Bridge's 26.08 MoE recipes set it (``perf_recipes/gpt_oss/gb300/gpt_oss.py:251`` @ v0.6.0).
    """
    c, framework = request.config, request.training.framework
    env: dict[str, str] = {}
    if framework == "megatron":
        if c.zero_stage >= 2:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
        elif c.tp > 1 or c.cp > 1:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
        if runs_op_fuser(request.model, c.cuda_graphs):
            env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "1"
    if framework == "megatron-deepspeed" and c.tp > 1:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env


def _hosts(request: LaunchRequest) -> tuple[str, ...]:
    n = request.cluster.num_nodes
    if not request.hosts:
        return tuple(f"node{i}" for i in range(n))
    if len(request.hosts) != n:
        raise SpecError("LaunchRequest.hosts", f"{len(request.hosts)} hosts for {n} nodes",
                        f"give exactly {n} host names (ClusterSpec.num_nodes), or none for placeholders")
    return tuple(request.hosts)


def _master_addr(request: LaunchRequest) -> str:
    return request.master_addr or _hosts(request)[0]


def _script_argv(request: LaunchRequest, script_args: Sequence[str], module: str | None = None) -> list[str]:
    """``train_script args``, or ``-m module args`` when a module is given."""
    if module is not None:
        return ["-m", module, *script_args]
    return [train_script(request), *script_args]


def _check_quotable(request: LaunchRequest, script_args: Sequence[str], module: str | None = None) -> None:
    """Refuse NUL in any request value, naming its field, and a module that is no dotted Python name."""
    quote(request.job_name, "LaunchRequest.job_name")
    if module is None:
        quote(train_script(request), "LaunchRequest.train_script")
    elif not isinstance(module, str) or _MODULE.fullmatch(module) is None:
        raise SpecError("module", f"{module!r} is not a dotted Python module name",
                        "give a module importable on every node, e.g. 'torchtitan.train'")
    quote(request.master_addr, "LaunchRequest.master_addr")
    for host in request.hosts:
        quote(host, "LaunchRequest.hosts")
    for arg in script_args:
        quote(arg, "script_args")


def _launch_env(request: LaunchRequest, env: Mapping[str, str] | None) -> dict[str, str]:
    """The framework's environment, then ``env`` (which wins on a shared name)."""
    return {**framework_env(request), **(env or {})}


def torchrun_argv(request: LaunchRequest, script_args: Sequence[str], *, module: str | None = None) -> list[str]:
    """The torchrun argv for a multi-node c10d rendezvous (the same on every node).

    With ``module`` torchrun runs ``-m module`` (``python -m`` semantics) instead of the train script.
    """
    _check_quotable(request, script_args, module)
    return ["torchrun",
            "--nnodes", str(request.cluster.num_nodes),
            "--nproc-per-node", str(request.cluster.node.gpus_per_node),
            "--rdzv-id", request.job_name,
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{_master_addr(request)}:{request.master_port}",
            *_script_argv(request, script_args, module)]


def torchrun(request: LaunchRequest, script_args: Sequence[str], *, module: str | None = None,
             env: Mapping[str, str] | None = None) -> LaunchFiles:
    """``launch_torchrun.sh``: the exports and the torchrun line, to run on every node.

    ``module``: run ``-m module`` instead of the train script; ``env``: exported after the
    framework's environment (e.g. ``PYTHONPATH`` for a config module).
    """
    argv = torchrun_argv(request, script_args, module=module)
    exports = _launch_env(request, env)
    line = command(argv)
    notes = "".join(f"# node {i}: {json.dumps(host)}\n" for i, host in enumerate(_hosts(request)))
    script = ("#!/bin/bash\n"
              "# Run this same script on every node; c10d rendezvous assigns the ranks. Its arguments go on to\n"
              "# the training entry point; an unset recipe value stops it with a message naming the variable.\n"
              f"{notes}"
              "set -euo pipefail\n"
              f"{_SCRIPT_DIR}"
              f"{export_lines(exports)}"
              f"{line} {PASS_THROUGH}\n")
    return LaunchFiles(files={"launch_torchrun.sh": script}, command=line, env=exports)


def with_torchrun(request: LaunchRequest, files: dict[str, str], entry: EntryPoint) -> LaunchFiles:
    """A framework's ``files`` with the torchrun line (the same on every node) that runs ``entry``, the
    environment it exports and the entry point's notes: what the framework targets emit."""
    argv = torchrun_argv(request, entry.args, module=entry.module)
    return LaunchFiles(files=files, command=command(argv), env=_launch_env(request, entry.env), notes=entry.notes)


def deepspeed_argv(request: LaunchRequest, script_args: Sequence[str]) -> list[str]:
    """The deepspeed launcher argv (pdsh to the hosts in ``hostfile``)."""
    _check_quotable(request, script_args)
    return ["deepspeed",
            "--hostfile", in_launch_dir("hostfile"),
            "--master_addr", _master_addr(request),
            "--master_port", str(request.master_port),
            *_script_argv(request, script_args)]


def deepspeed_launcher(request: LaunchRequest, script_args: Sequence[str]) -> LaunchFiles:
    """``hostfile`` (``host slots=G`` per node), ``launch_deepspeed.sh`` (run once, on the first node)
    and the ``deepspeed --hostfile ...`` command.

    The launcher starts the other nodes' ranks over pdsh/ssh, which carries only a few variables
    (``NCCL*``, ``PYTHON*``, ...); the framework's environment goes to every rank through
    ``.deepspeed_env`` (``DS_ENV_FILE`` points the launcher at it).
    """
    argv = deepspeed_argv(request, script_args)
    env = framework_env(request)
    gpn = request.cluster.node.gpus_per_node
    lines = []
    for host in _hosts(request):
        if re.fullmatch(r"\S+", host) is None:
            raise SpecError("LaunchRequest.hosts", f"{host!r} is empty or contains whitespace, "
                            "which the deepspeed hostfile format (host slots=N) cannot carry",
                            "use the node's host name or address")
        lines.append(f"{host} slots={gpn}\n")
    files = {"hostfile": "".join(lines)}
    exports: dict[str, str] = {}
    if env:
        export_lines(env)  # refuses a bad name or value before it reaches the file
        files[DS_ENV_FILE] = "".join(f"{name}={value}\n" for name, value in env.items())
        exports = {**env, "DS_ENV_FILE": in_launch_dir(DS_ENV_FILE)}
    files["launch_deepspeed.sh"] = ("#!/bin/bash\n"
                                    "# Run once, on the first node: the deepspeed launcher starts every rank of the "
                                    "hostfile over ssh.\n# Its arguments go on to the training entry point; an unset "
                                    "recipe value stops it with a message.\n"
                                    "set -euo pipefail\n"
                                    f"{_SCRIPT_DIR}"
                                    f"{export_lines(exports)}"
                                    f"{command(argv)} {PASS_THROUGH}\n")
    return LaunchFiles(files=files, command=command(argv), env=env)


def slurm(request: LaunchRequest, script_args: Sequence[str], *, module: str | None = None,
          env: Mapping[str, str] | None = None) -> LaunchFiles:
    """``job.sbatch``: one task per node, each running torchrun with a c10d rendezvous on the first node.

    ``$SLURM_JOB_NODELIST``, ``$SLURM_NNODES``, ``$SLURM_JOB_ID`` and ``$MASTER_ADDR`` are left
    to the shell on purpose (in double quotes): Slurm sets them when the job runs. Every value
    from the request is single-quoted. ``module`` and ``env`` as for :func:`torchrun` (srun
    passes the exported environment on to the tasks). Slurm runs a copy of the script, so the
    launch directory is the one ``sbatch`` ran in (``$SLURM_SUBMIT_DIR``): submit from it.
    """
    _check_quotable(request, script_args, module)
    if _CONTROL.search(request.job_name):
        raise SpecError("LaunchRequest.job_name", f"{request.job_name!r} contains a control character "
                        "(e.g. a newline), which would end the #SBATCH directive",
                        "use a job name without control characters")
    gpn = request.cluster.node.gpus_per_node
    exports = _launch_env(request, env)
    run = command(_script_argv(request, script_args, module))
    script = ("#!/bin/bash\n"
              f"#SBATCH --job-name={quote(request.job_name, 'LaunchRequest.job_name')}\n"
              f"#SBATCH --nodes={request.cluster.num_nodes}\n"
              "#SBATCH --ntasks-per-node=1\n"
              f"#SBATCH --gpus-per-node={gpn}\n"
              "#SBATCH --exclusive\n"
              "set -euo pipefail\n"
              '# Slurm runs a copy of this script: the emitted files are where sbatch was run (submit from there).\n'
              'LAUNCH_DIR="${SLURM_SUBMIT_DIR:-$PWD}"\n'
              f"{export_lines(exports)}"
              '# Slurm variables below are expanded by the shell at run time, on purpose.\n'
              '# First node of the allocation; sed reads all input (head -n 1 would exit early and,\n'
              '# under pipefail, the SIGPIPE of scontrol would fail the job with status 141).\n'
              'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"\n'
              "export MASTER_ADDR\n"
              f'srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {gpn} --rdzv-id "$SLURM_JOB_ID" '
              f'--rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:{int(request.master_port)}" {run} {PASS_THROUGH}\n')
    return LaunchFiles(files={"job.sbatch": script}, command="sbatch job.sbatch", env=exports)
