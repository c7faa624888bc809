"""The alltoall dispatcher's sorts by local expert (search._moe_terms.local_sort_total_bytes_per_copy):
Megatron-Core sorts the received copies into expert order after the dispatch and back before the combine
when a rank holds more than one expert; the flex dispatchers do not. Charged at the GPU's HBM rate as the
forward share of the block's elementwise term."""

from __future__ import annotations

import pytest

from search import cluster_preset, model_preset
from search._calibration import default_calibration
from search._moe_terms import (
    LOCAL_SORT_TOTAL_BYTES_PER_COPY_PER_H,
    expert_load_factor,
    local_sort_total_bytes_per_copy,
    moe_layer_times,
    routed_copies_per_gpu,
)
from search._predict import _kernels

QWEN3_30B = model_preset("qwen3-30b-a3b")  # hidden 2048, 128 experts top-8


def test_two_sorts_each_a_read_and_a_write_forward_and_backward() -> None:
    # sort + unsort, each reading and writing a 16-bit copy (4h) forward and its inverse backward (4h).
    assert LOCAL_SORT_TOTAL_BYTES_PER_COPY_PER_H == 2 * (4 + 4)
    assert local_sort_total_bytes_per_copy(QWEN3_30B, "alltoall", 16) == 16 * 2048
    assert local_sort_total_bytes_per_copy(QWEN3_30B, "alltoall", 1) == 0.0  # one expert: no sort
    for flex in ("flex-deepep", "flex-hybridep"):
        assert local_sort_total_bytes_per_copy(QWEN3_30B, flex, 16) == 0.0


@pytest.mark.parametrize("ep", [8, 32, 128])
def test_alltoall_blocks_pay_the_sorts_on_top_of_the_flex_ones_elementwise_work(ep: int) -> None:
    cluster = cluster_preset("dgx-b200", 16)
    cal = default_calibration()
    kernels, _ = _kernels(cluster.gpu, "bf16", cal, "megatron")
    mb = 2
    a2a, flex = (moe_layer_times(QWEN3_30B, mb, 1, 1, False, ep, 1, kernels, cluster, cal, d)
                 for d in ("alltoall", "flex-hybridep"))
    local = QWEN3_30B.moe.experts // ep
    copies = routed_copies_per_gpu(QWEN3_30B, mb, 1, 1, 1) * expert_load_factor(QWEN3_30B)
    expected = copies * local_sort_total_bytes_per_copy(QWEN3_30B, "alltoall", local) / 3 / kernels.hbm_bytes_per_s
    assert a2a.elementwise_s - flex.elementwise_s == pytest.approx(expected)
    assert (expected > 0) == (local > 1)
    assert (a2a.gemm_s, a2a.attention_s) == (flex.gemm_s, flex.attention_s)
