"""GPU, node and cluster presets.

Datasheet facts come from ``benchmarks/data/hardware.json`` (its ``source`` fields cite
NVIDIA datasheets and DGX documentation). Achieved figures are marked as such with their
source; the ones marked *unverified* are estimates a measured hardware profile should replace
(``autopar profile``).
"""

from __future__ import annotations

from search._cluster_spec import ClusterSpec, GPUSpec, NodeSpec
from search._errors import UnknownPresetError
from search._units import GiB, TiB

NVLINK_RING_EFFICIENCY = 0.78
"""NCCL ring all-reduce bus bandwidth over NVLink line rate per direction (232/300 on DGX A100)."""
NETWORK_EFFICIENCY = 0.96
"""NCCL bus bandwidth over NIC line rate (192/200 GB/s with 8x HDR, NVIDIA/nccl #812)."""

# Maximum achievable matmul FLOP/s (MAMF), bf16, fraction of dense peak: stas00/ml-engineering
# compute/accelerator/README.md "Maximum Achievable Matmul FLOPS comparison table":
# A100 SXM 271.2/312 = 0.869, H100 SXM 794.5/989 = 0.803 ("H200 is the same").
# V100: ~97 TFLOP/s fp16 at 8192^3 of 125 (community measurement; unverified).
# FlashAttention-2 best fraction of peak (Dao 2023, arXiv:2307.08691 Sec. 4.1): A100 230/312 = 0.73,
# H100 335/989 = 0.34 (no Hopper-specific instructions); V100 is not supported by FlashAttention
# (0.5 is a placeholder that only applies if a model on V100 says attention="flash").
GPUS: dict[str, GPUSpec] = {
    "v100-sxm3-32gb": GPUSpec("v100-sxm3-32gb", 32 * GiB, 900e9, 125e12, None, None, 15.7e12, None, 0.78, 0.5),
    "v100-32gb": GPUSpec("v100-32gb", 32 * GiB, 900e9, 125e12, None, None, 15.7e12, None, 0.78, 0.5),
    "a100-sxm4-40gb": GPUSpec("a100-sxm4-40gb", 40 * GiB, 1555e9, 312e12, 312e12, 156e12, 19.5e12, None, 0.869, 0.73),
    "a100-sxm4-80gb": GPUSpec("a100-sxm4-80gb", 80 * GiB, 2039e9, 312e12, 312e12, 156e12, 19.5e12, None, 0.869, 0.73),
    "h100-sxm5-80gb": GPUSpec("h100-sxm5-80gb", 80 * GiB, 3350e9, 989.4e12, 989.4e12, 494.7e12, 66.9e12,
                              1978.9e12, 0.803, 0.34),
    "h200-sxm-141gb": GPUSpec("h200-sxm-141gb", 141 * GiB, 4800e9, 989e12, 989e12, 494.7e12, 66.9e12,
                              1979e12, 0.803, 0.34),
}

# Node links are achievable NCCL bus bandwidths (nccl-tests busbw), not line rates:
# intra_node: DGX A100 232 GB/s all-reduce on 8 GPUs (nccl-tests #175; NCCL tuning.cc caps A100
#   at 235) = 0.78 of the 300 GB/s NVLink3 per direction; DGX H100/H200 ~480 GB/s with NVLink
#   SHARP (NVLS, NCCL's default there; nccl-tests #212: "peak busBw of ~480GB/s", ring 370);
#   DGX-2 0.78 x 150 GB/s (NVLink2, A100 ratio assumed; unverified).
# inter_node: DGX A100 8x HDR 192 GB/s (NVIDIA/nccl #812); DGX H100 8x NDR 46-48 GB/s per NIC
#   (nccl-tests #290) = 376 GB/s; DGX-2 8x EDR 100 Gb/s x 0.96 (the HDR ratio; unverified).
# pcie: host<->GPU per GPU with all GPUs of the node transferring at once: DGX-2 ~3 GB/s
#   (ZeRO-Infinity Sec. 4 via hardware.json); DGX A100 two GPUs per Gen4 x16 switch uplink,
#   ~25 GB/s measured pinned (BaM paper) / 2; DGX H100 Gen5 ~55 GB/s measured pinned
#   (ml-engineering network/README.md) / 2 (unverified: switch sharing assumed as on A100).
# NVMe: Azure 4x Gen4 RAID-0 measured 10 GB/s read, 5 GB/s write (DeepSpeed blogs/deepspeed-gds);
#   DGX A100 has 4 such drives, DGX H100/H200 and DGX-2 8 (2x, unverified).
# CPU Adam: DeepSpeed CPUAdam 11.6B params in 8.2 s = 1.4e9 params/s (DeepSpeed PR #735,
#   DGX-2 class host, unverified); newer 2-socket hosts scaled by core count (unverified).
NODES: dict[str, NodeSpec] = {
    "dgx-2": NodeSpec("dgx-2", 16, NVLINK_RING_EFFICIENCY * 150e9, NETWORK_EFFICIENCY * 100e9, 3e9, 1.5 * TiB,
                      30e12, 20e9, 10e9, 1.4e9),
    "dgx-a100-40gb": NodeSpec("dgx-a100-40gb", 8, 232e9, 192e9, 12.5e9, 1 * TiB, 15e12, 10e9, 5e9, 2.8e9),
    "dgx-a100-80gb": NodeSpec("dgx-a100-80gb", 8, 232e9, 192e9, 12.5e9, 1 * TiB, 15e12, 10e9, 5e9, 2.8e9),
    "dgx-h100": NodeSpec("dgx-h100", 8, 480e9, 376e9, 27.5e9, 2 * TiB, 30.72e12, 20e9, 10e9, 2.8e9),
    "dgx-h200": NodeSpec("dgx-h200", 8, 480e9, 376e9, 27.5e9, 2 * TiB, 30.72e12, 20e9, 10e9, 2.8e9),
}

NODE_GPU: dict[str, str] = {
    "dgx-2": "v100-sxm3-32gb",
    "dgx-a100-40gb": "a100-sxm4-40gb",
    "dgx-a100-80gb": "a100-sxm4-80gb",
    "dgx-h100": "h100-sxm5-80gb",
    "dgx-h200": "h200-sxm-141gb",
}

CLUSTER_PRESETS: tuple[str, ...] = tuple(NODES)


def gpu_preset(name: str) -> GPUSpec:
    """The GPU preset ``name`` (ids as in ``hardware.json``)."""
    try:
        return GPUS[name]
    except KeyError:
        raise UnknownPresetError("GPU", name, sorted(GPUS)) from None


def node_preset(name: str) -> NodeSpec:
    """The node preset ``name``."""
    try:
        return NODES[name]
    except KeyError:
        raise UnknownPresetError("node", name, sorted(NODES)) from None


def cluster_preset(name: str, num_nodes: int = 1) -> ClusterSpec:
    """``num_nodes`` nodes of preset ``name`` (``dgx-a100-80gb``, ``dgx-h100``, ...)."""
    node = node_preset(name)
    return ClusterSpec(gpu=GPUS[NODE_GPU[name]], node=node, num_nodes=num_nodes, name=name)
