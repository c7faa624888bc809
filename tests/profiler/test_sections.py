"""The profile sections' registry: ``autopar profile --only`` offers exactly the registered sections, each
fills HardwareProfile fields no other section fills, and what a section measures lands in the profile
only under the fields it declares."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from profiler import (
    PROFILE_SECTIONS,
    SECTIONS,
    Measured,
    Section,
    SectionContext,
    _sections,
    profile_section,
    run_profile,
)
from search import HardwareProfile
from service._profile_cli import SECTIONS as CLI_SECTIONS
from service._profile_cli import parse_sections

MEASURED_FIELDS = {f.name for f in dataclasses.fields(HardwareProfile)} - {"fingerprint", "schema_version"}
WORKER_JSON = {"backend": "gloo", "hostnames": ["a", "b"], "leaves": ["l0", "l0"], "notes": ["gloo on CPU"],
               "links": [{"collective": "all_reduce", "scope": "inter_node", "ranks": 2, "latency_s": 2e-5,
                          "bus_bytes_per_s": 1.2e10, "samples": [[1e6, 1e-4], [1e7, 9e-4]]}]}


def test_the_cli_offers_the_registered_sections() -> None:
    assert CLI_SECTIONS == SECTIONS == tuple(s.name for s in PROFILE_SECTIONS)
    assert parse_sections(",".join(SECTIONS)) == SECTIONS


def test_each_field_is_filled_by_one_section() -> None:
    fills = [f for s in PROFILE_SECTIONS for f in s.fills]
    assert len(fills) == len(set(fills)), "two sections fill one field"
    assert set(fills) == MEASURED_FIELDS, "every measured field has its section, and no section invents one"
    for section in PROFILE_SECTIONS:
        assert profile_section(section.name) is section
    with pytest.raises(ValueError, match="cpu-adam"):
        profile_section("gpu-burn")


def test_recorded_collectives_fill_links_only(tmp_path: Path) -> None:
    measured = profile_section("collectives").run(SectionContext(collectives=WORKER_JSON))
    assert set(measured.fields) == {"links"} and measured.fields["links"][0].bus_bytes_per_s == 1.2e10
    assert measured.notes == ["gloo on CPU"] and "all_reduce inter_node x2 (gloo)" in measured.rows[0][0]
    path = tmp_path / "collectives.json"
    path.write_text(json.dumps(WORKER_JSON))
    run = run_profile(["collectives"], collectives_from=path)
    assert run.profile.links == measured.fields["links"] and run.profile.fingerprint.hostnames == ("a", "b")
    assert run.profile.gemm == () and run.profile.nvme_read_bytes_per_s is None


def test_nvme_without_a_path_is_a_note() -> None:
    measured = profile_section("nvme").run(SectionContext())
    assert measured.fields == {} and "--nvme-path" in measured.notes[0]


def test_a_section_filling_what_it_does_not_declare_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    rogue = Section("nvme", ("aio",), lambda _context: Measured(fields={"aio": {}, "cpu_adam_params_per_s": 1.0}))
    monkeypatch.setitem(_sections._BY_NAME, "nvme", rogue)
    with pytest.raises(RuntimeError, match="cpu_adam_params_per_s"):
        run_profile(["nvme"])
