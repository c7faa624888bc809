"""What a prediction returns: time, throughput, memory, feasibility, and why."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from search._breakdowns import MemoryBreakdown, TimeBreakdown
from search._units import GiB


@dataclass(frozen=True, slots=True)
class Prediction:
    """One configuration's predicted step.

    ``time_breakdown_s`` holds the exposed seconds of each named term; they add up to
    ``iteration_time_s``. ``memory_breakdown_bytes`` holds the peak GPU's components;
    they add up to ``peak_memory_bytes_per_gpu``. Both are typed frozen dataclasses read as
    mappings from the term's name (:mod:`search._breakdowns`).
    """

    iteration_time_s: float
    time_breakdown_s: TimeBreakdown
    tokens_per_s: float
    model_flop_per_iteration: float
    hardware_flop_per_iteration: float
    model_tflop_per_s_per_gpu: float
    mfu: float
    hfu: float
    peak_memory_bytes_per_gpu: float
    memory_breakdown_bytes: MemoryBreakdown
    gpu_memory_bytes: float
    cpu_memory_bytes_per_node: float
    nvme_bytes_per_node: float
    num_micro_batches: int
    feasible: bool
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    stage_layers: tuple[int, ...] = ()
    """Transformer layers on each pipeline rank, first to last."""
    stage_times_s: tuple[float, ...] = ()
    """Per-micro-batch time of each pipeline rank (layers, host overhead, the LM head on the last);
    the slowest paces the pipeline."""
    stage_peak_memory_bytes: tuple[float, ...] = ()
    """Peak GPU memory of each pipeline rank; the largest is ``peak_memory_bytes_per_gpu``."""
    cpu_memory_breakdown_bytes: dict[str, float] = field(default_factory=dict)
    """Host memory per node by component (offloaded optimizer states and parameters, activation
    checkpoints, NVMe swap buffers, the OS and processes' allowance, a requested safety margin);
    adds up to ``cpu_memory_bytes_per_node``."""
    host_estimator_margin_bytes: float = 0.0
    """What DeepSpeed's estimators (``additional_buffer_factor`` 1.5) would add on top of the
    offloaded states: a safety margin, not part of the requirement unless asked for."""
    error_band: float = 0.0
    """Relative iteration-time error to expect (0.07: +-7 %): the model's measured MAPE on
    published runs of this runtime and GPU family (:func:`search._error_band.error_band`)."""

    @property
    def bottleneck(self) -> str:
        """The largest term of the time breakdown."""
        return max(self.time_breakdown_s.items(), key=lambda kv: kv[1])[0]

    @property
    def memory_headroom_bytes(self) -> float:
        """GPU memory left at the peak (negative when it does not fit)."""
        return self.gpu_memory_bytes - self.peak_memory_bytes_per_gpu

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, with the derived ``bottleneck`` and ``memory_headroom_bytes``."""
        out = asdict(self)
        out["time_breakdown_s"] = dict(self.time_breakdown_s.items())
        out["memory_breakdown_bytes"] = dict(self.memory_breakdown_bytes.items())
        out["reasons"] = list(self.reasons)
        out["warnings"] = list(self.warnings)
        out["stage_layers"] = list(self.stage_layers)
        out["stage_times_s"] = list(self.stage_times_s)
        out["stage_peak_memory_bytes"] = list(self.stage_peak_memory_bytes)
        out["bottleneck"] = self.bottleneck
        out["memory_headroom_bytes"] = self.memory_headroom_bytes
        return out

    def explain(self) -> str:
        """A readable multi-line breakdown for people."""
        lines = [
            f"iteration time   {self.iteration_time_s:10.3f} s   ({self.num_micro_batches} micro-batches; "
            f"+-{self.error_band:.0%}, the model's measured error for this runtime and GPU)",
            f"throughput       {self.tokens_per_s:10.0f} tokens/s",
            f"model TFLOP/s    {self.model_tflop_per_s_per_gpu:10.1f} per GPU   "
            f"MFU {self.mfu:.1%}   HFU {self.hfu:.1%}",
            "time breakdown (exposed seconds):",
        ]
        total = self.iteration_time_s or 1.0
        for name, value in sorted(self.time_breakdown_s.items(), key=lambda kv: -kv[1]):
            if value > 0:
                lines.append(f"  {name:<22} {value:10.3f} s  {value / total:6.1%}")
        lines.append(f"peak GPU memory  {self.peak_memory_bytes_per_gpu / GiB:10.1f} GiB of "
                     f"{self.gpu_memory_bytes / GiB:.1f} GiB")
        for name, value in sorted(self.memory_breakdown_bytes.items(), key=lambda kv: -kv[1]):
            if value > 0:
                lines.append(f"  {name:<22} {value / GiB:10.2f} GiB")
        if self.cpu_memory_bytes_per_node:
            lines.append(f"CPU memory/node  {self.cpu_memory_bytes_per_node / GiB:10.1f} GiB")
            for name, value in self.cpu_memory_breakdown_bytes.items():
                if value > 0:
                    lines.append(f"  {name:<22} {value / GiB:10.2f} GiB")
            if self.host_estimator_margin_bytes and "safety_margin" not in self.cpu_memory_breakdown_bytes:
                lines.append(f"  (DeepSpeed's estimator would add {self.host_estimator_margin_bytes / GiB:.1f} GiB "
                             "of safety margin: --host-safety-factor 1.5)")
        if self.nvme_bytes_per_node:
            lines.append(f"NVMe/node        {self.nvme_bytes_per_node / 1e12:10.2f} TB")
        lines.append("feasible" if self.feasible else "NOT feasible: " + "; ".join(self.reasons))
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)
