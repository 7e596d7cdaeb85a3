"""JSON Lines: one document per line, with configurable text, title, id, metadata and embedding
fields (:class:`JsonlFields`); read a line at a time, never whole. A bad line is reported as
``FILE:LINE: reason`` and the other lines go in. A record with an embedding is one chunk, its
whole text, stored with that vector (:mod:`pgrag.ingest.vectors`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest.document import LoadedFile, from_text, source_of
from pgrag.ingest.formats._base import Sample, one_line
from pgrag.ingest.vectors import check_vector

NAME = "jsonl"
LABEL = "JSON Lines"
SUFFIXES = (".jsonl", ".ndjson")
ORDER = 300


def detect(sample: Sample) -> bool:
    """Named .jsonl or .ndjson, or of no known kind with a JSON object on its first line."""
    if sample.known == NAME:
        return True
    first, newline, _ = sample.text.partition("\n")
    return sample.known is None and bool(newline) and _json_object(first.strip())


def _json_object(line: str) -> bool:
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


@dataclass(frozen=True)
class JsonlFields:
    """Which fields of a JSON Lines record are what. ``id`` None: ``_id`` or ``id`` when the
    record has one, else the line number (an id keeps a record's identity when lines move).
    ``metadata`` None: every other field. ``embedding``: the field holding a record's vector,
    made already (a record without it, or with null there, is embedded as usual); None: no
    record has one."""

    text: str = "text"
    title: str | None = "title"
    id: str | None = None
    metadata: tuple[str, ...] | None = None
    embedding: str | None = "embedding"


@dataclass(frozen=True)
class Record:
    line: int
    key: str
    title: str | None
    text: str
    metadata: dict[str, Any]
    vector: tuple[float, ...] | None = None


MAX_LINE_BYTES = 16 * 1024 * 1024


def jsonl_records(
    stream: IO[bytes], fields: JsonlFields
) -> Iterator[Record | tuple[int, InputError]]:
    """Each line's record, or (line number, the problem with that line); one line at a time."""
    seen: dict[str, int] = {}
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"is {len(raw)} bytes, over the {MAX_LINE_BYTES}-byte line limit")
            try:
                record = json.loads(raw)
            except ValueError as err:
                raise InputError(f"is not valid JSON ({one_line(err)})") from err
            if not isinstance(record, dict):
                raise InputError("is not a JSON object")
            yield record_of(number, record, fields, seen)
        except InputError as err:
            yield number, err


def record_of(
    number: int,
    record: dict[str, Any],
    fields: JsonlFields,
    seen: dict[str, int],
    unit: str = "line",
) -> Record:
    """The record of a file's ``number``-th entry (a JSON Lines line, a Parquet row), its id
    checked against those ``seen`` (id -> number); an InputError says what is wrong with it."""
    text = record.get(fields.text)
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"has no text in field {fields.text!r}; name the field with --jsonl-text")
    id_field = fields.id or next((f for f in ("_id", "id") if f in record), None)
    if id_field is not None and record.get(id_field) in (None, ""):
        raise InputError(f"has no {id_field!r}; every record needs one, or none does")
    key = str(record[id_field]) if id_field else f"{unit}-{number}"
    if key in seen:
        raise InputError(f"repeats id {key!r} of {unit} {seen[key]}")
    seen[key] = number
    title = record.get(fields.title) if fields.title else None
    vector = None
    if fields.embedding and record.get(fields.embedding) is not None:
        vector = check_vector(record[fields.embedding], f"its {fields.embedding!r} field")
    used = {fields.text, fields.title, id_field, fields.embedding}
    names = fields.metadata if fields.metadata is not None else tuple(record)
    metadata = {n: record[n] for n in names if n in record and n not in used}
    return Record(number, key, title if isinstance(title, str) else None, text, metadata, vector)


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    """One document per record: its source is the file's path and the record's id."""
    yield from documents(path, jsonl_records(fh, options.get(NAME) or JsonlFields()), NAME)


def documents(
    path: Path, records: Iterable[Record | tuple[int, InputError]], fmt: str
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    """Each record as a document labelled ``FILE:NUMBER`` (a problem, as its InputError), of
    format ``fmt``: its source is the file's path and the record's id."""
    source = source_of(path)
    for item in records:
        if isinstance(item, tuple):
            number, err = item
            yield f"{path}:{number}", err
            continue
        meta = {**item.metadata, "path": str(path), "record": item.key}
        try:
            doc = from_text(
                f"{source}#{item.key}",
                item.text,
                title=item.title or f"{path.stem} {item.key}",
                metadata=meta,
                vector=item.vector,
            )
        except InputError as err:
            yield f"{path}:{item.line}", err
            continue
        label = f"{path}:{item.line}"
        yield label, replace(doc, label=label, format=fmt, metadata={**meta, "format": fmt})
