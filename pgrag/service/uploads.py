"""Reading a ``POST /v1/documents`` request: its multipart body, within the service's size
limit (413 above it, before anything is stored), its files saved in a private directory under
their own names (what their formats and titles are read from) and its form fields."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgrag.errors import InputError
from pgrag.ingest.uploads import disk_name

FIELDS = ("collection", "allow", "source")
FILES = "files"
# Bytes of an oversized body still read (and dropped) before the 413 is sent, so that a client
# still sending reads the answer rather than a reset connection.
DRAIN = 16 * 1024 * 1024


@dataclass
class Received:
    # (the name each file was uploaded as, where it was saved or why it was not)
    files: list[tuple[str, Path | InputError]] = field(default_factory=list)
    fields: dict[str, list[str]] = field(default_factory=dict)

    def one(self, name: str) -> str | None:
        values = self.fields.get(name, [])
        if len(values) > 1:
            raise InputError(f"form field {name!r} is given {len(values)} times; give it once")
        return values[0] if values else None


def too_large(size: int | None, limit: int) -> Exception:
    from starlette.exceptions import HTTPException

    said = f"is {size} bytes" if size is not None else "is larger than that"
    return HTTPException(
        413,
        f"the upload {said}, over this service's limit of {limit} bytes"
        " (pgrag serve --max-upload-mb); send fewer or smaller files per request",
    )


async def _drain(receive: Any, more: bool) -> None:
    dropped = 0
    while more and dropped < DRAIN:
        message = await receive()
        if message["type"] != "http.request":
            return
        dropped += len(message.get("body", b""))
        more = message.get("more_body", False)


async def receive_uploads(request: Any, limit: int, directory: Path) -> Received:
    """The request's files (saved under ``directory``) and fields. A body over ``limit``
    bytes (by its Content-Length, or counted as it arrives) is refused with 413."""
    from starlette.concurrency import run_in_threadpool
    from starlette.datastructures import UploadFile
    from starlette.requests import Request

    kind = request.headers.get("content-type", "")
    if not kind.lower().startswith("multipart/form-data"):
        raise InputError(
            "POST /v1/documents takes multipart/form-data (files, collection, allow), e.g."
            " curl -F files=@report.pdf -F collection=handbook; got"
            f" {kind.split(';')[0] or 'no content type'}"
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        await _drain(request.receive, True)
        raise too_large(int(declared), limit)
    seen = 0

    async def counted() -> Any:
        nonlocal seen
        message = await request.receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                await _drain(request.receive, message.get("more_body", False))
                raise too_large(None, limit)
        return message

    form = await Request(request.scope, counted).form(
        max_files=1000, max_fields=1000, max_part_size=64 * 1024
    )
    received = Received()
    try:
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                if key != FILES:
                    raise InputError(
                        f"file field {key!r} is not one this route reads; send files as 'files'"
                    )
                name = value.filename or ""
                try:
                    saved = directory / str(len(received.files)) / disk_name(name)
                except InputError as err:  # this file's problem: the others go on
                    received.files.append((name, err))
                    continue
                saved.parent.mkdir()
                await run_in_threadpool(_save, value.file, saved)
                received.files.append((name, saved))
            elif key in FIELDS:
                received.fields.setdefault(key, []).append(value)
            else:
                raise InputError(
                    f"unknown form field {key!r}; POST /v1/documents reads files,"
                    f" {', '.join(FIELDS)}"
                )
    finally:
        await form.close()
    if not received.files:
        raise InputError(
            "no files in the upload: send each as a 'files' part, e.g. curl -F files=@report.pdf"
        )
    return received


def _save(source: Any, path: Path) -> None:
    with path.open("xb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
