"""Parquet: one document per row, with the fields JSON Lines records have (text, title, id,
metadata, embedding: :class:`~pgrag.ingest.formats.jsonl.JsonlFields`, set with the same
``--jsonl-*`` options), read a batch of rows at a time through pyarrow (``pgrag[parquet]``).
A bad row is reported as ``FILE:ROW: reason`` and the other rows go in. A row with an
embedding (a list of numbers) is one chunk, its whole text, stored with that vector.

Values JSON has no type for (timestamps, dates, decimals, bytes) are stored in the metadata as
text: a timestamp as ISO 8601, bytes as hexadecimal."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.formats._base import Sample, one_line
from pgrag.ingest.formats.jsonl import JsonlFields, Record, documents, record_of

NAME = "parquet"
LABEL = "Parquet"
SUFFIXES = (".parquet",)
ORDER = 60
BINARY = True

MAGIC = b"PAR1"
ROWS_PER_BATCH = 1024


def detect(sample: Sample) -> bool:
    """Its magic bytes; a file named .parquet without them is refused."""
    if sample.head.startswith(MAGIC):
        return True
    if sample.known == NAME:
        raise InputError("is named .parquet but does not start with PAR1: not a Parquet file")
    return False


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    """One document per row: its source is the file's path and the row's id (``row-N`` when
    the rows have none)."""
    yield from documents(path, parquet_records(fh, options.get("jsonl") or JsonlFields()), NAME)


def parquet_records(fh: BinaryIO, fields: JsonlFields) -> Iterator[Record | tuple[int, InputError]]:
    """Each row's record, or (row number, the problem with that row); ROWS_PER_BATCH at a time."""
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise InputError(
            "is a Parquet file, and reading one needs pyarrow: pip install 'pgrag[parquet]'"
        ) from err
    try:
        table = pq.ParquetFile(fh)
        names = set(table.schema_arrow.names)
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError and others for bad files
        raise InputError(f"is not a readable Parquet file ({one_line(err)})") from err
    if fields.text not in names:
        raise InputError(
            f"has no column {fields.text!r} (it has {', '.join(sorted(names)) or 'none'});"
            " name the text column with --jsonl-text"
        )
    if fields.embedding not in (None, JsonlFields.embedding) and fields.embedding not in names:
        # (A column named on purpose, not there: its rows would be embedded without a word.)
        raise InputError(
            f"has no column {fields.embedding!r} (it has {', '.join(sorted(names))}); name the"
            " vector column with --jsonl-embedding, or '' for none"
        )
    import pyarrow as pa

    kind = table.schema_arrow.field(fields.text).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InputError(
            f"has a column {fields.text!r} of type {kind}, not text; name the text column"
            " with --jsonl-text"
        )
    seen: dict[str, int] = {}
    number = 0
    try:
        for batch in table.iter_batches(batch_size=ROWS_PER_BATCH):
            for row in _rows(batch):
                number += 1
                try:
                    if isinstance(row, InputError):
                        raise row
                    yield record_of(number, _plain(row, fields.embedding), fields, seen, unit="row")
                except InputError as err:
                    yield number, err
    except Exception as err:  # a corrupt page part-way through
        raise InputError(f"could not be read past row {number} ({one_line(err)})") from err


def _rows(batch: Any) -> Iterator[dict[str, Any] | InputError]:
    """A batch's rows as Python values; when the batch will not convert (a timestamp beyond
    what Python's datetime holds), row by row, each that will not as its problem."""
    try:
        rows = batch.to_pylist()
    except Exception:  # pyarrow's ArrowInvalid, ValueError, OverflowError...
        rows = None
    if rows is not None:
        yield from rows
        return
    for i in range(batch.num_rows):
        try:
            [row] = batch.slice(i, 1).to_pylist()
        except Exception as err:
            yield InputError(f"has a value that cannot be read ({one_line(err)})")
        else:
            yield row


def _plain(row: dict[str, Any], vector: str | None) -> dict[str, Any]:
    """A row with the values JSON cannot hold made text, or null for a NaN or infinity (nested
    lists and structs too); the ``vector`` column as it is, for its own checks."""
    return {k: v if k == vector else _json_value(v) for k, v in row.items()}


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return str(value)
    return json.loads(json.dumps(value, default=str))
