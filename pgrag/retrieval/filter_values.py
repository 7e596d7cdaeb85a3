"""Metadata filters as Python reads them: what JSON may hold that PostgreSQL's jsonb may not.

A filter (docs/search.md#filters) is checked in full by the database (``pgrag.filter_check``);
this module refuses, before anything is sent, the values the database could only answer with a
raw error, or that Python itself would change or choke on: NaN and infinities, a number that
overflows or underflows a float (``1e-99999`` would silently become 0), NUL characters and
lone surrogates in strings, and nesting past the limit (which Python would meet as a
RecursionError). Each is a one-line :class:`~pgrag.errors.InputError` naming the input.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pgrag.errors import InputError

MAX_DEPTH = 32  # the levels of objects and lists, as sql/functions/filter.sql counts them
_EXAMPLE = 'e.g. \'{"team": "billing"}\''
_NONZERO_DIGIT = re.compile(r"[1-9]")


def parse_filter_json(raw: str, name: str = "--filter") -> dict[str, Any]:
    """``raw`` parsed as a filter object, or an InputError naming ``name``."""

    def number(text: str) -> float:
        value = float(text)
        mantissa = text.lower().partition("e")[0]
        if math.isinf(value) or (value == 0 and _NONZERO_DIGIT.search(mantissa)):
            raise InputError(
                f"{name} has the number {text[:40]}, beyond double precision"
                " (about 1e-308 to 1e308): compare with a number in that range"
            )
        return value

    def constant(text: str) -> Any:
        raise InputError(f"{name} has {text}, which is not JSON: use a number or a string")

    try:
        value = json.loads(raw, parse_float=number, parse_constant=constant)
    except json.JSONDecodeError as err:
        raise InputError(f"{name} is not valid JSON ({err.msg}); {_EXAMPLE}") from None
    except RecursionError:
        raise InputError(
            f"{name} is nested more than {MAX_DEPTH} levels deep (the limit):"
            " flatten its $and / $or / $not"
        ) from None
    except ValueError as err:  # an integer of more digits than Python converts
        raise InputError(
            f"{name} has a number too long to read ({err}); use a shorter one"
        ) from None
    if not isinstance(value, dict):
        raise InputError(f"{name} must be a JSON object, {_EXAMPLE}")
    check_filter_values(value, name)
    return value


def check_filter_values(filter: Any, name: str = "filter") -> None:
    """Refuse what jsonb cannot hold, and nesting past :data:`MAX_DEPTH`, walking ``filter``
    without recursion. Levels are counted as the database counts them: each object or list
    one level, a ``$and`` / ``$or``'s list none of its own, a scalar none."""
    stack: list[tuple[Any, int]] = [(filter, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(
                f"{name} is nested more than {MAX_DEPTH} levels deep (the limit):"
                " flatten its $and / $or / $not"
            )
        if isinstance(node, dict):
            for key, child in node.items():
                if not isinstance(key, str):
                    raise InputError(f"{name} has the key {key!r}; keys must be strings")
                _check_string(key, name)
                flat = key in ("$and", "$or") and isinstance(child, list)
                stack.append((child, depth + (0 if flat or not _nested(child) else 1)))
        elif isinstance(node, list | tuple):
            stack.extend((child, depth + (1 if _nested(child) else 0)) for child in node)
        elif isinstance(node, str):
            _check_string(node, name)
        elif isinstance(node, float) and not math.isfinite(node):
            raise InputError(
                f"{name} has the number {node}, which JSON cannot hold: use a finite number"
            )


def _nested(value: Any) -> bool:
    return isinstance(value, dict | list | tuple)


def _check_string(text: str, name: str) -> None:
    shown = text if len(text) <= 40 else text[:37] + "..."
    if "\x00" in text:
        raise InputError(
            f"{name} has the string {shown!r} with a NUL character, which PostgreSQL cannot"
            " store: remove it"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(
            f"{name} has the string {shown!r}, which is not valid Unicode (a lone surrogate"
            " such as \\ud800): write the character itself, or its full surrogate pair"
        ) from None
