"""The formats pgrag reads, one module each, found by themselves: adding a format is adding a
module here (docs/ingest.md#adding-a-format), with no edit anywhere else.

The content decides a file's format; its name only breaks ties that content cannot. Each
format's ``detect`` is asked in turn, lowest ``ORDER`` first, and the first that says yes
wins: PDF (its magic bytes), HTML, JSON Lines, Markdown, and plain text, which takes anything
else that is text.

A format module (any module of this package whose name does not start with ``_``) defines:

- ``NAME``: the format's name, stored as each document's ``metadata.format``.
- ``LABEL``: how messages name it ("JSON Lines").
- ``SUFFIXES``: the lower-case file name suffixes a directory walk picks up for it.
- ``ORDER``: when its ``detect`` is asked, lowest first.
- ``detect(sample)``: whether a file that starts as ``sample`` (a :class:`Sample`) is in this
  format; it may raise :class:`~pgrag.errors.InputError` for a file that claims to be one
  (by its suffix) and is not.
- exactly one of
  - ``convert(text)``: a text format. pgrag reads the file as UTF-8 (refusing NUL bytes,
    other encodings and files of only whitespace) and ``convert`` returns (the text to
    chunk, the document's title or None for one made of the file name);
  - ``read(path, fh, options)``: a format that reads the file itself, from ``fh`` (opened in
    binary, at its start). It yields (label, :class:`~pgrag.ingest.document.LoadedFile` or
    InputError) for each document the file holds; ``options`` holds what the caller set for
    formats, by format name (``{"jsonl": JsonlFields(...)}``).
- optionally ``MARKDOWN = True`` (its text is chunked as Markdown: headings and table rows
  kept as units), ``BINARY = True`` (its files may hold NUL bytes) and ``STREAMS = True`` (a
  text format whose ``convert`` returns the text as it is: a file too large to read whole is
  then chunked a line at a time, and its title is the first one ``convert`` finds in a block).

Every problem is an InputError with a one-line reason; the caller names the file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.formats._base import SNIFF_BYTES, Sample

__all__ = [
    "PACKAGE",
    "SNIFF_BYTES",
    "Format",
    "Sample",
    "discover",
    "format_of",
    "formats",
    "labels",
    "sniff",
    "suffixes",
]

PACKAGE = __name__  # where the format modules are found

Reader = Callable[
    [Path, BinaryIO, Mapping[str, Any]], Iterable[tuple[str, LoadedFile | InputError]]
]


@dataclass(frozen=True)
class Format:
    """One format module, as the registry found it."""

    name: str
    label: str
    suffixes: tuple[str, ...]
    order: int
    detect: Callable[[Sample], bool]
    convert: Callable[[str], tuple[str, str | None]] | None = None
    read: Reader | None = None
    markdown: bool = False
    binary: bool = False
    streams: bool = False


def formats() -> tuple[Format, ...]:
    """Every format, in the order their ``detect`` is asked."""
    return discover(PACKAGE)


def suffixes() -> Mapping[str, str]:
    """The suffixes a directory walk picks up, and the format each usually holds."""
    return _suffixes(PACKAGE)


@cache
def _suffixes(package: str) -> Mapping[str, str]:
    return MappingProxyType({s: fmt.name for fmt in discover(package) for s in fmt.suffixes})


def labels() -> str:
    """The formats pgrag reads, for messages: "PDF, HTML, ... and plain text"."""
    names = [fmt.label for fmt in formats()]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def sniff(head: bytes, suffix: str, members: frozenset[str] = frozenset()) -> str:
    """The name of a file's format, from its first bytes (:func:`format_of`)."""
    return format_of(head, suffix, members).name


def format_of(head: bytes, suffix: str, members: frozenset[str] = frozenset()) -> Format:
    """The format of a file from its first bytes (and, for a ZIP archive, its ``members``);
    the suffix only breaks ties between text formats that content cannot tell apart
    (Markdown and plain text)."""
    sample = Sample.of(head, suffix, suffixes().get(suffix), members)
    for fmt in formats():
        if fmt.detect(sample):
            return fmt
    raise InputError(f"is in none of the formats pgrag reads ({labels()})")


@cache
def discover(package: str) -> tuple[Format, ...]:
    """The format modules of ``package`` (every module whose name does not start with
    ``_``), checked, in ``ORDER``."""
    found = [
        _format(importlib.import_module(f"{package}.{info.name}"))
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__)
        if not info.name.startswith("_")
    ]
    claimed: dict[str, str] = {}
    for fmt in found:
        for key in (fmt.name, *fmt.suffixes):
            if key in claimed:
                raise TypeError(f"format {fmt.name!r} claims {key!r}, as {claimed[key]!r} does")
            claimed[key] = fmt.name
    return tuple(sorted(found, key=lambda f: (f.order, f.name)))


def _format(module: ModuleType) -> Format:
    names = ("NAME", "LABEL", "SUFFIXES", "ORDER", "detect")
    missing = [n for n in names if not hasattr(module, n)]
    convert, read = getattr(module, "convert", None), getattr(module, "read", None)
    if (convert is None) == (read is None):
        missing.append("exactly one of convert() and read()")
    if missing:
        raise TypeError(
            f"{module.__name__} is not a format module: it lacks {', '.join(missing)}"
            " (see pgrag.ingest.formats)"
        )
    return Format(
        name=module.NAME,
        label=module.LABEL,
        suffixes=tuple(module.SUFFIXES),
        order=module.ORDER,
        detect=module.detect,
        convert=convert,
        read=read,
        markdown=getattr(module, "MARKDOWN", False),
        binary=getattr(module, "BINARY", False),
        streams=getattr(module, "STREAMS", False),
    )
