"""What format modules share (a module whose name starts with ``_`` is not a format)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pgrag.errors import InputError

SNIFF_BYTES = 8192  # how much of a file the formats' detect() functions see
ZIP_MAGIC = b"PK\x03\x04"
ZIP_MAX_MEMBERS = 50_000  # an archive that lists more is refused before anything is read

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Sample:
    """The start of a file, as a format's ``detect`` sees it."""

    head: bytes  # the first SNIFF_BYTES bytes, as they are
    suffix: str  # the file name's suffix, lower case ('' for none)
    known: str | None  # the format that suffix usually holds, if any format claims it
    text: str  # the head as UTF-8 (undecodable bytes dropped), leading BOM and blanks removed
    # A ZIP archive's member names (its central directory, read by the loader: office files
    # and e-books are ZIP archives that their members tell apart); () for any other file.
    members: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls, head: bytes, suffix: str, known: str | None, members: frozenset[str] = frozenset()
    ) -> Sample:
        text = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
        return cls(head=head, suffix=suffix, known=known, text=text, members=members)

    @property
    def is_zip(self) -> bool:
        """Starts as a ZIP archive does (a local file header, or an empty archive's end)."""
        return self.head.startswith((ZIP_MAGIC, b"PK\x05\x06"))

    @property
    def lower(self) -> str:
        """The first 4,096 characters of the text, in lower case."""
        return self.text[:4096].lower()


def zip_members(path: Path) -> frozenset[str]:
    """The member names of the ZIP archive at ``path`` (from its central directory: nothing
    is decompressed); an archive too damaged to list has none."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if len(infos) > ZIP_MAX_MEMBERS:
                raise InputError(
                    f"is a ZIP archive of {len(infos)} members; at most {ZIP_MAX_MEMBERS} are read"
                )
            return frozenset(i.filename for i in infos)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return frozenset()


def one_line(err: BaseException) -> str:
    """An exception's message on one line, for an :class:`~pgrag.errors.InputError` reason."""
    return _WS.sub(" ", str(err)).strip()[:200] or type(err).__name__
