"""Placement: the order groups are laid onto ranks decides which of them stay inside a node, and it is
searched, refused and emitted only where a runtime has the knob (Megatron's --use-tp-pp-dp-mapping)."""

from __future__ import annotations

import pytest

from search import ParallelConfig, SpecError, TrainingSpec, check_compatible, cluster_preset, model_preset, predict
from search._parallel_spec import Placement
from search._placement import cp_group, dp_cp_group, edp_group, ep_group, pp_group, tp_group
from search._space import enumerate_space
from service.launch._base import LaunchRequest
from service.launch._megatron import megatron_args
from service.launch._megatron_checks import check_megatron_args

ALT: Placement = "tp-cp-ep-pp-dp"


def test_each_order_lays_the_groups_at_megatrons_strides() -> None:
    """Megatron's RankGenerator: a group's stride is the product of the degrees inside it in the order."""
    default = ParallelConfig(dp=4, tp=4, pp=2, cp=2)
    alt = ParallelConfig(dp=4, tp=4, pp=2, cp=2, placement=ALT)
    for c in (default, alt):
        assert tp_group(c) == ((4, 1),) and cp_group(c) == ((2, 4),)
    assert pp_group(default) == ((2, 32),) and pp_group(alt) == ((2, 8),)
    assert dp_cp_group(default) == ((8, 4),)  # cp then dp: one run of 8 ranks 4 apart
    assert dp_cp_group(alt) == ((2, 4), (4, 16))  # the pipeline sits between cp and dp
    moe = ParallelConfig(dp=8, tp=2, pp=2, sp=True, ep=4, etp=1)
    assert ep_group(moe) == ((4, 1),) and edp_group(moe) == ((4, 4),)
    assert edp_group(ParallelConfig(dp=8, tp=2, pp=2, sp=True, placement=ALT)) == ((16, 2),)


def test_the_pipeline_inside_the_node_trades_pp_sends_for_a_wider_dp_all_reduce() -> None:
    """Llama 3 70B, tp=4 pp=2 dp=4 on 4 DGX H100: by default the two stages are 16 ranks apart (different
    nodes) and a dp group has 2 ranks per node; tp-cp-ep-pp-dp puts both stages in one node (NVLink sends)
    and spreads each dp group over 4 nodes, one rail each."""
    model, training = model_preset("llama3-70b"), TrainingSpec(global_batch=64)
    cluster = cluster_preset("dgx-h100", 4)
    base = {"dp": 4, "tp": 4, "pp": 2, "sp": True, "zero_stage": 1, "recompute": "full"}
    default = predict(model, cluster, ParallelConfig(**base), training).time_breakdown_s  # type: ignore[arg-type]
    alt = predict(model, cluster, ParallelConfig(**base, placement=ALT), training).time_breakdown_s  # type: ignore[arg-type]
    assert alt["pp_p2p"] < default["pp_p2p"] / 4
    assert alt["dp_comm"] > 2 * default["dp_comm"]
    assert alt["tp_comm"] == default["tp_comm"] and alt["compute"] == default["compute"]


def test_without_dp_or_pp_both_orders_cost_the_same() -> None:
    model, training = model_preset("llama3-8b"), TrainingSpec(global_batch=16)
    cluster = cluster_preset("dgx-h100", 2)
    for base in ({"dp": 2, "tp": 8, "pp": 1}, {"dp": 1, "tp": 8, "pp": 2}):
        one = predict(model, cluster, ParallelConfig(**base), training)  # type: ignore[arg-type]
        two = predict(model, cluster, ParallelConfig(**base, placement=ALT), training)  # type: ignore[arg-type]
        assert one.iteration_time_s == two.iteration_time_s


@pytest.mark.parametrize(("config", "framework", "name"), [
    (ParallelConfig(dp=2, tp=2, pp=2, cp=2, placement=ALT), "megatron", "megatron-tp-pp-dp-mapping-cp-ep"),
    (ParallelConfig(dp=2, tp=2, pp=2, zero_stage=1, placement=ALT), "deepspeed", None),
    (ParallelConfig(dp=4, tp=2, pp=2, zero_stage=3, placement=ALT), "fsdp", "fsdp-placement"),
    (ParallelConfig(dp=4, tp=2, pp=2, placement=ALT), "megatron-deepspeed", "megatron-deepspeed-placement"),
])
def test_orders_a_runtime_does_not_have_are_refused_naming_placement(config: ParallelConfig, framework: str,
                                                                      name: str | None) -> None:
    model = model_preset("llama3-8b")
    with pytest.raises(SpecError) as err:
        check_compatible(model, config.world_size, config, TrainingSpec(global_batch=16, framework=framework))  # type: ignore[arg-type]
    if name is not None:
        assert err.value.field == "ParallelConfig.placement"


def test_the_search_space_has_the_second_order_for_megatron_only_where_it_differs() -> None:
    model = model_preset("llama3-8b")
    space = enumerate_space(model, 16, 32, "any")
    placed = [c for c in space.candidates if c.config.placement == ALT]
    assert placed and all(c.framework == "megatron" for c in placed)
    assert all(c.config.dp > 1 and c.config.pp > 1 and c.config.cp == 1 and c.config.zero_stage < 2 for c in placed)
    defaults = {(c.framework, c.config) for c in space.candidates}
    for cand in placed[:50]:  # each has its default-order twin
        twin = ParallelConfig(**{**{f: getattr(cand.config, f) for f in cand.config.__slots__},  # type: ignore[arg-type]
                                 "placement": "tp-cp-ep-dp-pp"})
        assert ("megatron", twin) in defaults


def test_megatron_launch_files_carry_use_tp_pp_dp_mapping() -> None:
    model, cluster = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    training = TrainingSpec(global_batch=16)
    alt = LaunchRequest(model, cluster, ParallelConfig(dp=2, tp=4, pp=2, sp=True, placement=ALT), training)
    default = LaunchRequest(model, cluster, ParallelConfig(dp=2, tp=4, pp=2, sp=True), training)
    argv = megatron_args(alt)
    assert "--use-tp-pp-dp-mapping" in argv and "--use-tp-pp-dp-mapping" not in megatron_args(default)
    check_megatron_args(argv, 16)
