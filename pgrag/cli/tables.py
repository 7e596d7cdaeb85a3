"""Aligned tables with a header line, for people (``--json`` is for programs).

:func:`table` renders whatever keys the rows have: the columns a command names come first, under
the headers it gives, and any other key a library function returns (a field added later) follows
under its own name, so a new field shows up without a change here. Numbers are right-aligned,
``None`` and empty lists read ``-``, lists are joined with commas, and a cell never holds a tab,
a newline or another control character (they would break the alignment), so a name such as
``"a\\tb"`` shows as ``a\\tb``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pgrag.cli.output import escape, write

GAP = "  "


class Approx(int):
    """A count that is an estimate: shown as ``~N``, aligned as a number."""


def cell(value: Any) -> str:
    """One value as a table cell reads it."""
    if value is None:
        return "-"
    if isinstance(value, Approx):
        return f"~{value:,}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, Mapping):
        return ", ".join(f"{cell(k)} {cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(cell(v) for v in value) or "-"
    return printable(str(value))


def printable(text: str) -> str:
    """``text`` on one line, safe for a terminal: :func:`pgrag.cli.output.escape` without
    layout (tab, newline, escape, bidi overrides, ... written as escapes)."""
    return escape(text, layout=False)


def width(text: str) -> int:
    """Columns ``text`` takes on a terminal (wide East Asian characters take two)."""
    return sum(
        0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        for ch in text
    )


def header(key: str) -> str:
    return key.replace("_", " ").upper()


def table(
    rows: Sequence[Mapping[str, Any]],
    columns: Mapping[str, str] | None = None,
    *,
    hide: Collection[str] = (),
) -> str:
    """``rows`` as lines of aligned columns under a header line ("" when there are no rows).

    ``columns`` maps the keys to show first to their headers, in order; every other key of
    the rows (but those in ``hide``) follows, headed by its name in capitals."""
    if not rows:
        return ""
    named = dict(columns or {})
    keys = [k for k in named if any(k in r for r in rows)]
    for r in rows:
        keys += [k for k in r if k not in named and k not in keys and k not in hide]
    keys = [k for k in keys if k not in hide]
    heads = [named.get(k) or header(k) for k in keys]
    body = [[cell(r.get(k)) for k in keys] for r in rows]
    numeric = [
        all(
            isinstance(r.get(k), int | float) and not isinstance(r.get(k), bool)
            for r in rows
            if r.get(k) is not None
        )
        and any(r.get(k) is not None for r in rows)
        for k in keys
    ]
    widths = [max(width(x) for x in [h, *(line[i] for line in body)]) for i, h in enumerate(heads)]

    def line(cells: list[str]) -> str:
        out = []
        for i, text in enumerate(cells):
            pad = " " * (widths[i] - width(text))
            out.append(pad + text if numeric[i] else text + pad)  # numbers (and their header)
        return GAP.join(out).rstrip()

    return "\n".join([line(heads), *(line(c) for c in body)])


def print_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Mapping[str, str] | None = None,
    *,
    hide: Collection[str] = (),
) -> None:
    """:func:`table` on stdout (nothing when there are no rows)."""
    text = table(rows, columns, hide=hide)
    if text:
        write(text)  # every cell went through printable()
