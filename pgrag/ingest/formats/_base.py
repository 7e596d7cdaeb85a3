"""What format modules share (a module whose name starts with ``_`` is not a format)."""

from __future__ import annotations

import re
from dataclasses import dataclass

SNIFF_BYTES = 8192  # how much of a file the formats' detect() functions see

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Sample:
    """The start of a file, as a format's ``detect`` sees it."""

    head: bytes  # the first SNIFF_BYTES bytes, as they are
    suffix: str  # the file name's suffix, lower case ('' for none)
    known: str | None  # the format that suffix usually holds, if any format claims it
    text: str  # the head as UTF-8 (undecodable bytes dropped), leading BOM and blanks removed

    @classmethod
    def of(cls, head: bytes, suffix: str, known: str | None) -> Sample:
        text = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
        return cls(head=head, suffix=suffix, known=known, text=text)

    @property
    def lower(self) -> str:
        """The first 4,096 characters of the text, in lower case."""
        return self.text[:4096].lower()


def one_line(err: BaseException) -> str:
    """An exception's message on one line, for an :class:`~pgrag.errors.InputError` reason."""
    return _WS.sub(" ", str(err)).strip()[:200] or type(err).__name__
