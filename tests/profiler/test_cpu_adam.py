"""CPU Adam throughput: torch's Adam measured for real, DeepSpeed's CPUAdam measured or reported unavailable."""

from __future__ import annotations

import pytest

from profiler import _cpu_adam
from profiler._cpu_adam import measure_cpu_adam

pytest.importorskip("torch")


def test_torch_adam_rate_and_deepspeed_measured_or_explained() -> None:
    result = measure_cpu_adam(200_000, steps=2, deepspeed_build=False)  # no minute-long JIT build in tests
    assert result.torch_params_per_s > 0
    assert result.n_params == 200_000 and result.threads >= 1
    if result.deepspeed_params_per_s is None:
        assert result.note.startswith("DeepSpeed CPUAdam unavailable: ")
    else:
        assert result.deepspeed_params_per_s > 0 and result.note == ""


def test_deepspeed_without_a_built_op_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cpu_adam, "_deepspeed_op_ready", lambda: False)
    result = measure_cpu_adam(100_000, steps=1, deepspeed_build=False)
    assert result.deepspeed_params_per_s is None
    assert "DS_BUILD_CPU_ADAM=1" in result.note
    assert result.torch_params_per_s > 0


@pytest.mark.parametrize(("n_params", "steps"), [(0, None), (10, 0)])
def test_invalid_sizes_are_rejected(n_params: int, steps: int | None) -> None:
    with pytest.raises(ValueError):
        measure_cpu_adam(n_params, steps=steps)
