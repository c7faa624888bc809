"""GPU, node and cluster presets.

Datasheet facts come from ``benchmarks/data/hardware.json`` and, for Blackwell and the H100
HBM2e 96GB, ``benchmarks/data/hardware_2024_2026.json`` (their ``source`` fields cite NVIDIA
datasheets, DGX documentation and the pages they were read from). Achieved figures are marked as such with their
source; the ones marked *unverified* are estimates a measured hardware profile should replace
(``autopar profile``).
"""

from __future__ import annotations

from dataclasses import replace

from search._cluster_spec import ClusterSpec, GPUSpec, NodeSpec
from search._errors import UnknownPresetError
from search._fabric import Fabric, FabricTier
from search._units import GiB, TiB

NVLINK_RING_EFFICIENCY = 0.78
"""NCCL ring all-reduce bus bandwidth over NVLink line rate per direction (232/300 on DGX A100)."""
NETWORK_EFFICIENCY = 0.96
"""NCCL bus bandwidth over NIC line rate (192/200 GB/s with 8x HDR, NVIDIA/nccl #812)."""
OMNI_PATH_NCCL_EFFICIENCY = 0.405
"""NCCL bus bandwidth over NIC line rate on Intel Omni-Path, measured: NCCL has no Omni-Path
transport of its own and runs its IB verbs one over the hfi1 driver. On four of Jean Zay's A100
nodes (8 GPUs and 4x 100 Gb/s OPA each; 32 ranks, NCCL 2.10.3) a 4 GB fp32 all-reduce took 1.53 s:
bus bandwidth 40.5 Gb/s, and each node's ring sent both its channels through one NIC (``NET/IB/3``)
and received them through another (``NET/IB/1``), so one 100 Gb/s NIC carried 40.5 Gb/s
(bigscience-workshop/bigscience ``experiments/bandwidth/all_reduce_bench-a100-n4.txt`` @ 358e3c8,
2022-01-28; its README: "an issue with nccl that doesn't fully utilize Intel OPA full bandwidth")."""

# Maximum achievable matmul FLOP/s (MAMF), bf16, fraction of dense peak: stas00/ml-engineering
# compute/accelerator/README.md "Maximum Achievable Matmul FLOPS comparison table":
# A100 SXM 271.2/312 = 0.869, H100 SXM 794.5/989 = 0.803 ("H200 is the same").
# V100: ~97 TFLOP/s fp16 at 8192^3 of 125 (community measurement; unverified).
# FlashAttention-2 best fraction of peak (Dao 2023, arXiv:2307.08691 Sec. 4.1): A100 230/312 = 0.73,
# H100 335/989 = 0.34 (no Hopper-specific instructions). Not the same convention: the A100 figure is
# the forward pass alone, H100's forward + backward (the README's fwd+bwd benchmark, head dim 128,
# gives A100 203/312 = 0.651); the fitted attention share absorbs it for A100, H100's FlashAttention-2
# is costed ~11 % slow next to it (docs/cost-model.md, Known limits). V100 is not supported by
# FlashAttention (0.5 is a placeholder that only applies if a model on V100 says attention="flash").
HOPPER_FUSED_ATTENTION = 0.55
"""Hopper's own fused attention (FlashAttention-3; Transformer Engine's cuDNN backend is of the same
generation), forward + backward: FlashAttention-2's 0.34 (Dao 2023) times FA3's speed-up over it,
1.5-2.0x forward and 1.5-1.75x backward (Shah et al. 2024, arXiv:2407.08608, abstract and Sec. 4.1;
backward is 5 of the 7 matmuls), midpoint 1.625. Runtimes on Transformer Engine use it (Megatron-Core)."""
BLACKWELL_FUSED_ATTENTION = 0.62
"""Blackwell's (FlashAttention-4 / cuDNN), forward + backward: Dao-AILab/flash-attention PR #2280, hdim
128, seq 8192 on B200: 1534.8 TFLOP/s forward in 1.433 ms and 1359.8 backward in 4.043 ms, 1405 of
2250 dense TFLOP/s together (see the Blackwell comment below)."""
BLACKWELL_ULTRA_ATTENTION_SPEEDUP = 1.117
"""Blackwell Ultra's (B300, GB300) fused attention over Blackwell's at the same BF16 peak: the geometric mean,
over the 45 shapes NVIDIA published for both (forward + backward time), of cuDNN's SDPA time on GB200 over
GB300 (NVIDIA/cudnn-frontend ``benchmark/sdpa_benchmark_training/results/*/gb200|gb300/*_20260424_*.csv``,
cuDNN frontend 1.21.1, backend 9.22: DeepSeek-V3 1.128, Kimi K2.6 1.139, Llama 3.1 1.125, LTX-2 1.126,
Wan 2.2 1.096, GPT-OSS's 64-wide sliding window 1.052; range 1.045-1.213)."""
BLACKWELL_ULTRA_FUSED_ATTENTION = BLACKWELL_FUSED_ATTENTION * BLACKWELL_ULTRA_ATTENTION_SPEEDUP

GPUS: dict[str, GPUSpec] = {
    "v100-sxm3-32gb": GPUSpec("v100-sxm3-32gb", 32 * GiB, 900e9, 125e12, None, None, 15.7e12, None, 0.78, 0.5),
    "v100-32gb": GPUSpec("v100-32gb", 32 * GiB, 900e9, 125e12, None, None, 15.7e12, None, 0.78, 0.5),
    "a100-sxm4-40gb": GPUSpec("a100-sxm4-40gb", 40 * GiB, 1555e9, 312e12, 312e12, 156e12, 19.5e12, None, 0.869, 0.73),
    "a100-sxm4-80gb": GPUSpec("a100-sxm4-80gb", 80 * GiB, 2039e9, 312e12, 312e12, 156e12, 19.5e12, None, 0.869, 0.73),
    "h100-sxm5-80gb": GPUSpec("h100-sxm5-80gb", 80 * GiB, 3350e9, 989.4e12, 989.4e12, 494.7e12, 66.9e12,
                              1978.9e12, 0.803, 0.34, fused_attention_efficiency=HOPPER_FUSED_ATTENTION),
    "h200-sxm-141gb": GPUSpec("h200-sxm-141gb", 141 * GiB, 4800e9, 989e12, 989e12, 494.7e12, 66.9e12,
                              1979e12, 0.803, 0.34, fused_attention_efficiency=HOPPER_FUSED_ATTENTION),
}

# Blackwell and the H100 HBM2e 96GB, from hardware_2024_2026.json (dense peaks; memory as its
# memory_bytes, vendor GB read as GiB):
# b200-sxm-180gb: glennklockwood.com/garden/processors/B200, HGX B200 at 1,000 W, dense column: BF16
#   2250, FP8 4500, FP4 9000, TF32 1100, FP32 80 TFLOP/s; 8 TB/s; 180 GB usable per GPU (DGX B200:
#   1,440 GB over 8 GPUs, brent-newsom-nvidia.github.io AIPS-Boom wiki NVIDIA-DGX-B200).
# gb200-nvl72 (the B200 of a GB200 NVL72 rack, 1,200 W): glennklockwood.com B200 page, GB200 dense
#   column: BF16 2500, FP8 5000, FP4 10000, TF32 1250, FP32 90; 13.4 TB / 72 = 186 GB and
#   576 TB/s / 72 = 8 TB/s (aiwiki.ai/wiki/nvidia_gb200_nvl72). verda.com lists lower GB200 peaks;
#   the file keeps these, which match the rack's 720 PF sparse FP8.
# b300-sxm-270gb: glennklockwood.com/garden/processors/B300, HGX B300 dense column: BF16 2250,
#   FP8 4500, FP4 13125, TF32 1125, FP32 75; 8 TB/s; 270 GB usable (verda.com gb300-nvl72-architecture).
# gb300-nvl72 (the B300 of a GB300 NVL72 rack, 1.4 kW): verda.com gb300-nvl72-architecture,
#   "Per-GPU specifications" without sparsity: FP4 15 PF, FP8 5, BF16 2.5, TF32 1.25, FP32 0.080;
#   279 GB, 8 TB/s.
# h100-sxm-hbm2e-96gb (500 W, Meta Grand Teton; torchtitan benchmarks/llama3_h100_202412_torchtitan.md):
#   96 GB HBM2e at 2.4 TB/s. Its peaks are H100 SXM5's as an UPPER BOUND (torchtitan docs/performance.md:
#   the true peak lies between H100 SXM and NVL and is unknown); the file has no FP32 figure, so FP32
#   is H100 SXM5's 66.9 (upper bound, unverified).
# matmul_efficiency: MAMF over dense BF16 peak, stas00/ml-engineering compute/accelerator/README.md
#   "Maximum Achievable Matmul FLOPS comparison table": B200 SXM 1745.0/2250 = 0.776, B300 SXM
#   1769.0/2250 = 0.786, GB200 1822.0/2500 = 0.729. GB300 has no row: GB200's 0.729 (the same 1.2-1.4 kW
#   superchip part; unverified). H100 HBM2e 96GB: H100 SXM's 0.803 (unverified: a 500 W part may
#   throttle below it).
# attention_efficiency: FlashAttention-2 has no published Blackwell figure; H100's 0.34 is kept
#   (unverified). The architecture-native kernels reach about the same fraction on both generations
#   (FlashAttention-3 on H100: 740/989 = 0.75 forward, Shah et al. 2024, arXiv:2407.08608;
#   FlashAttention-4 on B200: 1613/2250 = 0.71 forward, Zadouri et al. 2026, Dao-AILab/flash-attention
#   assets/fa4_paper.pdf), so the fraction the calibration's attention constant was fitted against
#   carries over; FA4 forward + backward is ~0.62 (Dao-AILab/flash-attention PR #2280, hdim 128,
#   seq 8192: 1534.8 TFLOP/s forward in 1.433 ms, 1359.8 backward in 4.043 ms).
GPUS.update({
    "b200-sxm-180gb": GPUSpec("b200-sxm-180gb", 180 * GiB, 8000e9, 2250e12, 2250e12, 1100e12, 80e12, 4500e12,
                              1745.0 / 2250, 0.34, fp4_flop_per_s=9000e12,
                              fused_attention_efficiency=BLACKWELL_FUSED_ATTENTION),
    "gb200-nvl72": GPUSpec("gb200-nvl72", 186 * GiB, 8000e9, 2500e12, 2500e12, 1250e12, 90e12, 5000e12,
                           1822.0 / 2500, 0.34, fp4_flop_per_s=10000e12,
                           fused_attention_efficiency=BLACKWELL_FUSED_ATTENTION),
    "b300-sxm-270gb": GPUSpec("b300-sxm-270gb", 270 * GiB, 8000e9, 2250e12, 2250e12, 1125e12, 75e12, 4500e12,
                              1769.0 / 2250, 0.34, fp4_flop_per_s=13125e12,
                              fused_attention_efficiency=BLACKWELL_ULTRA_FUSED_ATTENTION),
    "gb300-nvl72": GPUSpec("gb300-nvl72", 279 * GiB, 8000e9, 2500e12, 2500e12, 1250e12, 80e12, 5000e12,
                           1822.0 / 2500, 0.34, fp4_flop_per_s=15000e12,
                           fused_attention_efficiency=BLACKWELL_ULTRA_FUSED_ATTENTION),
    "h100-sxm-hbm2e-96gb": GPUSpec("h100-sxm-hbm2e-96gb", 96 * GiB, 2400e9, 989.4e12, 989.4e12, 494.7e12, 66.9e12,
                                   1978.9e12, 0.803, 0.34, fused_attention_efficiency=HOPPER_FUSED_ATTENTION),
})

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

# Blackwell nodes. An NVL72 "node" is one compute tray (2 Grace + 4 GPUs, hardware_2024_2026.json
# gpus_per_node 4, as Slurm sees it); its NVLink domain is the rack's 72 GPUs (18 trays).
# intra_node (achievable NCCL all-reduce busbw in the NVLink domain):
#   DGX B200 ~830 GB/s on 8 GPUs (NVIDIA/nccl #1807: "all_reduce_perf ... of 8 B200s in a single
#   machine ... ours is 830+"); GB200 NVL72 835 GB/s on all 72 GPUs of a rack at 4-8 GiB
#   (coreweave/nccl-tests #43: 834.6-846.8 busbw, "Avg bus bandwidth 745.53" over 0.5-8 GiB).
#   B300 / GB300 keep the same NVLink5 switch system (1.8 TB/s per GPU, hardware_2024_2026.json):
#   B200's and GB200's figures (unverified).
# inter_node: NIC line rate x NIC count x NETWORK_EFFICIENCY, one NIC per GPU: DGX B200 8x ConnectX-7
#   400 Gb/s (docs.nvidia.com dgxb200-user-guide "Introduction"); GB200 tray 4x ConnectX-7 400G
#   (docs.nvidia.com dgxgb200-user-guide "Hardware"); GB300 tray and DGX B300 ConnectX-8 800G per GPU
#   (hardware_2024_2026.json gb300-nvl72: "72x ConnectX-8 800G"; NVIDIA NVL72 enterprise RA: 4 per
#   tray); Grand Teton 400 Gb/s RDMA per GPU (torchtitan llama3_h100_202412 benchmark).
# pcie (host<->GPU per GPU, all GPUs at once): DGX B200/B300 have PCIe Gen5 hosts (Xeon 8570):
#   DGX H100's 27.5 GB/s (unverified). NVL72 trays reach host memory over NVLink-C2C, 900 GB/s
#   bidirectional per Grace shared by its 2 GPUs: GH200 measured 346 GB/s host-to-device over one
#   C2C (NVIDIA/nvbandwidth #23), halved: 173 GB/s per GPU (unverified).
# Host memory: DGX B200 2 TB (user guide; DGX B300 assumed the same, unverified); Grace 480 GB
#   LPDDR5X per CPU (GB200 NVL72: up to 17 TB over 36 Grace), 2 per tray = 960 GB (unverified:
#   "up to"; GB300 assumed the same).
# NVMe: DGX B200 8x 3.84 TB U.2 (user guide), speeds as DGX H100 (unverified; DGX B300 assumed the
#   same); NVL72 trays 4x E1.S (NVIDIA NVL72 enterprise RA), 3.84 TB each and the 4-drive speeds of
#   DGX A100 (unverified).
# CPU Adam, by core count from DGX H100's 2.8e9 for 112 cores (unverified): DGX B200 2x 56 cores
#   2.8e9, DGX B300 3.2e9 (128 cores, unverified count), NVL72 tray 2x 72 Neoverse V2 3.6e9.
# Grand Teton (H100 HBM2e 96GB) host figures: DGX H100's (unverified: not in the source), NVLink
#   as H100 SXM5's NVSwitch board (the file: "fully connected with NVLink").
_GRACE_TRAY_MEMORY = 2 * 480 * GiB
NODES.update({
    "dgx-b200": NodeSpec("dgx-b200", 8, 830e9, NETWORK_EFFICIENCY * 8 * 50e9, 27.5e9, 2 * TiB, 30.72e12, 20e9,
                         10e9, 2.8e9),
    "dgx-b300": NodeSpec("dgx-b300", 8, 830e9, NETWORK_EFFICIENCY * 8 * 100e9, 27.5e9, 2 * TiB, 30.72e12, 20e9,
                         10e9, 3.2e9),
    "gb200-nvl72": NodeSpec("gb200-nvl72", 4, 835e9, NETWORK_EFFICIENCY * 4 * 50e9, 173e9, _GRACE_TRAY_MEMORY,
                            15.36e12, 10e9, 5e9, 3.6e9, nvlink_domain_gpus=72),
    "gb300-nvl72": NodeSpec("gb300-nvl72", 4, 835e9, NETWORK_EFFICIENCY * 4 * 100e9, 173e9, _GRACE_TRAY_MEMORY,
                            15.36e12, 10e9, 5e9, 3.6e9, nvlink_domain_gpus=72),
    "grand-teton-h100-hbm2e": NodeSpec("grand-teton-h100-hbm2e", 8, 480e9, NETWORK_EFFICIENCY * 8 * 50e9, 27.5e9,
                                       2 * TiB, 30.72e12, 20e9, 10e9, 2.8e9),
})

# NVLink SHARP (NVLS): third-generation NVSwitch and later reduce in the switch, and NCCL picks NVLS for
# all-reduces there; the intra_node figures above of these nodes are NVLS bus bandwidths (DGX H100's 480
# against ring's 370, nccl-tests #212; B200 and NVL72 likewise measured with NCCL's defaults).
for _name in ("dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72", "grand-teton-h100-hbm2e"):
    NODES[_name] = replace(NODES[_name], nvls=True)

# Scale-out fabrics of the presets (search/_fabric.py), nodes per switch group counted in the preset's nodes.
# DGX SuperPODs are rail-optimized, non-blocking (1:1) fat trees built of scalable units (SU), each rail of
# an SU on its own leaf switch:
#   DGX A100: SU of 20 nodes, two tiers up to 7 SU (DGX SuperPOD A100 reference architecture; unverified here).
#   DGX H100/H200 and B200: SU of 32 nodes; leaf and spine up to 8 SU (256 nodes), a core tier from 16 SU
#     (docs.nvidia.com/dgx-superpod reference-architecture-scalable-infrastructure-b200, "Larger DGX SuperPOD
#     component counts": 2-8 SU no core switches, 16-64 SU with core; DGX H100 RA-11333 SU of 32 nodes, the
#     tiers assumed as B200's).
#   DGX B300: SU of 64 nodes over 16 leaves (2 per rail: a leaf holds 32 nodes), leaf and spine only up to 16 SU
#     (reference-architecture/scalable-infrastructure-b300, Table 3).
#   GB200/GB300 NVL72: SU of 8 racks (DGX GB200 RA abstract: "each SU contains 8 DGX GB200 systems"), i.e. 144
#     compute trays; one leaf group per SU and a non-blocking spine assumed (unverified; the GB300 as the GB200).
#   Grand Teton (Meta): the Llama 3 RoCE cluster (Dubey et al. 2024, arXiv:2407.21783 Sec. 3.3.1): 16 GPUs (2 nodes)
#     per rack switch, 192 racks (3,072 GPUs) per pod at full bisection, pods joined at 1:7 oversubscription
#     (that the torchtitan Grand Teton runs sit on such a fabric is assumed).
#   DGX-2: no published fabric; one non-blocking tier.
_SUPERPOD = Fabric((FabricTier("leaf", 32), FabricTier("spine", 256), FabricTier("core")))
FABRICS: dict[str, Fabric] = {
    "dgx-2": Fabric(),
    "dgx-a100-40gb": Fabric((FabricTier("leaf", 20), FabricTier("spine"))),
    "dgx-a100-80gb": Fabric((FabricTier("leaf", 20), FabricTier("spine"))),
    "dgx-h100": _SUPERPOD,
    "dgx-h200": _SUPERPOD,
    "dgx-b200": _SUPERPOD,
    "dgx-b300": Fabric((FabricTier("leaf", 32), FabricTier("spine"))),
    "gb200-nvl72": Fabric((FabricTier("leaf", 144), FabricTier("spine"))),
    "gb300-nvl72": Fabric((FabricTier("leaf", 144), FabricTier("spine"))),
    "grand-teton-h100-hbm2e": Fabric((FabricTier("leaf", 2), FabricTier("spine", 384),
                                      FabricTier("core", 0, oversubscription=7.0))),
}

NODE_GPU: dict[str, str] = {
    "dgx-2": "v100-sxm3-32gb",
    "dgx-a100-40gb": "a100-sxm4-40gb",
    "dgx-a100-80gb": "a100-sxm4-80gb",
    "dgx-h100": "h100-sxm5-80gb",
    "dgx-h200": "h200-sxm-141gb",
    "dgx-b200": "b200-sxm-180gb",
    "dgx-b300": "b300-sxm-270gb",
    "gb200-nvl72": "gb200-nvl72",
    "gb300-nvl72": "gb300-nvl72",
    "grand-teton-h100-hbm2e": "h100-sxm-hbm2e-96gb",
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


def cluster_preset(name: str, num_nodes: int = 1, fabric: Fabric | None = None) -> ClusterSpec:
    """``num_nodes`` nodes of preset ``name`` (``dgx-a100-80gb``, ``dgx-h100``, ...) on the preset's
    fabric (:data:`FABRICS`) or ``fabric``; an NVL72 preset's node is one 4-GPU compute tray, so
    ``cluster_preset("gb200-nvl72", 18)`` is one rack."""
    node = node_preset(name)
    return ClusterSpec(gpu=GPUS[NODE_GPU[name]], node=node, num_nodes=num_nodes, name=name,
                       fabric=FABRICS[name] if fabric is None else fabric)
