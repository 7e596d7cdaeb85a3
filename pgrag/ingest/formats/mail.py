"""Mail: a message (.eml) or a mailbox of them (.mbox), read with Python's own ``email`` and
``mailbox`` packages. Each message is a document: its source ``FILE#MESSAGE-ID``, its subject
the title, its sender, recipients, date and Message-ID in the metadata (``from``, ``to``,
``cc``, ``date`` as ISO 8601, ``message_id``), and its text a header block (From, To, Date,
Subject) and the body (the plain-text part, else the HTML part read as an HTML page is).

Each attachment pgrag can read (a PDF, a Word file, a spreadsheet, another message, ...) is a
document of its own, ``FILE#MESSAGE-ID/NAME``, with ``attachment_of`` (the message's source)
and ``filename`` in its metadata, read as a file of that name would be. One that cannot be
read is reported on its own line (``FILE#MESSAGE-ID/NAME: reason``) and the rest go in;
inline images and signatures are skipped. Limits: an attachment of at most 50 MB, messages
attached within messages three deep, and the file's time budget.

A file is mail when it is named .eml or .mbox, or has no known suffix and starts with mail
headers (From: and at least two of Date:, Subject:, To:, Message-ID:, MIME-Version:,
Received:, Return-Path:); a mailbox starts with a "From " line."""

from __future__ import annotations

import email.policy
import hashlib
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import replace
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError, NotText, SkippedInput
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile, file_metadata, source_of
from pgrag.ingest.formats._base import Sample, one_line

NAME = "email"
LABEL = "mail (EML, mbox)"
SUFFIXES = (".eml", ".mbox")
ORDER = 150  # after PDF; before HTML, which an HTML body could make it look like
BINARY = True  # (read as bytes: a message may be in any charset, or 8-bit)

MAX_MESSAGE_BYTES = 100 * 1024 * 1024
MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024
MAX_DEPTH = 3

_HEADER = re.compile(rb"^([!-9;-~]+):[ \t]?", re.MULTILINE)
_TYPICAL = {b"date", b"subject", b"to", b"message-id", b"mime-version", b"received", b"return-path"}
_MAIL = _TYPICAL | {b"from", b"content-type", b"cc", b"sender", b"reply-to", b"in-reply-to"}
_SKIPPED_TYPES = {"application/pgp-signature", "application/pkcs7-signature"}
_depth: ContextVar[int] = ContextVar("pgrag_mail_depth", default=0)


def detect(sample: Sample) -> bool:
    """Named .eml or .mbox, or of no known kind with mail headers; a file named .eml or .mbox
    that does not start like mail is refused."""
    head = sample.head.lstrip(b"\r\n")
    if head.startswith(b"From "):  # a mailbox ("From sender date" lines between messages)
        if sample.known == NAME:
            return True  # (named as mail and laid out as a mailbox: each message says the rest)
        return sample.known is None and _headers(head.partition(b"\n")[2]) is not None
    if sample.known == NAME:
        if _headers(head) is None:
            raise InputError(
                f"is named {sample.suffix} but does not start with mail headers (From:, Date:,"
                " Subject:, Content-Type:...); not a message"
            )
        return True
    names = _headers(head, strict=True)
    return sample.known is None and names is not None and len(names & _TYPICAL) >= 2


def _headers(head: bytes, strict: bool = False) -> set[bytes] | None:
    """The names in the header block at the start of ``head``, if it is one: a file named as
    mail may have any of a message's headers (one saved without From:, a part of a message),
    and its header block may run into the body without a blank line, as Python's parser
    allows; ``strict`` (a file of no known kind) asks for From: and a block that ends."""
    block = re.split(rb"\r?\n\r?\n", head, maxsplit=1)[0]
    lines = block.splitlines()
    if not lines or not _HEADER.match(lines[0]):
        return None
    names = set()
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            continue  # a folded header's continuation
        match = _HEADER.match(line)
        if match is None:
            if strict:
                return None
            break
        names.add(match.group(1).lower())
    if strict:
        return names if b"from" in names else None
    return names if names & _MAIL else None


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    size = path.stat().st_size
    head = fh.read(5)
    fh.seek(0)
    with budget.file_budget():
        if head == b"From ":
            yield from _mailbox(path, options)
            return
        if size > MAX_MESSAGE_BYTES:
            raise InputError(
                f"is {size} bytes, over the {MAX_MESSAGE_BYTES}-byte limit for a message"
            )
        raw = fh.read()
        yield from _message(path, raw, None, {}, options)


def _mailbox(
    path: Path, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    import mailbox

    seen: dict[str, int] = {}
    box = mailbox.mbox(path, create=False)
    try:
        for number, key in enumerate(box.iterkeys(), 1):
            budget.check("reading the mailbox")
            try:
                raw = box.get_bytes(key)
            except Exception as err:  # a damaged mailbox
                yield f"{path}:{number}", InputError(f"cannot be read ({one_line(err)})")
                continue
            if len(raw) > MAX_MESSAGE_BYTES:
                yield (
                    f"{path}:{number}",
                    InputError(
                        f"message {number} is {len(raw)} bytes, over the limit of"
                        f" {MAX_MESSAGE_BYTES}"
                    ),
                )
                continue
            yield from _message(path, raw, number, seen, options)
    finally:
        box.close()


def _message(
    path: Path, raw: bytes, number: int | None, seen: dict[str, int], options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    where = f"{path}:{number}" if number is not None else str(path)
    try:
        message = BytesParser(policy=email.policy.default).parsebytes(raw)
        assert isinstance(message, EmailMessage)
        key = _key(message, number, seen)
        text, markdown, notes = _text(message)
        meta = _metadata(message)
    except InputError as err:
        yield where, err
        return
    except Exception as err:  # the email package raises many types for broken messages
        yield (
            where,
            InputError(f"cannot be read as a message ({type(err).__name__}: {one_line(err)})"),
        )
        return
    # (A header may decode to NUL characters or lone surrogates, which PostgreSQL's text and
    # jsonb cannot store: they are dropped and replaced, never a failed write.)
    text = _clean(text)
    meta = {k: _clean(v) if isinstance(v, str) else v for k, v in meta.items()}
    source = f"{source_of(path)}#{key}"
    st = path.stat()
    yield (
        f"{path}#{key}",
        LoadedFile(
            label=f"{path}#{key}",
            source=source,
            format=NAME,
            text=text,
            title=meta.get("subject") or f"Message {key}",
            content_hash=hashlib.sha256(raw).hexdigest(),
            metadata={**file_metadata(path, NAME, st.st_size, st.st_mtime), **meta, "record": key},
            markdown=markdown,
            notes=notes,
        ),
    )
    yield from _attachments(path, message, key, source, options)


def _clean(text: str) -> str:
    """``text`` without NUL characters, lone surrogates replaced."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def _key(message: EmailMessage, number: int | None, seen: dict[str, int]) -> str:
    found = _clean(str(message.get("Message-ID", "") or "")).strip().strip("<>").strip()
    key = re.sub(r"[\s#/]+", "_", found)[:200] or f"message-{number or 1}"
    if key in seen:
        seen[key] += 1
        key = f"{key}-{seen[key]}"
    else:
        seen[key] = 1
    return key


def _metadata(message: EmailMessage) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for name in ("from", "to", "cc"):
        values = [str(v).strip() for v in message.get_all(name, []) if str(v).strip()]
        if values:
            meta[name] = values[0] if name == "from" else ", ".join(values)
    subject = " ".join(str(message.get("subject", "") or "").split())
    if subject:
        meta["subject"] = subject
    date = message.get("date")
    if date is not None:
        try:
            meta["date"] = date.datetime.isoformat()
        except (AttributeError, TypeError, ValueError):
            meta["date"] = str(date)
    message_id = str(message.get("message-id", "") or "").strip()
    if message_id:
        meta["message_id"] = message_id
    return meta


def _text(message: EmailMessage) -> tuple[str, bool, tuple[str, ...]]:
    """The message's header block and body; whether it is Markdown (an HTML body); what
    reading it had to guess (pgrag.ingest.document.LoadedFile.notes)."""
    lines = []
    for name in ("From", "To", "Cc", "Date", "Subject"):
        value = " ".join(str(message.get(name, "") or "").split())
        if value:
            lines.append(f"{name}: {value}")
    body = message.get_body(preferencelist=("plain", "html"))
    text, markdown = "", False
    notes: tuple[str, ...] = ()
    if body is not None:
        try:
            content = body.get_content()
        except LookupError:  # a charset Python does not know: UTF-8 if it is, else Windows-1252
            payload = body.get_payload(decode=True)
            content = payload if isinstance(payload, bytes) else str(payload or "")
            charset = " ".join(str(body.get_content_charset()).split())[:60]
            notes = (f"its body's charset {charset!r} is unknown; read as UTF-8 or Windows-1252",)
            if isinstance(content, bytes):
                try:
                    content = content.decode("utf-8")
                except UnicodeDecodeError:
                    content = content.decode("cp1252", errors="replace")
        if isinstance(content, bytes):
            content = content.decode("utf-8", errors="replace")
        if body.get_content_subtype() == "html":
            from pgrag.ingest.formats.html import html_to_markdown

            text, _ = html_to_markdown(content)
            markdown = True
        else:
            text = content
    text = text.replace("\x00", "").replace("\r\n", "\n").strip()
    if markdown:  # the header block as plain lines, never headings
        return "\n".join(f"{line}  " for line in lines) + "\n\n" + text + "\n", True, notes
    return "\n".join(lines) + "\n\n" + text + "\n", False, notes


def _attachments(
    path: Path, message: EmailMessage, key: str, parent: str, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    from pgrag.ingest.loaders import load_path

    names: dict[str, int] = {}
    for n, part in enumerate(message.iter_attachments(), 1):
        if part.get_content_type() in _SKIPPED_TYPES:
            continue
        if part.get_content_maintype() == "image" and part.get_content_disposition() == "inline":
            continue
        name = _file_name(str(part.get_filename() or ""), n)
        if part.get_content_type() == "message/rfc822" and not name.endswith(".eml"):
            name += ".eml"
        if name in names:  # (two attachments of one name: the second is NAME-2.ext)
            names[name] += 1
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}-{names[name]}.{ext}" if dot and stem else f"{name}-{names[name]}"
        names.setdefault(name, 1)
        record = f"{key}/{name}"
        label = f"{path}#{record}"
        if _depth.get() >= MAX_DEPTH:
            yield label, InputError(f"is a message attached {MAX_DEPTH} deep; not read further")
            continue
        try:
            data = _payload(part)
        except InputError as err:
            yield label, err
            continue
        if not data.strip():
            continue  # (an empty part: nothing to read, and nothing wrong)
        with tempfile.TemporaryDirectory(prefix="pgrag-mail-") as tmp:
            file = Path(tmp) / name
            try:
                file.write_bytes(data)
            except (OSError, ValueError) as err:  # (a name the file system refuses)
                yield label, InputError(f"cannot be saved to be read ({one_line(err)})")
                continue
            token = _depth.set(_depth.get() + 1)
            try:
                items = list(load_path(file, options.get("jsonl")))
            finally:
                _depth.reset(token)
        for inner_label, item in items:
            inner = inner_label[len(str(file)) :]  # ("" or a record's ":N" / "#ID" of its own)
            if isinstance(item, NotText) and part.get_content_maintype() != "text":
                # (a picture, an archive, a program: mail carries many kinds pgrag does not
                # read, and the message is read without them)
                kind = part.get_content_type()
                yield (
                    label + inner,
                    SkippedInput(f"skipped: an attachment of a kind pgrag does not read ({kind})"),
                )
                continue
            if isinstance(item, InputError):
                yield label + inner, item
                continue
            if item.stream is not None:  # (a text file too large to hold: read from its path)
                yield (
                    label,
                    InputError("is too large to read from a message; save it and ingest it"),
                )
                continue
            own = item.source[len(source_of(file)) :]  # "#ID" for a file of many documents
            meta = {
                **item.metadata,
                "path": str(path),
                "record": record + own,
                "attachment_of": parent,
                "filename": name,
            }
            yield (
                label + inner,
                replace(
                    item,
                    label=label + inner,
                    source=f"{source_of(path)}#{record}{own}",
                    metadata=meta,
                ),
            )


def _file_name(raw: str, n: int) -> str:
    """An attachment's name as a file of its own: its last path part, without control
    characters, at most 120 characters (its suffix kept); "attachment-N" when nothing is left."""
    name = "".join(c for c in raw.replace("\\", "/").split("/")[-1] if c.isprintable()).strip()
    if name in ("", ".", ".."):
        return f"attachment-{n}"
    if len(name.encode()) > 120:
        stem, dot, ext = name.rpartition(".")
        ext = ext[:16] if dot and stem else ""
        stem = (stem if ext else name).encode()[:100].decode("utf-8", errors="ignore")
        name = f"{stem}.{ext}" if ext else stem
    return name


def _payload(part: EmailMessage) -> bytes:
    if part.get_content_type() == "message/rfc822":
        inner = part.get_content()
        data = inner.as_bytes(policy=email.policy.default) if hasattr(inner, "as_bytes") else b""
    else:
        found = part.get_payload(decode=True)
        data = found if isinstance(found, bytes) else b""
    if len(data) > MAX_ATTACHMENT_BYTES:
        raise InputError(
            f"is {len(data)} bytes, over the {MAX_ATTACHMENT_BYTES}-byte limit for an attachment"
        )
    if part.get_content_maintype() == "text" and part.get_content_charset():
        # Text in the charset it declares (ISO-8859-1, Windows-1252, ...), saved as UTF-8,
        # which is what pgrag reads text files as.
        try:
            data = data.decode(part.get_content_charset() or "utf-8").encode("utf-8")
        except (LookupError, UnicodeError):
            pass  # (an unknown or wrong charset: the bytes as they are, UTF-8 or refused)
    return data
