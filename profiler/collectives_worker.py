"""One rank of the collective benchmark; launch it with torchrun on every node::

    torchrun --nproc-per-node 8 -m profiler.collectives_worker --out collectives.json [--quick]
             [--hosts hosts.txt]

Every rank measures; rank 0 writes the samples and the alpha-beta fits (LinkFit, as in a
HardwareProfile) as JSON and prints a summary. It measures inside each node, across nodes (of one
leaf, when the nodes' leaf switches are known) and across leaves (when two or more are): a node's
leaf is ``AUTOPAR_LEAF`` in its ranks' environment or its line ``HOST LEAF`` in ``--hosts``. The
JSON is what ``autopar profile --collectives-from`` reads into a hardware profile.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from profiler._collectives import (
    OPS,
    QUICK_SIZES_BYTES,
    SIZES_BYTES,
    CollectiveSample,
    fit_links,
    init_from_env,
    measure,
    read_hosts_file,
    topology,
)


def _summary(samples: list[CollectiveSample]) -> str:
    lines = [f"{'op':<15}{'scope':<12}{'ranks':>6}{'size (B)':>12}{'time (us)':>12}{'algbw GB/s':>12}"
             f"{'busbw GB/s':>12}"]
    for s in samples:
        lines.append(f"{s.op:<15}{s.scope:<12}{s.ranks:>6}{s.size_bytes:>12}{s.time_s * 1e6:>12.1f}"
                     f"{s.algbw_bytes_per_s / 1e9:>12.3f}{s.busbw_bytes_per_s / 1e9:>12.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m profiler.collectives_worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="JSON file rank 0 writes")
    parser.add_argument("--quick", action="store_true", help="1 KiB .. 64 MiB in steps of 4, fewer repeats")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {','.join(OPS)}")
    parser.add_argument("--quiet", action="store_true", help="no progress lines or summary")
    parser.add_argument("--hosts", type=Path, metavar="FILE", help="'HOST LEAF' lines: the leaf switch of each host")
    parser.add_argument("--max-bytes", type=int, metavar="N", help="largest message (default: 1 GiB, 64 MiB quick)")
    args = parser.parse_args(argv)

    import torch.distributed as dist

    backend = init_from_env()
    rank = dist.get_rank()
    hosts = read_hosts_file(args.hosts) if args.hosts else None
    topo = topology(hosts)
    sizes = [s for s in (QUICK_SIZES_BYTES if args.quick else SIZES_BYTES)
             if args.max_bytes is None or s <= args.max_bytes]
    ops = [op for op in args.ops.split(",") if op]
    warmup, repeats = (2, 7) if args.quick else (5, 20)
    notes: list[str] = []

    def progress(done: int, total: int, label: str) -> None:
        if rank == 0 and not args.quiet:
            print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)

    scopes = ["intra_node"]
    if len(topo.nodes) > 1 and (not topo.by_leaf() or any(len(n) > 1 for n in topo.by_leaf().values())):
        scopes.append("inter_node")
    if len(topo.by_leaf()) > 1:
        scopes.append("inter_leaf")
    samples: list[CollectiveSample] = []
    for scope in scopes:
        samples += measure(ops, sizes, scope=scope, warmup=warmup, repeats=repeats, progress=progress,
                           notes=notes, hosts=hosts)
    if rank == 0:
        result = {
            "backend": backend,
            "world_size": dist.get_world_size(),
            "nodes": len(topo.nodes),
            "ranks_per_node": topo.ranks_per_node,
            "hostnames": list(topo.hostnames),
            "leaves": list(topo.leaves) if all(topo.leaves) else [],
            "samples": [asdict(s) for s in samples],
            "links": [asdict(fit) for fit in fit_links(samples)],
            "notes": notes,
        }
        args.out.write_text(json.dumps(result, indent=2))
        if not args.quiet:
            print(_summary(samples))
            for note in notes:
                print(f"note: {note}", file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
