"""Reading a Megatron argument list (``--flag value`` words) as Megatron's parser types its values: the
helpers every Megatron rule (:mod:`service.launch._megatron_checks`, its architecture variants and
Megatron-DeepSpeed's checks) reads flags with."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from search import SpecError

FIELD = "megatron_args"
"""The request field a refused Megatron argument list is reported on."""


def arg_values(argv: Sequence[str]) -> dict[str, str | None]:
    """``--flag`` -> its value (the next word when that is not a flag), or None for a switch."""
    out: dict[str, str | None] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[word] = nxt if nxt is not None and not nxt.startswith("--") else None
    return out


def is_placeholder(text: str | None) -> bool:
    """A value the shell fills in at launch (a recipe placeholder): not known here."""
    return text is not None and text.startswith("${")


def _flag_number(values: dict[str, str | None], flag: str, field: str, convert: type[int] | type[float],
                 noun: str) -> int | float | None:
    """``flag``'s value converted, None when absent or a placeholder; SpecError on ``field`` otherwise."""
    text = values.get(flag)
    if text is None or is_placeholder(text):
        return None
    try:
        return convert(text)
    except ValueError:
        raise SpecError(field, f"{flag} {text!r} is not {noun}", f"give {flag} {noun}") from None


def int_value(values: dict[str, str | None], flag: str, default: int | None, field: str = FIELD) -> int | None:
    """``flag``'s integer value, ``default`` when absent or a placeholder; SpecError on ``field`` when not an
    integer."""
    if flag in values and values[flag] is None:
        raise SpecError(field, f"{flag} has no value", f"give {flag} an integer")
    number = _flag_number(values, flag, field, int, "an integer")
    return default if number is None else int(number)


def check_known_flags(argv: Sequence[str], flags: frozenset[str], field: str, framework: str, pin: str) -> None:
    """Refuse a ``--flag`` of ``argv`` that is not in ``flags``, the flag list of ``framework`` at its
    pinned ``pin`` (a release or a commit)."""
    for word in argv:
        if word.startswith("--") and word not in flags:
            raise SpecError(field, f"{word} is not an argument of {framework}",
                            f"remove it or use the flag that {pin} defines")


def float_value(values: dict[str, str | None], flag: str, field: str) -> float | None:
    """``flag``'s number, None when absent or a placeholder; SpecError on ``field`` when not a number."""
    number = _flag_number(values, flag, field, float, "a number")
    return None if number is None else float(number)


def layer_pattern(v: dict[str, str | None], flag: str, layers: int | None) -> int | list[int]:
    """``flag`` (``--moe-layer-freq``, ``--window-attn-skip-freq``) as ``moe_freq_type`` reads it: a positive
    integer, or a list expression of digits, ``[]``, ``()``, ``+``, ``*`` and commas, evaluated here without
    ``eval``; the list has one 0 or 1 per layer."""
    text = v.get(flag) or "1"
    if "[" not in text:
        freq = int_value(v, flag, 1) or 0
        if freq <= 0:
            raise SpecError(FIELD, f"{flag} {text!r} is not a positive integer", "give 1 or a list")
        return freq
    try:
        if re.search(r"[^,\d\[\]()+*]", text):
            raise ValueError("characters other than digits, [], (), +, * and commas")
        pattern = _list_expression(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError) as exc:
        raise SpecError(FIELD, f"{flag} {text!r} is not a list expression: {exc}",
                        "write it as e.g. ([0]*3+[1]*58)") from None
    if not isinstance(pattern, list) or any(x not in (0, 1) for x in pattern):
        raise SpecError(FIELD, f"{flag} {text!r} is not a list of 0 and 1", "give 0 or 1 per layer")
    if layers is not None and len(pattern) != layers:
        raise SpecError(FIELD, f"{flag} has {len(pattern)} entries, --num-layers is {layers}",
                        "give one entry per layer")
    return pattern


def _list_expression(node: ast.expr) -> int | list[int]:
    """Integers, lists of integers, ``+`` and ``*`` of them (at most 100,000 entries)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.List):
        items = [_list_expression(e) for e in node.elts]
        if all(isinstance(i, int) for i in items):
            return [i for i in items if isinstance(i, int)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _list_expression(node.left), _list_expression(node.right)
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            return left + right
        if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int):
            if len(left) * right > 100_000:
                raise ValueError("more than 100,000 entries")
            return left * right
    raise ValueError("only lists of integers joined by + and repeated by * are read")
