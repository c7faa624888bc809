"""Issue 11's bar: the configuration each benchmark question ranks first is written to launch files
that its framework's checks accept (the flag list and validate_args rules for Megatron-LM and
Megatron-DeepSpeed, DeepSpeed's own config classes, torchtitan's own pipeline split and config)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks.search_speed import cases  # noqa: E402
from search import SpecError, TrainingSpec  # noqa: E402
from service.launch import LaunchRequest, emit_target  # noqa: E402

TARGET = {"megatron": "megatron", "megatron-deepspeed": "megatron-deepspeed", "deepspeed": "deepspeed",
          "fsdp": "torchtitan"}
CASES = {c.name: c for c in cases()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_top_configuration_launches(name: str, case_search: Callable[[str], Any]) -> None:
    case = CASES[name]
    result = case_search(name)
    assert result.best is not None
    best = result.best
    request = LaunchRequest(model=case.model, cluster=case.cluster, config=best.config,
                            training=TrainingSpec(case.global_batch, case.precision, framework=best.framework))
    if case.allow_untested:  # BLOOM's ALiBi: the pinned fork's parser has none; refused with the reason
        with pytest.raises(SpecError, match="ALiBi"):
            emit_target(request, TARGET[best.framework])
        return
    out = emit_target(request, TARGET[best.framework])  # each emitter runs its framework's checks
    assert out.files
    if best.framework == "deepspeed":  # ds_config.json only: the launcher target runs it
        out = emit_target(request, "deepspeed-launcher")
    assert out.command
    if best.config.stage_layers is not None and best.framework == "megatron":
        text = "".join(out.files.values())
        assert any(flag in text for flag in ("--decoder-first-pipeline-num-layers", "--account-for-embedding",
                                             "--pipeline-model-parallel-layout"))
