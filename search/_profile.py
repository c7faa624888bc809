"""The hardware-profile schema (torch-free): what ``autopar profile`` measures.

The profiler (``profiler/``) writes it; the cost model reads it through
:func:`apply_profile`, which replaces preset figures with measured ones wherever the profile
has a measurement and says which ones it fell back on. Versioned JSON; unknown versions are
refused with a message that says what to do. Version 2 carries the topology measured (each node's
leaf switch, :attr:`Fingerprint.leaves`) and fits across leaves (scope ``inter_leaf``); version 1
profiles load unchanged.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from search._cluster_spec import ClusterSpec
from search._errors import SpecError

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Versions :meth:`HardwareProfile.from_dict` reads (1 has no leaves and no inter_leaf fits)."""
SCOPES = ("intra_node", "inter_node", "inter_leaf")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Where and when a profile was measured."""

    gpu_name: str
    gpu_count: int
    gpus_per_node: int
    created_at: str
    """ISO 8601 UTC timestamp."""
    driver: str = ""
    cuda: str = ""
    nccl: str = ""
    torch: str = ""
    cpu_model: str = ""
    cpu_memory_bytes: float = 0.0
    hostnames: tuple[str, ...] = ()
    leaves: tuple[str, ...] = ()
    """The leaf switch of each measured node, in node order (empty where not labelled)."""

    def __post_init__(self) -> None:
        for name in ("gpu_name", "created_at"):
            text = getattr(self, name)
            if not isinstance(text, str) or not text:
                raise SpecError(f"HardwareProfile.fingerprint.{name}", f"{text!r} is not a non-empty string",
                                "re-run `autopar profile`")
        for name in ("gpu_count", "gpus_per_node"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise SpecError(f"HardwareProfile.fingerprint.{name}", f"{value!r} is not a positive integer",
                                "re-run `autopar profile`")


@dataclass(frozen=True, slots=True)
class GemmSample:
    """One timed GEMM ``(m x k) @ (k x n)``."""

    m: int
    n: int
    k: int
    dtype: str
    time_s: float

    @property
    def flop_per_s(self) -> float:
        return 2.0 * self.m * self.n * self.k / self.time_s


@dataclass(frozen=True, slots=True)
class LinkFit:
    """Alpha-beta fit of one collective on one kind of group (Hockney model).

    ``time_s = latency_s + size_bytes * factor / bus_bytes_per_s`` where ``factor`` is the
    nccl-tests bus factor of the collective (2(n-1)/n for all-reduce, (n-1)/n for gathers).
    """

    collective: str
    """all_reduce, all_gather, reduce_scatter, all_to_all or send_recv."""
    scope: str
    """intra_node (inside a node / NVLink domain), inter_node (across nodes of one leaf switch, or of
    the whole cluster when leaves were not labelled) or inter_leaf (one node under each leaf)."""
    ranks: int
    """Ranks in the measured group."""
    latency_s: float
    bus_bytes_per_s: float
    samples: tuple[tuple[float, float], ...] = ()
    """Raw (size_bytes, time_s) measurements."""
    ranks_per_node: int = 1
    """Inter-node fits: GPUs of each node in the group, i.e. NICs (rails) the group used per node."""


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """Measured speeds of one cluster."""

    fingerprint: Fingerprint
    gemm: tuple[GemmSample, ...] = ()
    links: tuple[LinkFit, ...] = ()
    host_to_device_bytes_per_s: float | None = None
    """Pinned copies, all GPUs of the node at once, per GPU."""
    device_to_host_bytes_per_s: float | None = None
    nvme_read_bytes_per_s: float | None = None
    nvme_write_bytes_per_s: float | None = None
    cpu_adam_params_per_s: float | None = None
    aio: dict[str, Any] = field(default_factory=dict)
    """Best DeepSpeed ``aio`` settings found on the NVMe path."""
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        """Serialise (tuples become lists)."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareProfile:
        """Parse and validate; errors name the field and the fix."""
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise SpecError("HardwareProfile.schema_version", f"{version!r} is not supported",
                            f"re-run `autopar profile` to write schema version {SCHEMA_VERSION}")
        try:
            fp = data["fingerprint"]
            fingerprint = Fingerprint(**{**fp, "hostnames": tuple(fp.get("hostnames", ())),
                                         "leaves": tuple(fp.get("leaves", ()))})
            gemm = tuple(GemmSample(**g) for g in data.get("gemm", ()))
            links = tuple(
                LinkFit(**{**ln, "samples": tuple(tuple(s) for s in ln.get("samples", ()))})
                for ln in data.get("links", ())
            )
        except (KeyError, TypeError) as exc:
            raise SpecError("HardwareProfile", f"malformed profile ({exc})",
                            "write it with `autopar profile` or follow search/_profile.py") from None
        for g in gemm:
            if isinstance(g.time_s, bool) or not isinstance(g.time_s, int | float):
                raise SpecError("HardwareProfile.gemm.time_s", f"{g.time_s!r} is not a number", "give seconds")
            if not g.time_s > 0:
                raise SpecError("HardwareProfile.gemm.time_s", f"{g.time_s!r} is not > 0", "drop the sample")
        for ln in links:
            numbers = (ln.bus_bytes_per_s, ln.latency_s)
            if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in numbers) or not (
                    ln.bus_bytes_per_s > 0 and ln.latency_s >= 0 and ln.bus_bytes_per_s != float("inf")):
                raise SpecError("HardwareProfile.links", f"{ln.collective}/{ln.scope} has a non-physical fit "
                                f"(bus_bytes_per_s={ln.bus_bytes_per_s!r}, latency_s={ln.latency_s!r})",
                                "re-run the collective benchmark")
            if ln.scope not in SCOPES:
                raise SpecError("HardwareProfile.links.scope", f"{ln.scope!r} is not a scope",
                                f"use one of: {', '.join(SCOPES)}")
            if type(ln.ranks_per_node) is not int or not 1 <= ln.ranks_per_node <= ln.ranks:
                raise SpecError("HardwareProfile.links.ranks_per_node", f"{ln.ranks_per_node!r} is not in 1..ranks",
                                "give the number of GPUs per node in the measured group")
        rates: dict[str, float | None] = {}
        for name in ("host_to_device_bytes_per_s", "device_to_host_bytes_per_s", "nvme_read_bytes_per_s",
                     "nvme_write_bytes_per_s", "cpu_adam_params_per_s"):
            value = data.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
                raise SpecError(f"HardwareProfile.{name}", f"{value!r} is not a positive number", "give a rate or null")
            rates[name] = None if value is None else float(value)
        return cls(
            fingerprint=fingerprint, gemm=gemm, links=links, aio=dict(data.get("aio") or {}),
            host_to_device_bytes_per_s=rates["host_to_device_bytes_per_s"],
            device_to_host_bytes_per_s=rates["device_to_host_bytes_per_s"],
            nvme_read_bytes_per_s=rates["nvme_read_bytes_per_s"],
            nvme_write_bytes_per_s=rates["nvme_write_bytes_per_s"],
            cpu_adam_params_per_s=rates["cpu_adam_params_per_s"],
        )

    @classmethod
    def load(cls, path: str | Path) -> HardwareProfile:
        """Read a profile JSON file."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SpecError("profile", f"cannot read {path}: {exc}",
                            "give the JSON file `autopar profile` wrote") from None
        return cls.from_dict(data)

    def link(self, collective: str, scope: str) -> LinkFit | None:
        """The fit for ``collective`` on ``scope`` with the most ranks, if measured."""
        fits = [ln for ln in self.links if ln.collective == collective and ln.scope == scope]
        return max(fits, key=lambda ln: ln.ranks) if fits else None


def fit_alpha_beta(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """Fit ``time = alpha + size / bandwidth``; returns (alpha_s, bandwidth_bytes_per_s).

    Hockney 1994 model, weighted least squares on relative residuals (weights 1/time^2):
    timing noise is proportional to the time, so unweighted fits let the largest messages
    swamp the latency. Raises if fewer than two distinct sizes or a non-positive slope.
    """
    sizes = [s for s, _ in samples]
    if len(set(sizes)) < 2:
        raise ValueError("alpha-beta fit needs at least two distinct message sizes")
    weights = [1.0 / (t * t) if t > 0 else 0.0 for _, t in samples]
    total = sum(weights)
    if total <= 0:
        raise ValueError("alpha-beta fit: times must be positive")
    mean_x = sum(w * s for w, (s, _) in zip(weights, samples, strict=True)) / total
    mean_y = sum(w * t for w, (_, t) in zip(weights, samples, strict=True)) / total
    sxx = sum(w * (s - mean_x) ** 2 for w, (s, _) in zip(weights, samples, strict=True))
    sxy = sum(w * (s - mean_x) * (t - mean_y) for w, (s, t) in zip(weights, samples, strict=True))
    slope = sxy / sxx
    if slope <= 0:
        raise ValueError("alpha-beta fit: time does not grow with size; measure larger messages")
    return max(0.0, mean_y - slope * mean_x), 1.0 / slope


def apply_profile(cluster: ClusterSpec, profile: HardwareProfile) -> tuple[ClusterSpec, tuple[str, ...]]:
    """The cluster with measured figures in place of preset ones, and a warning per fallback.

    Node link fields hold achievable bus bandwidths, so measured ones replace them as they are
    (an inter-node fit over ``ranks_per_node`` rails is scaled to the node's one rail per GPU); an
    across-leaf fit becomes the fabric's spine tier's measured rail bandwidth
    (:attr:`search._fabric.FabricTier.bus_bytes_per_s`), which groups spanning leaves then run at.
    """
    gpu, node = cluster.gpu, cluster.node
    warnings: list[str] = []
    half = [g for g in profile.gemm if g.dtype in ("bf16", "fp16")]
    if half:
        best = max(g.flop_per_s for g in half)
        by_size: dict[float, list[float]] = {}
        for g in half:
            by_size.setdefault(2.0 * g.m * g.n * g.k, []).append(g.flop_per_s)
        table = tuple(sorted((flop, sorted(rates)[len(rates) // 2]) for flop, rates in by_size.items()))
        gpu = replace(gpu, matmul_efficiency=min(1.0, best / gpu.fp16_flop_per_s), gemm_flop_per_s_by_size=table)
    else:
        warnings.append("no bf16/fp16 GEMM measurement: using the preset matmul efficiency")
    intra = profile.link("all_reduce", "intra_node")
    if intra:
        node = replace(node, intra_node_bytes_per_s=intra.bus_bytes_per_s)
    else:
        warnings.append("no intra-node all-reduce measurement: using the preset NVLink bandwidth")
    inter = profile.link("all_reduce", "inter_node")
    if inter:
        # The fit used ranks_per_node rails per node; the node has one per GPU.
        node = replace(node, inter_node_bytes_per_s=inter.bus_bytes_per_s * node.gpus_per_node / inter.ranks_per_node)
    else:
        warnings.append("no inter-node all-reduce measurement: using the preset network bandwidth")
    across = profile.link("all_reduce", "inter_leaf")
    if across:
        fabric = cluster.fabric
        if len(fabric.tiers) < 2:
            warnings.append("an across-leaf all-reduce was measured but the cluster's fabric has one tier: "
                            "describe its leaves and spine to use it")
        else:  # one rank per node across leaves: a rail's bus bandwidth through the spine
            spine = replace(fabric.tiers[1], bus_bytes_per_s=across.bus_bytes_per_s / across.ranks_per_node)
            cluster = replace(cluster, fabric=replace(fabric, tiers=(fabric.tiers[0], spine, *fabric.tiers[2:])))
    for attr, name in (("host_to_device_bytes_per_s", "pcie_bytes_per_s"),
                       ("nvme_read_bytes_per_s", "nvme_read_bytes_per_s"),
                       ("nvme_write_bytes_per_s", "nvme_write_bytes_per_s"),
                       ("cpu_adam_params_per_s", "cpu_adam_params_per_s")):
        value = getattr(profile, attr)
        if value:
            node = replace(node, **{name: value})
        else:
            warnings.append(f"no {attr} measurement: using the preset value")
    return replace(cluster, gpu=gpu, node=node, profile=profile), tuple(warnings)


def staleness(profile: HardwareProfile, cluster: ClusterSpec, max_age_days: float = 90.0,
              now: datetime | None = None) -> tuple[str, ...]:
    """Reasons the profile should not be trusted for ``cluster`` (empty when fresh and matching)."""
    reasons = []
    fp = profile.fingerprint
    try:
        created = datetime.fromisoformat(fp.created_at)
    except ValueError:
        return (f"fingerprint.created_at {fp.created_at!r} is not ISO 8601",)
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    age_days = ((now or datetime.now(UTC)) - created).total_seconds() / 86400
    if age_days > max_age_days:
        reasons.append(f"measured {age_days:.0f} days ago (older than {max_age_days:.0f})")
    if fp.gpus_per_node != cluster.node.gpus_per_node:
        reasons.append(f"measured on {fp.gpus_per_node} GPUs per node, the cluster has {cluster.node.gpus_per_node}")
    measured = fp.gpu_name.lower().replace("nvidia", "").replace("_", "-").replace(" ", "-")
    if not all(token in measured for token in cluster.gpu.name.lower().split("-")):
        reasons.append(f"measured on {fp.gpu_name!r}, the cluster has {cluster.gpu.name!r}")
    return tuple(reasons)
