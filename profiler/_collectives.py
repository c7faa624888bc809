"""Collective bandwidth inside a node, across nodes of one leaf and across leaves, reported as
nccl-tests reports it.

Runs in a torch.distributed process group (NCCL on GPUs, gloo on CPUs), normally under
torchrun (``python -m profiler.collectives_worker``). For each operation and message size
every rank times ``repeats`` runs, each after a barrier; a size's time is the max over ranks
of the per-rank median. ``algbw = S / t`` and ``busbw = algbw * factor`` with nccl-tests' byte
counts S and bus factors (its doc/PERFORMANCE.md), so busbw is the bottleneck link's speed.

Tiers (the scopes of the samples): ``intra_node`` (each host's ranks: NVLink), ``inter_node`` (one
rank per node across the nodes of one leaf switch, every leaf at once; without leaf labels, across
all nodes) and ``inter_leaf`` (one rank per node, one node of each leaf, every such group at once, so
the leaves' uplinks carry what a synchronous step sends across them). A node's leaf comes from the
``AUTOPAR_LEAF`` environment variable of its ranks or from a hosts file (:func:`read_hosts_file`).
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler._errors import ProfilerUnavailable
from search import LinkFit, fit_alpha_beta

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
SCOPES = ("intra_node", "inter_node", "inter_leaf")
"""The tiers measured: inside a node, across nodes of one leaf, across leaves."""
LEAF_ENV = "AUTOPAR_LEAF"
"""Environment variable naming the leaf switch of the node a rank runs on (overrides a hosts file)."""
SIZES_BYTES = tuple(2**i for i in range(10, 31))
"""1 KiB .. 1 GiB in powers of 2 (nccl-tests ``-b 1K -e 1G -f 2``)."""
QUICK_SIZES_BYTES = tuple(4**i for i in range(5, 14))
"""--quick: 1 KiB .. 64 MiB in steps of 4."""
GLOO_MAX_BYTES = 64 * 2**20
"""gloo runs on host memory through TCP: larger messages only take longer to say the same."""
ELEMENT_BYTES = 4
"""Messages are float32, nccl-tests' default ``-d float``."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)``, called after each (op, size) on this rank."""


@dataclass(frozen=True, slots=True)
class CollectiveSample:
    """One (operation, group, message size) measurement."""

    op: str
    scope: str
    """intra_node (all ranks of one host), inter_node (ranks on several hosts of one leaf, or of all
    hosts without leaf labels) or inter_leaf (one node of each leaf)."""
    ranks: int
    ranks_per_node: int
    size_bytes: int
    """nccl-tests' S: the all-reduce buffer, the gathered / scattered whole array, the
    all-to-all buffer of one rank, or the bytes each rank sends."""
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
    reduce-scatter and all-to-all, 1 for send/recv."""
    if ranks < 1:
        raise ValueError(f"ranks={ranks} must be >= 1")
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")
    return {"all_reduce": 2.0 * (ranks - 1) / ranks, "send_recv": 1.0}.get(op, (ranks - 1) / ranks)


def sample(op: str, scope: str, ranks: int, ranks_per_node: int, size_bytes: int, time_s: float) -> CollectiveSample:
    """A sample with algbw and busbw derived from size and time as nccl-tests does."""
    algbw = size_bytes / time_s
    return CollectiveSample(op, scope, ranks, ranks_per_node, size_bytes, time_s, algbw, algbw * bus_factor(op, ranks))


def fit_links(samples: Iterable[CollectiveSample]) -> list[LinkFit]:
    """Alpha-beta fit per (op, scope, ranks): ``time = latency + size * factor / busbw``.

    Fitting ``(size * factor, time)`` makes :attr:`LinkFit.bus_bytes_per_s` the asymptotic
    busbw. Groups with fewer than two sizes, one rank, or a non-physical fit are left out.
    """
    groups: dict[tuple[str, str, int, int], list[CollectiveSample]] = {}
    for s in samples:
        groups.setdefault((s.op, s.scope, s.ranks, s.ranks_per_node), []).append(s)
    fits = []
    for (op, scope, ranks, per_node), group in groups.items():
        factor = bus_factor(op, ranks)  # 0 for one rank: no two distinct sizes, so no fit
        try:
            latency_s, bus_bytes_per_s = fit_alpha_beta([(s.size_bytes * factor, s.time_s) for s in group])
        except ValueError:
            continue
        raw = tuple(sorted((float(s.size_bytes), s.time_s) for s in group))
        fits.append(LinkFit(collective=op, scope=scope, ranks=ranks, latency_s=latency_s,
                            bus_bytes_per_s=bus_bytes_per_s, samples=raw, ranks_per_node=per_node))
    return fits


def init_from_env() -> str:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR, ...) unless
    one exists; NCCL when CUDA is available, gloo otherwise. Returns the backend."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise ProfilerUnavailable("this torch build has no torch.distributed; install a build with it")
    if dist.is_initialized():
        return str(dist.get_backend())
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ProfilerUnavailable("collectives need a process group: launch with "
                                  "`torchrun --nproc-per-node N -m profiler.collectives_worker --out FILE`")
    if torch.cuda.is_available():
        if not dist.is_nccl_available():
            raise ProfilerUnavailable("CUDA GPUs but no NCCL in this torch build; install a CUDA build of torch")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        return "nccl"
    dist.init_process_group("gloo")
    return "gloo"


@dataclass(frozen=True, slots=True)
class Topology:
    """Which ranks share a host, and which hosts share a leaf switch."""

    nodes: tuple[tuple[int, ...], ...]
    """Global ranks of each node, in order of each node's lowest rank."""
    hostnames: tuple[str, ...]
    leaves: tuple[str, ...] = ()
    """Leaf label of each node (as ``nodes``); empty, or "" for a node, where unknown."""

    @property
    def ranks_per_node(self) -> int:
        return min(len(ranks) for ranks in self.nodes)

    def by_leaf(self) -> dict[str, list[tuple[int, ...]]]:
        """The nodes of each labelled leaf, in order; empty unless every node has a label."""
        if len(self.leaves) != len(self.nodes) or not all(self.leaves):
            return {}
        out: dict[str, list[tuple[int, ...]]] = {}
        for leaf, ranks in zip(self.leaves, self.nodes, strict=True):
            out.setdefault(leaf, []).append(ranks)
        return out


def read_hosts_file(path: str | Path) -> dict[str, str]:
    """``HOST LEAF`` per line (``#`` starts a comment): the leaf switch of each host."""
    leaves = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise ValueError(f"{path}:{number}: {line.strip()!r} is not 'HOST LEAF'")
        leaves[words[0]] = words[1]
    return leaves


def topology(hosts: dict[str, str] | None = None) -> Topology:
    """Nodes from the host name of every rank (all_gather_object), split further by torchrun's
    node rank (GROUP_RANK) where several nodes report the same host name; each node's leaf from
    :data:`LEAF_ENV` or ``hosts`` (host name -> leaf)."""
    import torch.distributed as dist

    host = socket.gethostname()
    leaf = os.environ.get(LEAF_ENV) or (hosts or {}).get(host, "")
    key = (host, os.environ.get("GROUP_RANK", ""), leaf)
    keys: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(keys, key)
    nodes: dict[tuple[str, str], list[int]] = {}
    labels: dict[tuple[str, str], str] = {}
    for rank, (name, node_rank, label) in enumerate(keys):
        nodes.setdefault((name, node_rank), []).append(rank)
        labels.setdefault((name, node_rank), label)
    return Topology(tuple(tuple(r) for r in nodes.values()), tuple(dict.fromkeys(k[0] for k in keys)),
                    tuple(labels[k] for k in nodes))


Plan = tuple[tuple[tuple[int, ...], ...], int]  # groups measured at once (global ranks), ranks per node


def plans(scope: str, topo: Topology) -> list[Plan]:
    """The groups measured (at once) for ``scope`` on ``topo`` (see the module docstring)."""
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
    if scope == "intra_node":
        # Every node's group at once (like NCCL_TESTS_SPLIT), the same size on each node.
        return [(tuple(ranks[:topo.ranks_per_node] for ranks in topo.nodes), topo.ranks_per_node)]
    leaves = topo.by_leaf()
    if scope == "inter_leaf":
        if len(leaves) < 2:
            raise ProfilerUnavailable("across-leaf collectives need nodes under two or more leaves: label each "
                                      f"node's leaf ({LEAF_ENV}=NAME, or a hosts file of 'HOST LEAF' lines)")
        depth = min(len(nodes) for nodes in leaves.values())
        # Group j: the j-th node of every leaf, one rank (rail) each; all groups at once.
        return [(tuple(tuple(nodes[j][0] for nodes in leaves.values()) for j in range(depth)), 1)]
    if len(topo.nodes) < 2:
        raise ProfilerUnavailable("inter-node collectives need ranks on two or more hosts; "
                                  "run torchrun with --nnodes >= 2")
    if leaves:
        shared = [nodes for nodes in leaves.values() if len(nodes) >= 2]
        if not shared:
            raise ProfilerUnavailable("no leaf has two nodes: nothing to measure inside one leaf")
        width = min(len(nodes) for nodes in shared)
        # One rank per node across the first `width` nodes of each leaf with two or more, all leaves at once.
        return [(tuple(tuple(ranks[0] for ranks in nodes[:width]) for nodes in shared), 1)]
    out: list[Plan] = [((tuple(ranks[0] for ranks in topo.nodes),), 1)]  # one rank (one rail) per node
    if topo.ranks_per_node > 1:
        out.append(((tuple(r for ranks in topo.nodes for r in ranks[:topo.ranks_per_node]),),
                    topo.ranks_per_node))
    return out



def _op(op: str, elements: int, n: int, group: Any, members: tuple[int, ...], device: Any) -> Callable[[], None]:
    """A closure running one collective on preallocated float32 buffers of nccl-tests' S."""
    import torch
    import torch.distributed as dist

    def buf(count: int) -> Any:
        return torch.zeros(count, dtype=torch.float32, device=device)

    # torch 2.13 renamed all_gather_into_tensor / reduce_scatter_tensor (the old names warn).
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_reduce":
        x = buf(elements)
        return lambda: dist.all_reduce(x, group=group)
    if op == "all_gather":
        out, x = buf(elements), buf(elements // n)
        return lambda: gather(out, x, group=group)
    if op == "reduce_scatter":
        out, x = buf(elements // n), buf(elements)
        return lambda: scatter(out, x, group=group)
    if op == "all_to_all":
        out, x = buf(elements), buf(elements)
        return lambda: dist.all_to_all_single(out, x, group=group)
    if op == "send_recv":  # ring: send to the next rank, receive from the previous (nccl-tests sendrecv)
        me = members.index(dist.get_rank())
        send, recv = buf(elements), buf(elements)
        ops = [dist.P2POp(dist.isend, send, members[(me + 1) % n], group),
               dist.P2POp(dist.irecv, recv, members[(me - 1) % n], group)]

        def ring() -> None:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return ring
    raise ValueError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")


BATCH_BYTES = 4 * 2**20
"""A timed run repeats small messages back to back up to this many bytes (nccl-tests times its
``-n`` iterations together), so one barrier's skew is shared by many messages."""
MAX_BATCH = 20


def batch_count(size_bytes: int) -> int:
    """Back-to-back operations per timed run (the same on every rank)."""
    return max(1, min(MAX_BATCH, BATCH_BYTES // max(1, size_bytes)))


def _median_time(fn: Callable[[], None], group: Any, device: Any, warmup: int, repeats: int, batch: int) -> float:
    """Median over ``repeats`` barrier-aligned runs of the per-operation time of ``batch`` operations."""
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    for _ in range(warmup):
        fn()
    times: list[float] = []
    for _ in range(repeats):
        if cuda:
            dist.barrier(group=group, device_ids=[device.index])
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # untyped in torch
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            for _ in range(batch):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / batch)  # elapsed_time is in ms
        else:
            dist.barrier(group=group)
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            times.append((time.perf_counter() - t0) / batch)
    return statistics.median(times)


def message_elements(size_bytes: int, ranks: int) -> int:
    """float32 elements for a message of about ``size_bytes``: a multiple of ``ranks``, at least one each."""
    elements = size_bytes // ELEMENT_BYTES
    return max(ranks, elements - elements % ranks)


def measure(ops: Iterable[str] = OPS, sizes_bytes: Iterable[int] | None = None, scope: str = "intra_node",
            warmup: int = 5, repeats: int = 20, progress: Progress | None = None, quick: bool = False,
            notes: list[str] | None = None, hosts: dict[str, str] | None = None) -> list[CollectiveSample]:
    """Measure ``ops`` over ``sizes_bytes`` on the groups of ``scope``; every rank calls it and
    every rank gets the same samples.

    ``sizes_bytes`` defaults to :data:`SIZES_BYTES` (:data:`QUICK_SIZES_BYTES` with ``quick``)
    and is capped at :data:`GLOO_MAX_BYTES` on gloo. intra_node times each host's ranks, all
    hosts at once; inter_node times one rank per host (per leaf when the nodes' leaves are known,
    ``hosts`` or :data:`LEAF_ENV`), then without leaves and with several ranks per host all ranks;
    inter_leaf one node of each leaf. Ctrl-C returns the operations completed so far.
    """
    import torch
    import torch.distributed as dist

    backend = init_from_env()
    op_list = list(ops)
    for op in op_list:
        bus_factor(op, 2)  # validates the name
    sizes = sorted(set(sizes_bytes if sizes_bytes is not None else (QUICK_SIZES_BYTES if quick else SIZES_BYTES)))
    out_notes = notes if notes is not None else []
    if backend == "gloo" and sizes and sizes[-1] > GLOO_MAX_BYTES:
        sizes = [s for s in sizes if s <= GLOO_MAX_BYTES]
        out_notes.append(f"gloo: message sizes capped at {GLOO_MAX_BYTES // 2**20} MiB")
    if dist.get_world_size() < 2:
        raise ProfilerUnavailable("collectives need at least 2 ranks; launch with torchrun --nproc-per-node 2 or more")
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    topo = topology(hosts)
    scope_plans = plans(scope, topo)
    total, done = len(scope_plans) * len(op_list) * len(sizes), 0
    samples: list[CollectiveSample] = []
    try:
        for groups, per_node in scope_plans:
            # Every rank creates every group, in the same order (torch.distributed.new_group).
            handles = [None if len(g) == world else dist.new_group(list(g)) for g in groups]
            mine = next(((g, h) for g, h in zip(groups, handles, strict=True) if rank in g), None)
            n = len(groups[0])
            if n < 2:
                out_notes.append(f"{scope}: groups of one rank; nothing to measure")
                continue
            for op in op_list:
                local = [0.0] * len(sizes)  # ranks outside every group add 0 to the max
                for i, size in enumerate(sizes):
                    if mine is not None:
                        fn = _op(op, message_elements(size, n), n, mine[1], mine[0], device)
                        local[i] = _median_time(fn, mine[1], device, warmup, repeats, batch_count(size))
                    done += 1
                    if progress is not None:
                        progress(done, total, f"{op} {scope} x{n} {size} B")
                worst = torch.tensor(local, dtype=torch.float64, device=device)
                dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # nccl-tests reports the slowest rank
                for size, t in zip(sizes, worst.tolist(), strict=True):
                    samples.append(sample(op, scope, n, per_node, message_elements(size, n) * ELEMENT_BYTES, t))
    except KeyboardInterrupt:
        out_notes.append(f"collectives interrupted after {done} of {total}; kept {len(samples)} samples")
    return samples
