"""The aligned tables the CLI prints for people (pgrag.cli.tables)."""

from __future__ import annotations

from pgrag.cli.tables import cell, table
from tests.tables import read_table


def test_a_header_line_then_aligned_columns() -> None:
    rows = [
        {"name": "docs", "documents": 3, "chunks": 12345, "model": "m"},
        {"name": "handbook", "documents": 120, "chunks": 7, "model": None},
    ]
    text = table(rows, {"name": "COLLECTION", "documents": "DOCUMENTS"})
    assert text.splitlines() == [
        "COLLECTION  DOCUMENTS  CHUNKS  MODEL",
        "docs                3  12,345  m",
        "handbook          120       7  -",
    ]
    assert "\t" not in text


def test_fields_the_command_does_not_name_still_show() -> None:
    # Another release (or another part of pgrag) adds a field: it gets a column of its own.
    rows = [
        {"collection": "docs", "estimated": True, "index_health": [{"model": "m", "ok": True}]},
        {"collection": "b", "extra_field": 1.5},
    ]
    got = read_table(table(rows, {"collection": "COLLECTION"}, hide={"hidden"}))
    assert got == [
        {"COLLECTION": "docs", "ESTIMATED": "yes", "INDEX HEALTH": "model m, ok yes",
         "EXTRA FIELD": "-"},
        {"COLLECTION": "b", "ESTIMATED": "-", "INDEX HEALTH": "-", "EXTRA FIELD": "1.5"},
    ]  # fmt: skip
    assert "COLLECTION" not in table(rows, hide={"collection"}).splitlines()[0]


def test_cells_cannot_break_the_alignment() -> None:
    rows = [{"name": "a\tb\nc", "n": 1}, {"name": "\u7d22\u5f15", "n": 22}]
    lines = table(rows).splitlines()
    assert lines[1] == "a\\tb\\nc   1"
    # Two wide characters take four columns: the numbers still line up.
    assert lines[2] == "\u7d22\u5f15     22"
    assert [cell(x) for x in ([], ["a", "b"], None, False, 1234567)] == [
        "-",
        "a, b",
        "-",
        "no",
        "1,234,567",
    ]


def test_no_rows_no_table() -> None:
    assert table([]) == ""


def test_command_lines_in_hints_paste_into_a_shell() -> None:
    import shlex

    from pgrag.errors import command_line

    name = 'Bob\'s "model" $HOME; rm -rf x'
    line = command_line("pgrag", "models", "activate", name, "-c", "docs")
    assert line.startswith("`") and line.endswith("`")
    assert shlex.split(line[1:-1]) == ["pgrag", "models", "activate", name, "-c", "docs"]
    assert command_line("pgrag", "collections") == "`pgrag collections`"
