"""The calibration data lives in the repository, each file as PROVENANCE.md describes it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"
FILES = ("runs.json", "runs_2024_2026.json", "hardware.json", "hardware_2024_2026.json", "feasibility.json",
         "README.md", "README_2024_2026.md", "formulas.md")
OWN = ("PROVENANCE.md", "errata.json")
"""Written by this project, not copies: the provenance itself and the errata (benchmarks/_errata.py)."""


def _provenance_hashes() -> dict[str, str]:
    text = (DATA / "PROVENANCE.md").read_text()
    return dict(re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", text, re.MULTILINE))


def test_every_file_is_listed_with_its_sha256() -> None:
    hashes = _provenance_hashes()
    assert set(hashes) == set(FILES)
    assert {p.name for p in DATA.iterdir()} == {*FILES, *OWN}
    for name, digest in hashes.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, f"{name} changed: see PROVENANCE.md"


def test_the_json_files_parse_and_every_row_cites_its_source() -> None:
    for name in ("runs.json", "runs_2024_2026.json", "feasibility.json"):
        for row in json.loads((DATA / name).read_text()):
            assert row["source"], f"{name}: {row['id']} has no source"
    for name in ("hardware.json", "hardware_2024_2026.json"):
        hw = json.loads((DATA / name).read_text())
        assert all(item["source"] for item in [*hw["gpus"], *hw["nodes"]])


def test_no_code_or_test_reaches_outside_the_repository() -> None:
    outside = re.compile(r"""ROOT\.parent|REPO\.parent|parents\[\d\]\s*/\s*["']shared|\.\./shared""")
    offenders = [str(p.relative_to(ROOT)) for folder in ("benchmarks", "search", "service", "profiler", "tests")
                 for p in (ROOT / folder).rglob("*.py") if p != Path(__file__) and outside.search(p.read_text())]
    assert offenders == []
