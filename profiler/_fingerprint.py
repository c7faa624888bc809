"""Where and when a profile is measured: GPU model and count, driver, CUDA, NCCL, torch, CPU,
memory, host names and the date (the staleness check compares them with the cluster)."""

from __future__ import annotations

import platform
import socket
import subprocess
from datetime import UTC, datetime

from search import Fingerprint


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 0.0


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


def collect_fingerprint(hostnames: tuple[str, ...] | None = None) -> Fingerprint:
    """The fingerprint of this host (torch is imported here: the profiler needs it anyway).

    Without a CUDA device the profile describes the CPU host: ``gpu_name`` says so and the
    counts are 1.
    """
    import torch

    cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 1
    name = torch.cuda.get_device_name(0) if cuda else f"CPU only ({_cpu_model()})"
    nccl = ""
    if cuda:
        try:
            nccl = ".".join(str(x) for x in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]  # torch leaves it untyped
        except (RuntimeError, AttributeError):
            nccl = ""
    return Fingerprint(
        gpu_name=name,
        gpu_count=count * (len(hostnames) if hostnames else 1),
        gpus_per_node=count,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        driver=_driver() if cuda else "",
        cuda=torch.version.cuda or "",
        nccl=nccl,
        torch=torch.__version__,
        cpu_model=_cpu_model(),
        cpu_memory_bytes=_memory_bytes(),
        hostnames=hostnames or (socket.gethostname(),),
    )


def local_gpu_count() -> int:
    """GPUs on this host (0 without CUDA), from CUDA_VISIBLE_DEVICES-aware torch."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


__all__ = ["collect_fingerprint", "local_gpu_count"]
