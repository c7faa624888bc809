"""The pinned Megatron-LM argument list: ``megatron_flags.txt``, the long options of
``megatron/training/arguments.py`` at the pinned megatron-core release (regenerate with
``scripts/extract_megatron_flags.py``). The emitter (:mod:`service.launch._megatron`) and the
argument checks (:mod:`service.launch._megatron_checks`) both read it."""

from __future__ import annotations

from functools import cache
from pathlib import Path

FLAGS_FILE = Path(__file__).with_name("megatron_flags.txt")


@cache
def read_flag_file(path: Path) -> tuple[str, frozenset[str]]:
    """(release line, flags) of a flag list: a ``# release`` first line, then one ``--flag`` per line."""
    lines = path.read_text().splitlines()
    release = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else "unknown release"
    return release, frozenset(ln.strip() for ln in lines if ln.strip() and not ln.startswith("#"))


def megatron_flags() -> frozenset[str]:
    """Every long option of the pinned Megatron-LM argument parser."""
    return read_flag_file(FLAGS_FILE)[1]


def megatron_release() -> str:
    """The release the flag list was extracted from, e.g. ``megatron-core 0.19.2 megatron/training/arguments.py``."""
    return read_flag_file(FLAGS_FILE)[0]
