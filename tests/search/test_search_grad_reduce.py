"""search(grad_reduce_in_bf16=True): Megatron-Core's ``--grad-reduce-in-bf16`` as a search input.

The flag restricts the search to Megatron-Core, its answers are what predict() gives with the
flag-set TrainingSpec (2-byte gradients, half the data-parallel bytes), and the runtimes without
the option are refused naming the field."""

from __future__ import annotations

import pytest

from search import SpecError, TrainingSpec, cluster_preset, model_preset, predict
from search._search import search
from search._space import enumerate_space


def test_flag_restricts_to_megatron_and_answers_as_predict_with_the_flag() -> None:
    model, cluster, batch = model_preset("llama3-70b"), cluster_preset("dgx-a100-40gb", 2), 512
    result = search(model, cluster, batch, framework="any", top_k=5, grad_reduce_in_bf16=True)
    assert result.framework == "megatron"
    assert result.top and {r.framework for r in result.top} == {"megatron"}
    flagged = TrainingSpec(batch, "bf16", framework="megatron", grad_reduce_in_bf16=True)
    plain = TrainingSpec(batch, "bf16", framework="megatron")
    for r in result.top:
        again = predict(model, cluster, r.config, flagged)
        assert again.feasible
        assert again.tokens_per_s == r.prediction.tokens_per_s
        assert again.peak_memory_bytes_per_gpu == r.prediction.peak_memory_bytes_per_gpu
        assert again.memory_breakdown_bytes == r.prediction.memory_breakdown_bytes
        # Megatron's fp32 main_grad buffer (4 bytes a parameter) becomes a bf16 one (2 bytes).
        without = predict(model, cluster, r.config, plain)
        assert r.prediction.memory_breakdown_bytes.gradients_bytes > 0
        assert r.prediction.memory_breakdown_bytes.gradients_bytes == \
            without.memory_breakdown_bytes.gradients_bytes / 2


def test_flag_counts_exactly_what_fits_with_it() -> None:
    """The memory scan (GpuPeak) and the timed plans both take the flag: the feasible count is the
    brute-force count of Megatron configurations that fit with a 2-byte gradient buffer, more than
    without it (70B on 16 A100-40GB: the gradient buffer decides many layouts)."""
    model, cluster, batch = model_preset("llama3-70b"), cluster_preset("dgx-a100-40gb", 2), 512
    flagged = TrainingSpec(batch, "bf16", framework="megatron", grad_reduce_in_bf16=True)
    cands = enumerate_space(model, cluster.world_size, batch, "megatron").candidates
    fits = sum(predict(model, cluster, c.config, flagged).feasible for c in cands)
    with_flag = search(model, cluster, batch, framework="megatron", top_k=3, grad_reduce_in_bf16=True)
    without = search(model, cluster, batch, framework="megatron", top_k=3)
    assert with_flag.exhaustive and with_flag.n_feasible == fits
    assert with_flag.n_feasible > without.n_feasible
    assert with_flag.top[0].prediction.tokens_per_s > without.top[0].prediction.tokens_per_s


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed", "fsdp"])
def test_runtimes_without_the_option_are_refused_naming_the_field(framework: str) -> None:
    model, cluster = model_preset("gpt-7.5b"), cluster_preset("dgx-a100-80gb", 1)
    with pytest.raises(SpecError, match=r"^grad_reduce_in_bf16: .*Megatron-Core") as info:
        search(model, cluster, 64, framework=framework, grad_reduce_in_bf16=True)  # type: ignore[arg-type]
    assert info.value.field == "grad_reduce_in_bf16"
    assert framework in str(info.value)


def test_fp16_and_non_booleans_are_refused_naming_the_field() -> None:
    model, cluster = model_preset("gpt-7.5b"), cluster_preset("dgx-a100-80gb", 1)
    with pytest.raises(SpecError, match=r"grad_reduce_in_bf16: fp16 training already reduces"):
        search(model, cluster, 64, precision="fp16", framework="megatron", grad_reduce_in_bf16=True)
    with pytest.raises(SpecError, match=r"grad_reduce_in_bf16: 'yes' is not a boolean"):
        search(model, cluster, 64, framework="megatron", grad_reduce_in_bf16="yes")  # type: ignore[arg-type]

