"""The hardware: GPU, node and cluster specs (SI units: bytes, seconds, FLOP/s).

Every figure has a physical range (:data:`BOUNDS`): a positive but tiny figure (5e-324 FLOP/s)
would make the cost model divide by almost nothing and answer infinity, so it is refused where
the spec is built, naming the field and the range. The ranges hold every preset with orders of
magnitude to spare on both sides and any plausible future part: FLOP/s from 1 GFLOP/s (a
laptop GPU's fp32 is ~1e12) to 1 EFLOP/s (an H100's dense fp8 is ~2e15); bytes/s from 1 MB/s
(a slow disk) to 100 TB/s (H200 HBM is 4.8e12, DGX H100 NVLink 4.8e11); memory from 1 GiB to
64 TiB (the largest GPU today has 192 GB, the largest servers 32 TiB of DRAM); NVMe capacity up
to 1 PiB; CPU Adam from 1e6 to 1e14 parameter updates per second (DeepSpeed CPUAdam ~3e9); an
achievable fraction of peak from 1 % to 100 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from search._checks import positive_int, positive_number
from search._errors import SpecError
from search._fabric import NON_BLOCKING, Fabric

if TYPE_CHECKING:
    from search._profile import HardwareProfile

Dtype = Literal["fp4", "fp8", "fp16", "bf16", "tf32", "fp32"]

GiB = 2**30
FLOP_PER_S = (1e9, 1e18)
BYTES_PER_S = (1e6, 1e14)
MEMORY_BYTES = (1 * GiB, 64 * 2**40)
NVME_BYTES = (1 * GiB, 2**50)
PARAMS_PER_S = (1e6, 1e14)
FRACTION = (0.01, 1.0)
BOUNDS: dict[str, tuple[float, float]] = {
    "memory_bytes": MEMORY_BYTES, "hbm_bytes_per_s": BYTES_PER_S,
    **dict.fromkeys(("fp16_flop_per_s", "bf16_flop_per_s", "tf32_flop_per_s", "fp32_flop_per_s", "fp8_flop_per_s",
                     "fp4_flop_per_s"), FLOP_PER_S),
    "matmul_efficiency": FRACTION, "attention_efficiency": FRACTION, "fused_attention_efficiency": FRACTION,
    **dict.fromkeys(("intra_node_bytes_per_s", "inter_node_bytes_per_s", "pcie_bytes_per_s", "nvme_read_bytes_per_s",
                     "nvme_write_bytes_per_s"), BYTES_PER_S),
    "cpu_memory_bytes": MEMORY_BYTES, "nvme_bytes": NVME_BYTES, "cpu_adam_params_per_s": PARAMS_PER_S,
}
"""Field -> (least, most) of every bounded figure of GPUSpec and NodeSpec (see the module docstring)."""


def _in_bounds(owner: str, name: str, value: object) -> None:
    low, high = BOUNDS[name]
    number = positive_number(owner, name, value)
    if not low <= number <= high:
        raise SpecError(f"{owner}.{name}", f"{number:g} is outside the physical range [{low:g}, {high:g}]",
                        f"give a value in [{low:g}, {high:g}] ({name} is in SI units: bytes, FLOP/s, fractions)")


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One accelerator. Peaks are dense (no 2:4 sparsity) datasheet figures."""

    name: str
    memory_bytes: float
    """HBM capacity (vendor GB read as GiB: A100 80GB = 80 * 2**30)."""
    hbm_bytes_per_s: float
    """Datasheet HBM bandwidth."""
    fp16_flop_per_s: float
    bf16_flop_per_s: float | None
    """None where the GPU has no bf16 tensor cores (V100)."""
    tf32_flop_per_s: float | None
    fp32_flop_per_s: float
    fp8_flop_per_s: float | None = None
    matmul_efficiency: float = 0.8
    """Maximum achievable fraction of the dense peak for large GEMMs (cuBLAS), a hardware fact
    measured by the profiler; the preset value cites its source."""
    attention_efficiency: float = 0.6
    """Best fraction of dense peak FlashAttention-2 reaches on this GPU (forward + backward,
    FLOPs counted as executed); Dao 2023: 335/989 on H100 (the A100 preset's 230/312 is its forward
    pass: a known inconsistency, docs/cost-model.md Known limits)."""
    gemm_flop_per_s_by_size: tuple[tuple[float, float], ...] = ()
    """Measured 16-bit GEMM throughput as (FLOPs per GEMM, FLOP/s) pairs sorted by size, from a
    hardware profile; empty means the preset roofline (matmul_efficiency x peak, tile-quantised)."""
    fp4_flop_per_s: float | None = None
    """Dense FP4 (NVFP4 / MXFP4) tensor-core peak; None where the GPU has none (before Blackwell)."""
    fused_attention_efficiency: float | None = None
    """Best fraction of dense peak the architecture's own fused attention reaches (forward +
    backward, FLOPs as executed): FlashAttention-3 / cuDNN on Hopper, FlashAttention-4 / cuDNN on
    Blackwell, which Transformer Engine (Megatron-Core) runs; None where FlashAttention-2 is the
    best kernel (Ampere and older)."""

    def __post_init__(self) -> None:
        owner = f"GPUSpec({self.name})"
        for name in ("memory_bytes", "hbm_bytes_per_s", "fp16_flop_per_s", "fp32_flop_per_s"):
            _in_bounds(owner, name, getattr(self, name))
        for name in ("bf16_flop_per_s", "tf32_flop_per_s", "fp8_flop_per_s", "fp4_flop_per_s"):
            if getattr(self, name) is not None:
                _in_bounds(owner, name, getattr(self, name))
        try:
            table = tuple((float(f), float(r)) for f, r in self.gemm_flop_per_s_by_size)
        except (TypeError, ValueError):
            raise SpecError(f"{owner}.gemm_flop_per_s_by_size", "is not a list of [flop, flop_per_s] pairs",
                            "give measured pairs, or leave it empty") from None
        low, high = FLOP_PER_S
        if any(not (f > 0 and low <= r <= high) for f, r in table) or list(table) != sorted(table):
            raise SpecError(f"{owner}.gemm_flop_per_s_by_size", "needs positive pairs sorted by FLOPs, "
                            f"each rate in [{low:g}, {high:g}] FLOP/s", "sort the measured GEMMs by size")
        object.__setattr__(self, "gemm_flop_per_s_by_size", table)
        for name in ("matmul_efficiency", "attention_efficiency", "fused_attention_efficiency"):
            value = getattr(self, name)
            if value is None and name == "fused_attention_efficiency":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not FRACTION[0] <= value <= 1:
                raise SpecError(f"{owner}.{name}", f"{value!r} is outside [{FRACTION[0]:g}, 1]",
                                "give the achievable fraction of peak, e.g. 0.85")

    def peak_flop_per_s(self, dtype: Dtype) -> float:
        """Dense peak for ``dtype``; raises if the GPU lacks that tensor-core type."""
        peaks = {
            "fp4": self.fp4_flop_per_s,
            "fp8": self.fp8_flop_per_s,
            "fp16": self.fp16_flop_per_s,
            "bf16": self.bf16_flop_per_s,
            "tf32": self.tf32_flop_per_s,
            "fp32": self.fp32_flop_per_s,
        }
        value = peaks[dtype]
        if value is None:
            supported = [d for d in ("fp8", "bf16", "fp16") if peaks[d] is not None]
            raise SpecError("TrainingSpec.precision", f"{self.name} has no {dtype} tensor cores",
                            f"use one of: {', '.join(supported)}")
        return value


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One server: its GPUs, links, host memory, NVMe and CPU."""

    name: str
    gpus_per_node: int
    intra_node_bytes_per_s: float
    """Achievable NCCL all-reduce bus bandwidth inside the node (nccl-tests ``busbw``), per GPU."""
    inter_node_bytes_per_s: float
    """Achievable bus bandwidth of the node's compute NICs together, per direction (nccl-tests
    ``busbw`` of an all-reduce with every GPU of the node in the group)."""
    pcie_bytes_per_s: float
    """Host<->GPU bandwidth per GPU per direction (pinned memory)."""
    cpu_memory_bytes: float
    """Host DRAM of the node."""
    nvme_bytes: float
    """NVMe capacity usable for ZeRO-Infinity swap files."""
    nvme_read_bytes_per_s: float
    """Aggregate sequential read bandwidth of the node's NVMe (all drives)."""
    nvme_write_bytes_per_s: float
    """Aggregate sequential write bandwidth of the node's NVMe."""
    cpu_adam_params_per_s: float
    """Adam parameter updates per second with all host cores (DeepSpeed CPUAdam)."""
    nvlink_domain_gpus: int = 0
    """GPUs that reach each other over NVLink, when that is more than one node (a GB200/GB300
    NVL72 rack: 72 GPUs over 18 compute trays of 4); 0 means the node. A multiple of
    ``gpus_per_node``; consecutive nodes fill a domain."""
    nvls: bool = False
    """The NVLink switches reduce in the switch (NVLink SHARP, third-generation NVSwitch and later:
    DGX H100/H200, B200/B300, NVL72), so NCCL's all-reduce in the domain is NVLS and
    ``intra_node_bytes_per_s`` is its bus bandwidth; False: a ring over NVLink (DGX A100, DGX-2)."""

    def __post_init__(self) -> None:
        owner = f"NodeSpec({self.name})"
        positive_int(owner, "gpus_per_node", self.gpus_per_node)
        for name in (
            "intra_node_bytes_per_s", "inter_node_bytes_per_s", "pcie_bytes_per_s", "cpu_memory_bytes",
            "nvme_bytes", "nvme_read_bytes_per_s", "nvme_write_bytes_per_s", "cpu_adam_params_per_s",
        ):
            _in_bounds(owner, name, getattr(self, name))
        domain = self.nvlink_domain_gpus
        if isinstance(domain, bool) or not isinstance(domain, int) or domain < 0 or (
                domain and domain % self.gpus_per_node):
            raise SpecError(f"{owner}.nvlink_domain_gpus", f"{domain!r} is not 0 or a multiple of gpus_per_node="
                            f"{self.gpus_per_node}", "give the GPUs of one NVLink domain (72 for an NVL72 rack), "
                            "or 0 for the node")
        if not isinstance(self.nvls, bool):
            raise SpecError(f"{owner}.nvls", f"{self.nvls!r} is not a boolean", "use true or false")

    @property
    def nvlink_domain(self) -> int:
        """GPUs in one NVLink domain: the node, or the rack of an NVL72 system."""
        return max(self.gpus_per_node, self.nvlink_domain_gpus)

    @property
    def nic_bytes_per_s_per_gpu(self) -> float:
        """The node's network bandwidth divided among its GPUs (one rail per GPU on DGX)."""
        return self.inter_node_bytes_per_s / self.gpus_per_node


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """``num_nodes`` identical nodes, optionally with a measured :class:`HardwareProfile`.

    When ``profile`` is given, its measurements replace the preset figures wherever it has
    one (see :func:`search.apply_profile`); the cost model reads only this spec.
    """

    gpu: GPUSpec
    node: NodeSpec
    num_nodes: int = 1
    name: str = "custom"
    profile: HardwareProfile | None = None
    fabric: Fabric = NON_BLOCKING
    """The scale-out network above the nodes (:mod:`search._fabric`); the default is one
    non-blocking tier, every node reaching every other at its NICs' rate."""

    def __post_init__(self) -> None:
        positive_int("ClusterSpec", "num_nodes", self.num_nodes)
        if not isinstance(self.fabric, Fabric):
            raise SpecError("ClusterSpec.fabric", f"{type(self.fabric).__name__} is not a Fabric",
                            "pass a search Fabric (leaf, spine, core tiers)")
        domain_nodes = self.node.nvlink_domain // self.node.gpus_per_node
        leaf = self.fabric.tiers[0].nodes
        if leaf and leaf % domain_nodes:
            raise SpecError("ClusterSpec.fabric.tiers.leaf.nodes", f"{leaf} nodes per leaf splits an NVLink domain "
                            f"of {domain_nodes} nodes", f"give a multiple of {domain_nodes} (whole NVLink domains)")

    @property
    def world_size(self) -> int:
        """Total GPUs: num_nodes * gpus_per_node."""
        return self.num_nodes * self.node.gpus_per_node
