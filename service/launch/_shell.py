"""Shell quoting for everything an emitter writes into a command line or a script.

Every user-controlled value (host names, job name, paths, script arguments) goes through
:func:`quote`: ``shlex.quote`` wraps it in single quotes, inside which bash expands nothing
(no ``$(...)``, backticks, ``;`` or newlines take effect). NUL cannot be represented in a
POSIX argument or environment value at all, so it is refused rather than silently truncated.

The only words the shell expands are :class:`ShellExpr` values, which autopar builds itself from
fixed parts: a recipe :func:`placeholder` (``"${LR:?autopar: set LR (...)}"``: the launch stops
with that message when the variable is unset) and paths in the launch directory
(:func:`in_launch_dir`: ``"${LAUNCH_DIR:-.}/ds_config.json"``, where the launch scripts set
``LAUNCH_DIR`` to their own directory, so no path of the machine that emitted them is written).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from search import SpecError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MESSAGE = re.compile(r"[A-Za-z0-9 ,.;:()/_=+@%-]*")
_FILE_NAME = re.compile(r"\.?[A-Za-z0-9_][A-Za-z0-9._-]*")
LAUNCH_DIR = "${LAUNCH_DIR:-.}"
"""The launch directory as the shell sees it: the scripts set LAUNCH_DIR; a copied command uses the
working directory."""


class ShellExpr(str):
    """A word the shell expands at launch, written by autopar from fixed parts (never from request
    values): :func:`quote` puts it in double quotes instead of single quotes. Build it with
    :func:`placeholder` or :func:`in_launch_dir`."""

    __slots__ = ()


def placeholder(name: str, what: str) -> ShellExpr:
    """``"${NAME:?autopar: set NAME (what) ...}"``: the value of environment variable ``NAME`` at
    launch, or a stop with that message when it is unset or empty."""
    if _ENV_NAME.fullmatch(name) is None or _MESSAGE.fullmatch(what) is None:
        raise ValueError(f"unsafe placeholder {name!r}: {what!r}")  # a bug in autopar, not user input
    return ShellExpr(f"${{{name}:?autopar: set {name} to {what}; or emit the launch files again with it}}")


def in_launch_dir(file_name: str) -> ShellExpr:
    """The path of ``file_name`` (one of the emitted files) in the launch directory, at launch."""
    if _FILE_NAME.fullmatch(file_name) is None:
        raise ValueError(f"unsafe file name {file_name!r}")
    return ShellExpr(f"{LAUNCH_DIR}/{file_name}")


def python_path() -> ShellExpr:
    """``PYTHONPATH`` with the launch directory first (torchtitan imports the emitted config module from it)."""
    return ShellExpr(f"{LAUNCH_DIR}${{PYTHONPATH:+:$PYTHONPATH}}")


def quote(value: object, field: str = "value") -> str:
    """``value`` as one shell word; SpecError naming ``field`` if it contains a NUL byte."""
    if isinstance(value, ShellExpr):
        return f'"{value}"'
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
