"""GEMM benchmark: the shapes are the cost model's, and CPU timing gives sane samples."""

from __future__ import annotations

import math

import pytest

import search._compute_time as compute_time
from profiler._matmul import DTYPES, run_matmul, square_sweep, summarize, transformer_gemm_shapes
from search import GemmSample, model_preset

torch = pytest.importorskip("torch")

KERNELS = compute_time.Kernels(matmul_flop_per_s=1e15, cuda_core_flop_per_s=1e13, attention_flop_per_s=1e15,
                               hbm_bytes_per_s=3e12, gemm_overhead_s=0.0)


def _cost_model_shapes(monkeypatch: pytest.MonkeyPatch, name: str, tp: int, tokens: int) -> set[tuple[int, int, int]]:
    """The (m, n, k) the cost model passes to gemm_work_s for one layer and the LM head."""
    calls: list[tuple[float, float, float]] = []

    def record(m: float, n: float, k: float, kernels: compute_time.Kernels) -> float:
        calls.append((m, n, k))
        return 1e-3

    monkeypatch.setattr(compute_time, "gemm_work_s", record)
    model = model_preset(name)
    compute_time.layer_times(model, tokens, tokens, tp, sp=True, kernels=KERNELS)
    compute_time.lm_head_time_s(model, tokens, tp, KERNELS)
    assert all(float(x).is_integer() for call in calls for x in call)
    return {(int(m), int(n), int(k)) for m, n, k in calls}


@pytest.mark.parametrize(("name", "tp"), [("llama3-70b", 8), ("llama3-8b", 1), ("gpt-1.7b", 2), ("mpt-7b", 4)])
def test_shapes_are_the_cost_models_gemms(monkeypatch: pytest.MonkeyPatch, name: str, tp: int) -> None:
    tokens = 4096
    expected = _cost_model_shapes(monkeypatch, name, tp, tokens)
    shapes = transformer_gemm_shapes([model_preset(name)], [tp], tokens)
    assert set(shapes) == expected
    assert len(shapes) == len(set(shapes))


def test_llama3_8b_tp8_known_answer() -> None:
    # h=4096, 32 heads, 8 KV heads of 128 (kv_dim 1024), SwiGLU f=14336, V=128256.
    assert transformer_gemm_shapes([model_preset("llama3-8b")], [8], 2048) == [
        (2048, (4096 + 2 * 1024) // 8, 4096),  # QKV
        (2048, 4096, 4096 // 8),  # attention output
        (2048, 2 * 14336 // 8, 4096),  # gate + up
        (2048, 4096, 14336 // 8),  # down
        (2048, 128256 // 8, 4096),  # LM head
    ]


def test_shapes_keep_only_usable_tp_and_deduplicate() -> None:
    llama70 = model_preset("llama3-70b")  # 64 heads, 8 KV heads
    assert transformer_gemm_shapes([llama70], [3], 1024) == []
    assert transformer_gemm_shapes([llama70], [16], 1024) == []  # 16 does not divide kv_heads=8
    one = transformer_gemm_shapes([llama70], [1, 2], 1024)
    assert transformer_gemm_shapes([llama70, llama70], [1, 2, 2, 3], 1024) == one
    assert len(one) == 10
    with pytest.raises(ValueError, match="tokens"):
        transformer_gemm_shapes([llama70], [1], 0)


def test_square_sweep() -> None:
    assert square_sweep([64, 128]) == [(64, 64, 64), (128, 128, 128)]
    with pytest.raises(ValueError):
        square_sweep([0])


def test_run_matmul_on_cpu() -> None:
    notes: list[str] = []
    seen: list[tuple[int, int, str]] = []
    shapes = [(32, 48, 64), (64, 64, 64)]
    samples = run_matmul(shapes, dtypes=("fp32", "tf32", "bf16"), device="cpu", warmup=1, repeats=3,
                         progress=lambda done, total, label: seen.append((done, total, label)), notes=notes)
    assert [(s.m, s.n, s.k, s.dtype) for s in samples] == [
        (32, 48, 64, "fp32"), (64, 64, 64, "fp32"), (32, 48, 64, "bf16"), (64, 64, 64, "bf16")]
    for s in samples:
        assert isinstance(s, GemmSample)
        assert s.time_s > 0 and math.isfinite(s.time_s)
        assert s.flop_per_s == pytest.approx(2 * s.m * s.n * s.k / s.time_s)
    assert any("tf32" in note for note in notes)  # a GPU mode: skipped with a note, not a crash
    assert [d for d, _, _ in seen] == [1, 2, 3, 4] and all(t == 4 for _, t, _ in seen)

    rows = summarize(samples, {"fp32": 1e12, "bf16": None})
    assert [r.dtype for r in rows] == ["bf16", "bf16", "fp32", "fp32"]  # DTYPES order
    for r in rows:
        assert r.flop_per_s > 0
        assert r.fraction_of_peak == (pytest.approx(r.flop_per_s / 1e12) if r.dtype == "fp32" else None)


def test_run_matmul_ctrl_c_keeps_what_was_measured() -> None:
    notes: list[str] = []

    def stop_after_two(done: int, total: int, label: str) -> None:
        if done == 2:
            raise KeyboardInterrupt

    samples = run_matmul([(16, 16, 16)] * 4, dtypes=("fp32",), device="cpu", warmup=0, repeats=1,
                         progress=stop_after_two, notes=notes)
    assert len(samples) == 2
    assert any("interrupted" in note for note in notes)


def test_run_matmul_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        run_matmul([(8, 8, 8)], dtypes=("int4",), device="cpu")
    with pytest.raises(ValueError, match="repeats"):
        run_matmul([(8, 8, 8)], device="cpu", repeats=0)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA"):
            run_matmul([(8, 8, 8)], device="cuda")
    assert DTYPES == ("bf16", "fp16", "tf32", "fp32")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bf16_8192_reaches_90_percent_of_a_tight_loop() -> None:
    """The acceptance bar: the benchmark's bf16 8192^3 figure vs torch.matmul back to back."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    loops = 50
    start.record()
    for _ in range(loops):
        a @ b
    end.record()
    torch.cuda.synchronize()
    tight_flop_per_s = 2 * n**3 / (start.elapsed_time(end) / 1e3 / loops)
    (sample,) = run_matmul([(n, n, n)], dtypes=("bf16",), device="cuda", warmup=10, repeats=50)
    assert sample.flop_per_s >= 0.9 * tight_flop_per_s, (sample.flop_per_s, tight_flop_per_s)
