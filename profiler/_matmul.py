"""GEMM throughput: the shapes a transformer layer runs after tensor-parallel splitting, and a
square sweep, timed per dtype (CUDA events on a GPU, ``time.perf_counter`` on the CPU).

torch is imported inside the functions that time, so the shape helpers work without it.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from search import GemmSample, ModelSpec

DTYPES = ("bf16", "fp16", "tf32", "fp32")
"""Precisions the benchmark knows; tf32 is fp32 storage with TF32 tensor-core math."""

SQUARE_SIZES = (256, 512, 1024, 2048, 4096, 8192)
"""Default square sweep: from launch-bound to the 8192^3 GEMM the acceptance bar names."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)``, called after each timed (shape, dtype)."""


def transformer_gemm_shapes(models: Iterable[ModelSpec], tp_degrees: Iterable[int],
                            tokens: int) -> list[tuple[int, int, int]]:
    """The ``(m, n, k)`` GEMMs (``[m, k] x [k, n]``) of one layer on one of ``tp`` ranks.

    Exactly the shapes :func:`search._compute_time.layer_times` and ``lm_head_time_s`` cost,
    after Megatron's column/row split (Shoeybi et al. 2019, arXiv:1909.08053 Sec. 3):
    QKV ``[tokens, h] x [h, (h + 2 kv_dim)/tp]``, output ``[tokens, h/tp] x [h/tp, h]``,
    MLP in ``[tokens, h] x [h, f (m-1)/tp]``, MLP out ``[tokens, f/tp] x [f/tp, h]`` and the
    vocab-parallel LM head ``[tokens, h] x [h, V/tp]`` (V/tp rounded up where the vocabulary
    is not padded to a multiple of tp). Only degrees the search would use are kept: tp divides
    heads, kv_heads and ffn (``search._space``). Deduplicated, in first-seen order.
    """
    if tokens <= 0:
        raise ValueError(f"tokens={tokens} must be positive")
    degrees = list(tp_degrees)
    shapes: dict[tuple[int, int, int], None] = {}
    for model in models:
        h, f, kvd = model.hidden, model.ffn, model.kv_dim
        kv_heads = int(model.kv_heads or model.heads)
        for tp in degrees:
            if tp <= 0:
                raise ValueError(f"tensor-parallel degree {tp} must be positive")
            if model.heads % tp or kv_heads % tp or f % tp:
                continue
            for shape in (
                (tokens, (h + 2 * kvd) // tp, h),  # fused QKV, column-parallel
                (tokens, h, h // tp),  # attention output, row-parallel
                (tokens, f * (model.mlp_matrices - 1) // tp, h),  # MLP in (gate + up for SwiGLU)
                (tokens, h, f // tp),  # MLP out, row-parallel
                (tokens, -(-model.vocab // tp), h),  # LM head, vocab-parallel
            ):
                shapes[shape] = None
    return list(shapes)


def square_sweep(sizes: Iterable[int] = SQUARE_SIZES) -> list[tuple[int, int, int]]:
    """``(s, s, s)`` for each size."""
    out = []
    for s in sizes:
        if s <= 0:
            raise ValueError(f"square GEMM size {s} must be positive")
        out.append((s, s, s))
    return out


class _Precision:
    """Context manager: TF32 matmul math on (``tf32``) or off (``fp32``), restored on exit.

    torch >= 2.9 has ``fp32_precision``; mixing it with the legacy ``allow_tf32`` flag warns,
    so the new one is used where it exists.
    """

    def __init__(self, torch: Any, tf32: bool) -> None:
        self._matmul = torch.backends.cuda.matmul
        self._tf32 = tf32
        self._new_api = hasattr(self._matmul, "fp32_precision")
        self._saved: Any = None

    def __enter__(self) -> None:
        if self._new_api:
            self._saved = self._matmul.fp32_precision
            self._matmul.fp32_precision = "tf32" if self._tf32 else "ieee"
        else:
            self._saved = self._matmul.allow_tf32
            self._matmul.allow_tf32 = self._tf32

    def __exit__(self, *exc: object) -> None:
        if self._new_api:
            self._matmul.fp32_precision = self._saved
        else:
            self._matmul.allow_tf32 = self._saved


def _time_gpu(torch: Any, a: Any, b: Any, out: Any, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        torch.matmul(a, b, out=out)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:  # back to back, one sync: the GPU stays busy as in a training step
        start.record()
        torch.matmul(a, b, out=out)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in events]  # elapsed_time is in ms


def _time_cpu(torch: Any, a: Any, b: Any, out: Any, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        torch.matmul(a, b, out=out)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b, out=out)
        times.append(time.perf_counter() - t0)
    return times


def _time_shape(torch: Any, shape: tuple[int, int, int], dtype: Any, dev: Any, warmup: int,
                repeats: int) -> list[float]:
    """Per-run times of one GEMM; its tensors are freed on return, before the next shape."""
    m, n, k = shape
    a = torch.randn(m, k, device=dev, dtype=dtype)
    b = torch.randn(k, n, device=dev, dtype=dtype)
    out = torch.empty(m, n, device=dev, dtype=dtype)
    time_fn = _time_gpu if dev.type == "cuda" else _time_cpu
    return time_fn(torch, a, b, out, warmup, repeats)


def run_matmul(shapes: Iterable[tuple[int, int, int]], dtypes: Iterable[str] = DTYPES, device: str = "cuda",
               warmup: int = 3, repeats: int = 10, progress: Progress | None = None,
               notes: list[str] | None = None) -> list[GemmSample]:
    """Time ``[m, k] @ [k, n]`` for every shape and dtype; the median of ``repeats`` runs.

    A dtype the device cannot run, or a shape that does not fit in memory, is skipped with a
    line appended to ``notes``. On the CPU tf32 is skipped (it is a GPU tensor-core mode and
    would repeat fp32). Ctrl-C stops early and returns the samples measured so far (with a
    note).
    """
    import torch

    if warmup < 0 or repeats < 1:
        raise ValueError(f"warmup={warmup} must be >= 0 and repeats={repeats} >= 1")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA GPU; pass device='cpu'")
    torch_dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
    shape_list, dtype_list = list(shapes), list(dtypes)
    for d in dtype_list:
        if d not in torch_dtypes:
            raise ValueError(f"unknown dtype {d!r}; choose from {', '.join(DTYPES)}")
    skip_notes = notes if notes is not None else []
    if dev.type != "cuda" and "tf32" in dtype_list:
        dtype_list.remove("tf32")
        skip_notes.append("tf32 skipped on the CPU: it is a GPU tensor-core mode (fp32 covers it)")
    total, done = len(shape_list) * len(dtype_list), 0
    samples: list[GemmSample] = []
    try:
        for dtype in dtype_list:
            with _Precision(torch, dtype == "tf32") if dev.type == "cuda" else contextlib.nullcontext():
                for m, n, k in shape_list:
                    label = f"matmul {dtype} {m}x{n}x{k}"
                    try:
                        times = _time_shape(torch, (m, n, k), torch_dtypes[dtype], dev, warmup, repeats)
                    except torch.cuda.OutOfMemoryError:
                        skip_notes.append(f"{label} skipped: out of device memory")
                    except (RuntimeError, NotImplementedError) as exc:
                        skip_notes.append(f"{label} skipped: {str(exc).splitlines()[0]}")
                    else:
                        samples.append(GemmSample(m=m, n=n, k=k, dtype=dtype, time_s=statistics.median(times)))
                    done += 1
                    if progress is not None:
                        progress(done, total, label)
    except KeyboardInterrupt:
        skip_notes.append(f"matmul interrupted after {done} of {total} measurements; kept {len(samples)}")
    return samples


@dataclass(frozen=True, slots=True)
class GemmRow:
    """One line of the summary table."""

    m: int
    n: int
    k: int
    dtype: str
    time_s: float
    flop_per_s: float
    fraction_of_peak: float | None
    """Measured / datasheet peak for the dtype; None where no peak is known."""


def summarize(samples: Iterable[GemmSample], peak_flop_per_s_by_dtype: Mapping[str, float | None]) -> list[GemmRow]:
    """Rows for the summary table, by dtype then FLOPs, with FLOP/s and the fraction of peak.

    ``peak_flop_per_s_by_dtype`` maps ``bf16``/``fp16``/``tf32``/``fp32`` to the datasheet
    dense peak (e.g. from :class:`search.GPUSpec`); missing or None leaves the fraction empty.
    """
    rows = []
    for s in samples:
        peak = peak_flop_per_s_by_dtype.get(s.dtype)
        rate = s.flop_per_s
        rows.append(GemmRow(m=s.m, n=s.n, k=s.k, dtype=s.dtype, time_s=s.time_s, flop_per_s=rate,
                            fraction_of_peak=rate / peak if peak else None))
    order = {d: i for i, d in enumerate(DTYPES)}
    rows.sort(key=lambda r: (order.get(r.dtype, len(order)), r.dtype, r.m * r.n * r.k, r.m, r.n, r.k))
    return rows
