"""The sections of ``autopar profile``: one :class:`ProfileSection` each, registered once in :data:`PROFILE_SECTIONS`.

A section measures one thing on this node and says which :class:`search.HardwareProfile` fields it fills
(``fills``); :func:`profiler.run_profile` runs the selected ones in order and puts what each measured into
the profile. A section that cannot run here raises :class:`ProfilerUnavailable` (skipped with a note).
The benchmark modules import torch inside their functions, so this module imports without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from profiler._errors import ProfilerUnavailable
from profiler._fingerprint import local_gpu_count
from search import LinkFit, SpecError, model_preset

SHAPE_MODELS = ("gpt3-175b", "llama3-8b", "llama3-70b")
"""Models whose TP-split layer GEMMs the matmul sweep times (on a GPU)."""
TP_DEGREES = (1, 2, 4, 8)
CPU_SQUARE_SIZES = (128, 256, 512)
"""A CPU has no business timing transformer-sized GEMMs: small squares show the mechanics."""
CPU_COLLECTIVE_RANKS = 2
"""gloo processes when there is no GPU (the collective path is exercised, not a fabric)."""
COLLECTIVES_TIMEOUT_S = 1800

Progress = Callable[..., None]
"""``progress(done, total, *label)``: what the benchmarks call as they go."""


@dataclass(frozen=True, slots=True)
class SectionContext:
    """What every section is given: the run's options."""

    quick: bool = False
    """Fewer sizes and repeats."""
    nvme_path: str | None = None
    """A directory on the NVMe (the nvme section); None: that section is skipped with a note."""
    collectives: dict[str, Any] | None = None
    """A multi-node collectives worker's JSON (:func:`read_collectives`) that stands in for this node's collectives."""
    progress: Progress | None = None


@dataclass(slots=True)
class Measured:
    """What one section measured: profile fields (among its ``fills``), summary rows and notes."""

    fields: dict[str, Any] = field(default_factory=dict)
    """HardwareProfile field -> value."""
    rows: list[tuple[str, str]] = field(default_factory=list)
    """(measurement, value) lines for the summary table."""
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    """Ctrl-C stopped the section, which kept what it had measured."""


class ProfileSection(Protocol):
    """One section of ``autopar profile --only``.

    Contract (``tests/profiler/test_sections.py``): ``name`` is unique and is the word ``--only`` takes;
    ``fills`` are :class:`search.HardwareProfile` fields no other section fills; ``run`` returns values
    for some of ``fills`` only, and raises :class:`ProfilerUnavailable` when this node cannot run it.
    """

    @property
    def name(self) -> str:
        """The word ``autopar profile --only`` takes."""
        ...

    @property
    def fills(self) -> tuple[str, ...]:
        """The HardwareProfile fields it measures."""
        ...

    def run(self, context: SectionContext) -> Measured:
        """Measure on this node."""
        ...


@dataclass(frozen=True, slots=True)
class Section:
    """A section whose measurement is one function."""

    name: str
    fills: tuple[str, ...]
    measure: Callable[[SectionContext], Measured]

    def run(self, context: SectionContext) -> Measured:
        """``measure(context)``."""
        return self.measure(context)


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB/s"


def _matmul(context: SectionContext) -> Measured:
    from profiler._matmul import run_matmul, square_sweep, transformer_gemm_shapes

    quick, out = context.quick, Measured()
    gpu = local_gpu_count() > 0
    if gpu:
        models = [model_preset(n) for n in (SHAPE_MODELS[:1] if quick else SHAPE_MODELS)]
        shapes = transformer_gemm_shapes(models, TP_DEGREES, 2048 if quick else 4096)
        shapes += square_sweep((1024, 4096, 8192) if quick else (256, 512, 1024, 2048, 4096, 8192, 16384))
        dtypes: tuple[str, ...] = ("bf16", "fp16") if quick else ("bf16", "fp16", "tf32", "fp32")
    else:
        shapes = square_sweep(CPU_SQUARE_SIZES[:2] if quick else CPU_SQUARE_SIZES)
        dtypes = ("fp32",) if quick else ("fp32", "bf16")
    samples = run_matmul(shapes, dtypes, device="cuda" if gpu else "cpu", warmup=2 if quick else 3,
                         repeats=5 if quick else 10, notes=out.notes, progress=context.progress)
    for dtype in dtypes:
        rates = [s.flop_per_s for s in samples if s.dtype == dtype]
        if rates:
            out.rows.append((f"matmul {dtype} best", f"{max(rates) / 1e12:,.2f} TFLOP/s"))
    out.fields["gemm"] = tuple(samples)
    return out


def _collectives(context: SectionContext) -> Measured:
    if context.collectives is not None:
        return collective_fits(context.collectives)
    gpus = local_gpu_count()
    if gpus == 1:
        raise ProfilerUnavailable("collectives need at least 2 GPUs on the node (NCCL refuses two ranks on one "
                                  "GPU); run on a multi-GPU node, or across nodes with torchrun -m "
                                  "profiler.collectives_worker and --collectives-from its JSON")
    ranks = gpus or CPU_COLLECTIVE_RANKS
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "collectives.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "-m", "profiler.collectives_worker", "--out", str(out), "--quiet"]
        if context.quick:
            cmd.append("--quick")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=COLLECTIVES_TIMEOUT_S, check=False)
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise ProfilerUnavailable(f"the collective benchmark failed (torchrun exit {done.returncode}): "
                                      + " | ".join(tail) + "; check that torch.distributed works on this node")
        data: dict[str, Any] = json.loads(out.read_text())
    return collective_fits(data)


def collective_fits(data: dict[str, Any]) -> Measured:
    """The fits of a collectives worker's JSON, with a summary row each."""
    fits = tuple(LinkFit(**{**f, "samples": tuple(tuple(s) for s in f.get("samples", ()))}) for f in data["links"])
    rows = [(f"{fit.collective} {fit.scope} x{fit.ranks} ({data['backend']})",
             f"{_gb(fit.bus_bytes_per_s)} busbw, {fit.latency_s * 1e6:,.0f} us") for fit in fits]
    return Measured(fields={"links": fits}, rows=rows, notes=list(data.get("notes", [])))


def read_collectives(path: str | Path) -> dict[str, Any]:
    """A collectives worker's JSON (``torchrun ... -m profiler.collectives_worker --out FILE`` on every
    node): its fits per tier and the topology measured (hosts, each node's leaf)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError("--collectives-from", f"cannot read {path}: {exc}",
                        "give the --out file of torchrun -m profiler.collectives_worker") from None
    if not isinstance(data, dict) or not isinstance(data.get("links"), list) or "backend" not in data:
        raise SpecError("--collectives-from", f"{path} is not a collectives worker's JSON (no backend and links)",
                        "give the --out file of torchrun -m profiler.collectives_worker")
    return data


def _host(context: SectionContext) -> Measured:
    from profiler._host_links import measure_host_links

    host = measure_host_links(quick=context.quick)
    return Measured(fields={"host_to_device_bytes_per_s": host.host_to_device_bytes_per_s,
                            "device_to_host_bytes_per_s": host.device_to_host_bytes_per_s},
                    rows=[("host->device pinned, all GPUs, per GPU", _gb(host.host_to_device_bytes_per_s)),
                          ("device->host pinned, all GPUs, per GPU", _gb(host.device_to_host_bytes_per_s))])


def _nvme(context: SectionContext) -> Measured:
    if context.nvme_path is None:
        return Measured(notes=["nvme skipped: give --nvme-path DIR on the NVMe to measure it"])
    from profiler._nvme import aio_section, measure_nvme

    nvme = measure_nvme(context.nvme_path, quick=context.quick, gpus_per_node=local_gpu_count() or None,
                        progress=context.progress)
    buffered = "" if nvme.direct_io else " (buffered)"
    return Measured(fields={"nvme_read_bytes_per_s": nvme.read_bytes_per_s,
                            "nvme_write_bytes_per_s": nvme.write_bytes_per_s, "aio": aio_section(nvme)},
                    rows=[(f"NVMe read{buffered}", _gb(nvme.read_bytes_per_s)),
                          (f"NVMe write{buffered}", _gb(nvme.write_bytes_per_s))],
                    notes=list(nvme.warnings), interrupted=nvme.interrupted)


def _cpu_adam(context: SectionContext) -> Measured:
    from profiler import _cpu_adam

    # Building DeepSpeed's CPUAdam op takes a minute or two: only in full runs.
    adam = _cpu_adam.measure_cpu_adam(quick=context.quick, deepspeed_build=not context.quick)
    best = adam.deepspeed_params_per_s or adam.torch_params_per_s
    kind = "DeepSpeed CPUAdam" if adam.deepspeed_params_per_s else "torch"
    return Measured(fields={"cpu_adam_params_per_s": best},
                    rows=[(f"CPU Adam ({kind}, {adam.threads} threads)", f"{best / 1e9:,.2f} G params/s")],
                    notes=[f"cpu-adam: {adam.note}"] if adam.note else [])


PROFILE_SECTIONS: tuple[ProfileSection, ...] = (
    Section("matmul", ("gemm",), _matmul),
    Section("collectives", ("links",), _collectives),
    Section("host", ("host_to_device_bytes_per_s", "device_to_host_bytes_per_s"), _host),
    Section("nvme", ("nvme_read_bytes_per_s", "nvme_write_bytes_per_s", "aio"), _nvme),
    Section("cpu-adam", ("cpu_adam_params_per_s",), _cpu_adam),
)
"""Every section, in the order a full ``autopar profile`` runs them."""

SECTIONS: tuple[str, ...] = tuple(s.name for s in PROFILE_SECTIONS)
"""Their names, which ``autopar profile --only`` takes."""
_BY_NAME: dict[str, ProfileSection] = {s.name: s for s in PROFILE_SECTIONS}


def profile_section(name: str) -> ProfileSection:
    """The section called ``name``; ValueError naming the known ones."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown section {name!r}; choose from {', '.join(SECTIONS)}")
    return _BY_NAME[name]
