"""Pipeline layouts in each framework's terms (frameworks_2.md sec. 1) and their cost per stage (issue 13)."""

from __future__ import annotations

import dataclasses

import pytest

from search import ParallelConfig, SpecError, TrainingSpec, check_compatible, cluster_preset, model_preset, predict
from search._pipeline_layout import (
    balanced,
    deepspeed_partition,
    even,
    head_layers,
    megatron_account_for,
    megatron_first_last,
    megatron_layout,
    torchtitan_split,
)


def test_megatron_forms_of_llama3_405b() -> None:
    """126 layers on pp 16: the paper's split (one layer fewer on the first and last rank) in its
    three Megatron spellings (frameworks_2.md sec. 1.1 'Worked configurations')."""
    paper = (7,) + (8,) * 14 + (7,)
    assert megatron_account_for(126, 16, 8) == paper
    assert megatron_layout("E|(t|)*126,L", 16) == (paper, 8)
    assert megatron_layout("Et*7|(t*8|)*14,t*7L", 16) == (paper, 1)
    assert megatron_first_last(126, 16, 1, 7, 7) == paper
    with pytest.raises(SpecError, match="multiples of vp"):
        megatron_first_last(126, 16, 2, 7, 7)  # 7 % 2 != 0 (frameworks_2.md: "Not valid with VP=2")


def test_deepspeed_partitions_of_bloom() -> None:
    """BLOOM-176B: 70 layers, pp 12, type:transformer|embedding -> rank 0 = embed + 5, ranks 1-10 = 6,
    rank 11 = 5 + embed (bigscience tr11 README); plain type:transformer -> 6 x 10 + 5 + 5."""
    assert deepspeed_partition(70, 12, "type:transformer|embedding") == (5,) + (6,) * 10 + (5,)
    assert sorted(deepspeed_partition(70, 12, "type:transformer")) == [5, 5] + [6] * 10


def test_torchtitan_splits() -> None:
    """torchtitan 0.3.0 _generate_llm_fqn_per_model_part examples (frameworks_2.md sec. 1.3)."""
    assert torchtitan_split(126, 16, 1) == (7,) + (8,) * 14 + (7,)
    assert torchtitan_split(80, 8, 1) == (10, 11, 10, 10, 10, 10, 10, 9)
    assert torchtitan_split(126, 16, 2) == (7,) + (8,) * 14 + (7,)  # 32 stages: emb+3, 4 x 30, 3+head
    with pytest.raises(SpecError):
        torchtitan_split(4, 4, 2)


def test_balanced_split_carries_the_head_weight() -> None:
    assert balanced(32, 4, 0.0) == (8, 8, 8, 8)
    split = balanced(32, 4, 2.1)  # Llama 3 8B: the head + loss is about two layers of work
    assert sum(split) == 32 and split[-1] < 8
    assert max(n + w for n, w in zip(split, (0, 0, 0, 2.1), strict=True)) < 8 + 2.1
    assert head_layers(128256, 4096, 218_112_000, 8192) == pytest.approx(2.09, abs=0.01)
    with pytest.raises(SpecError):
        even(70, 12)


def test_uneven_layouts_are_validated_against_the_model() -> None:
    model = model_preset("llama3-8b")
    with pytest.raises(SpecError, match="stage_layers"):
        ParallelConfig(dp=4, pp=2, stage_layers=(16,))
    with pytest.raises(SpecError, match="stage_layers"):
        check_compatible(model, 8, ParallelConfig(dp=4, pp=2, stage_layers=(15, 16)), TrainingSpec(64))
    with pytest.raises(SpecError, match="uneven layout"):
        check_compatible(model_preset("bloom-176b"), 96, ParallelConfig(dp=8, pp=12), TrainingSpec(64))


def test_balancing_the_head_stage_is_faster_and_memory_is_the_worst_stage() -> None:
    """Llama 3 8B (128K vocabulary) on pp 4: the last stage, with the LM head and loss, paces the even
    pipeline; moving a layer off it lowers the iteration time, and moving one off the first stage
    when that one is the slowest does too. The peak is the fullest stage's."""
    model, cluster, training = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1), TrainingSpec(64)

    def run(layout: tuple[int, ...] | None) -> object:
        return predict(model, cluster, ParallelConfig(dp=2, pp=4, micro_batch=1, zero_stage=1, stage_layers=layout),
                       training)

    flat = run(None)
    assert flat.stage_times_s[-1] == max(flat.stage_times_s)  # the head's stage is the slowest
    lighter_head = run((8, 8, 9, 7))
    assert lighter_head.iteration_time_s < flat.iteration_time_s
    heavy_first = run((11, 8, 7, 6))
    assert heavy_first.stage_times_s[0] == max(heavy_first.stage_times_s)
    moved = run((10, 9, 7, 6))
    assert moved.iteration_time_s < heavy_first.iteration_time_s
    for p in (flat, lighter_head, heavy_first, moved):
        assert p.peak_memory_bytes_per_gpu == pytest.approx(max(p.stage_peak_memory_bytes))
        assert len(p.stage_layers) == len(p.stage_times_s) == len(p.stage_peak_memory_bytes) == 4
    assert heavy_first.stage_peak_memory_bytes[0] > flat.stage_peak_memory_bytes[0]  # more layers, pp in flight


def test_search_finds_uneven_layouts_where_pp_does_not_divide_the_layers() -> None:
    from search._search import search

    model = dataclasses.replace(model_preset("llama3-8b"), layers=30)
    result = search(model, cluster_preset("dgx-h100", 1), 64, framework="megatron", top_k=50)
    uneven = [r for r in result.top if r.config.pp > 1 and r.config.stage_layers is not None]
    assert uneven and all(sum(r.config.stage_layers or ()) == 30 for r in uneven)


def test_the_last_rank_carries_the_head_and_mtp_weighed_by_the_work_a_token_does() -> None:
    """A dense model's head weighs as before; an MoE model's against the parameters a token passes
    (dense parts and top-k experts, not all of them); each MTP module adds one layer and one more head
    pass. DeepSeek-V3's 61 layers on 4 ranks leave the MTP rank 12 layers, not 16."""
    from search import model_preset
    from search._pipeline_layout import balanced, head_layers, last_stage_extra_layers

    llama = model_preset("llama3-70b")
    assert last_stage_extra_layers(llama) == head_layers(llama.vocab, llama.hidden, llama.params_per_layer,
                                                         llama.seq_len)
    qwen = model_preset("qwen3-30b-a3b")
    assert qwen.moe is not None and qwen.mtp_layers == 0
    active = qwen.moe_layer_dense_params + qwen.moe.topk * qwen.mlp_matrices * qwen.hidden * qwen.moe.expert_ffn
    per_token = active + qwen.seq_len * qwen.hidden
    assert last_stage_extra_layers(qwen) == pytest.approx(qwen.hidden * qwen.vocab / per_token)
    ds = model_preset("deepseek-v3")
    head = last_stage_extra_layers(dataclasses.replace(ds, mtp_layers=0))
    extra = last_stage_extra_layers(ds)
    assert extra == pytest.approx(head + 1 + head) and 1.4 < head < 1.6  # one MTP module: a layer and a head
    assert balanced(ds.layers, 4, extra) == (17, 16, 16, 12)
