"""The NVMe benchmark, for real on a temporary directory: sweep, aio section, O_DIRECT fallback, errors, Ctrl-C."""

from __future__ import annotations

import errno
import itertools
import os
import re
from pathlib import Path
from typing import Any

import pytest

from profiler import _nvme
from profiler._errors import ProfilerUnavailable
from profiler._nvme import NvmeResult, NvmeSettings, aio_section, measure_nvme, transfer_bytes_per_s

MiB = 1 << 20
SMALL: dict[str, Any] = {"file_bytes": 16 * MiB, "block_sizes": (1 * MiB, 2 * MiB), "queue_depths": (1, 4),
                         "workers": (1, 2)}


def refuse_o_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make open(O_DIRECT) fail as it does on tmpfs or overlayfs."""
    real = _nvme._open

    def fake(path: Path, flags: int) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real(path, flags)

    monkeypatch.setattr(_nvme, "_open", fake)


def test_sweep_covers_every_setting_and_cleans_up(tmp_path: Path) -> None:
    progress: list[tuple[int, int]] = []
    result = measure_nvme(tmp_path, gpus_per_node=4, progress=lambda done, total: progress.append((done, total)),
                          **SMALL)
    expected = set(itertools.product(("read", "write"), (1 * MiB, 2 * MiB), (1, 4), (1, 2, 4)))
    assert {s[:4] for s in result.samples} == expected
    assert len(result.samples) == len(expected)
    assert all(s[4] > 0 for s in result.samples)
    assert progress == [(i, 12) for i in range(1, 13)]
    reads = [s[4] for s in result.samples if s[0] == "read"]
    assert result.read_bytes_per_s == max(reads) == result.best_read.read_bytes_per_s
    assert result.write_bytes_per_s == max(s[4] for s in result.samples if s[0] == "write")
    assert result.best.workers in (1, 2)  # the one-reader-per-GPU setting is not an intra-op parallelism
    assert not result.interrupted
    assert result.direct_io or result.warnings  # tmp_path may sit on tmpfs, which refuses O_DIRECT
    assert list(tmp_path.iterdir()) == []


def test_aio_section_has_exactly_the_keys_deepspeed_reads() -> None:
    best = NvmeSettings(block_bytes=4 * MiB, queue_depth=16, workers=2, read_bytes_per_s=3e9, write_bytes_per_s=2e9)
    result = NvmeResult(3e9, 2e9, best, best, best, (), direct_io=True)
    section = aio_section(result)
    assert section == {"block_size": 4 * MiB, "queue_depth": 16, "intra_op_parallelism": 2,
                       "single_submit": False, "overlap_events": True}
    assert [type(section[k]) for k in ("block_size", "queue_depth", "intra_op_parallelism")] == [int] * 3
    assert type(section["single_submit"]) is bool and type(section["overlap_events"]) is bool
    aio_config = pytest.importorskip("deepspeed.runtime.swap_tensor.aio_config")
    parsed = aio_config.get_aio_config({"aio": section})
    assert {k: parsed[k] for k in section} == section  # every key is read, none renamed
    assert set(section) <= set(aio_config.AIO_DEFAULT_DICT)


def test_refused_o_direct_falls_back_to_buffered_io_with_a_warning(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_o_direct(monkeypatch)
    result = measure_nvme(tmp_path, file_bytes=8 * MiB, block_sizes=(1 * MiB,), queue_depths=(2,), workers=(1,))
    assert result.direct_io is False
    assert any("O_DIRECT" in w and str(tmp_path) in w for w in result.warnings)
    assert result.read_bytes_per_s > 0 and result.write_bytes_per_s > 0
    assert list(tmp_path.iterdir()) == []


def test_refused_o_direct_is_an_error_when_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_o_direct(monkeypatch)
    with pytest.raises(ProfilerUnavailable, match="refuses O_DIRECT") as info:
        measure_nvme(tmp_path, strict=True, **SMALL)
    assert str(tmp_path) in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_path_names_the_path_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: Path, flags: int) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(_nvme, "_open", denied)
    with pytest.raises(ProfilerUnavailable, match=r"cannot write to .*--nvme-path") as info:
        measure_nvme(tmp_path, **SMALL)
    assert str(tmp_path) in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_read_only_directory_is_unavailable(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(ProfilerUnavailable, match=re.escape(str(tmp_path))):
            measure_nvme(tmp_path, **SMALL)
    finally:
        tmp_path.chmod(0o700)


def test_missing_directory_is_unavailable(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    with pytest.raises(ProfilerUnavailable, match=re.escape(f"{missing} is not an existing directory; create it")):
        measure_nvme(missing, **SMALL)


def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    result = measure_nvme(tmp_path, progress=interrupt, **SMALL)
    assert result.interrupted
    assert [s[:4] for s in result.samples] == [("write", MiB, 1, 1), ("read", MiB, 1, 1)]
    assert result.best == result.best_read == result.best_write
    assert any("interrupted" in w for w in result.warnings)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_before_any_measurement_propagates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = _nvme._transfer
    calls = []

    def transfer(*args: Any) -> float:
        calls.append(args[1])
        if len(calls) == 2:  # the first timed write, after the untimed lay-out pass
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(_nvme, "_transfer", transfer)
    with pytest.raises(KeyboardInterrupt):
        measure_nvme(tmp_path, **SMALL)
    assert list(tmp_path.iterdir()) == []


def test_transfer_on_an_existing_file(tmp_path: Path) -> None:
    file = tmp_path / "data.bin"
    file.write_bytes(os.urandom(4 * MiB))
    direct = _nvme._O_DIRECT != 0 and measure_nvme(tmp_path, **SMALL).direct_io
    assert transfer_bytes_per_s(file, "write", MiB, 4, workers=2, direct=direct) > 0
    assert transfer_bytes_per_s(file, "read", MiB, 4, workers=2, direct=direct) > 0


@pytest.mark.parametrize("bad", [{"block_sizes": (1000,)}, {"queue_depths": (0,)}, {"workers": ()},
                                 {"file_bytes": MiB, "block_sizes": (MiB,), "workers": (2,)}])
def test_invalid_settings_are_rejected(tmp_path: Path, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        measure_nvme(tmp_path, **{**SMALL, **bad})
