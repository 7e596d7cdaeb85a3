"""Reading files into documents: which files, in what format (:mod:`pgrag.ingest.formats`), and
refusing what cannot be used; or documents made from text (:func:`from_text`).

Each refusal is an :class:`InputError` whose message is one line naming the file's problem;
the caller adds the file name and moves on to the next file.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from pgrag.errors import InputError, NotText, SkippedInput
from pgrag.ingest import budget, formats
from pgrag.ingest.document import LoadedFile, file_metadata, from_text, name_title, source_of
from pgrag.ingest.formats import SNIFF_BYTES, Format
from pgrag.ingest.formats._base import ZIP_MAGIC, zip_members
from pgrag.ingest.formats.jsonl import JsonlFields
from pgrag.ingest.report import Seen

__all__ = [
    "MAX_BYTES",
    "LoadedFile",
    "find_files",
    "from_text",
    "load",
    "load_files",
    "load_path",
]

# A text format's file is read whole below this size, and above it streamed (a line at a
# time, chunked section by section) if its format STREAMS, or refused (HTML must be read whole
# to be parsed). Formats that read the file themselves (JSON Lines a line at a time, PDF an
# object at a time) have limits of their own.
MAX_BYTES = 50 * 1024 * 1024


def find_files(paths: list[Path]) -> Iterator[tuple[Path, InputError | None]]:
    """Yield each file to ingest, in a stable order. Directories are walked recursively
    (hidden entries and files of other types skipped); a path given explicitly that cannot be
    ingested, an unreadable subdirectory, or a directory with nothing to ingest is yielded with
    the reason."""
    for path in paths:
        if path.is_dir():
            yield from _walk(path)
        elif path.is_file():
            yield path, None  # named explicitly: its content decides what it is
        elif path.exists():
            yield path, InputError("not a regular file or directory")
        elif path.is_symlink():
            yield (
                path,
                InputError(
                    f"a symbolic link to {_link_target(path)}, which leads to no file (a loop"
                    " of links, or a target that does not exist)"
                ),
            )
        else:
            yield path, InputError("no such file or directory")


def _walk(root: Path) -> Iterator[tuple[Path, InputError | None]]:
    found = skipped = 0
    problems: list[tuple[Path, InputError]] = []
    suffixes = formats.suffixes()

    def unreadable(err: OSError) -> None:
        where = Path(err.filename) if err.filename else root
        problems.append((where, InputError(f"cannot read this directory ({err.strerror})")))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            child = Path(dirpath) / name
            if child.suffix.lower() in suffixes and child.is_file():
                found += 1
                yield child, None
            elif child.is_symlink() and not child.exists():
                # Said, not skipped silently: named directly it is an error.
                what = "is part of a loop of links" if _loops(child) else "does not exist"
                target = _link_target(child)
                yield child, SkippedInput(f"skipped: a symbolic link to {target}, which {what}")
            else:
                skipped += 1
    yield from problems
    if not found and not problems:
        others = ""
        if skipped:
            others = f" ({skipped} {'file' if skipped == 1 else 'files'} of other types skipped)"
        kinds = ", ".join(sorted(suffixes))
        yield root, InputError(f"no {kinds} files in this directory{others}")


def _loops(path: Path) -> bool:
    try:
        path.resolve(strict=True)
    except RuntimeError:  # (Python 3.11's word for a loop of symbolic links)
        return True
    except OSError as err:
        import errno

        return err.errno == errno.ELOOP
    return False


def _link_target(path: Path) -> str:
    try:
        return repr(os.readlink(path))
    except OSError:
        return "a path"


def load_files(
    paths: list[Path], jsonl: JsonlFields | None = None, seen: Seen | None = None
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    """The documents in files and directories (walked), each with its label; ``seen`` records
    the sources loaded and the files that could not be read whole."""
    seen = seen if seen is not None else Seen()
    for path, problem in find_files(paths):
        if problem is not None:
            # (--prune keeps the documents of a file it could not read: a dangling link's
            # under its own name and its target's)
            seen.failed_files.update({str(path.absolute()), source_of(path)})
            yield str(path), problem
            continue
        for label, item in load_path(path, jsonl):
            # (a part skipped with a warning, such as a mail attachment of a kind pgrag does
            # not read, is not a failure: --prune still prunes the file's other documents)
            if isinstance(item, LoadedFile):
                seen.sources.add(item.source)
            elif not isinstance(item, SkippedInput):
                seen.failed_files.add(source_of(path))
            yield label, item


def load_path(
    path: Path, jsonl: JsonlFields | None = None
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    """The documents in a file, each with the label messages use for it: one for most files,
    one per record for JSON Lines (a bad record is yielded as its problem, the others go on)."""
    label = str(path)
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
            fmt = _format(head, path)
            if fmt.read is not None:
                fh.seek(0)
                yield from fmt.read(path, fh, {} if jsonl is None else {"jsonl": jsonl})
                return
    except InputError as err:
        yield label, err
        return
    except PermissionError:
        yield label, InputError("permission denied; make it readable for this user")
        return
    except OSError as err:
        yield label, InputError(f"cannot read it ({err.strerror})")
        return
    try:
        yield label, load(path)
    except InputError as err:
        yield label, err


def _format(head: bytes, path: Path) -> Format:
    if not head:
        raise InputError("file is empty; nothing to ingest")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError("is UTF-16 text; convert it to UTF-8, e.g. `iconv -f utf-16 -t utf-8`")
    members = zip_members(path) if head.startswith(ZIP_MAGIC) else frozenset()
    fmt = formats.format_of(head, path.suffix.lower(), members)
    nul = head.find(b"\0")
    if not fmt.binary and nul >= 0:
        suffix = path.suffix or "(none)"
        convert = _convertible(head, members, path.suffix.lower())
        if convert is not None:
            raise NotText(
                f"is {convert[0]}, which pgrag does not read; convert it to {convert[1]}, e.g."
                f" `libreoffice --headless --convert-to {convert[1]} FILE`"
            )
        raise NotText(
            f"contains NUL bytes (offset {nul}): a binary file (type {suffix!r}), not one"
            f" pgrag reads ({formats.labels()})"
        )
    return fmt


_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # Office 97-2003 (.doc, .xls, .ppt)


def _convertible(head: bytes, members: frozenset[str], suffix: str) -> tuple[str, str] | None:
    """(what a file is, what to convert it to) for the office files pgrag does not read but
    an office suite converts: Office 97-2003 files and OpenDocument ones."""
    if head.startswith(_OLE2):
        old = {".xls": ("Excel", "xlsx"), ".ppt": ("PowerPoint", "pptx")}
        program, target = old.get(suffix, ("Word", "docx"))
        if suffix not in (".doc", ".xls", ".ppt"):
            return "a Microsoft Office 97-2003 file (Word, Excel or PowerPoint)", "docx"
        return f"a {program} 97-2003 file ({suffix})", target
    if "content.xml" in members and "mimetype" in members:
        kind = head[38:120].split(b"application/vnd.oasis.opendocument.", 1)[-1]
        for name, target in (("text", "docx"), ("spreadsheet", "xlsx"), ("presentation", "pptx")):
            if kind.startswith(name.encode()):
                return f"an OpenDocument {name} (LibreOffice's own format)", target
        return "an OpenDocument file (LibreOffice's own format)", "docx, xlsx or pptx"
    return None


def load(path: Path) -> LoadedFile:
    """A file of a text format (Markdown, text, HTML), read whole, or streamed when it is
    large and its format allows (the others: :func:`load_path`)."""
    try:
        st = path.stat()
        size = st.st_size
        if size > MAX_BYTES:
            return _load_streamed(path, st)
        data = path.read_bytes()
    except PermissionError as err:
        raise InputError("permission denied; make it readable for this user") from err
    except OSError as err:
        raise InputError(f"cannot read it ({err.strerror})") from err
    fmt = _format(data[:SNIFF_BYTES], path)
    if fmt.convert is None:
        raise InputError(f"is {fmt.name}; read it with pgrag.ingest.loaders.load_path")
    if not data.strip():
        raise InputError("file holds only whitespace; nothing to ingest")
    nul = data.find(b"\0")
    if nul >= 0:
        raise NotText(f"contains NUL bytes (offset {nul}); looks like a binary file, not text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise NotText(
            f"is not valid UTF-8 (byte {err.start}); convert it, e.g. `iconv -f latin1 -t utf-8`"
        ) from err
    with budget.file_budget():
        text, title = fmt.convert(text.replace("\r\n", "\n").replace("\r", "\n"))
    return LoadedFile(
        label=str(path),
        source=source_of(path),
        format=fmt.name,
        text=text,
        title=title or name_title(path),
        content_hash=hashlib.sha256(data).hexdigest(),
        metadata=file_metadata(path, fmt.name, size, st.st_mtime),
        markdown=fmt.markdown,
    )


def _load_streamed(path: Path, st: os.stat_result) -> LoadedFile:
    """A file too large to read whole, of a format that STREAMS: checked (UTF-8, no NUL) and
    hashed in blocks now, chunked a line at a time when it is written."""
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
        fmt = _format(head, path)
        if fmt.convert is None or not fmt.streams:
            raise InputError(
                f"file is {st.st_size} bytes, over the {MAX_BYTES}-byte limit for {fmt.name}"
                " (read whole to parse); split it"
            )
        fh.seek(0)
        digest = hashlib.sha256()
        decoder = codecs.getincrementaldecoder("utf-8-sig")()
        offset = 0
        title = None
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
            nul = block.find(b"\0")
            if nul >= 0:
                raise NotText(
                    f"contains NUL bytes (offset {offset + nul}); looks like a binary file"
                )
            try:
                text = decoder.decode(block)
            except UnicodeDecodeError as err:
                raise NotText(
                    f"is not valid UTF-8 (byte {offset + err.start}); convert it, e.g."
                    " `iconv -f latin1 -t utf-8`"
                ) from err
            if title is None:
                title = fmt.convert(text)[1]
            offset += len(block)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as err:
            raise NotText("is not valid UTF-8 (it ends inside a character)") from err
    return LoadedFile(
        label=str(path),
        source=source_of(path),
        format=fmt.name,
        text="",
        title=title or name_title(path),
        content_hash=digest.hexdigest(),
        metadata={**file_metadata(path, fmt.name, st.st_size, st.st_mtime), "streamed": True},
        stream=path,
        markdown=fmt.markdown,
    )
