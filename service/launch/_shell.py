"""Shell quoting for everything an emitter writes into a command line or a script.

Every user-controlled value (host names, job name, paths, script arguments) goes through
:func:`quote`: ``shlex.quote`` wraps it in single quotes, inside which bash expands nothing
(no ``$(...)``, backticks, ``;`` or newlines take effect). NUL cannot be represented in a
POSIX argument or environment value at all, so it is refused rather than silently truncated.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from search import SpecError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def quote(value: object, field: str = "value") -> str:
    """``value`` as one shell word; SpecError naming ``field`` if it contains a NUL byte."""
    text = str(value)
    if "\0" in text:
        raise SpecError(field, f"{text!r} contains a NUL byte, which no shell argument can carry",
                        "remove the NUL character")
    return shlex.quote(text)


def command(argv: Sequence[object], field: str = "command") -> str:
    """The shell command line that runs exactly ``argv`` (each part quoted)."""
    return " ".join(quote(part, field) for part in argv)


def export_lines(env: Mapping[str, str]) -> str:
    """``export NAME=<quoted value>`` lines, one per variable (ending in a newline when non-empty)."""
    lines = []
    for name, value in env.items():
        if not isinstance(name, str) or _ENV_NAME.fullmatch(name) is None:
            raise SpecError("LaunchFiles.env", f"{name!r} is not a valid environment variable name",
                            "use letters, digits and underscores, not starting with a digit")
        lines.append(f"export {name}={quote(value, f'LaunchFiles.env[{name}]')}\n")
    return "".join(lines)
