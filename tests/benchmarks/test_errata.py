"""Errata of the published runs (benchmarks/_errata.py, benchmarks/data/errata.json): each applies to
its row only while the row holds the published values, changes only the layout, is reported by
fidelity.py, and a malformed erratum is a clear error."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import fidelity  # noqa: E402
from benchmarks._errata import ERRATA, correct_records, load_errata, read_corrected  # noqa: E402
from search import predict  # noqa: E402
from search._runs_file import read_runs  # noqa: E402

DATA = ROOT / "benchmarks" / "data"


def _open(e: Any) -> bool:
    """An erratum that leaves the recipe value open: a dispatcher no recipe of the row's release pins."""
    return e.corrected.get("moe_dispatcher") == "unknown"


def _field(record: dict[str, Any], name: str) -> Any:
    """A record's value of an erratum's field: ``config.<name>``, or ``model.moe.<name>`` by its path."""
    if name.startswith("model.moe."):
        return record["model"]["moe"].get(name.removeprefix("model.moe."))
    return record["config"].get(name)


def _entry(**over: Any) -> dict[str, Any]:
    entry = json.loads(ERRATA.read_text())["errata"][0]
    entry.update(over)
    return entry


def _write(tmp_path: Path, *entries: Any) -> Path:
    path = tmp_path / "errata.json"
    path.write_text(json.dumps({"errata": list(entries)}))
    return path


def test_every_erratum_matches_its_published_row_and_cites_evidence() -> None:
    errata = load_errata()
    assert errata, "the project's errata file is empty"
    for e in errata:
        records = {r["id"]: r for r in json.loads((DATA / e.file).read_text())}
        assert e.id in records, f"{e.id} is not a row of {e.file}"
        record = records[e.id]
        assert {k: _field(record, k) for k in e.published} == dict(e.published)
        assert dict(e.corrected) != dict(e.published)
        first = e.evidence[0]  # names the reference read and a line of it
        assert ("@" in first or " at " in first) and ("line" in first or re.search(r":\d+", first)), e.evidence
        if e.kind == "completes":  # fills what the table does not print, never overrides what it does
            assert all(v is None for v in e.published.values()), e.id


def test_the_corrected_rows_are_read_with_the_recipes_layout_and_the_rest_as_printed() -> None:
    path = DATA / "runs_2024_2026.json"
    printed = {r.id: r for r in read_runs(path).runs}
    corrected, applied = read_corrected(path)
    assert {e.id for e in applied} == {e.id for e in load_errata() if e.file == path.name}
    fixed = {e.id: e for e in applied}
    # The errata refuse nothing the printed rows did not: a dispatcher no recipe pins is left open, and the
    # row is completed as tuned over Megatron-Core's dispatchers (benchmarks/_tuned.py).
    assert {row.id for row in corrected.refused} <= {row.id for row in read_runs(path).refused}
    left_open = {e.id for e in applied if _open(e)}
    assert len(left_open) == 3  # the 25.11 rows of DeepSeek-V3 and Qwen3-235B on NVL72
    for run in corrected.runs:
        assert ("moe_dispatcher" in run.unknown) == (run.id in left_open)
        if run.id in left_open:
            assert run.config.moe_dispatcher == "alltoall" and run.config.moe_a2a_overlap is False
    # Rows refused as printed that the recipe completes: the 25.09 token-dropping rows, whose capacity the
    # table does not print (capacity factor 1.0, padded, in the benchmark script of their release).
    completed = {run.id: run for run in corrected.runs if run.id not in printed}
    assert len(completed) == 7 and all("-tokendrop" in rid for rid in completed)
    for run in completed.values():
        assert run.model.moe is not None and run.id in fixed
        assert (run.model.moe.capacity_factor, run.model.moe.pad_to_capacity) == (1.0, True)
        assert run.config.moe_dispatcher == "alltoall"
    assert len(corrected.runs) == len(printed) + len(completed)
    for run in corrected.runs:
        if run.id in completed:
            continue
        before = printed[run.id]
        if run.id not in fixed:
            assert run == before
            continue
        e = fixed[run.id]
        c = run.config
        got = {"micro_batch": c.micro_batch, "vp": c.vp, "pp": c.pp, "dp": c.dp, "tp": c.tp, "cp": c.cp,
               "moe_dispatcher": c.moe_dispatcher, "moe_a2a_overlap": c.moe_a2a_overlap}
        pinned = {k: v for k, v in e.corrected.items() if k in got and not (k == "moe_dispatcher" and _open(e))}
        assert {k: v for k, v in got.items() if k in pinned} == pinned
        # What was measured, the cluster and the run's identity are untouched; the model only where its own
        # definition completes it (GPT-OSS's clamp, biases, sinks and YaRN).
        completes_model = {k.removeprefix("model."): v for k, v in e.corrected.items()
                           if k.startswith("model.") and not k.startswith("model.moe.")}
        model = dataclasses.replace(before.model, **completes_model) if completes_model else before.model
        assert (run.iteration_time_s, run.model, run.cluster, run.source) == (
            before.iteration_time_s, model, before.cluster, before.source)
        assert c.world_size == run.cluster.world_size == before.config.world_size


def test_the_nvfp4_row_as_printed_cannot_fit_and_as_its_recipe_does() -> None:
    """The evidence the NVFP4 erratum cites: 70B unsharded on a 288 GB GPU does not fit."""
    rid = "mbridge-26.02.01-gb300-llama3-70b-nvfp4-64g-gbs256-mbs2-tp1pp1cp1vp1"
    path = DATA / "runs_2024_2026.json"
    printed = next(r for r in read_runs(path).runs if r.id == rid)
    fixed = next(r for r in read_corrected(path)[0].runs if r.id == rid)
    assert not predict(printed.model, printed.cluster, printed.config, printed.training).feasible
    assert predict(fixed.model, fixed.cluster, fixed.config, fixed.training).feasible


def test_an_erratum_whose_row_changed_is_an_error_naming_row_and_field() -> None:
    e = load_errata()[0]
    records = json.loads((DATA / e.file).read_text())
    row = next(r for r in records if r["id"] == e.id)
    field = next(iter(e.published))
    row["config"][field] = e.published[field] + 7
    with pytest.raises(ValueError, match=rf"{e.id}: config\.{field} is .*review the erratum"):
        correct_records(records, e.file, [e])


def test_a_capacity_erratum_checks_the_rows_moe_part_and_fills_it() -> None:
    e = next(e for e in load_errata() if "model.moe.capacity_factor" in e.corrected)
    records = json.loads((DATA / e.file).read_text())
    row = next(r for r in records if r["id"] == e.id)
    (out,), _ = correct_records([row], e.file, [e])
    assert (out["model"]["moe"]["capacity_factor"], out["model"]["moe"]["pad_to_capacity"]) == (1.0, True)
    assert out["config"] == row["config"] and "capacity_factor" not in row["model"]["moe"]
    changed = copy.deepcopy(row)
    changed["model"]["moe"]["capacity_factor"] = 1.25  # the source now prints it: the erratum is stale
    with pytest.raises(ValueError, match=rf"{e.id}: model\.moe\.capacity_factor is 1\.25 .*review the erratum"):
        correct_records([changed], e.file, [e])
    dense = copy.deepcopy(row)
    del dense["model"]["moe"]
    with pytest.raises(ValueError, match=r"model\.moe\.capacity_factor is 'no model\.moe object'"):
        correct_records([dense], e.file, [e])


def test_a_model_erratum_checks_the_rows_model_and_completes_it() -> None:
    """GPT-OSS's rows: the schema has no field for its GLU clamp, biases, sinks or YaRN; its release's model
    sets them, and the row is read with them (then costed with the unfused paths they take)."""
    e = next(e for e in load_errata() if "model.glu_clamp" in e.corrected and "moe_dispatcher" not in e.corrected)
    records = json.loads((DATA / e.file).read_text())
    row = next(r for r in records if r["id"] == e.id)
    (out,), _ = correct_records([row], e.file, [e])
    assert {k: out["model"][k] for k in ("glu_clamp", "glu_linear_offset", "bias", "softmax_sinks")} == {
        "glu_clamp": 7.0, "glu_linear_offset": 1.0, "bias": True, "softmax_sinks": True}
    assert out["model"]["rope_yarn"]["factor"] == 32.0 and out["config"] == row["config"]
    assert "glu_clamp" not in row["model"]  # the input is untouched
    run = next(r for r in read_corrected(DATA / e.file)[0].runs if r.id == e.id)
    assert (run.model.activation, run.model.glu_clamp, run.model.bias, run.model.softmax_sinks) == (
        "quick-geglu", 7.0, True, True)
    assert run.model.rope_yarn is not None and run.model.rope_yarn.factor == 32.0
    changed = copy.deepcopy(row)
    changed["model"]["glu_clamp"] = 10.0  # the source now prints it: the erratum is stale
    with pytest.raises(ValueError, match=rf"{e.id}: model\.glu_clamp is 10\.0 .*review the erratum"):
        correct_records([changed], e.file, [e])
    every = [x for x in load_errata() if "model.glu_clamp" in x.corrected]
    assert len(every) == 11 and all("gpt-oss" in x.id for x in every)


def test_correcting_leaves_the_input_records_untouched() -> None:
    e = load_errata()[0]
    records = json.loads((DATA / e.file).read_text())
    before = copy.deepcopy(records)
    out, applied = correct_records(records, e.file, [e])
    assert records == before and applied == (e,) and out != before
    # Another file's rows are not corrected even when an id matches.
    assert correct_records(records, "other.json", [e]) == (records, ())


@pytest.mark.parametrize(("over", "message"), [
    ({"corrected": {"zero_stage": 1}, "published": {"zero_stage": 2}}, r"config\.zero_stage cannot be corrected"),
    ({"corrected": {"recompute": "none"}, "published": {"recompute": None}},
     r"a 'contradicts' erratum corrects printed layout fields only, not config\.recompute"),
    ({"kind": "completes"}, r"a 'completes' erratum fills fields the table left null, but config\.\w+ is published"),
    ({"kind": "completes", "corrected": {"recompute": "some"}, "published": {"recompute": None}},
     r"corrected config\.recompute is 'some'; give one of none, selective, full"),
    ({"kind": "completes", "corrected": {"activation_offload_layers": -1},
      "published": {"activation_offload_layers": None}}, r"give a count >= 0"),
    ({"corrected": {"micro_batch": 0}, "published": {"micro_batch": 2}}, r"corrected config\.micro_batch is 0"),
    ({"corrected": {"micro_batch": 1}, "published": {"vp": 1}}, r"give both values of every field"),
    ({"evidence": []}, r"evidence must be a non-empty list"),
    ({"kind": "better fit"}, r"kind 'better fit' is not one of contradicts, completes"),
    ({"kind": "completes", "corrected": {"moe_a2a_overlap": "yes"}, "published": {"moe_a2a_overlap": None}},
     r"corrected config\.moe_a2a_overlap is 'yes'; give true or false"),
    ({"reason": ""}, r"reason must say why"),
    ({"kind": "completes", "corrected": {"model.moe.capacity_factor": 0.5},
      "published": {"model.moe.capacity_factor": None}}, r"corrected model\.moe\.capacity_factor is 0\.5; give a "
                                                          r"capacity factor >= 1"),
    ({"kind": "completes", "corrected": {"model.moe.pad_to_capacity": "yes"},
      "published": {"model.moe.pad_to_capacity": None}}, r"corrected model\.moe\.pad_to_capacity is 'yes'; give true"),
    ({"corrected": {"model.moe.capacity_factor": 1.0}, "published": {"model.moe.capacity_factor": None}},
     r"a 'contradicts' erratum corrects printed layout fields only, not model\.moe\.capacity_factor"),
    ({"kind": "completes", "corrected": {"model.moe.experts": 8}, "published": {"model.moe.experts": None}},
     r"model\.moe\.experts cannot be corrected"),
    ({"kind": "completes", "corrected": {"model.hidden": 4096}, "published": {"model.hidden": None}},
     r"model\.hidden cannot be corrected"),
    ({"kind": "completes", "corrected": {"model.glu_clamp": "7"}, "published": {"model.glu_clamp": None}},
     r"corrected model\.glu_clamp is '7'; give a finite number"),
    ({"kind": "completes", "corrected": {"model.bias": 1}, "published": {"model.bias": None}},
     r"corrected model\.bias is 1; give true or false"),
    ({"kind": "completes", "corrected": {"model.rope_yarn": 32}, "published": {"model.rope_yarn": None}},
     r"corrected model\.rope_yarn is 32; give an object"),
    ({"corrected": {"model.softmax_sinks": True}, "published": {"model.softmax_sinks": None}},
     r"a 'contradicts' erratum corrects printed layout fields only, not model\.softmax_sinks"),
])
def test_a_malformed_erratum_names_the_entry_and_the_field(tmp_path: Path, over: dict, message: str) -> None:
    with pytest.raises(ValueError, match=r"errata\[0\]: .*" + message):
        load_errata(_write(tmp_path, _entry(**over)))


def test_an_erratum_without_a_field_or_given_twice_is_refused(tmp_path: Path) -> None:
    entry = _entry()
    del entry["evidence"]
    with pytest.raises(ValueError, match=r"errata\[0\]: evidence missing"):
        load_errata(_write(tmp_path, entry))
    with pytest.raises(ValueError, match="has two 'contradicts' entries; merge them"):
        load_errata(_write(tmp_path, _entry(), _entry()))


def test_fidelity_reports_the_errata_and_can_read_the_rows_as_printed(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(DATA / "runs_2024_2026.json")
    assert fidelity.main(["--data", path, "--json"]) == 0
    corrected = json.loads(capsys.readouterr().out)
    assert fidelity.main(["--data", path, "--json", "--as-published"]) == 0
    printed = json.loads(capsys.readouterr().out)
    ids = {e.id for e in load_errata()}
    assert {e["id"] for e in corrected["errata"]} == ids and printed["errata"] == []
    printed_refused = {row["id"] for row in printed["refused"]["rows"]}
    # Refused as printed (capacity not stated), read with their recipe's capacity; the rows whose dispatcher
    # the errata leave open are read either way, completed as tuned once corrected.
    sized = {e.id for e in load_errata() if "model.moe.capacity_factor" in e.corrected} & printed_refused
    assert len(sized) == 7
    assert corrected["n_time"] == printed["n_time"] + len(sized)
    assert corrected["refused"]["n"] == printed["refused"]["n"] - len(sized)
    assert corrected["completed_fields"]["moe_dispatcher"] == 3 and "moe_dispatcher" not in printed["completed_fields"]
    assert fidelity.main(["--data", path]) == 0
    table = capsys.readouterr().out
    assert f"rows read with an erratum ({fidelity.ERRATA_NOTE}): {len(ids)}" in table
    assert "benchmarks/data/errata.json" in fidelity.ERRATA_NOTE


def test_a_row_may_have_one_entry_of_each_kind_and_both_apply() -> None:
    """The H100 Qwen3-30B-A3B row of 26.02.01: its layout misprinted ('contradicts') and its dispatcher
    unprinted ('completes'); both apply, and the error bands read only the first."""
    rid = "mbridge-26.02.01-h100-qwen3-30b-a3b-fp8-16g-gbs1024-mbs1-tp1pp2cp1vp12ep8"
    mine = [e for e in load_errata() if e.id == rid]
    assert sorted(e.kind for e in mine) == ["completes", "contradicts"]
    records = json.loads((DATA / "runs_2024_2026.json").read_text())
    fixed, both = correct_records(records, "runs_2024_2026.json", mine)
    assert len(both) == 2
    config = next(r for r in fixed if r["id"] == rid)["config"]
    assert (config["pp"], config["ep"], config["moe_dispatcher"]) == (1, 16, "flex-hybridep")
    layout_only, _ = correct_records(records, "runs_2024_2026.json", [e for e in mine if e.kind == "contradicts"])
    config = next(r for r in layout_only if r["id"] == rid)["config"]
    assert (config["pp"], config["ep"], config.get("moe_dispatcher")) == (1, 16, None)


def test_the_gpt_oss_rows_are_completed_with_the_presets_architecture() -> None:
    """The errata give the 11 GPT-OSS rows the model of their release, which is the preset's (Megatron-Bridge's
    GPT-OSS provider): the same GLU, clamp, offset, YaRN, sinks and biases, so the rows test what a user's
    GPT-OSS prediction costs."""
    from search import model_preset

    preset = model_preset("gpt-oss-120b")
    fields = ("activation", "glu_clamp", "glu_linear_offset", "rope_yarn", "softmax_sinks", "bias")
    rows = [r for r in read_corrected(DATA / "runs_2024_2026.json")[0].runs if "gpt-oss" in r.id]
    assert len(rows) == 11
    for run in rows:
        assert {f: getattr(run.model, f) for f in fields} == {f: getattr(preset, f) for f in fields}, run.id
