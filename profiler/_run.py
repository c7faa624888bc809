"""``run_profile``: run the selected microbenchmark sections on this node and assemble a HardwareProfile.

Each section (:data:`profiler._sections.PROFILE_SECTIONS`) is independent: one that cannot run here
(no CUDA for host links, no ``--nvme-path``) is skipped with a note, and Ctrl-C stops the run keeping
every section (and partial section) measured so far.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from profiler._errors import ProfilerUnavailable
from profiler._fingerprint import collect_fingerprint
from profiler._sections import SECTIONS, Progress, SectionContext, profile_section, read_collectives
from search import HardwareProfile

__all__ = ["SECTIONS", "ProfileRun", "run_profile"]


@dataclass
class ProfileRun:
    """What ``run_profile`` measured: the profile, notes per section and whether Ctrl-C stopped it."""

    profile: HardwareProfile
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    rows: list[tuple[str, str]] = field(default_factory=list)
    """(measurement, value) lines for the summary table."""

    def print_summary(self, stream: TextIO) -> None:
        """A table of what was measured (rich when available)."""
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"hardware profile: {self.profile.fingerprint.gpu_name}")
        table.add_column("measurement")
        table.add_column("value", justify="right")
        for name, value in self.rows:
            table.add_row(name, value)
        Console(file=stream, width=None if stream.isatty() else 120).print(table)


class _Bars:
    """One rich progress bar per section on stderr."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress as RichProgress

        self._progress = RichProgress(console=Console(file=sys.stderr), transient=False)
        self._task: Any = None

    def start(self, section: str) -> Progress:
        self._progress.start()
        self._task = self._progress.add_task(section, total=None)

        def update(done: int, total: int, *_label: object) -> None:
            self._progress.update(self._task, completed=done, total=total)

        return update

    def finish(self) -> None:
        task = self._progress.tasks[-1] if self._progress.tasks else None
        if task is not None:
            self._progress.update(self._task, completed=task.total or 1, total=task.total or 1)
        self._progress.stop()


def run_profile(sections: Sequence[str] = SECTIONS, *, quick: bool = False, nvme_path: str | None = None,
                show_progress: bool = False, collectives_from: str | Path | None = None) -> ProfileRun:
    """Run ``sections`` (see :data:`SECTIONS`) and return the assembled profile.

    ``show_progress`` draws a progress bar per section on stderr. ``collectives_from``, a collectives
    worker's JSON from a multi-node torchrun, stands in for the collectives section: its fits inside
    nodes, across nodes of a leaf and across leaves, and its hosts and leaves in the fingerprint.
    """
    selected = [profile_section(name) for name in sections]
    run = ProfileRun(profile=HardwareProfile(fingerprint=collect_fingerprint()))
    measured = None if collectives_from is None else read_collectives(collectives_from)
    if measured is not None:
        fp = replace(run.profile.fingerprint, hostnames=tuple(measured.get("hostnames") or ()),
                     leaves=tuple(measured.get("leaves") or ()))
        run.profile = HardwareProfile(fingerprint=fp)
    fields: dict[str, Any] = {}
    bars = _Bars() if show_progress else None
    for section in selected:
        context = SectionContext(quick=quick, nvme_path=nvme_path, collectives=measured,
                                 progress=bars.start(section.name) if bars else None)
        try:
            result = section.run(context)
        except ProfilerUnavailable as exc:
            run.notes.append(f"{section.name} skipped: {exc}")
            continue
        except KeyboardInterrupt:
            run.interrupted = True
            run.notes.append(f"interrupted during {section.name}: later sections were not run")
            break
        finally:
            if bars:
                bars.finish()
        undeclared = sorted(set(result.fields) - set(section.fills))
        if undeclared:  # a bug in the section, not in the node
            raise RuntimeError(f"section {section.name} measured {undeclared}, which it does not declare it fills")
        fields.update(result.fields)
        run.rows.extend(result.rows)
        run.notes.extend(result.notes)
        run.interrupted = run.interrupted or result.interrupted
    run.profile = replace(run.profile, **fields)
    return run
