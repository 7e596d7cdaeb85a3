"""Reading a ``POST /v1/documents`` request: its multipart body, within the service's size
limit (413 above it, before anything is stored), its files saved in a private directory under
their own names (what their formats and titles are read from) and its form fields."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgrag.errors import InputError
from pgrag.ingest.uploads import disk_name

# A request's private directory: pgrag-upload-<pid>-<random>, so that one left behind by a
# service killed mid-upload (kill -9, out of memory) is known for stale at the next start.
DIR_PREFIX = "pgrag-upload-"
_DIR_NAME = re.compile(re.escape(DIR_PREFIX) + r"([0-9]{1,12})-")
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


def upload_directory() -> tempfile.TemporaryDirectory[str]:
    """A request's private directory (mode 0700), named for this process, removed when the
    request ends (or, were the process killed, by the next service's start)."""
    return tempfile.TemporaryDirectory(prefix=f"{DIR_PREFIX}{os.getpid()}-")


def remove_stale_upload_directories(root: Path | None = None) -> list[Path]:
    """Remove the upload directories under ``root`` (the temporary directory) that a service
    killed mid-upload left behind, with every file it had received: those named for a process
    that is no longer running, and owned by this user (never another user's, nor one of a
    running service). The removed ones, for the log."""
    if os.name != "posix":  # (os.kill(pid, 0) tests a process only there)
        return []
    base = root or Path(tempfile.gettempdir())
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = _DIR_NAME.match(entry.name)
        if match is None:
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if _running(int(match.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False  # (no process; os.kill would signal a process group)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OverflowError:
        return False
    return True
