"""The few global constants of the cost model, fitted on published runs.

They are properties of software stacks in general (how well kernels and collectives use the
hardware), never of one run, source or model. ``benchmarks/fit_constants.py`` refits them on a
runs file in the calibration schema and rewrites ``search/calibration.json``; the defaults
below are the values used when that file is absent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from pathlib import Path

from search._errors import SpecError

CALIBRATION_PATH = Path(__file__).with_name("calibration.json")


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted constants, each dimensionless unless its name carries a unit."""

    hbm_efficiency: float = 0.7
    """Achieved fraction of datasheet HBM bandwidth in memory-bound kernels (LayerNorm,
    activations, softmax, cross-entropy, optimizer). Bandwidth tests reach ~0.8-0.9."""
    attention_efficiency: float = 0.8
    """Share of the GPU's best FlashAttention throughput (:attr:`GPUSpec.attention_efficiency`)
    reached by causal training shapes (FLOPs counted as executed: half the full count)."""
    fused_attention_share: float = 0.6
    """Share of the fused attention kernel's published best throughput (:attr:`GPUSpec.fused_attention_efficiency`:
    FlashAttention-3 / cuDNN on Hopper, FlashAttention-4 / cuDNN on Blackwell) reached by causal training
    shapes in the runtimes that run it (Megatron-Core's Transformer Engine); :attr:`attention_efficiency`
    is FlashAttention-2's, fitted on runs.json, which has almost no fused-attention run. Fitted on the
    dense Megatron-Core runs of 2024-26 (``benchmarks/fit_constants.py --fused-attention``)."""
    gemm_overhead_s: float = 10e-6
    """Fixed time per GEMM kernel, fitted on blocks of four GEMMs: a block pays four of it whatever its
    GEMM count, an MoE block's router and the LM head one each (:func:`search._compute_time.block_overhead_s`)."""
    collective_latency_s: float = 20e-6
    """Latency (alpha) of one collective call: NCCL ring base latency plus per-hop latencies
    (NCCL tuning.cc) and launch, 10-35 us measured for small all-reduces on 8 A100s (nccl-tests #123)."""
    zero3_efficiency: float = 0.6
    """Achieved fraction of bus bandwidth by FSDP-style sharded parameter all-gathers and
    gradient reduce-scatters (one flat buffer per transformer block; PyTorch FSDP, Megatron-FSDP),
    which run while compute kernels compete for SMs and memory."""
    deepspeed_zero3_efficiency: float = 0.3
    """The same for DeepSpeed ZeRO-3, which gathers parameters module by module (many smaller
    collectives with prefetch buckets) and partitions gradients with per-parameter hooks."""
    zero3_overlap: float = 0.7
    """Fraction of the shorter of (compute, ZeRO-3 traffic) of a micro-batch hidden by the
    longer one: t = max(c, m) + (1 - overlap) * min(c, m)."""
    dp_overlap: float = 0.0
    """Fraction of the data-parallel gradient reduction hidden behind the last micro-batch's
    backward pass (bucketed overlap)."""
    microbatch_overhead_s: float = 0.0
    """Host-side time per micro-batch per stage (Python, kernel launches, scheduling)."""
    pipeline_engine_microbatch_s: float = 0.0
    """Extra host time per micro-batch per stage of DeepSpeed's ``PipelineEngine`` (the
    instruction interpreter of ``TrainSchedule``, its meta-data sends and the per-micro-batch
    buffer management, ``deepspeed/runtime/pipe/engine.py``), on top of
    :attr:`microbatch_overhead_s`; Megatron's and torch's schedules do not pay it."""
    moe_sync_chunk_s: float = 0.0
    """Host time exposed per micro-batch and virtual pipeline stage of a rank when the MoE token
    dispatcher synchronizes the host with the GPU in every MoE layer (Megatron's dropless alltoall
    dispatcher reads its all-to-all split sizes on the host, ``token_dispatcher.py``
    ``cuda_sync_point``; DeepEP's normal kernels their receive counts): the host can no longer run
    ahead of the GPU, so each pipeline chunk's own host work is exposed. Not fitted on runs.json (no
    MoE run): the mean per-chunk residual of the published MoE runs that ran such a dispatcher
    (``benchmarks/fit_constants.py`` ``moe_sync_chunk_fit``)."""
    fp8_gemm_speedup: float = 1.5
    """Speed-up of FP8 GEMMs over BF16 end to end (casts, scaling and amax bookkeeping eat
    most of the 2x peak ratio)."""
    memory_overhead_bytes: float = 2.5 * 2**30
    """Fixed per-GPU memory outside the model: CUDA context, NCCL buffers, workspace."""
    memory_fragmentation: float = 1.1
    """Allocator reserve over allocated bytes (PyTorch caching allocator, nvidia-smi figures)."""

    def __post_init__(self) -> None:
        _validate(self)


FRACTIONS = ("hbm_efficiency", "attention_efficiency", "fused_attention_share", "zero3_efficiency",
             "deepspeed_zero3_efficiency")
OVERLAPS = ("zero3_overlap", "dp_overlap")


def _validate(cal: Calibration) -> None:
    for f in fields(cal):
        value = getattr(cal, f.name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
            raise SpecError(f"Calibration.{f.name}", f"{value!r} is not a number >= 0", "refit or restore the default")
    for name in FRACTIONS:
        if not 0 < getattr(cal, name) <= 1:
            raise SpecError(f"Calibration.{name}", f"{getattr(cal, name)!r} is outside (0, 1]", "give a fraction")
    for name in OVERLAPS:
        if getattr(cal, name) > 1:
            raise SpecError(f"Calibration.{name}", f"{getattr(cal, name)!r} is above 1", "give a fraction in [0, 1]")
    if cal.fp8_gemm_speedup < 1 or cal.memory_fragmentation < 1:
        raise SpecError("Calibration", "fp8_gemm_speedup and memory_fragmentation must be >= 1",
                        "refit or restore the defaults")


@lru_cache(maxsize=1)
def default_calibration() -> Calibration:
    """The fitted constants from ``search/calibration.json`` (or the defaults if it is absent)."""
    if not CALIBRATION_PATH.exists():
        return Calibration()
    data = json.loads(CALIBRATION_PATH.read_text())
    known = {f.name for f in fields(Calibration)}
    return Calibration(**{k: float(v) for k, v in data.get("constants", {}).items() if k in known})


def calibration_from_dict(constants: dict[str, object], base: Calibration | None = None) -> Calibration:
    """``base`` (default: :func:`default_calibration`) with the ``constants`` given, validated; an
    unknown name or a value that is not a number is a :class:`SpecError` naming it."""
    known = {f.name for f in fields(Calibration)}
    values: dict[str, float] = {}
    for name, value in constants.items():
        if name not in known:
            raise SpecError(f"Calibration.{name}", "is not a constant of the cost model",
                            f"use one of: {', '.join(sorted(known))}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"Calibration.{name}", f"{value!r} is not a number", "give a number")
        values[name] = float(value)
    return replace(base or default_calibration(), **values)


def calibration_fingerprint(cal: Calibration, run_ids: Sequence[str] = (),
                            extra: Mapping[str, float] | None = None) -> str:
    """SHA-256 of the constants, the ids of the runs they were fitted on and ``extra`` figures that
    go with them (a cluster calibration's GPU rate factor): two calibrations with the same
    fingerprint predict the same."""
    payload = {"constants": asdict(cal), "runs": sorted(run_ids), **({"extra": dict(extra)} if extra else {})}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
