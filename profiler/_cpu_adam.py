"""Adam parameter updates per second on the host CPU: torch's Adam and DeepSpeed's CPUAdam.

ZeRO-Offload runs the optimizer step on the host, so its time is ``params / rate``. One flat
fp32 tensor of ``n_params`` (weights, gradients and both moments: 16 bytes per parameter),
warm-up steps, then timed steps; the median step gives the rate. torch imports inside the
functions so the package imports without it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

N_PARAMS = 50_000_000
QUICK_N_PARAMS = 10_000_000
WARMUP_STEPS = 2
STEPS = 7
QUICK_STEPS = 3


@dataclass(frozen=True, slots=True)
class CpuAdamResult:
    """Adam updates per second with all the threads torch uses."""

    torch_params_per_s: float
    """torch.optim.Adam(foreach=True, fused=False)."""
    deepspeed_params_per_s: float | None
    """deepspeed.ops.adam.DeepSpeedCPUAdam; None when its op could not be loaded (see ``note``)."""
    threads: int
    n_params: int
    note: str = ""


def _median_step_s(step: Callable[[], Any], warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _deepspeed_op_ready() -> bool:
    """Whether DeepSpeed's cpu_adam op loads without compiling: prebuilt, or JIT-built before."""
    from deepspeed.git_version_info import installed_ops
    if installed_ops.get("cpu_adam", False):
        return True
    from torch.utils.cpp_extension import _get_build_directory

    return any(Path(_get_build_directory("cpu_adam", verbose=False)).glob("cpu_adam*.so"))


def measure_cpu_adam(n_params: int | None = None, *, quick: bool = False, steps: int | None = None,
                     deepspeed_build: bool = True) -> CpuAdamResult:
    """Median Adam step over ``n_params`` fp32 parameters with torch, then DeepSpeed's CPUAdam.

    DeepSpeed's op is compiled on first use when it was not prebuilt (``DS_BUILD_CPU_ADAM=1``),
    which takes a minute or two; ``deepspeed_build=False`` skips it then and says so in
    ``note``. Any failure to import, build or run it is reported in ``note``, never raised.
    """
    import torch

    n = n_params if n_params is not None else (QUICK_N_PARAMS if quick else N_PARAMS)
    if type(n) is not int or n <= 0:
        raise ValueError(f"n_params: {n!r} must be a positive integer")
    count = steps if steps is not None else (QUICK_STEPS if quick else STEPS)
    if type(count) is not int or count <= 0:
        raise ValueError(f"steps: {count!r} must be a positive integer")
    generator = torch.Generator().manual_seed(0)
    param = torch.nn.Parameter(torch.randn(n, generator=generator))
    param.grad = torch.randn(n, generator=generator) * 1e-3
    adam = torch.optim.Adam([param], lr=1e-4, foreach=True, fused=False)
    torch_s = _median_step_s(adam.step, WARMUP_STEPS, count)
    del adam
    notes = []
    deepspeed_rate = None
    try:
        if not deepspeed_build and not _deepspeed_op_ready():
            raise RuntimeError("its cpu_adam op is not prebuilt and deepspeed_build=False skips the JIT build; "
                               "allow the build or install DeepSpeed with DS_BUILD_CPU_ADAM=1")
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        ds_adam = DeepSpeedCPUAdam([param], lr=1e-4, adamw_mode=False)
        deepspeed_rate = n / _median_step_s(ds_adam.step, WARMUP_STEPS, count)
        del ds_adam
    except Exception as exc:  # an optional backend: ImportError, compiler errors, missing op, ...
        notes.append(f"DeepSpeed CPUAdam unavailable: {type(exc).__name__}: {str(exc).strip()[:300]}")
    return CpuAdamResult(torch_params_per_s=n / torch_s, deepspeed_params_per_s=deepspeed_rate,
                         threads=torch.get_num_threads(), n_params=n, note="; ".join(notes))
