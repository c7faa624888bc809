"""What every ``autopar`` command shares about its output: exit codes, tables that fit the terminal,
and a reader that goes away early (``autopar presets --json | head -1``).

Exit codes (also in ``autopar --help`` and the README):

* 0: answered (a prediction that fits, a ranking, written files, ...);
* 2: bad input (an invalid spec, an unknown preset, an unreadable file, a usage error);
* 3: nothing feasible (``predict``: the configuration does not fit; ``search``: no configuration fits);
* 130: interrupted (Ctrl-C);
* 141: the reader of stdout went away (SIGPIPE), said nowhere: the reader chose to stop.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
EXIT_CODES_HELP = ("exit status: 0 answered; 2 bad input (invalid spec, unknown preset, unreadable file, usage); "
                   "3 nothing feasible (predict: the configuration does not fit; search: no configuration fits); "
                   "130 interrupted")


def silence_stdout() -> None:
    """After a BrokenPipeError: point stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout replaced by something without a file descriptor (tests)
        pass


def output_width() -> int | None:
    """Columns available on stdout when it is a terminal (``$COLUMNS``, else the terminal's width);
    None for a file or a pipe: no limit, a file does not wrap."""
    if not sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else shutil.get_terminal_size().columns


@dataclass(frozen=True, slots=True)
class Column:
    """A table column; ``keep`` columns are never dropped, the others go lowest ``priority`` first."""

    name: str
    left: bool = False
    keep: bool = False
    priority: int = 0


def print_table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], *, wide: bool = False) -> None:
    """``rows`` as a rich table on stdout that fits :func:`output_width` by leaving out the
    lowest-priority columns (said below the table); ``wide`` (``--wide``) keeps every column."""
    from rich.console import Console
    from rich.table import Table

    def build(shown: list[int]) -> Table:
        table = Table(title=title)
        for i in shown:
            table.add_column(columns[i].name, justify="left" if columns[i].left else "right", no_wrap=True)
        for row in rows:
            table.add_row(*(row[i] for i in shown))
        return table

    shown = list(range(len(columns)))
    measure = Console(width=100_000)
    limit = None if wide else output_width()
    table = build(shown)
    need = measure.measure(table).maximum
    droppable = sorted((i for i, c in enumerate(columns) if not c.keep), key=lambda i: (columns[i].priority, -i))
    dropped: list[str] = []
    while limit is not None and need > limit and droppable:
        i = droppable.pop(0)
        shown.remove(i)
        dropped.append(columns[i].name)
        table = build(shown)
        need = measure.measure(table).maximum
    Console(file=sys.stdout, width=need, soft_wrap=False).print(table)
    if dropped:
        print(f"(left out to fit {limit} columns: {', '.join(dropped)}; --wide shows every column)")
