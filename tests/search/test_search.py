"""search(): exact ranking, validity, feasibility, determinism, objectives, hints, shared storage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search import (
    ModelSpec,
    ParallelConfig,
    SpecError,
    TrainingSpec,
    check_compatible,
    cluster_preset,
    model_preset,
    predict,
)
from search._search import pareto_front, search
from search._space import enumerate_space
from search._storage import open_storage

ROOT = Path(__file__).resolve().parents[2]


def small_model(**overrides: Any) -> ModelSpec:
    fields: dict[str, Any] = dict(name="small", layers=8, hidden=1024, heads=16, ffn=4096, vocab=32000, seq_len=2048)
    fields.update(overrides)
    return ModelSpec(**fields)


def _simplicity(c: ParallelConfig) -> tuple[int, int, int]:
    """Offloads, then parallel dimensions beyond dp, then other departures from the defaults
    (written out for the test; nothing untested is enumerated by default)."""
    offloads = (c.offload_optimizer != "none") + (c.offload_param != "none")
    dims = (c.tp > 1) + (c.pp > 1) + (c.vp > 1) + (c.cp > 1)
    departures = (c.zero_stage >= 2) + (c.recompute != "none") + c.tp_comm_overlap
    return offloads, dims, departures


def brute_force_tokens_per_s(model: ModelSpec, cluster: Any, global_batch: int, framework: str,
                             top_k: int) -> list[float]:
    """Every valid configuration predicted; the first ``top_k`` feasible ones' tokens/s in ranking
    order: those within the best one's error band first, simplest first, then by tokens/s; the
    rest by tokens/s; the fastest of all in the last place if it would not be shown otherwise."""
    out = []
    for cand in enumerate_space(model, cluster.world_size, global_batch, framework).candidates:
        p = predict(model, cluster, cand.config, TrainingSpec(global_batch, framework=cand.framework))
        if p.feasible:
            out.append((p.tokens_per_s, p.error_band, cand.config, p.peak_memory_bytes_per_gpu))
    if not out:
        return []
    best, band, _, _ = max(out, key=lambda x: x[0])
    near = [x for x in out if best - x[0] <= band * best]
    far = [x for x in out if best - x[0] > band * best]
    near.sort(key=lambda x: (_simplicity(x[2]), -x[0]))
    far.sort(key=lambda x: -x[0])
    listed, seen = [], set()
    for x in near + far:  # one configuration that two runtimes run with the same prediction: once
        if (x[2], x[0], x[3]) not in seen:
            seen.add((x[2], x[0], x[3]))
            listed.append(x[0])
    if top_k > 1 and max(listed) not in listed[:top_k]:
        listed[top_k - 1] = max(listed)
    return listed[:top_k]


@pytest.mark.parametrize(("model", "nodes", "batch", "framework"), [
    (small_model(), 1, 64, "any"),
    (small_model(), 2, 32, "megatron"),
    ("gpt-1.7b", 1, 64, "fsdp"),
])
def test_exact_top_k_equals_brute_force(model: Any, nodes: int, batch: int, framework: str) -> None:
    model = model_preset(model) if isinstance(model, str) else model
    cluster = cluster_preset("dgx-a100-80gb", nodes)
    result = search(model, cluster, batch, framework=framework, top_k=10)
    assert result.exhaustive
    expected = brute_force_tokens_per_s(model, cluster, batch, framework, 10)
    assert [r.prediction.tokens_per_s for r in result.top] == pytest.approx(expected, rel=1e-12)


def test_returned_configurations_are_valid_feasible_and_ranked() -> None:
    model, cluster = model_preset("gpt-7.5b"), cluster_preset("dgx-a100-80gb", 4)
    result = search(model, cluster, 128, framework="any", top_k=10)
    assert len(result.top) == 10
    assert [r.rank for r in result.top] == list(range(1, 11))
    scores = [r.prediction.tokens_per_s for r in result.top]
    plain = [r.prediction.tokens_per_s for r in result.top if not r.equivalent_to_best]
    assert plain == sorted(plain, reverse=True)  # past the equivalents, by throughput
    assert all(r.prediction.tokens_per_s >= max(scores) * (1 - r.prediction.error_band) - 1e-6
               for r in result.top if r.equivalent_to_best)
    seen = set()
    for r in result.top:
        training = TrainingSpec(128, framework=r.framework)  # type: ignore[arg-type]
        check_compatible(model, cluster.world_size, r.config, training)
        again = predict(model, cluster, r.config, training)
        assert again.feasible and again.tokens_per_s == pytest.approx(r.prediction.tokens_per_s, rel=1e-12)
        assert (r.framework, r.config) not in seen
        seen.add((r.framework, r.config))
        assert r.explanation.startswith(f"{r.prediction.tokens_per_s:,.0f} tokens/s")
    assert result.exhaustive and 0 < result.n_evaluated <= result.n_feasible <= result.n_valid <= result.space_size


def test_same_seed_same_answer_also_when_sampled() -> None:
    model, cluster = model_preset("gpt-7.5b"), cluster_preset("dgx-a100-80gb", 4)
    a = search(model, cluster, 128, framework="megatron", max_exhaustive=0, n_trials=60, seed=7)
    b = search(model, cluster, 128, framework="megatron", max_exhaustive=0, n_trials=60, seed=7)
    assert not a.exhaustive
    assert [(r.framework, r.config) for r in a.top] == [(r.framework, r.config) for r in b.top]


def test_sampled_search_finds_a_near_optimal_configuration() -> None:
    model, cluster = model_preset("gpt-7.5b"), cluster_preset("dgx-a100-80gb", 4)
    exact = search(model, cluster, 128, framework="megatron")
    sampled = search(model, cluster, 128, framework="megatron", max_exhaustive=0, n_trials=300, seed=0)
    assert exact.best is not None and sampled.best is not None
    regret = 1 - sampled.best.prediction.tokens_per_s / exact.best.prediction.tokens_per_s
    assert 0 <= regret <= 0.05


def test_cost_objective_ranks_by_dollars_per_million_tokens() -> None:
    model, cluster = small_model(), cluster_preset("dgx-a100-80gb", 1)
    result = search(model, cluster, 64, framework="megatron", objective="cost", price_per_gpu_hour=2.0)
    costs = [r.score for r in result.top if not r.equivalent_to_best]
    assert costs == sorted(costs)  # past the equivalents (simplest first), cheapest first
    assert all(abs(r.score - min(x.score for x in result.top)) <= r.prediction.error_band * r.score
               for r in result.top if r.equivalent_to_best)
    best = result.top[0]
    assert best.score == pytest.approx(2.0 * 8 / 3600 / best.prediction.tokens_per_s * 1e6, rel=1e-12)
    with pytest.raises(SpecError, match="price_per_gpu_hour"):
        search(model, cluster, 64, objective="cost")


def test_pareto_front_is_non_dominated() -> None:
    model, cluster = small_model(), cluster_preset("dgx-a100-80gb", 1)
    result = search(model, cluster, 64, framework="megatron", objective="pareto")
    points = [(r.prediction.tokens_per_s, r.prediction.memory_headroom_bytes) for r in result.pareto]
    assert len(points) >= 2
    for i, (t, h) in enumerate(points):
        assert not any(t2 >= t and h2 >= h and (t2, h2) != (t, h) for j, (t2, h2) in enumerate(points) if j != i)
    assert pareto_front([(1.0, 1.0, 0), (2.0, 0.5, 1), (0.5, 0.5, 2), (2.0, 0.4, 3)]) == [1, 0]


def test_nothing_fits_says_why_and_what_would() -> None:
    model, cluster = model_preset("gpt-1t"), cluster_preset("dgx-2", 1)
    megatron = search(model, cluster, 16, precision="fp16", framework="megatron", top_k=3)
    assert megatron.top == ()
    assert any(h.startswith("closest:") and "GiB" in h for h in megatron.hints)
    anything = search(model, cluster, 16, precision="fp16", framework="any", top_k=3)
    assert anything.best is not None
    best = anything.best.config
    assert best.zero_stage == 3 and best.offload_param == "nvme" and best.offload_optimizer == "nvme"


def test_bad_arguments_name_the_field() -> None:
    model, cluster = small_model(), cluster_preset("dgx-a100-80gb", 1)
    with pytest.raises(SpecError, match=r"^objective"):
        search(model, cluster, 64, objective="fastest")
    with pytest.raises(SpecError, match=r"^framework"):
        search(model, cluster, 64, framework="jax")
    with pytest.raises(SpecError, match=r"^top_k"):
        search(model, cluster, 64, top_k=0)
    with pytest.raises(SpecError, match=r"^study_name"):
        search(model, cluster, 64, storage="sqlite://")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.sampled_from([4, 6, 8]), heads=st.sampled_from([8, 16]), nodes=st.sampled_from([1, 2]),
       batch=st.sampled_from([16, 32, 48]), framework=st.sampled_from(["megatron", "fsdp", "deepspeed", "any"]))
def test_property_every_answer_is_valid_feasible_and_exact(layers: int, heads: int, nodes: int, batch: int,
                                                          framework: str) -> None:
    model = small_model(layers=layers, heads=heads)
    cluster = cluster_preset("dgx-a100-80gb", nodes)
    result = search(model, cluster, batch, framework=framework, top_k=5)
    for r in result.top:
        training = TrainingSpec(batch, framework=r.framework)  # type: ignore[arg-type]
        check_compatible(model, cluster.world_size, r.config, training)
        assert predict(model, cluster, r.config, training).feasible
    expected = brute_force_tokens_per_s(model, cluster, batch, framework, 5)
    assert [r.prediction.tokens_per_s for r in result.top] == pytest.approx(expected, rel=1e-12)


def test_different_nodes_change_the_answer() -> None:
    model = model_preset("gpt-7.5b")
    one = search(model, cluster_preset("dgx-a100-80gb", 1), 64, framework="megatron")
    two = search(model, replace(cluster_preset("dgx-a100-80gb", 1), num_nodes=2), 64, framework="megatron")
    assert one.best is not None and two.best is not None
    assert two.best.prediction.tokens_per_s > one.best.prediction.tokens_per_s


WORKER = """
import gc, json, sys
from dataclasses import replace
from search import cluster_preset, ModelSpec
from search._search import search
model = ModelSpec(name="tiny", layers=4, hidden=512, heads=8, ffn=2048, vocab=32000, seq_len=1024)
base = cluster_preset("dgx-a100-80gb", 1)
cluster = replace(base, node=replace(base.node, gpus_per_node=2))  # a small question: ~16 configurations
for line in sys.stdin:  # one search per line, "URL STUDY": every worker gets it at the same moment
    url, name = line.split()
    try:
        result = search(model, cluster, 1, framework="fsdp", storage=url, study_name=name)
        answer = {"n_valid": result.n_valid, "n_evaluated": result.n_evaluated,
                  "best": result.best.prediction.tokens_per_s}
    except Exception as e:
        answer = {"error": f"{type(e).__name__}: {e}"[:3000]}
    gc.collect()  # each search's storage engine sits in a reference cycle: close its connections now
    print(json.dumps(answer), flush=True)
"""


def run_workers(n_workers: int, urls: list[str], tmp_path: Path) -> list[list[dict[str, Any]]]:
    """Start ``n_workers`` processes, then hand each URL to all of them at once (the worker
    processes are already up, so they reach the storage together); their answers per URL."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs = [(tmp_path / f"worker{i}.log").open("w") for i in range(n_workers)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=log, text=True, env=env) for log in logs]
    answers = []
    try:
        for url in urls:
            for p in procs:
                assert p.stdin is not None
                p.stdin.write(f"{url} shared\n")
                p.stdin.flush()
            lines = [p.stdout.readline() if p.stdout else "" for p in procs]
            assert all(lines), "a worker died: " + " | ".join(Path(log.name).read_text()[-2000:] for log in logs)
            answers.append([json.loads(line) for line in lines])
    finally:
        for p in procs:
            p.communicate(timeout=60)
        for log in logs:
            log.close()
    return answers


@pytest.mark.postgres
@pytest.mark.parametrize("n_workers", [2, 4])
def test_workers_share_one_study_on_fresh_postgresql(n_workers: int, new_pg_url: Any, tmp_path: Path) -> None:
    """Workers started together on a database that never held a study (so they create Optuna's
    schema at once) all succeed, ten times over: every configuration is evaluated exactly once
    across them, and each ranks what all of them found, so all give the same best."""
    pytest.importorskip("psycopg")
    tiny = ModelSpec(name="tiny", layers=4, hidden=512, heads=8, ffn=2048, vocab=32000, seq_len=1024)
    n_valid = len(enumerate_space(tiny, 2, 1, "fsdp").candidates)
    urls = [new_pg_url() for _ in range(10)]
    rounds = run_workers(n_workers, urls, tmp_path)
    took_part = []
    for url, answers in zip(urls, rounds, strict=True):
        assert not [a["error"] for a in answers if "error" in a]
        storage = optuna.storages.RDBStorage(url)
        try:
            study = optuna.load_study(study_name="shared", storage=storage)
            complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
            batches = [t.params["batch"] for t in complete]
            assert len(batches) == len(set(batches)) and sum(t.user_attrs["result"]["n"] for t in complete) == n_valid
            assert not study.get_trials(states=(optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING))
            took_part.append(len({t.user_attrs["result"]["worker"] for t in complete}))
        finally:
            storage.engine.dispose()
        assert {a["n_valid"] for a in answers} == {a["n_evaluated"] for a in answers} == {n_valid}
        assert {a["best"] for a in answers} == {answers[0]["best"]}
    assert max(took_part) >= 2, "the workers shared the work"


def test_threads_open_a_fresh_sqlite_storage_at_once(tmp_path: Path) -> None:
    """Openers of a SQLite file that holds no study yet take turns creating Optuna's schema
    (without the lock, most rounds fail on "table ... already exists")."""
    for r in range(5):
        url = f"sqlite:///{tmp_path / f'study{r}.db'}"
        start, errors = threading.Barrier(4), []

        def open_it(url: str = url, start: threading.Barrier = start, errors: list[Exception] = errors) -> None:
            start.wait()
            try:
                open_storage(url).engine.dispose()
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors


def test_opening_retries_only_when_another_opener_won(monkeypatch: pytest.MonkeyPatch) -> None:
    """A duplicate-key or "already exists" error while opening means the schema is there now:
    open again. Any other error is the caller's to see, at once."""
    from sqlalchemy.exc import IntegrityError, OperationalError

    calls: list[str] = []

    def lost_once(url: str) -> str:
        calls.append(url)
        if len(calls) == 1:
            raise IntegrityError("CREATE TYPE studydirection AS ENUM", {}, Exception(
                'duplicate key value violates unique constraint "pg_type_typname_nsp_index"'))
        return "storage"

    monkeypatch.setattr(optuna.storages, "RDBStorage", lost_once)
    assert open_storage("sqlite://") == "storage" and calls == ["sqlite://", "sqlite://"]

    def refused(url: str) -> str:
        calls.append(url)
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    calls.clear()
    monkeypatch.setattr(optuna.storages, "RDBStorage", refused)
    with pytest.raises(OperationalError, match="connection refused"):
        open_storage("sqlite://")
    assert calls == ["sqlite://"]


def test_stored_study_holds_configurations_as_optuna_params_with_importances(tmp_path: Path) -> None:
    """The configuration study a shared-storage search writes has the configurations' own parameters
    and predictions, so Optuna's tools work on it: parameter importances, the best trial."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    model = small_model()
    result = search(model, cluster_preset("dgx-a100-80gb", 1), 64, storage=url, study_name="s")
    storage = optuna.storages.RDBStorage(url)
    try:
        configs = optuna.load_study(study_name="s-configs", storage=storage)
        trials = configs.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        assert len(trials) >= len(result.top)
        assert {"framework", "tp", "pp", "micro_batch", "zero_stage", "recompute"} <= set(trials[0].params)
        assert configs.best_trial.user_attrs["iteration_time_s"] > 0
        assert result.best is not None
        assert configs.best_value == pytest.approx(max(r.prediction.tokens_per_s for r in result.top))
        importances = optuna.importance.get_param_importances(configs)
        assert importances and sum(importances.values()) == pytest.approx(1.0)
        batches = optuna.load_study(study_name="s", storage=storage)
        assert len(batches.trials) < result.n_valid  # configurations travel in batches, not one per trial
    finally:
        storage.engine.dispose()


def test_counts_and_pareto_front_do_not_depend_on_top_k() -> None:
    """Issue 12: the feasible count and the Pareto front are the whole space's, whatever --top is; the
    pareto objective returns the front itself."""
    model, cluster = model_preset("gpt-7.5b"), cluster_preset("dgx-a100-80gb", 4)
    one = search(model, cluster, 128, top_k=1)
    fifty = search(model, cluster, 128, top_k=50)
    assert one.exhaustive and fifty.exhaustive
    assert one.n_feasible == fifty.n_feasible > 50
    assert [(r.framework, r.config) for r in one.pareto] == [(r.framework, r.config) for r in fifty.pareto]
    front = search(model, cluster, 128, objective="pareto", top_k=1)
    assert [(r.framework, r.config) for r in front.top] == [(r.framework, r.config) for r in fifty.pareto]
    # every feasible configuration is dominated by (or on) the front
    best_headroom = {r.prediction.tokens_per_s: r.prediction.memory_headroom_bytes for r in fifty.pareto}
    for r in fifty.top:
        assert any(t >= r.prediction.tokens_per_s and h >= r.prediction.memory_headroom_bytes - 1e-6
                   for t, h in best_headroom.items())


@pytest.mark.parametrize("enabled", [True, False])
def test_an_exhaustive_search_leaves_the_garbage_collector_as_it_found_it(enabled: bool) -> None:
    """The sweep pauses the cyclic collector (search._search._gc_paused): on again after it only
    where it was on before."""
    import gc

    was = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        result = search(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1), 64)
        assert result.exhaustive
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
