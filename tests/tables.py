"""Reading back the aligned tables the CLI prints for people (pgrag.cli.tables)."""

from __future__ import annotations

import re


def read_table(text: str) -> list[dict[str, str]]:
    """The rows of a table under its header line, each as {HEADER: cell} (cells are separated
    by two spaces or more, which no cell the tests print holds)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    heads = re.split(r"\s{2,}", lines[0].strip())
    rows = []
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        assert len(cells) == len(heads), (heads, cells)
        rows.append(dict(zip(heads, cells, strict=True)))
    return rows
