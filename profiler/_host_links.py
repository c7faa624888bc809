"""Host <-> GPU copy bandwidth: pinned and pageable, one GPU alone and every GPU of the node at once.

Each copy direction is timed with CUDA events around ``repeat`` back-to-back copies on a
dedicated stream (median over ``rounds``). "All GPUs" runs one thread per GPU, each with its own
stream and host buffer, started together; its per-GPU figure is what each GPU moved divided by
the wall time of the whole concurrent phase, so a shared PCIe switch or host memory bandwidth
shows up. The profile takes the pinned, all-GPU, per-GPU figures. torch imports inside the
functions so the package imports without it.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from profiler._errors import ProfilerUnavailable

SIZE_BYTES = 256 << 20
QUICK_SIZE_BYTES = 64 << 20
ROUNDS = 5
REPEAT = 4
"""Copies per timed round."""
MODES = ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")


@dataclass(frozen=True, slots=True)
class HostLinkResult:
    """Copy bandwidth per mode (``MODES``), in bytes per second."""

    one_gpu_bytes_per_s: dict[str, float]
    """GPU 0 alone."""
    all_gpus_per_gpu_bytes_per_s: dict[str, float]
    """Every GPU of the node copying at once: bytes each GPU moved / wall time."""
    all_gpus_total_bytes_per_s: dict[str, float]
    gpus: int
    size_bytes: int

    @property
    def host_to_device_bytes_per_s(self) -> float:
        """The profile's figure: pinned, all GPUs at once, per GPU."""
        return self.all_gpus_per_gpu_bytes_per_s["h2d_pinned"]

    @property
    def device_to_host_bytes_per_s(self) -> float:
        return self.all_gpus_per_gpu_bytes_per_s["d2h_pinned"]


def _require_cuda() -> Any:
    try:
        import torch
    except ImportError:
        raise ProfilerUnavailable("host links need torch with CUDA; install autopar[profile] with a CUDA "
                                  "build of torch") from None
    if not torch.cuda.is_available():
        raise ProfilerUnavailable("host links need a CUDA GPU, and torch sees none (CPU build of torch, no "
                                  "driver, or CUDA_VISIBLE_DEVICES empty); run on a GPU node or skip with "
                                  "--only without host")
    return torch


class _Copier:
    """Buffers and a stream on one GPU; ``run(mode, repeat)`` enqueues and times copies."""

    def __init__(self, torch: Any, device: int, size_bytes: int) -> None:
        self.torch = torch
        self.device = torch.device("cuda", device)
        with torch.cuda.device(self.device):
            self.stream = torch.cuda.Stream()
            self.gpu = torch.empty(size_bytes, dtype=torch.uint8, device=self.device)
            self.host = {"pinned": torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True),
                         "pageable": torch.empty(size_bytes, dtype=torch.uint8)}
        for host in self.host.values():
            host.fill_(1)  # touch the pages before timing
        self.size_bytes = size_bytes

    def run(self, mode: str, repeat: int) -> float:
        """Seconds per copy (CUDA events), after the stream has finished."""
        torch = self.torch
        direction, memory = mode.split("_")
        host = self.host[memory]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            start.record(self.stream)
            for _ in range(repeat):
                if direction == "h2d":
                    self.gpu.copy_(host, non_blocking=memory == "pinned")
                else:
                    host.copy_(self.gpu, non_blocking=memory == "pinned")
            end.record(self.stream)
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / repeat


def _concurrent(copiers: list[_Copier], mode: str, rounds: int, repeat: int) -> float:
    """Per-GPU bytes/s with every GPU copying at once: bytes each moved / wall time."""
    barrier = threading.Barrier(len(copiers) + 1)
    errors: list[BaseException] = []

    def work(copier: _Copier) -> None:
        try:
            copier.run(mode, 1)  # warm-up
            barrier.wait()
            for _ in range(rounds):
                copier.run(mode, repeat)
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in copiers]
    for thread in threads:
        thread.start()
    try:
        barrier.wait()
        start = time.perf_counter()
        barrier.wait()
        elapsed = time.perf_counter() - start
    except threading.BrokenBarrierError:
        elapsed = 0.0
    finally:
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return copiers[0].size_bytes * rounds * repeat / elapsed


def measure_host_links(*, quick: bool = False, size_bytes: int | None = None,
                       rounds: int = ROUNDS, repeat: int = REPEAT) -> HostLinkResult:
    """Pinned and pageable H2D and D2H bandwidth, GPU 0 alone and all GPUs at once.

    Raises :class:`ProfilerUnavailable` without a CUDA GPU.
    """
    torch = _require_cuda()
    size = size_bytes if size_bytes is not None else (QUICK_SIZE_BYTES if quick else SIZE_BYTES)
    if min(size, rounds, repeat) <= 0:
        raise ValueError(f"size_bytes={size}, rounds={rounds} and repeat={repeat} must be positive")
    copiers = [_Copier(torch, device, size) for device in range(torch.cuda.device_count())]
    one: dict[str, float] = {}
    per_gpu: dict[str, float] = {}
    for mode in MODES:
        copiers[0].run(mode, 1)  # warm-up
        one[mode] = size / statistics.median(copiers[0].run(mode, repeat) for _ in range(rounds))
        per_gpu[mode] = _concurrent(copiers, mode, rounds, repeat) if len(copiers) > 1 else one[mode]
    return HostLinkResult(one_gpu_bytes_per_s=one, all_gpus_per_gpu_bytes_per_s=per_gpu,
                          all_gpus_total_bytes_per_s={m: r * len(copiers) for m, r in per_gpu.items()},
                          gpus=len(copiers), size_bytes=size)
