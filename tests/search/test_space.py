"""The configuration space: every candidate is valid, unique and de-duplicated, and nothing valid is missed."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from functools import cache
from itertools import product
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search import ModelSpec, ParallelConfig, SpecError, TrainingSpec, check_compatible, model_preset
from search._checks import divisors
from search._parallel_spec import FRAMEWORKS, OFFLOADS, RECOMPUTES, Framework
from search._pipeline_layout import (
    balanced,
    deepspeed_partition,
    head_layers,
    megatron_account_for,
    megatron_first_last,
    torchtitan_split,
)
from search._space import FRAMEWORK_TARGETS, Candidate, Space, enumerate_space

SMALL_FLASH = ModelSpec(name="small-flash", layers=8, hidden=512, heads=8, kv_heads=4, ffn=1408, vocab=32000,
                        seq_len=1024, activation="swiglu", attention="flash")
MODELS = {
    "gpt3-175b": model_preset("gpt3-175b"),  # MHA, standard attention
    "llama3-70b": model_preset("llama3-70b"),  # GQA (8 KV heads), flash
    "small-flash": SMALL_FLASH,
}
# (world size, global batch): one GPU, one node, a large cluster.
WORLDS = [(1, 8), (8, 32), (1024, 2048)]
RUNTIMES: tuple[Framework, ...] = ("megatron", "deepspeed", "megatron-deepspeed", "fsdp")


@cache
def space_of(model_name: str, world: int, batch: int, target: str) -> Space:
    """Enumerated once per case and shared by the tests below."""
    return enumerate_space(MODELS[model_name], world, batch, target)


def assert_valid(model: ModelSpec, world: int, batch: int, space: Space) -> None:
    """Every candidate passes check_compatible for its runtime, and none repeats."""
    trainings = {r: TrainingSpec(batch, framework=r) for r in RUNTIMES}
    for c in space.candidates:
        assert c.framework in RUNTIMES
        check_compatible(model, world, c.config, trainings[c.framework])
    assert len(set(space.candidates)) == len(space.candidates)


def offloads(c: Candidate) -> tuple[str, str]:
    return (c.config.offload_optimizer, c.config.offload_param)


# ---------------------------------------------------------------- validity on real shapes

# Every target on the small worlds; on 1024 GPUs 'any' only, which test_runtime_rules shows to be
# the union of the four runtime targets (so those are checked too, at half the cost).
CASES = [(m, w, b, t) for m in MODELS for (w, b) in WORLDS for t in FRAMEWORK_TARGETS if w < 1024 or t == "any"]


@pytest.mark.parametrize(("model_name", "world", "batch", "target"), CASES)
def test_every_candidate_passes_check_compatible(model_name: str, world: int, batch: int, target: str) -> None:
    space = space_of(model_name, world, batch, target)
    assert_valid(MODELS[model_name], world, batch, space)
    if target != "any":
        assert {c.framework for c in space.candidates} <= {target}


@pytest.mark.parametrize(("model_name", "world", "batch"), [(m, w, b) for m in MODELS for (w, b) in WORLDS])
def test_runtime_rules(model_name: str, world: int, batch: int) -> None:
    model = MODELS[model_name]
    every = space_of(model_name, world, batch, "any").candidates
    per_runtime = {r: space_of(model_name, world, batch, r).candidates for r in RUNTIMES}

    # 'any' is the union of the four runtimes, each candidate labelled with its runtime.
    assert set(every) == set().union(*map(set, per_runtime.values()))
    assert len(every) == sum(len(cs) for cs in per_runtime.values())
    for r, cs in per_runtime.items():
        assert cs, f"{r} has no candidate"
        assert {c for c in every if c.framework == r} == set(cs)

    for c in per_runtime["deepspeed"]:
        assert (c.config.tp, c.config.pp, c.config.cp, c.config.vp, c.config.sp) == (1, 1, 1, 1, False)
    for c in per_runtime["megatron-deepspeed"]:
        assert c.config.cp == 1 and c.config.vp == 1
        if c.config.pp > 1:
            assert c.config.zero_stage <= 1 and offloads(c) == ("none", "none")
    for c in per_runtime["fsdp"]:
        assert c.config.zero_stage in (2, 3)
        assert offloads(c) == ("none", "none") or (offloads(c) == ("cpu", "cpu") and c.config.zero_stage == 3)
    for c in per_runtime["megatron"]:
        assert c.config.offload_param == "none" and c.config.offload_optimizer != "nvme"
        assert c.config.offload_optimizer == "none" or c.config.zero_stage >= 1

    recomputes = {c.config.recompute for c in every}
    if model.attention == "flash":
        assert recomputes == {"none", "full"}
    else:
        assert recomputes == {"none", "selective", "full"}
    assert all(c.config.vp == 1 for c in every if c.config.pp == 1)

    # dp*cp == 1: one zero stage per offload pair, the lowest the runtime permits.
    stages: dict[tuple[object, ...], list[int]] = {}
    for c in every:
        if c.config.dp * c.config.cp == 1:
            key = (c.framework, *(v for f, v in _fields(c.config) if f != "zero_stage"))
            stages.setdefault(key, []).append(c.config.zero_stage)
    assert all(len(zs) == 1 for zs in stages.values())
    lowest = {"megatron": 0, "deepspeed": 0, "megatron-deepspeed": 0, "fsdp": 2}
    for c in every:
        if c.config.dp * c.config.cp == 1 and offloads(c) == ("none", "none"):
            assert c.config.zero_stage == lowest[c.framework]
        if c.config.dp * c.config.cp == 1 and offloads(c) == ("cpu", "none"):
            assert c.config.zero_stage == 1


def _fields(config: ParallelConfig) -> list[tuple[str, object]]:
    return [(f.name, getattr(config, f.name)) for f in dataclasses.fields(config)]


def test_sharding_stages_are_all_kept_when_there_is_something_to_shard() -> None:
    zeros = Counter((c.framework, c.config.zero_stage)
                    for c in space_of("llama3-70b", 8, 32, "any").candidates if c.config.dp > 1)
    assert {z for (r, z) in zeros if r in ("megatron", "deepspeed")} == {0, 1, 2, 3}
    assert {z for (r, z) in zeros if r == "fsdp"} == {2, 3}


def test_a_configuration_several_runtimes_run_appears_once_per_runtime() -> None:
    by_config: dict[ParallelConfig, list[str]] = {}
    for c in space_of("small-flash", 8, 32, "any").candidates:
        by_config.setdefault(c.config, []).append(c.framework)
    assert max(len(rs) for rs in by_config.values()) > 1
    assert all(len(rs) == len(set(rs)) for rs in by_config.values())


# ---------------------------------------------------------------- brute force over the raw product


def issue_allows(runtime: str, c: ParallelConfig, batch: int, allow_untested: bool = False) -> bool:
    """The runtime rules of the issues, written out independently of search._space and the
    support matrix: refused and (unless allowed) untested combinations are out."""
    offload = (c.offload_optimizer, c.offload_param)
    if c.tp_comm_overlap and runtime != "megatron":
        return False  # --tp-comm-overlap is Megatron-Core's (Transformer Engine userbuffers)
    if runtime == "megatron":  # interleaved: Megatron-Core groups micro-batches by pp
        if c.vp > 1 and (batch // (c.dp * c.micro_batch)) % c.pp:
            return False
        if c.zero_stage >= 2 and (c.pp > 1 or (not allow_untested and c.offload_optimizer != "none")):
            return False  # Megatron-FSDP: pp = 1 only; with optimizer offload unproven
        return c.offload_param == "none" and c.offload_optimizer != "nvme"
    if runtime == "deepspeed":
        return c.tp == c.pp == c.cp == 1
    if runtime == "megatron-deepspeed":
        return c.cp == 1 and c.vp == 1 and (c.pp == 1 or (c.zero_stage <= 1 and offload == ("none", "none")))
    if c.pp > 1:  # torch.distributed.pipelining: 1F1B needs n >= pp; Interleaved1F1B whole rounds
        n = batch // (c.dp * c.micro_batch)
        rounds = max(1, n // c.pp)
        if (c.vp == 1 and n < c.pp) or (c.vp > 1 and n % rounds):
            return False
        if offload != ("none", "none") and not allow_untested:
            return False  # CPU offload with torch pipelining: unproven
    return c.zero_stage in (2, 3) and (offload == ("none", "none") or (offload == ("cpu", "cpu") and c.zero_stage == 3))


def layouts_of(runtime: str, layers: int, pp: int, vp: int, head_w: float,
               allow_untested: bool = False) -> set[tuple[int, ...] | None]:
    """The pipeline layouts issue 13 lets each runtime use, built by the framework-form functions of
    search._pipeline_layout (tested on their own against the frameworks' published splits); an even
    split whose chunks divide is spelled None."""
    if pp == 1:
        return {None} if vp == 1 else set()
    forms: list[Any] = []
    if layers % (pp * vp) == 0 and (runtime != "megatron-deepspeed" or vp == 1):
        forms.append(None)
    if runtime == "megatron":
        forms.append(lambda: megatron_account_for(layers, pp, vp))
        try:
            split = balanced(layers, pp, head_w)
        except SpecError:
            split = ()
        if split and len(set(split[1:-1])) <= 1:
            forms.append(lambda: megatron_first_last(layers, pp, vp, split[0], split[-1]))
    elif runtime == "fsdp" and vp in (1, 2):
        forms.append(lambda: torchtitan_split(layers, pp, vp))
    elif runtime == "megatron-deepspeed" and vp == 1:
        forms.append(lambda: deepspeed_partition(layers, pp, "type:transformer"))
        if allow_untested:  # BLOOM's split: the BigScience fork's --pp-partition-method only
            forms.append(lambda: deepspeed_partition(layers, pp, "type:transformer|embedding"))
    out: set[tuple[int, ...] | None] = set()
    for form in forms:
        try:
            layout = form() if form is not None else None
        except SpecError:
            continue
        if layout is not None and len(set(layout)) == 1 and layers % (pp * vp) == 0:
            layout = None
        out.add(layout)
    return out


def brute_force(model: ModelSpec, world: int, batch: int, target: str,
                micro_batches: Sequence[int] | None = None,
                allow_untested: bool = False) -> set[tuple[str, ParallelConfig]]:
    """The raw product filtered by check_compatible and the issue's rules, then de-duplicated."""
    runtimes = tuple(r for r in RUNTIMES if target in (r, "any"))
    trainings = {r: TrainingSpec(batch, framework=r) for r in runtimes}
    micros = sorted(set(micro_batches)) if micro_batches is not None else divisors(batch)
    valid: set[tuple[str, ParallelConfig]] = set()
    head_w = round(head_layers(model.vocab, model.hidden, model.params_per_layer, model.seq_len), 3)
    for tp, pp, cp in product(divisors(world), repeat=3):
        dp = max(1, world // (tp * pp * cp))  # a wrong product is refused by check_compatible
        for vp in range(1, model.layers + 3):
            layouts = {r: layouts_of(r, model.layers, pp, vp, head_w, allow_untested) for r in runtimes}
            for layout, sp, overlap, mb, zero, opt, param, rc in product(
                    set().union(*layouts.values()), (False, True), (False, True), micros, range(4), OFFLOADS,
                    OFFLOADS, RECOMPUTES):
                try:
                    config = ParallelConfig(dp=dp, tp=tp, pp=pp, vp=vp, cp=cp, sp=sp, micro_batch=mb, zero_stage=zero,
                                            offload_optimizer=opt, offload_param=param,  # type: ignore[arg-type]
                                            recompute=rc, tp_comm_overlap=overlap,  # type: ignore[arg-type]
                                            stage_layers=layout)
                except SpecError:
                    continue
                for r in runtimes:
                    if layout not in layouts[r]:
                        continue
                    try:
                        check_compatible(model, world, config, trainings[r])
                    except SpecError:
                        continue
                    if issue_allows(r, config, batch, allow_untested):
                        valid.add((r, config))
    # The other placement lays out different groups only with both dp and pp > 1 (else the same ranks).
    for label, c in list(valid):
        if c.dp > 1 and c.pp > 1:
            placed = dataclasses.replace(c, placement="tp-cp-ep-pp-dp")
            try:
                check_compatible(model, world, placed, trainings[label])
            except SpecError:
                continue
            if issue_allows(label, placed, batch, allow_untested):
                valid.add((label, placed))
    kept: set[tuple[str, ParallelConfig]] = set()
    for label, c in valid:
        if model.attention == "flash" and c.recompute == "selective":
            continue  # FlashAttention recomputes the attention core anyway
        if c.dp * c.cp == 1 and any((label, _with_zero(c, z)) in valid for z in range(c.zero_stage)):
            continue  # nothing to shard: a lower stage with the same offloads runs the same
        kept.add((label, c))
    return kept


def _with_zero(c: ParallelConfig, zero: int) -> ParallelConfig | None:
    try:
        return dataclasses.replace(c, zero_stage=zero)
    except SpecError:
        return None


TINY_FLASH = ModelSpec(name="tiny-flash", layers=8, hidden=32, heads=4, kv_heads=2, ffn=64, vocab=16, seq_len=8)
TINY_STANDARD = ModelSpec(name="tiny-standard", layers=4, hidden=8, heads=2, ffn=6, vocab=16, seq_len=8,
                          attention="standard")


@pytest.mark.parametrize("allow_untested", [False, True])
@pytest.mark.parametrize(("model", "world", "batch", "target", "micro"), [
    (TINY_FLASH, 4, 4, "any", None),
    (TINY_FLASH, 8, 2, "fsdp", None),
    (TINY_STANDARD, 2, 4, "any", None),
    (TINY_STANDARD, 4, 8, "megatron-deepspeed", [1, 4]),
])
def test_exact_count_against_brute_force(model: ModelSpec, world: int, batch: int, target: str,
                                         micro: list[int] | None, allow_untested: bool) -> None:
    space = enumerate_space(model, world, batch, target, micro, allow_untested=allow_untested)
    expected = brute_force(model, world, batch, target, micro, allow_untested)
    got = [(c.framework, c.config) for c in space.candidates]
    assert len(got) == len(expected)
    assert set(got) == expected


def test_hand_counted_single_gpu() -> None:
    """13B on one GPU, batch 1 (flash: recompute none/full). Per runtime, tp = pp = cp = vp = mb = 1,
    and dp*cp = 1 keeps one zero stage per offload pair:
    megatron (none,none)@0, (cpu,none)@1 -> 2; deepspeed and megatron-deepspeed (pp = 1) all 9
    offload pairs -> 9; fsdp (none,none)@2, (cpu,cpu)@3 -> 2. Times 2 recompute choices."""
    model = ModelSpec(name="13b", layers=40, hidden=5120, heads=40, ffn=20480, vocab=50257, seq_len=1024)
    counts = {t: len(enumerate_space(model, 1, 1, t).candidates) for t in FRAMEWORK_TARGETS}
    assert counts == {"megatron": 4, "deepspeed": 18, "megatron-deepspeed": 18, "fsdp": 4, "any": 44}
    ds = {(c.config.zero_stage, *offloads(c)) for c in enumerate_space(model, 1, 1, "deepspeed").candidates}
    assert (0, "none", "none") in ds and (1, "cpu", "none") in ds and (3, "nvme", "nvme") in ds
    assert not any(z == 2 for z, *_ in ds)


# ---------------------------------------------------------------- random small shapes


@st.composite
def jobs(draw: st.DrawFn) -> tuple[ModelSpec, int, int, str, list[int] | None]:
    heads = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12]))
    model = ModelSpec(
        name="random", layers=draw(st.integers(1, 12)), hidden=heads * draw(st.integers(1, 4)), heads=heads,
        kv_heads=draw(st.sampled_from(divisors(heads))), ffn=draw(st.integers(1, 48)), vocab=16,
        seq_len=draw(st.integers(1, 64)), attention=draw(st.sampled_from(["flash", "standard"])),
    )
    micro = draw(st.none() | st.lists(st.integers(1, 16), min_size=1, max_size=4))
    world = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 32]))
    batch = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]))
    return model, world, batch, draw(st.sampled_from(FRAMEWORK_TARGETS)), micro


@settings(max_examples=80, deadline=None, database=None)
@given(jobs())
def test_random_shapes_are_valid_unique_and_complete(job: tuple[ModelSpec, int, int, str, list[int] | None]) -> None:
    model, world, batch, target, micro = job
    space = enumerate_space(model, world, batch, target, micro)
    assert_valid(model, world, batch, space)
    if micro is not None:
        assert all(c.config.micro_batch in micro for c in space.candidates)
    if model.attention == "flash":
        assert all(c.config.recompute != "selective" for c in space.candidates)
    if space.size <= 30_000:  # small enough to check completeness against the raw product
        assert {(c.framework, c.config) for c in space.candidates} == brute_force(model, world, batch, target, micro)


# ---------------------------------------------------------------- size, order, errors


def test_size_is_the_raw_product_of_choice_counts() -> None:
    # tp, pp, cp: divisors of 1024 (11); vp: divisors of 96 layers (12); (sp, tp_comm_overlap) 3;
    # micro: divisors of 2048 (12); zero 4; two offloads 3 * 3; recompute 3; and for 'any' four runtimes.
    raw = 11 ** 3 * 12 * 3 * 12 * 4 * 3 * 3 * 3
    assert space_of("gpt3-175b", 1024, 2048, "megatron").size == raw == 62_099_136
    assert space_of("gpt3-175b", 1024, 2048, "any").size == 4 * raw
    model = MODELS["llama3-70b"]
    size = enumerate_space(model, 8, 32, "fsdp", micro_batches=[1, 2, 2, 4]).size
    assert size == math.prod([len(divisors(8))] * 3 + [len(divisors(80)), 3, 3, 4, 3, 3, 3])


def test_micro_batches_restrict_the_choices() -> None:
    space = enumerate_space(SMALL_FLASH, 8, 32, "megatron", micro_batches=[2, 3, 64])
    assert {c.config.micro_batch for c in space.candidates} == {2}  # 3 and 64 divide no batch per dp rank


def test_order_is_deterministic() -> None:
    assert enumerate_space(SMALL_FLASH, 8, 32, "any") == enumerate_space(SMALL_FLASH, 8, 32, "any")


@pytest.mark.parametrize("framework", ["jax", "", "Megatron", "megatron-lm"])
def test_unknown_framework_raises_naming_the_field(framework: str) -> None:
    with pytest.raises(SpecError) as info:
        enumerate_space(SMALL_FLASH, 8, 32, framework)
    assert info.value.field == "framework"
    assert all(t in info.value.fix for t in FRAMEWORK_TARGETS)


@pytest.mark.parametrize(("field", "kwargs"), [
    ("world_size", {"world_size": 0}),
    ("global_batch", {"global_batch": -1}),
    ("micro_batches", {"micro_batches": [1, 0]}),
])
def test_bad_arguments_raise_naming_the_field(field: str, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"model": SMALL_FLASH, "world_size": 8, "global_batch": 32, "framework": "any"}
    args.update(kwargs)
    with pytest.raises(SpecError) as info:
        enumerate_space(**args)  # type: ignore[arg-type]
    assert info.value.field == field


def test_frameworks_match_the_spec() -> None:
    assert (*FRAMEWORKS, "any") == FRAMEWORK_TARGETS


@pytest.mark.parametrize(("model_name", "world", "batch"), [("llama3-70b", 1024, 2048), ("gpt3-175b", 8, 32)])
def test_blocks_hold_the_candidates_in_order(model_name: str, world: int, batch: int) -> None:
    """The blocks a memory scan walks hold exactly the space's candidates, in its order: blocks follow
    the enumeration, micro-batches ascend inside a block, runtimes of one micro-batch are adjacent."""
    space = space_of(model_name, world, batch, "any")
    assert space.n_valid == len(space.candidates) == sum(len(v) for b in space.blocks for _mb, v in b.entries)
    flat = [c for b in space.blocks for c in b.candidates()]
    assert flat == list(space.candidates)
    for block in space.blocks:
        mbs = [mb for mb, _ in block.entries]
        assert mbs == sorted(set(mbs))
        for cand in block.candidates():
            c = cand.config
            assert (c.dp, c.tp, c.pp, c.vp, c.cp, c.sp, c.zero_stage, c.recompute) == (
                block.dp, block.tp, block.pp, block.vp, block.cp, block.sp, block.zero_stage, block.recompute)
