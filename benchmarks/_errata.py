"""Errata of the published runs: rows whose printed configuration the recipe that produced it
contradicts or completes.

The calibration files of ``benchmarks/data`` are verbatim copies of their sources (``PROVENANCE.md``
checks their hashes), including a table's misprints and omissions. ``benchmarks/data/errata.json``
lists the rows whose printed configuration the run's own recipe contradicts (``kind``
``contradicts``: a misprinted layout) or completes (``completes``: a setting the table does not
print and the loader would otherwise default, such as the MoE token dispatcher), each with the
published values, the corrected ones, the reason and the evidence (file, commit and line).
:func:`read_corrected` reads a runs file with them applied, after checking that each row still
holds the published values (a changed data file is an error, never a silent patch); the benchmarks
that fit and score the model read the data through it, and ``fidelity.py --as-published`` reads
the rows as printed. An erratum corrects what a run was, never what it measured: only the layout,
the MoE dispatcher and overlap, recomputation, activation offload, CUDA graphs, FP8 attention and the
capacity of a token-dropping MoE can be corrected (a row the model cannot express is then refused with its reason,
as any other).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search._runs_file import RunsFile, json_records, read_records

ERRATA = Path(__file__).resolve().parent / "data" / "errata.json"
"""The project's errata of its published runs."""
CORRECTABLE = frozenset({"tp", "pp", "dp", "cp", "vp", "ep", "etp", "micro_batch", "grad_accum", "global_batch"})
"""Fields of a record's ``config`` an erratum may correct: the layout a table prints (positive integers)."""
CORRECTABLE_TEXT = {"moe_dispatcher": None, "recompute": ("none", "selective", "full"),
                    "cuda_graphs": ("none", "full-iteration")}
"""Settings a recipe fixes that the tables do not print (a dispatcher the loader then refuses, say),
with their allowed values (None: any name)."""
CORRECTABLE_FLAG = frozenset({"moe_a2a_overlap", "fp8_attention"})
"""On/off settings a recipe fixes (Megatron-Core's expert all-to-all overlap, Transformer Engine's FP8 attention)."""
CORRECTABLE_COUNT = frozenset({"activation_offload_layers"})
"""Counts a recipe fixes that may be zero (Megatron-Core's --cpu-offloading-num-layers)."""
CORRECTABLE_MOE = {"model.moe.capacity_factor": "factor", "model.moe.pad_to_capacity": "flag"}
"""Fields of a record's ``model.moe`` a recipe fixes and a table omits: the capacity of a run it marks as
dropping tokens (Megatron ``--moe-expert-capacity-factor``, ``--moe-pad-expert-input-to-capacity``);
named by their path, ``completes`` only."""
CORRECTABLE_MODEL = {"model.glu_clamp": "number", "model.glu_linear_offset": "number", "model.bias": "flag",
                     "model.softmax_sinks": "flag", "model.rope_yarn": "object"}
"""Fields of a record's ``model`` its model's own definition fixes and a table omits (GPT-OSS's clamped GLU,
biases, softmax sinks and YaRN, which the schema has no field for: Megatron-Bridge's GPT-OSS provider);
named by their path, ``completes`` only. The loader validates the values as it validates a model's."""
MOE_PREFIX = "model.moe."
MODEL_PREFIX = "model."
KINDS = ("contradicts", "completes")
"""``contradicts`` corrects printed layout fields only; ``completes`` fills fields the table left null."""


@dataclass(frozen=True, slots=True)
class Erratum:
    """One row's printed configuration corrected to its recipe's, with why."""

    file: str
    """Name of the runs file that holds the row (``runs_2024_2026.json``)."""
    id: str
    kind: str
    """``contradicts`` (the table misprints it) or ``completes`` (the table does not print it)."""
    published: Mapping[str, Any]
    """The row's ``config`` values as printed; checked before correcting."""
    corrected: Mapping[str, Any]
    """The values the recipe that ran it gives, for the same fields."""
    reason: str
    evidence: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "id": self.id, "kind": self.kind,
                "fields": {k: [self.published[k], self.corrected[k]] for k in self.corrected},
                "reason": self.reason, "evidence": list(self.evidence)}


def _path(field: str) -> str:
    """Where an erratum's field lives in a record: ``config.<field>``, or its own ``model.`` path."""
    return field if field.startswith(MODEL_PREFIX) else f"config.{field}"


def _check_model_value(where: str, field: str, kind: str, value: Any) -> None:
    """A :data:`CORRECTABLE_MODEL` value of the right type (its range is the model's to check)."""
    if kind == "flag" and not isinstance(value, bool):
        raise ValueError(f"{where}: corrected {field} is {value!r}; give true or false")
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))
                             or not math.isfinite(value)):
        raise ValueError(f"{where}: corrected {field} is {value!r}; give a finite number")
    if kind == "object" and not isinstance(value, dict):
        raise ValueError(f"{where}: corrected {field} is {value!r}; give an object")


def _erratum(entry: Any, where: str) -> Erratum:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: is a {type(entry).__name__}, not an object with file, id, published, "
                         "corrected, reason and evidence")
    missing = sorted({"file", "id", "kind", "published", "corrected", "reason", "evidence"} - set(entry))
    if missing:
        raise ValueError(f"{where}: {', '.join(missing)} missing; every erratum names its row, the published "
                         "and corrected values, the reason and the evidence")
    published, corrected = entry["published"], entry["corrected"]
    if not isinstance(published, dict) or not isinstance(corrected, dict) or not corrected:
        raise ValueError(f"{where}: published and corrected must be objects of config fields")
    if set(published) != set(corrected):
        raise ValueError(f"{where}: published names {sorted(published)} but corrected {sorted(corrected)}; "
                         "give both values of every field corrected")
    kind = entry["kind"]
    if kind not in KINDS:
        raise ValueError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    every = (CORRECTABLE | set(CORRECTABLE_TEXT) | CORRECTABLE_FLAG | CORRECTABLE_COUNT | set(CORRECTABLE_MOE)
             | set(CORRECTABLE_MODEL))
    if bad := sorted(set(corrected) - every):
        raise ValueError(f"{where}: {_path(bad[0])} cannot be corrected; an erratum corrects only the layout and "
                         f"the settings a recipe fixes ({', '.join(sorted(every))})")
    if kind == "contradicts" and (bad := sorted(set(corrected) - CORRECTABLE)):
        raise ValueError(f"{where}: a 'contradicts' erratum corrects printed layout fields only, not {_path(bad[0])}; "
                         "give the recipe's other settings in a 'completes' entry for the same row")
    if kind == "completes" and (bad := sorted(k for k, v in published.items() if v is not None)):
        raise ValueError(f"{where}: a 'completes' erratum fills fields the table left null, but {_path(bad[0])} is "
                         f"published as {published[bad[0]]!r}; a printed value the recipe contradicts is a "
                         "'contradicts' entry")
    for field, value in corrected.items():
        if field in CORRECTABLE_MOE:
            _check_model_value(where, field, CORRECTABLE_MOE[field], value)  # a flag's check; a factor's below
            if CORRECTABLE_MOE[field] == "factor" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                                       or not value >= 1):
                raise ValueError(f"{where}: corrected {field} is {value!r}; give a capacity factor >= 1")
        elif field in CORRECTABLE_MODEL:
            _check_model_value(where, field, CORRECTABLE_MODEL[field], value)
        elif field in CORRECTABLE_FLAG:
            if not isinstance(value, bool):
                raise ValueError(f"{where}: corrected config.{field} is {value!r}; give true or false")
        elif field in CORRECTABLE_TEXT:
            allowed = CORRECTABLE_TEXT[field]
            if not isinstance(value, str) or not value or (allowed is not None and value not in allowed):
                raise ValueError(f"{where}: corrected config.{field} is {value!r}; give "
                                 + (f"one of {', '.join(allowed)}" if allowed else "the setting's name"))
        elif not isinstance(value, int) or isinstance(value, bool) or value < (0 if field in CORRECTABLE_COUNT else 1):
            raise ValueError(f"{where}: corrected config.{field} is {value!r}; give "
                             + ("a count >= 0" if field in CORRECTABLE_COUNT else "a positive integer"))
    evidence = entry["evidence"]
    if not isinstance(evidence, list) or not evidence or not all(isinstance(e, str) and e for e in evidence):
        raise ValueError(f"{where}: evidence must be a non-empty list of citations (file, commit, line)")
    if not isinstance(entry["reason"], str) or not entry["reason"]:
        raise ValueError(f"{where}: reason must say why the printed values are wrong")
    return Erratum(str(entry["file"]), str(entry["id"]), entry["kind"], dict(published), dict(corrected),
                   entry["reason"], tuple(evidence))


def load_errata(path: str | Path = ERRATA) -> tuple[Erratum, ...]:
    """The errata of ``path``; a malformed entry raises ``ValueError`` naming it and the field."""
    doc = json.loads(Path(path).read_text())
    entries = doc.get("errata") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: not an object with an 'errata' list")
    errata = tuple(_erratum(e, f"{path}: errata[{i}]") for i, e in enumerate(entries))
    seen: set[tuple[str, str, str]] = set()
    for e in errata:
        if (e.file, e.id, e.kind) in seen:
            raise ValueError(f"{path}: {e.id} has two {e.kind!r} entries; merge them")
        seen.add((e.file, e.id, e.kind))
    return errata


def correct_records(records: Sequence[Any], name: str,
                    errata: Sequence[Erratum]) -> tuple[list[Any], tuple[Erratum, ...]]:
    """``records`` of the runs file called ``name`` with the errata for that file applied (copies;
    the input is untouched), and the errata applied (a file may hold a subset of the rows). A row
    with an erratum must hold the published values, or ``ValueError`` says which row and field changed."""
    mine: dict[str, list[Erratum]] = {}
    for e in errata:
        if e.file == name:
            mine.setdefault(e.id, []).append(e)
    if not mine:
        return list(records), ()
    out, applied = [], []
    for rec in records:
        rid = rec.get("id") if isinstance(rec, dict) else None
        found = mine.get(rid, []) if isinstance(rid, str) else []
        if not found:
            out.append(rec)
            continue
        config = rec.get("config")
        if not isinstance(config, dict):
            raise ValueError(f"{name}: {rid}: config is not an object, so its erratum cannot apply; fix the row")
        fixed = copy.deepcopy(rec)
        for e in found:
            for field, value in e.published.items():
                where, now = _published(rec, field)
                if now != value:
                    raise ValueError(f"{name}: {rid}: {where} is {now!r} but its erratum "
                                     f"expects the published {value!r}; the data changed: review the erratum in "
                                     f"{ERRATA.name}")
            for field, value in e.corrected.items():
                if field.startswith(MOE_PREFIX):
                    fixed["model"]["moe"][field.removeprefix(MOE_PREFIX)] = value
                elif field.startswith(MODEL_PREFIX):
                    fixed["model"][field.removeprefix(MODEL_PREFIX)] = copy.deepcopy(value)
                else:
                    fixed["config"][field] = value
            applied.append(e)
        out.append(fixed)
    return out, tuple(applied)


def _published(rec: dict[str, Any], field: str) -> tuple[str, Any]:
    """(the path an error names, the record's value) of an erratum's field: ``config.<field>``, or
    ``model.moe.<name>`` for :data:`CORRECTABLE_MOE` (a record without an MoE part has no such field),
    ``model.<name>`` for :data:`CORRECTABLE_MODEL`."""
    if not field.startswith(MODEL_PREFIX):
        return f"config.{field}", rec["config"].get(field)
    model = rec.get("model")
    if not field.startswith(MOE_PREFIX):
        return field, model.get(field.removeprefix(MODEL_PREFIX)) if isinstance(model, dict) else "no model object"
    moe = model.get("moe") if isinstance(model, dict) else None
    if not isinstance(moe, dict):
        return field, "no model.moe object"
    return field, moe.get(field.removeprefix(MOE_PREFIX))


def read_corrected(path: str | Path, errata: Sequence[Erratum] | None = None) -> tuple[RunsFile, tuple[Erratum, ...]]:
    """Every record of a runs file, with the errata for its name applied (default: the project's), and
    the errata applied. Raises as :func:`search._runs_file.read_runs` does, and ``ValueError`` when an
    erratum no longer matches its row."""
    records = json_records(path)
    fixed, applied = correct_records(records, Path(path).name, load_errata() if errata is None else errata)
    return read_records(fixed, path), applied
