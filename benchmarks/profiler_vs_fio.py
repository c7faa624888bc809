"""The NVMe benchmark against fio on the same file, block size and queue depth.

    python benchmarks/profiler_vs_fio.py [--path DIR] [--size 1G] [--block-sizes 1M,4M]
                                         [--queue-depths 8,32] [--repeat 5] [--json]

For each block size and queue depth, fio (``--ioengine=libaio --direct=1 --numjobs=1``) and
``profiler._nvme`` (queue depth = threads doing synchronous O_DIRECT I/O, one worker) each
write and then read the whole file, taking turns to go first, ``--repeat`` times; the medians and the ratio
ours/fio are printed. Target (issue 4): ratio >= 0.9 for reads and writes. Needs fio on PATH
(Debian/Ubuntu: ``apt-get install -y fio``); installs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from profiler._nvme import transfer_bytes_per_s  # noqa: E402

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    """'4M' -> 4194304 (binary units, as fio reads them)."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    return int(text[:-1]) * UNITS[text[-1]] if text[-1:] in UNITS else int(text)


def fio_bytes_per_s(file: Path, op: str, block_bytes: int, queue_depth: int, size_bytes: int) -> float:
    """fio's bandwidth for one sequential pass over ``file`` (``op`` is read or write)."""
    command = ["fio", "--name=autopar", "--ioengine=libaio", "--direct=1", f"--rw={op}", f"--bs={block_bytes}",
               f"--iodepth={queue_depth}", "--numjobs=1", f"--size={size_bytes}", f"--filename={file}",
               "--output-format=json"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    if op == "write":
        flush(file)
    return float(json.loads(out[out.index("{"):])["jobs"][0][op]["bw_bytes"])


def flush(file: Path) -> None:
    """fsync after fio's writes (untimed), as ours does, so each run starts with the drive's cache clean."""
    fd = os.open(file, os.O_WRONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compare(file: Path, size_bytes: int, block_sizes: list[int], queue_depths: list[int],
            repeat: int) -> list[dict[str, float | int | str]]:
    """Median bandwidth of fio and ours per (op, block size, queue depth), alternating runs."""
    fio_bytes_per_s(file, "write", max(block_sizes), 8, size_bytes)  # lay the file out once
    rows: list[dict[str, float | int | str]] = []
    for block in block_sizes:
        for depth in queue_depths:
            for op in ("write", "read"):
                fio, ours = [], []
                for run in range(repeat):  # alternate which tool goes first: drives drift
                    if run % 2:
                        ours.append(transfer_bytes_per_s(file, op, block, depth))
                    fio.append(fio_bytes_per_s(file, op, block, depth, size_bytes))
                    if not run % 2:
                        ours.append(transfer_bytes_per_s(file, op, block, depth))
                fio_s, ours_s = statistics.median(fio), statistics.median(ours)
                rows.append({"op": op, "block_bytes": block, "queue_depth": depth,
                             "fio_bytes_per_s": fio_s, "ours_bytes_per_s": ours_s, "ratio": ours_s / fio_s})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", help="directory on the drive to test (default: a temporary one under /tmp)")
    parser.add_argument("--size", default="1G", help="test file size (default 1G)")
    parser.add_argument("--block-sizes", default="1M,4M")
    parser.add_argument("--queue-depths", default="8,32")
    parser.add_argument("--repeat", type=int, default=5, help="runs per setting and tool; medians are compared")
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")
    args = parser.parse_args(argv)
    if shutil.which("fio") is None:
        print("fio is not on PATH; install fio: apt-get install -y fio", file=sys.stderr)
        return 2
    size = parse_bytes(args.size)
    blocks = [parse_bytes(b) for b in args.block_sizes.split(",")]
    depths = [int(q) for q in args.queue_depths.split(",")]
    folder = Path(args.path) if args.path else Path(tempfile.mkdtemp(prefix="autopar-fio-", dir="/tmp"))
    file = folder / "autopar-fio-test.bin"
    try:
        rows = compare(file, size, blocks, depths, max(1, args.repeat))
    finally:
        file.unlink(missing_ok=True)
        if not args.path:
            shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'op':<6}{'block':>8}{'qd':>5}{'fio GB/s':>11}{'ours GB/s':>11}{'ours/fio':>10}")
    for row in rows:
        print(f"{row['op']:<6}{int(row['block_bytes']) >> 20:>7}M{row['queue_depth']:>5}"
              f"{float(row['fio_bytes_per_s']) / 1e9:>11.3f}{float(row['ours_bytes_per_s']) / 1e9:>11.3f}"
              f"{float(row['ratio']):>10.2f}")
    for op in ("read", "write"):
        ratios = [float(r["ratio"]) for r in rows if r["op"] == op]
        print(f"{op}: lowest ratio {min(ratios):.2f}, geometric mean {statistics.geometric_mean(ratios):.2f} "
              "(target >= 0.90)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
