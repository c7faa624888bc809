"""One rank of the collective benchmark; launch it with torchrun on every node::

    torchrun --nproc-per-node 8 -m profiler.collectives_worker --out collectives.json [--quick]

Every rank measures; rank 0 writes the samples and the alpha-beta fits (LinkFit, as in a
HardwareProfile) as JSON and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from profiler._collectives import OPS, CollectiveSample, fit_links, init_from_env, measure, topology


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
    args = parser.parse_args(argv)

    import torch.distributed as dist

    backend = init_from_env()
    rank = dist.get_rank()
    topo = topology()
    ops = [op for op in args.ops.split(",") if op]
    warmup, repeats = (2, 7) if args.quick else (5, 20)
    notes: list[str] = []

    def progress(done: int, total: int, label: str) -> None:
        if rank == 0 and not args.quiet:
            print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)

    samples = measure(ops, scope="intra_node", warmup=warmup, repeats=repeats, progress=progress,
                      quick=args.quick, notes=notes)
    if len(topo.nodes) > 1:
        samples += measure(ops, scope="inter_node", warmup=warmup, repeats=repeats, progress=progress,
                           quick=args.quick, notes=notes)
    if rank == 0:
        result = {
            "backend": backend,
            "world_size": dist.get_world_size(),
            "nodes": len(topo.nodes),
            "ranks_per_node": topo.ranks_per_node,
            "hostnames": list(topo.hostnames),
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
