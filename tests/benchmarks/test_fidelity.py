"""The fidelity bar of the cost model on the project's calibration set (issue 2).

These tests run ``benchmarks/fidelity.py`` on ``benchmarks/data`` and hold the model to the
targets: iteration-time MAPE <= 7 % overall and <= 12 % per source (issue 11), peak-memory MAPE <= 15 %,
every OOM verdict and every published feasibility claim right, and (not met yet) >= 90 % of the
pairs of runs it ranks in the measured order. They also check the report: several data files,
a record the model cannot express refused per row with its reasons, runs completed as tuned,
and the pairwise concordance recomputed by separately written code.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"
RUNS = DATA / "runs.json"
RUNS_2024_2026 = DATA / "runs_2024_2026.json"
FEASIBILITY = DATA / "feasibility.json"


def _load_fidelity() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "benchmarks" / "fidelity.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fidelity"] = module
    spec.loader.exec_module(module)
    return module


fidelity = _load_fidelity()


@pytest.fixture(scope="module")
def summary() -> dict:
    results = fidelity.evaluate(fidelity.load_runs(RUNS))
    claims = fidelity.check_claims(FEASIBILITY)
    return fidelity.summarize(results, [expected == got for _, expected, got, _ in claims])


def test_every_run_is_predicted(summary: dict) -> None:
    assert summary["n_errors"] == 0
    assert summary["n_runs"] == len(json.loads(RUNS.read_text()))


def test_iteration_time_mape_overall_at_most_7_percent(summary: dict) -> None:
    assert summary["n_time"] >= 250
    assert summary["time_mape"] <= 7.0, f"time MAPE {summary['time_mape']:.2f} %"


SOURCES = sorted(fidelity.summarize(fidelity.evaluate(fidelity.load_runs(RUNS)))["per_source"])
KNOWN_OVER: dict[str, str] = {}
"""Sources over the bar, each with why (a strict xfail: it flips when the model gets there). The
Megatron-Core README's 4 runs (16 % before) meet it since their unpublished micro-batch, SP and
recompute are completed as tuned (4.8 %)."""


@pytest.mark.parametrize(
    "source",
    [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=KNOWN_OVER[s])) if s in KNOWN_OVER else s
     for s in SOURCES],
)
def test_iteration_time_mape_per_source_at_most_12_percent(summary: dict, source: str) -> None:
    stats = summary["per_source"][source]
    assert stats["time_mape"] <= 12.0, f"{source}: time MAPE {stats['time_mape']:.2f} % over {stats['n_time']} runs"


def test_peak_memory_mape_at_most_15_percent(summary: dict) -> None:
    assert summary["n_memory"] >= 50
    assert summary["memory_mape"] <= 15.0, f"memory MAPE {summary['memory_mape']:.2f} %"


def test_every_oom_verdict_agrees(summary: dict) -> None:
    assert summary["n_oom"] == summary["n_runs"]
    assert summary["oom_correct"] == summary["n_oom"]


def test_every_feasibility_claim_agrees(summary: dict) -> None:
    assert summary["n_feasibility"] == 4
    assert summary["feasibility_correct"] == summary["n_feasibility"]


def test_json_summary_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert fidelity.main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("n_time", "time_mape", "time_median_ape", "time_max_ape", "n_memory", "memory_mape", "n_oom",
                "oom_correct", "per_source", "n_feasibility", "feasibility_correct", "n_completed_as_tuned",
                "completed_fields", "pairwise", "refused"):
        assert key in out
    assert set(out["pairwise"]) >= {"pairs", "concordant", "concordance", "per_source", "at"}
    assert set(out["pairwise"]["at"]) == {"0.05", "0.1", "0.2"}
    assert set(out["refused"]) == {"n", "by_reason", "by_first_reason", "rows"}
    # The default data is the project's: both runs files, every record either predicted or refused.
    n_records = len(json.loads(RUNS.read_text())) + len(json.loads(RUNS_2024_2026.read_text()))
    assert out["n_runs"] + out["refused"]["n"] == n_records
    assert out["refused"]["n"] == sum(out["refused"]["by_first_reason"].values())


def test_any_file_in_the_schema_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = json.loads(RUNS.read_text())[0]
    record["id"] = "my-run"
    record["measured"]["iteration_time_s"] = 2 * record["measured"]["iteration_time_s"]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([record]))
    assert fidelity.main(["--data", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_time"] == 1
    run = fidelity.load_runs(path)[0]
    predicted = fidelity.predict(run.model, run.cluster, run.config, run.training).iteration_time_s
    measured = record["measured"]["iteration_time_s"]
    assert out["time_mape"] == pytest.approx(abs(predicted - measured) / measured * 100, rel=1e-12)


def test_a_malformed_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"id": "x"}]))
    assert fidelity.main(["--data", str(path)]) == 2
    assert "fidelity: error" in capsys.readouterr().err


# --- Ranking: pairwise concordance -------------------------------------------------------------

CONCORDANCE_MEASURED = (
    "pairwise concordance at >10 % apart is 84.1 % (122/145 pairs; 81.0 % at >5 %, 90.0 % at >20 %) "
    "on runs.json, measured 2026-12-02 with Omni-Path's measured NCCL efficiency (77.2 % before it, 67.6 % "
    "before the pipeline-engine, CP and DP-traffic terms): all 23 discordant pairs are BLOOM prequel runs: "
    "12 involve the two dp=24 pp=2 rows (still predicted 11-13 % fast: their 24-node data-parallel rings "
    "run slower than one NIC's measured rate shared by two GPUs) and 6 the gb=1568 row, measured in 113 s "
    "a step against 114 s for the same layout at gb=2048; 5 remain without either"
)


@pytest.mark.xfail(strict=True, reason=CONCORDANCE_MEASURED)
def test_pairwise_concordance_at_least_90_percent(summary: dict) -> None:
    pw = summary["pairwise"]
    assert pw["pairs"] >= 100
    assert pw["concordance"] >= 0.90, f"concordance {pw['concordance']:.3f} over {pw['pairs']} pairs"


def _record(rid: str, *, source: str = "Paper A, 2021", num_gpus: int = 32, global_batch: int = 512,
            time_s: float = 1.0, **model: object) -> dict:
    rec = json.loads(RUNS.read_text())[0]
    rec.update(id=rid, source=source)
    rec["model"].update(model)
    rec["cluster"]["num_gpus"] = num_gpus
    rec["config"].update(dp=num_gpus, global_batch=global_batch, grad_accum=global_batch // (16 * num_gpus))
    rec["measured"]["iteration_time_s"] = time_s
    return rec


def _hand_made() -> list:
    """Four runs of one shape on 32 GPUs (c at twice the batch, d from another source), one on 64.

    Measured tokens/s relative to a: b 1/1.08, c 1/1.25, d 1/2; predicted a 1/1.1, b 1/1.0,
    c 1/1.3, d 1/1.28. Pairs (measured gap, concordant?): ab (8 %, no), ac (25 %, yes),
    ad (100 %, yes), bc (15.7 %, yes), bd (85 %, yes), cd (60 %, no)."""
    from search._runs_file import run_from_record

    def res(rec: dict, predicted: float):
        return fidelity.RunResult(run_from_record(rec), predicted, 1e9, True)

    return [
        res(_record("a", time_s=1.0), 1.1),
        res(_record("b", time_s=1.08), 1.0),
        res(_record("c", global_batch=1024, time_s=2.5), 2.6),
        res(_record("d", source="Paper B (2024)", time_s=2.0), 1.28),
        # Another GPU count: never paired, though it would be discordant with every run above.
        res(_record("e", num_gpus=64, global_batch=1024, time_s=0.5), 5.0),
    ]


@pytest.mark.parametrize(("threshold", "pairs", "concordant"), [(0.05, 6, 4), (0.10, 5, 4), (0.20, 4, 3)])
def test_pairwise_on_a_hand_made_set(threshold: float, pairs: int, concordant: int) -> None:
    pw = fidelity.pairwise(_hand_made(), threshold)
    assert (pw["pairs"], pw["concordant"]) == (pairs, concordant)
    assert pw["concordance"] == pytest.approx(concordant / pairs)
    assert pw["n_groups"] == 1


def test_pairwise_per_source_splits_same_source_and_cross_source_pairs() -> None:
    pw = fidelity.pairwise(_hand_made(), 0.10)
    assert pw["per_source"] == {
        "(across sources)": {"pairs": 3, "concordant": 2, "concordance": pytest.approx(2 / 3)},  # ad, bd, cd
        "Paper A": {"pairs": 2, "concordant": 2, "concordance": 1.0},  # ac, bc
    }
    assert fidelity.ranking(_hand_made())["at"]["0.2"] == {"pairs": 4, "concordant": 3, "concordance": 0.75}


def test_a_pair_predicted_equal_is_not_concordant() -> None:
    from search._runs_file import run_from_record

    results = [fidelity.RunResult(run_from_record(_record(r, time_s=t)), 1.0, 1e9, True)
               for r, t in (("x", 1.0), ("y", 2.0))]
    assert (fidelity.pairwise(results)["pairs"], fidelity.pairwise(results)["concordant"]) == (1, 0)


def _independent_concordance(results: list, threshold: float) -> tuple[int, int]:
    """Separately written: sort the scored runs by a string key, walk each run of equal keys, and
    compare throughputs by cross-multiplication (tokens_a * time_b vs tokens_b * time_a)."""
    scored = [r for r in results if not r.error and r.run.iteration_time_s and r.run.ran is not False]

    def key(r) -> str:
        m = r.run.model
        return "|".join(map(str, (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab, m.seq_len, m.activation,
                                  r.run.cluster.gpu.name, r.run.cluster.world_size)))

    scored.sort(key=key)
    pairs = agree = 0
    start = 0
    while start < len(scored):
        end = start
        while end < len(scored) and key(scored[end]) == key(scored[start]):
            end += 1
        block = scored[start:end]
        for i in range(len(block)):
            for j in range(i + 1, len(block)):
                a, b = block[i], block[j]
                tok_a = a.run.training.global_batch * a.run.model.seq_len
                tok_b = b.run.training.global_batch * b.run.model.seq_len
                fast_a, fast_b = tok_a * b.run.iteration_time_s, tok_b * a.run.iteration_time_s  # ∝ measured tokens/s
                if max(fast_a, fast_b) <= (1 + threshold) * min(fast_a, fast_b):
                    continue
                pairs += 1
                pred_a, pred_b = tok_a * b.time_s, tok_b * a.time_s
                agree += (pred_a - pred_b) * (fast_a - fast_b) > 0
        start = end
    return pairs, agree


@pytest.mark.parametrize("threshold", [0.05, 0.10, 0.20])
def test_concordance_agrees_with_an_independent_count(threshold: float) -> None:
    results = fidelity.evaluate([*fidelity.load_runs(RUNS), *fidelity.read_runs(RUNS_2024_2026).runs])
    pw = fidelity.pairwise(results, threshold)
    assert pw["pairs"] > 0
    assert (pw["pairs"], pw["concordant"]) == _independent_concordance(results, threshold)
    hand = fidelity.pairwise(_hand_made(), threshold)
    assert (hand["pairs"], hand["concordant"]) == _independent_concordance(_hand_made(), threshold)


# --- Several files, refused records, runs completed as tuned -------------------------------------


def test_several_data_files_are_read_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps([_record("a1"), _record("a2", time_s=2.0)]))
    second.write_text(json.dumps([_record("b1", source="Paper B (2024)")]))
    assert fidelity.main(["--data", str(first), "--data", str(second), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_runs"], out["n_time"], out["refused"]["n"]) == (3, 3, 0)
    assert set(out["per_source"]) == {"Paper A", "Paper B"}
    assert "n_feasibility" not in out  # claims only with the default data or --feasibility


def _bad_records() -> list:
    moe = _record("moe")
    moe["model"]["moe"] = {"experts": 8, "topk": 2, "expert_ffn": moe["model"]["ffn"], "token_drop": True}
    gpu = _record("mi300x")
    gpu["cluster"]["gpu"] = "mi300x-192gb"
    unknown = _record("unknown-field")
    unknown["config"]["zero_bubble"] = True
    no_config = _record("no-config")
    del no_config["config"]
    wrong_type = _record("wrong-type")
    wrong_type["model"]["hidden"] = "wide"
    inconsistent = _record("inconsistent")
    inconsistent["config"]["grad_accum"] = 3
    invalid = _record("invalid")
    invalid["config"].update(tp=5, dp=1, micro_batch=1, global_batch=512, grad_accum=None)
    invalid["cluster"]["num_gpus"] = 5
    return [moe, gpu, unknown, no_config, wrong_type, inconsistent, invalid, "not an object"]


EXPECTED_REFUSALS = {
    "moe": ("model.moe.token_drop", "mixture of experts"),
    "mi300x": ("cluster.gpu", "unknown GPU"),
    "unknown-field": ("config.zero_bubble", "unknown field"),
    "no-config": ("config", "malformed record"),
    "wrong-type": ("record", "malformed record"),
    "inconsistent": ("config.grad_accum", "inconsistent record"),
    "invalid": ("ParallelConfig.tp", "invalid specs"),
    "?": ("record", "malformed record"),
}


def test_unsupported_and_malformed_rows_are_refused_one_by_one(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([_record("good"), *_bad_records()]))
    assert fidelity.main(["--data", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_runs"], out["n_errors"], out["refused"]["n"]) == (1, 0, len(EXPECTED_REFUSALS))
    got = {row["id"]: (row["reasons"][0]["field"], row["reasons"][0]["category"]) for row in out["refused"]["rows"]}
    assert got == EXPECTED_REFUSALS
    assert out["refused"]["by_reason"] == {"malformed record": 3, "mixture of experts": 1, "unknown GPU": 1,
                                           "unknown field": 1, "inconsistent record": 1, "invalid specs": 1}
    assert fidelity.main(["--data", str(path)]) == 0
    table = capsys.readouterr().out
    assert "REFUSED mixture of experts: model.moe.token_drop: tokens were dropped at a capacity factor" in table
    assert "records the model cannot express: 8 (by reason" in table and "malformed record 3" in table
    assert "pairwise concordance" in table


def test_the_published_2024_2026_rows_are_predicted_or_refused_with_reasons() -> None:
    got = fidelity.read_runs(RUNS_2024_2026)
    records = json.loads(RUNS_2024_2026.read_text())
    assert len(got.runs) + len(got.refused) == len(records)
    summary = fidelity.refusals(got.refused)
    # Every MoE row is predicted as a mixture of experts or refused with its reasons, never read as dense.
    moe_ids = {r["id"] for r in records if r["model"].get("moe") is not None}
    assert len(moe_ids) == 55
    refused = {row.id: {r.field for r in row.refusals} for row in got.refused}
    as_moe = {run.id for run in got.runs if run.model.moe is not None}
    assert moe_ids == as_moe | (moe_ids & set(refused)) and not as_moe & set(refused)
    assert len(as_moe) == 48  # H100 and Blackwell, GPT-OSS's 11 (sliding window) included; token-drop rows refused
    assert all(refused[i] for i in moe_ids - as_moe)
    uneven = {r["id"] for r in records if r["config"].get("uneven_pipeline")}
    assert len(uneven) == 51
    assert not any(r.category == "uneven pipeline" for row in got.refused for r in row.refusals)  # issue 13
    predicted = {run.id: run for run in got.runs}
    for i in uneven & set(predicted):  # expressed with the layout left open and completed as tuned
        assert "stage_layers" in predicted[i].unknown
    from search._runs_fields import NODE_FOR_GPU
    assert summary["by_reason"].get("unknown GPU", 0) == sum(
        1 for r in records if r["cluster"]["gpu"] not in NODE_FOR_GPU) == 0  # every GPU of the file has a preset
    results = fidelity.evaluate(got.runs)
    assert all(r.error is None for r in results)
    families = fidelity.summarize(results)["moe_families"]
    assert set(families) == {"DeepSeek-V3 671B", "Qwen3-235B-A22B", "Qwen3-30B-A3B", "GPT-OSS 120B"}
    assert sum(f["n_time"] for f in families.values()) == 48


def test_runs_with_open_fields_are_completed_as_tuned(summary: dict) -> None:
    runs = fidelity.load_runs(RUNS)
    open_runs = [r for r in runs if r.unknown]
    assert summary["n_completed_as_tuned"] == len(open_runs) == 10
    assert summary["completed_fields"] == {"vp": 6, "recompute": 4, "micro_batch": 4, "sp": 3}
    from benchmarks._tuned import completions, predict_tuned

    for result in fidelity.evaluate(open_runs):
        configs = completions(result.run)
        times = [fidelity.predict(result.run.model, result.run.cluster, c, result.run.training) for c in configs]
        feasible = [p.iteration_time_s for p in times if p.feasible]
        assert result.completed and result.time_s == min(feasible)
        assert predict_tuned(result.run).config in configs


def test_leave_one_source_out_refits_without_each_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = json.loads(RUNS.read_text())
    small = records[:4] + [r for r in records if r["source"].startswith("MosaicML")][:4]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(small))
    assert fidelity.main(["--data", str(path), "--json", "--loso", "--maxiter", "1"]) == 0
    captured = capsys.readouterr()
    loso = json.loads(captured.out)["leave_one_source_out"]
    assert loso["maxiter"] == 1
    assert set(loso["per_source"]) == {"MosaicML llm-foundry", "Narayanan et al. 2021"}
    for stats in loso["per_source"].values():
        assert stats["n_time"] == 4 and stats["time_mape"] >= 0 and stats["in_sample_time_mape"] >= 0
    assert "LOSO 1/2: refit without MosaicML llm-foundry (4 runs), then predict its 4" in captured.err
    assert "time constants: generation 1/1" in captured.err


# --- Blackwell dense rows per GPU type (issue 15) -----------------------------------------------

BLACKWELL = ("b200-sxm-180gb", "b300-sxm-270gb", "gb200-nvl72", "gb300-nvl72")


@pytest.fixture(scope="module")
def per_gpu_2024_2026() -> dict:
    errata = fidelity.load_errata()
    got, applied = fidelity.read_corrected(RUNS_2024_2026, errata)
    return fidelity.summarize(fidelity.evaluate(got.runs), errata=applied)["per_gpu"]


def test_every_dense_blackwell_row_is_expressible() -> None:
    """Issue 15's bar: no dense row on B200, B300, GB200 or GB300 is refused (Megatron-FSDP rows included)."""
    got, _ = fidelity.read_corrected(RUNS_2024_2026, fidelity.load_errata())
    records = {r["id"]: r for r in json.loads(RUNS_2024_2026.read_text())}
    dense = {i for i, r in records.items() if r["cluster"]["gpu"] in BLACKWELL and r["model"].get("moe") is None}
    assert len(dense) >= 40
    assert dense <= {run.id for run in got.runs}, sorted(dense & {row.id for row in got.refused})


def test_every_oom_verdict_on_the_2024_2026_rows_agrees_but_one_known() -> None:
    """OOM verdicts on the 2024-26 rows, errata applied. One known miss: torchtitan's Llama 2 70B on 64
    A100 with selective op recomputation, predicted at 107.6 GiB on an 80 GB GPU. The four GB200 Llama 3
    70B Megatron-FSDP rows with their recipe's 40 offloaded layers fit (177 GiB) since the rows take their
    Megatron-Bridge model provider's dropout, 0 (187 GiB on a 186 GiB GPU before)."""
    got, _ = fidelity.read_corrected(RUNS_2024_2026, fidelity.load_errata())
    results = fidelity.evaluate(got.runs)
    wrong = [r.run.id for r in results if r.oom_correct is False]
    assert wrong == ["torchtitan-doc-3faaa1a0d-a100-llama2-70b-64g-lbs1-tp1-selectiveop-bf16"], wrong
    assert sum(r.oom_correct is True for r in results) >= 67


@pytest.mark.parametrize("gpu", BLACKWELL)
def test_dense_blackwell_rows_have_at_most_15_percent_time_mape_per_gpu_type(per_gpu_2024_2026: dict,
                                                                             gpu: str) -> None:
    """Issue 15's bar, with the constants global (fitted on runs.json only). The file has no dense B300
    row; the 26.02.01 rows whose printed layout their recipe contradicts are read with their errata
    (benchmarks/data/errata.json)."""
    stats = per_gpu_2024_2026.get(f"{gpu} dense")
    if gpu == "b300-sxm-270gb":
        assert stats is None
        return
    assert stats["n_time"] >= 8
    assert stats["time_mape"] <= 15.0, f"{gpu} dense: time MAPE {stats['time_mape']:.2f} % over {stats['n_time']}"
