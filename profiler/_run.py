"""``run_profile``: run the selected microbenchmarks on this node and assemble a HardwareProfile.

Each section is independent: one that cannot run here (no CUDA for host links, no
``--nvme-path``) is skipped with a note, and Ctrl-C stops the run keeping every section (and
partial section) measured so far.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from profiler._errors import ProfilerUnavailable
from profiler._fingerprint import collect_fingerprint, local_gpu_count
from search import GemmSample, HardwareProfile, LinkFit, SpecError, model_preset

SECTIONS = ("matmul", "collectives", "host", "nvme", "cpu-adam")
SHAPE_MODELS = ("gpt3-175b", "llama3-8b", "llama3-70b")
"""Models whose TP-split layer GEMMs the matmul sweep times (on a GPU)."""
TP_DEGREES = (1, 2, 4, 8)
CPU_SQUARE_SIZES = (128, 256, 512)
"""A CPU has no business timing transformer-sized GEMMs: small squares show the mechanics."""
CPU_COLLECTIVE_RANKS = 2
"""gloo processes when there is no GPU (the collective path is exercised, not a fabric)."""
COLLECTIVES_TIMEOUT_S = 1800


@dataclass
class ProfileRun:
    """What ``run_profile`` measured: the profile, notes per section and whether Ctrl-C stopped it."""

    profile: HardwareProfile
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    rows: list[tuple[str, str]] = field(default_factory=list)
    """(measurement, value) lines for the summary table."""

    def print_summary(self, stream: TextIO) -> None:
        """A table of what was measured (rich when available)."""
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"hardware profile: {self.profile.fingerprint.gpu_name}")
        table.add_column("measurement")
        table.add_column("value", justify="right")
        for name, value in self.rows:
            table.add_row(name, value)
        Console(file=stream, width=None if stream.isatty() else 120).print(table)


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB/s"


Progress = Callable[..., None]
"""``progress(done, total, *label)``: what the benchmarks call as they go."""


def _matmul(quick: bool, run: ProfileRun, progress: Progress | None) -> list[GemmSample]:
    from profiler._matmul import run_matmul, square_sweep, transformer_gemm_shapes

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
                         repeats=5 if quick else 10, notes=run.notes, progress=progress)
    for dtype in dtypes:
        rates = [s.flop_per_s for s in samples if s.dtype == dtype]
        if rates:
            run.rows.append((f"matmul {dtype} best", f"{max(rates) / 1e12:,.2f} TFLOP/s"))
    return samples


def _collectives(quick: bool, run: ProfileRun) -> list[LinkFit]:
    gpus = local_gpu_count()
    if gpus == 1:
        raise ProfilerUnavailable("collectives need at least 2 GPUs on the node (NCCL refuses two ranks on one "
                                  "GPU); run on a multi-GPU node, or across nodes with torchrun -m "
                                  "profiler.collectives_worker and --collectives-from its JSON")
    ranks = gpus or CPU_COLLECTIVE_RANKS
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "collectives.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "-m", "profiler.collectives_worker", "--out", str(out), "--quiet"] + (["--quick"] if quick else [])
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=COLLECTIVES_TIMEOUT_S, check=False)
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise ProfilerUnavailable(f"the collective benchmark failed (torchrun exit {done.returncode}): "
                                      + " | ".join(tail) + "; check that torch.distributed works on this node")
        data: dict[str, Any] = json.loads(out.read_text())
    return _collective_fits(data, run)


def _collective_fits(data: dict[str, Any], run: ProfileRun) -> list[LinkFit]:
    """The fits of a collectives worker's JSON, with a summary row each."""
    run.notes.extend(data.get("notes", []))
    fits = [LinkFit(**{**f, "samples": tuple(tuple(s) for s in f.get("samples", ()))}) for f in data["links"]]
    for fit in fits:
        run.rows.append((f"{fit.collective} {fit.scope} x{fit.ranks} ({data['backend']})",
                         f"{_gb(fit.bus_bytes_per_s)} busbw, {fit.latency_s * 1e6:,.0f} us"))
    return fits


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


class _Bars:
    """One rich progress bar per section on stderr."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress as RichProgress

        self._progress = RichProgress(console=Console(file=sys.stderr), transient=False)
        self._task: Any = None

    def start(self, section: str) -> Progress:
        self._progress.start()
        self._task = self._progress.add_task(section, total=None)

        def update(done: int, total: int, *_label: object) -> None:
            self._progress.update(self._task, completed=done, total=total)

        return update

    def finish(self) -> None:
        task = self._progress.tasks[-1] if self._progress.tasks else None
        if task is not None:
            self._progress.update(self._task, completed=task.total or 1, total=task.total or 1)
        self._progress.stop()


def run_profile(sections: Sequence[str] = SECTIONS, *, quick: bool = False, nvme_path: str | None = None,
                show_progress: bool = False, collectives_from: str | Path | None = None) -> ProfileRun:
    """Run ``sections`` (see :data:`SECTIONS`) and return the assembled profile.

    ``show_progress`` draws a progress bar per section on stderr. ``collectives_from``, a collectives
    worker's JSON from a multi-node torchrun, stands in for the collectives section: its fits inside
    nodes, across nodes of a leaf and across leaves, and its hosts and leaves in the fingerprint.
    """
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    run = ProfileRun(profile=HardwareProfile(fingerprint=collect_fingerprint()))
    measured = None if collectives_from is None else read_collectives(collectives_from)
    if measured is not None:
        fp = replace(run.profile.fingerprint, hostnames=tuple(measured.get("hostnames") or ()),
                     leaves=tuple(measured.get("leaves") or ()))
        run.profile = HardwareProfile(fingerprint=fp)
    gemm: list[GemmSample] = []
    links: list[LinkFit] = []
    rates: dict[str, float | None] = {}
    aio: dict[str, Any] = {}
    bars = _Bars() if show_progress else None
    for section in sections:
        progress = bars.start(section) if bars else None
        try:
            if section == "matmul":
                gemm = _matmul(quick, run, progress)
            elif section == "collectives":
                links = _collective_fits(measured, run) if measured is not None else _collectives(quick, run)
            elif section == "host":
                from profiler._host_links import measure_host_links

                host = measure_host_links(quick=quick)
                rates["host_to_device_bytes_per_s"] = host.host_to_device_bytes_per_s
                rates["device_to_host_bytes_per_s"] = host.device_to_host_bytes_per_s
                run.rows.append(("host->device pinned, all GPUs, per GPU", _gb(host.host_to_device_bytes_per_s)))
                run.rows.append(("device->host pinned, all GPUs, per GPU", _gb(host.device_to_host_bytes_per_s)))
            elif section == "nvme":
                if nvme_path is None:
                    run.notes.append("nvme skipped: give --nvme-path DIR on the NVMe to measure it")
                    continue
                from profiler._nvme import aio_section, measure_nvme

                nvme = measure_nvme(nvme_path, quick=quick, gpus_per_node=local_gpu_count() or None,
                                    progress=progress)
                rates["nvme_read_bytes_per_s"] = nvme.read_bytes_per_s
                rates["nvme_write_bytes_per_s"] = nvme.write_bytes_per_s
                aio = aio_section(nvme)
                run.notes.extend(nvme.warnings)
                run.rows.append(("NVMe read" + ("" if nvme.direct_io else " (buffered)"), _gb(nvme.read_bytes_per_s)))
                run.rows.append(("NVMe write" + ("" if nvme.direct_io else " (buffered)"),
                                 _gb(nvme.write_bytes_per_s)))
                if nvme.interrupted:
                    run.interrupted = True
            elif section == "cpu-adam":
                from profiler._cpu_adam import measure_cpu_adam

                # Building DeepSpeed's CPUAdam op takes a minute or two: only in full runs.
                adam = measure_cpu_adam(quick=quick, deepspeed_build=not quick)
                best = adam.deepspeed_params_per_s or adam.torch_params_per_s
                rates["cpu_adam_params_per_s"] = best
                if adam.note:
                    run.notes.append(f"cpu-adam: {adam.note}")
                run.rows.append((f"CPU Adam ({'DeepSpeed CPUAdam' if adam.deepspeed_params_per_s else 'torch'}, "
                                 f"{adam.threads} threads)", f"{best / 1e9:,.2f} G params/s"))
        except ProfilerUnavailable as exc:
            run.notes.append(f"{section} skipped: {exc}")
        except KeyboardInterrupt:
            run.interrupted = True
            run.notes.append(f"interrupted during {section}: later sections were not run")
            break
        finally:
            if bars:
                bars.finish()
    run.profile = HardwareProfile(
        fingerprint=run.profile.fingerprint, gemm=tuple(gemm), links=tuple(links), aio=aio,
        host_to_device_bytes_per_s=rates.get("host_to_device_bytes_per_s"),
        device_to_host_bytes_per_s=rates.get("device_to_host_bytes_per_s"),
        nvme_read_bytes_per_s=rates.get("nvme_read_bytes_per_s"),
        nvme_write_bytes_per_s=rates.get("nvme_write_bytes_per_s"),
        cpu_adam_params_per_s=rates.get("cpu_adam_params_per_s"),
    )
    return run
