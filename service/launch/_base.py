"""What every launch target produces, and the one contract they all follow.

A launch target turns one ranked configuration (model, cluster, parallel config, training
spec) into the files and the command line that run it. Emitters are pure: they return text,
the caller writes it. Every value that reaches a shell goes through :func:`service.launch.quote`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from search import ClusterSpec, HardwareProfile, ModelSpec, ParallelConfig, TrainingSpec

from ._recipe import TrainingRecipe


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Everything an emitter needs about one run."""

    model: ModelSpec
    cluster: ClusterSpec
    config: ParallelConfig
    training: TrainingSpec
    hosts: tuple[str, ...] = ()
    """Host names of the nodes (launchers); empty means placeholders node0..nodeN-1."""
    master_addr: str = ""
    """Rendezvous host; the first host when empty."""
    master_port: int = 29500
    nvme_path: str = "/local_nvme"
    """Swap directory for ZeRO-Infinity NVMe offload."""
    train_script: str | None = None
    """The training entry point the launch command runs; None: the framework's (``pretrain_gpt.py`` of
    Megatron-LM / Megatron-DeepSpeed, run from its checkout; for plain DeepSpeed, which has no entry
    point of its own, a ``TRAIN_SCRIPT`` placeholder set at launch)."""
    job_name: str = "autopar"
    profile: HardwareProfile | None = None
    """Measured hardware profile: supplies DeepSpeed's aio settings when NVMe is used."""
    recipe: TrainingRecipe = field(default_factory=TrainingRecipe)
    """Data, tokenizer, schedule, length, checkpoints and logging (placeholders where not given)."""


@dataclass(frozen=True, slots=True)
class LaunchFiles:
    """An emitter's output: files (relative path -> text) and the command that runs them."""

    files: dict[str, str] = field(default_factory=dict)
    command: str = ""
    """A shell command line, every value quoted."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment the framework needs (exported by the command / script)."""
    notes: tuple[str, ...] = ()
    """What the files leave to the user or could not check (said by the CLI and the API)."""
