"""Host <-> GPU copy bandwidth: a clear error without CUDA, real measurements on a GPU."""

from __future__ import annotations

import pytest

from profiler._errors import ProfilerUnavailable
from profiler._host_links import MODES, measure_host_links

torch = pytest.importorskip("torch")
HAS_CUDA = torch.cuda.is_available()


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a CUDA GPU")
def test_without_cuda_the_benchmark_is_unavailable() -> None:
    with pytest.raises(ProfilerUnavailable, match="host links need a CUDA GPU"):
        measure_host_links(quick=True)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_copies_on_every_gpu() -> None:
    result = measure_host_links(size_bytes=16 << 20, rounds=2, repeat=2)
    assert result.gpus == torch.cuda.device_count()
    for figures in (result.one_gpu_bytes_per_s, result.all_gpus_per_gpu_bytes_per_s,
                    result.all_gpus_total_bytes_per_s):
        assert set(figures) == set(MODES) and all(v > 0 for v in figures.values())
    assert result.host_to_device_bytes_per_s == result.all_gpus_per_gpu_bytes_per_s["h2d_pinned"]
    assert result.device_to_host_bytes_per_s == result.all_gpus_per_gpu_bytes_per_s["d2h_pinned"]
    assert result.all_gpus_total_bytes_per_s["h2d_pinned"] == pytest.approx(
        result.gpus * result.host_to_device_bytes_per_s)
