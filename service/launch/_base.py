"""What every launch target produces, and the one contract they all follow.

A launch target turns one ranked configuration (model, cluster, parallel config, training
spec) into the files and the command line that run it. Emitters are pure: they return text,
the caller writes it. Every value that reaches a shell goes through :func:`service.launch.quote`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from search import ClusterSpec, HardwareProfile, ModelSpec, ParallelConfig, SpecError, TrainingSpec
from search._parallel_spec import BLACKWELL_PRECISIONS, Framework
from search._predict import check_precision
from search._support import check_model_supported

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

    def __post_init__(self) -> None:
        # A model feature the framework's files cannot express (the support matrix's refused model entries: MoE,
        # MLA, GPT-OSS's window, sinks, GLU or YaRN outside Megatron-Core) would be launched as another model.
        check_model_supported(self.model, self.training.framework)
        # The GPU runs the precision recipe (MXFP8/NVFP4 need Blackwell), the runtime emits it (Megatron-Core
        # alone for those two): every target's launch file would otherwise name a recipe nothing runs.
        if self.training.precision in BLACKWELL_PRECISIONS:  # fp8/bf16 support: each emitter says it its way
            check_precision(self.cluster.gpu, self.training.precision)
        if self.training.precision in BLACKWELL_PRECISIONS and self.training.framework != "megatron":
            raise SpecError("TrainingSpec.precision", f"{self.training.precision} is costed and emitted for "
                            f"Megatron-Core only, not {self.training.framework}",
                            "use framework megatron, or precision fp8 / bf16")
        # The full-iteration CUDA graph is Megatron-Core's (--cuda-graph-impl full_iteration; the support matrix's
        # '<runtime>-cuda-graphs' entries): another runtime's launch file would run the step without it.
        if self.config.cuda_graphs != "none" and self.training.framework != "megatron":
            raise SpecError("ParallelConfig.cuda_graphs", f"the {self.config.cuda_graphs} CUDA graph is costed and "
                            f"emitted for Megatron-Core only, not {self.training.framework}",
                            "use framework megatron, or cuda_graphs='none'")
        # A value that becomes a program path or argument must not act as an option: torchrun takes
        # the last --rdzv-endpoint, so a train_script "--rdzv-endpoint=attacker:29400" would move the
        # rendezvous although every shell value is quoted (issue 17, found by an adversarial probe).
        for name in ("train_script", "job_name", "master_addr", "nvme_path", *(() if not self.hosts else ("hosts",))):
            values = self.hosts if name == "hosts" else (getattr(self, name),)
            for value in values:
                if value is None or value == "":
                    continue
                if value.startswith("-"):
                    raise SpecError(f"LaunchRequest.{name}", f"{value!r} starts with '-', so the launcher would read "
                                    "it as an option", "give a path or name that does not start with '-' (use ./-x)")


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


@dataclass(frozen=True, slots=True)
class EntryPoint:
    """What a launcher runs for one framework: the training entry point's arguments, and how to start it."""

    args: tuple[str, ...]
    """The arguments after the train script (or after ``-m module``)."""
    module: str | None = None
    """A Python module run as ``-m module`` instead of the request's train script; None: the train script."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment the entry point needs on top of the framework's (e.g. ``PYTHONPATH`` for a config module)."""
    notes: tuple[str, ...] = ()
    """What the framework's files leave to the user (placeholders to set, ...)."""


class LaunchTarget(Protocol):
    """One way to launch a ranked configuration: a framework's files, or a launcher's script.

    The contract, run against every registered target over every enumerated configuration by
    ``tests/service/launch/test_targets.py``:

    * ``name`` is unique among the targets; it is what ``--emit`` and the launch endpoint's
      ``target`` take;
    * ``frameworks`` are the :data:`search.FRAMEWORKS` whose configurations ``emit`` writes;
    * ``emit(request)`` for a request of one of those frameworks returns at least one non-empty
      file, and a command unless the framework's own launch needs a launcher target (plain
      DeepSpeed's ``ds_config.json``); it is pure: the same request gives equal files, command,
      environment and notes;
    * a request of any other framework is refused with a :class:`search.SpecError` on field
      ``target`` that names the targets which run it; a configuration the framework cannot run
      is refused with a SpecError naming the field to change.
    """

    @property
    def name(self) -> str:
        """What ``--emit`` and the launch endpoint's ``target`` call it."""
        ...

    @property
    def frameworks(self) -> tuple[Framework, ...]:
        """The frameworks whose configurations it launches."""
        ...

    def emit(self, request: LaunchRequest) -> LaunchFiles:
        """The files, command, environment and notes that launch ``request``."""
        ...
