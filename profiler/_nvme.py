"""Sequential NVMe read and write bandwidth with O_DIRECT, swept as DeepSpeed's ds_nvme_tune does.

Queue depth ``q`` means ``q`` outstanding requests: ``q`` threads per worker, each issuing
synchronous O_DIRECT ``preadv``/``pwrite`` calls at distinct block offsets (the GIL is released
during the system call), which keeps ``q`` requests in the device queue as libaio with
``iodepth=q`` does. Parallel workers (DeepSpeed's ``intra_op_parallelism``, ds_nvme_tune's
``io_parallel``) each own a contiguous region of the file through their own file descriptor;
"one reader per GPU" is ``workers = gpus_per_node``. Writes are timed without fsync, as fio
``--direct=1`` and DeepSpeed's aio swapper do; reads follow with the page cache bypassed.
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler._errors import ProfilerUnavailable

MiB = 1 << 20
BLOCK_SIZES = (1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB)
QUEUE_DEPTHS = (1, 4, 8, 16, 32)
WORKERS = (1, 2, 4)
FILE_BYTES = 1 << 30
QUICK_BLOCK_SIZES = (1 * MiB, 8 * MiB)
QUICK_QUEUE_DEPTHS = (8, 32)
QUICK_WORKERS = (1,)
QUICK_FILE_BYTES = 256 * MiB
BUFFER_BUDGET_BYTES = 256 * MiB
"""Host memory for I/O buffers; past it threads share buffers (what is read is discarded)."""
ALIGN_BYTES = 4096
"""O_DIRECT needs offsets, sizes and buffers aligned to the logical block size (<= 4 KiB)."""
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)


@dataclass(frozen=True, slots=True)
class NvmeSettings:
    """One point of the sweep and what it measured."""

    block_bytes: int
    queue_depth: int
    """Outstanding requests per worker."""
    workers: int
    read_bytes_per_s: float
    write_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class NvmeResult:
    """Sequential bandwidth of one directory's filesystem (aggregate over workers)."""

    read_bytes_per_s: float
    """Best read bandwidth of the sweep."""
    write_bytes_per_s: float
    best_read: NvmeSettings
    best_write: NvmeSettings
    best: NvmeSettings
    """Highest read + write among the parallel-worker settings (ds_nvme_tune's rule); the aio section."""
    samples: tuple[tuple[str, int, int, int, float], ...]
    """(op, block_bytes, queue_depth, workers, bytes_per_s); op is "read" or "write"."""
    direct_io: bool
    """False when the filesystem refused O_DIRECT and buffered I/O was measured instead."""
    warnings: tuple[str, ...] = ()
    interrupted: bool = False
    """Ctrl-C stopped the sweep; the figures cover the settings measured before it."""


def aio_section(result: NvmeResult) -> dict[str, Any]:
    """DeepSpeed's ``aio`` config section for the best settings, keys as the runtime reads them.

    ``deepspeed/runtime/swap_tensor/constants.py`` (0.19.8): block_size, queue_depth,
    intra_op_parallelism (``thread_count``/``num_threads`` are not read), single_submit and
    overlap_events as JSON booleans. The submission modes are libaio's and not measured here,
    so they keep DeepSpeed's defaults; ``use_gds`` is left out (default false: the path
    measured is the host bounce buffer, not GPUDirect Storage).
    """
    best = result.best
    return {"block_size": best.block_bytes, "queue_depth": best.queue_depth,
            "intra_op_parallelism": best.workers, "single_submit": False, "overlap_events": True}


def _open(path: Path, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _unwritable(path: Path, exc: OSError) -> ProfilerUnavailable:
    return ProfilerUnavailable(f"NVMe benchmark: cannot write to {path} ({exc.strerror or exc}); give --nvme-path "
                               "a directory on the NVMe drive that this user can write to, or fix its permissions")


def _check_dir(path: Path, file_bytes: int) -> None:
    if not path.is_dir():
        raise ProfilerUnavailable(f"NVMe benchmark: {path} is not an existing directory; create it "
                                  f"(mkdir -p {path}) or give --nvme-path a directory on the NVMe drive")
    free = shutil.disk_usage(path).free
    if free < file_bytes + 64 * MiB:
        raise ProfilerUnavailable(f"NVMe benchmark: {path} has {free / 2**30:.2f} GiB free, the test file needs "
                                  f"{file_bytes / 2**30:.2f} GiB; free space or use a smaller file (--quick)")


def _create(target: Path, strict: bool, warnings: list[str]) -> bool:
    """Create the test file; True when O_DIRECT works there, else the buffered fallback (or raise)."""
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    reason = "os.O_DIRECT does not exist on this platform" if not _O_DIRECT else ""
    if _O_DIRECT:
        try:
            fd = _open(target, flags | _O_DIRECT)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise _unwritable(target.parent, exc) from None
            if exc.errno != errno.EINVAL:
                raise
            reason = f"open(O_DIRECT): {exc.strerror or exc}"
        else:
            probe = mmap.mmap(-1, ALIGN_BYTES)
            try:
                os.pwrite(fd, probe, 0)
                return True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                reason = f"write(O_DIRECT): {exc.strerror or exc}"
            finally:
                os.close(fd)
                probe.close()
    if strict:
        target.unlink(missing_ok=True)
        raise ProfilerUnavailable(f"NVMe benchmark: the filesystem of {target.parent} refuses O_DIRECT ({reason}); "
                                  "give --nvme-path a directory on a local NVMe filesystem (ext4, xfs), "
                                  "or allow the buffered fallback")
    try:
        os.close(_open(target, flags & ~os.O_EXCL))
    except OSError as exc:
        raise _unwritable(target.parent, exc) from None
    warnings.append(f"{target.parent} refuses O_DIRECT ({reason}): measured buffered I/O with fsync and "
                    "posix_fadvise(DONTNEED), which DeepSpeed's aio path does not use; put --nvme-path on a "
                    "local NVMe filesystem (ext4, xfs) for figures DeepSpeed will see")
    return False


def _buffers(count: int, block_bytes: int) -> list[mmap.mmap]:
    """Page-aligned anonymous buffers filled with incompressible bytes (touched now, not while timed)."""
    data = os.urandom(block_bytes)
    pool = []
    for _ in range(count):
        buf = mmap.mmap(-1, block_bytes)
        buf[:] = data
        pool.append(buf)
    return pool


def _transfer(target: Path, op: str, block_bytes: int, queue_depth: int, workers: int, file_bytes: int,
              direct: bool, buffers: Sequence[mmap.mmap], stop: threading.Event) -> float:
    """Move the first ``file_bytes`` of ``target`` once; returns bytes per second."""
    region_blocks = file_bytes // (workers * block_bytes)
    flags = (os.O_RDONLY if op == "read" else os.O_WRONLY) | (_O_DIRECT if direct else 0)
    fds = [_open(target, flags) for _ in range(workers)]
    views = [memoryview(buf)[:block_bytes] for buf in buffers]
    barrier = threading.Barrier(workers * queue_depth + 1)
    errors: list[BaseException] = []

    def run(fd: int, first: int, end: int, view: memoryview) -> None:
        try:
            barrier.wait()
            for block in range(first, end, queue_depth):
                if stop.is_set():
                    return
                offset = block * block_bytes
                done = os.preadv(fd, [view], offset) if op == "read" else os.pwrite(fd, view, offset)
                if done != block_bytes:
                    raise OSError(errno.EIO, f"short {op} of {done} bytes at offset {offset}")
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, daemon=True,
                                args=(fds[w], w * region_blocks + q, (w + 1) * region_blocks,
                                      views[(w * queue_depth + q) % len(views)]))
               for w in range(workers) for q in range(queue_depth)]
    try:
        if not direct and op == "read" and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fds[0], 0, 0, os.POSIX_FADV_DONTNEED)  # drop the cached pages (written and fsynced)
        for thread in threads:
            thread.start()
        barrier.wait()
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        if op == "write" and not direct:
            os.fsync(fds[0])  # buffered writes count once they reach the drive
        elapsed = time.perf_counter() - start
        if op == "write" and direct:
            os.fsync(fds[0])  # untimed, as fio --direct=1 and DeepSpeed's swapper do not fsync
    finally:
        stop.set()
        barrier.abort()
        for thread in threads:
            thread.join()
        stop.clear()
        for view in views:
            view.release()
        for fd in fds:
            os.close(fd)
    if errors:
        raise errors[0]
    return region_blocks * workers * block_bytes / elapsed


def transfer_bytes_per_s(target: str | Path, op: str, block_bytes: int, queue_depth: int, workers: int = 1,
                         direct: bool = True) -> float:
    """Bandwidth of one read or write pass over an existing file (e.g. the one fio laid out)."""
    path = Path(target)
    file_bytes = path.stat().st_size
    count = max(1, min(workers * queue_depth, BUFFER_BUDGET_BYTES // block_bytes))
    buffers = _buffers(count, block_bytes)
    try:
        return _transfer(path, op, block_bytes, queue_depth, workers, file_bytes, direct, buffers, threading.Event())
    finally:
        for buf in buffers:
            buf.close()


def _positive(name: str, values: Iterable[int], multiple: int = 1) -> tuple[int, ...]:
    values = tuple(values)
    if not values or any(type(v) is not int or v <= 0 or v % multiple for v in values):
        raise ValueError(f"{name}: {values!r} must be positive integers, multiples of {multiple}")
    return values


def measure_nvme(nvme_path: str | Path, *, quick: bool = False, file_bytes: int | None = None,
                 block_sizes: Sequence[int] | None = None, queue_depths: Sequence[int] | None = None,
                 workers: Sequence[int] | None = None, gpus_per_node: int | None = None, strict: bool = False,
                 progress: Callable[[int, int], None] | None = None) -> NvmeResult:
    """Sweep block size x queue depth x parallel workers on a test file in ``nvme_path``.

    ``gpus_per_node`` adds the "one reader per GPU" setting. ``strict`` raises
    :class:`ProfilerUnavailable` where O_DIRECT is refused instead of falling back to buffered
    I/O. ``progress(done, total)`` is called after each setting. Ctrl-C returns what was
    measured so far (``interrupted=True``); the test file is removed in every case.
    """
    path = Path(nvme_path)
    size = file_bytes if file_bytes is not None else (QUICK_FILE_BYTES if quick else FILE_BYTES)
    default = (QUICK_BLOCK_SIZES, QUICK_QUEUE_DEPTHS, QUICK_WORKERS) if quick else (BLOCK_SIZES, QUEUE_DEPTHS, WORKERS)
    blocks = _positive("block_sizes", default[0] if block_sizes is None else block_sizes, ALIGN_BYTES)
    depths = _positive("queue_depths", default[1] if queue_depths is None else queue_depths)
    parallel = _positive("workers", default[2] if workers is None else workers)
    counts = sorted(set(parallel) | ({gpus_per_node} if gpus_per_node else set()))
    if type(size) is not int or size < max(blocks) * max(counts):
        raise ValueError(f"file_bytes={size} is smaller than one {max(blocks)}-byte block per worker "
                         f"for {max(counts)} workers")
    _check_dir(path, size)
    target = path / f".autopar-nvme-{uuid.uuid4().hex}.bin"
    warnings: list[str] = []
    combos = [(b, q, w) for b in blocks for q in depths for w in counts]
    samples: list[tuple[str, int, int, int, float]] = []
    measured: list[NvmeSettings] = []
    interrupted = False
    stop = threading.Event()
    pool: list[mmap.mmap] = []
    try:
        direct = _create(target, strict, warnings)
        pool = _buffers(max(1, min(max(depths) * max(counts), BUFFER_BUDGET_BYTES // max(blocks))), max(blocks))
        _transfer(target, "write", max(blocks), 8, 1, size, direct, pool, stop)  # lay out the file, untimed
        for done, (block, depth, count) in enumerate(combos, start=1):
            try:
                write = _transfer(target, "write", block, depth, count, size, direct, pool, stop)
                read = _transfer(target, "read", block, depth, count, size, direct, pool, stop)
                samples += [("write", block, depth, count, write), ("read", block, depth, count, read)]
                measured.append(NvmeSettings(block, depth, count, read, write))
                if progress:
                    progress(done, len(combos))
            except KeyboardInterrupt:
                if not measured:
                    raise
                interrupted = True
                warnings.append(f"interrupted: measured {len(measured)} of {len(combos)} settings")
                break
    finally:
        target.unlink(missing_ok=True)
        for buf in pool:
            buf.close()
    best_read = max(measured, key=lambda s: s.read_bytes_per_s)
    best_write = max(measured, key=lambda s: s.write_bytes_per_s)
    candidates = [s for s in measured if s.workers in parallel] or measured
    best = max(candidates, key=lambda s: s.read_bytes_per_s + s.write_bytes_per_s)
    return NvmeResult(read_bytes_per_s=best_read.read_bytes_per_s, write_bytes_per_s=best_write.write_bytes_per_s,
                      best_read=best_read, best_write=best_write, best=best, samples=tuple(samples),
                      direct_io=direct, warnings=tuple(warnings), interrupted=interrupted)
