"""``POST /v1/documents`` (upload: multipart files), ``GET /v1/documents`` (listing) and
``DELETE /v1/documents`` (by source), under the caller's principals.

Who may write what is PostgreSQL's decision: an upload or a delete runs in a session that reads
as the caller's principals and writes for them only (``pgrag.write_principals``,
sql/functions/access.sql), so the database refuses a document readable by principals the
caller does not hold, and any change to or deletion of a document others may read. Uploads
need the ``write`` scope; listing needs ``read``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import JSONResponse

from pgrag.collections import check_name
from pgrag.db.principals import check_principals
from pgrag.errors import DatabaseError, InputError
from pgrag.service.auth import Caller, Forbidden
from pgrag.service.deps import caller, service
from pgrag.service.errors import body as error_body
from pgrag.service.runtime import Work, run
from pgrag.service.uploads import receive_uploads, upload_directory

router = APIRouter()

REFUSED = "42501"


def readers(who: Caller, allow: list[str]) -> list[str] | None:
    """Who may read the uploaded documents: ``allow`` as given, else the caller's principals
    (public only for a caller that has none; None, as ``pgrag ingest``, for a ``--no-auth``
    service reading as its database role: new documents public)."""
    if allow:
        return check_principals(allow, "allow principal")
    if who.principals is None:
        return None
    return list(who.principals) or ["public"]


@router.post("/v1/documents", response_model=None)
async def upload_route(request: Request, who: Annotated[Caller, Depends(caller)]) -> Any:
    from pgrag.ingest.uploads import Upload, UploadResult, ingest_uploads, upload_source

    svc = service(request)
    who.require("write")
    with upload_directory() as tmp:
        got = await receive_uploads(request, svc.config.max_upload_bytes, Path(tmp))
        collection = got.one("collection") or svc.settings.collection
        check_name(collection)
        allow = readers(who, got.fields.get("allow", []))
        sources = got.fields.get("source")
        if sources is not None and len(sources) != len(got.files):
            raise InputError(
                f"{len(sources)} source fields for {len(got.files)} files: give one source per"
                " file, in the order of the files, or none (each is then upload/<file name>)"
            )
        results: list[UploadResult | None] = []
        uploads: list[Upload] = []
        for i, (name, saved) in enumerate(got.files):
            try:
                if isinstance(saved, InputError):
                    raise saved
                source = upload_source(name, sources[i] if sources is not None else None)
            except InputError as err:
                results.append(UploadResult(name, "", "failed", reason=str(err)))
                continue
            results.append(None)
            uploads.append(Upload(saved, name, source))

        def work(job: Work) -> list[UploadResult]:
            with svc.database(who, job) as db:
                # (A client that goes away stops the upload at its next file or batch.)
                return ingest_uploads(
                    db,
                    uploads,
                    collection=collection,
                    allow=allow,
                    write_for=who.principals,
                    check=job.check,
                )

        done = iter(await run(request, work) if uploads else [])
    files = [r if r is not None else next(done) for r in results]
    out: dict[str, Any] = {
        "collection": collection,
        "allow": allow,  # (None: new documents public, others keep theirs, as pgrag ingest)
        "files": [f.to_dict() for f in files],
        "chunks_written": sum(f.chunks for f in files if f.status in ("added", "updated")),
        "chunks_embedded": sum(f.embedded for f in files),
    }
    for status in ("added", "updated", "unchanged", "access", "duplicate", "failed"):
        out[status] = sum(1 for f in files if f.status == status)
    if out["failed"] < len(files):
        return JSONResponse(out)
    refused = all(f.refused for f in files)
    reasons = "; ".join(f"{f.filename}: {f.reason}" for f in files)
    message = f"no file was ingested: {reasons}"
    kind = "permission_error" if refused else "invalid_request_error"
    out.update(error_body(" ".join(message.split()), kind, "no_file_ingested"))
    return JSONResponse(out, status_code=403 if refused else 400)


@router.get("/v1/documents")
async def list_route(
    request: Request,
    who: Annotated[Caller, Depends(caller)],
    collection: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: str | None = None,
) -> dict[str, Any]:
    from pgrag.ingest.listing import list_documents

    svc = service(request)
    who.require("read")
    name = collection or svc.settings.collection

    def work(job: Work) -> dict[str, Any]:
        with svc.database(who, job) as db:
            page, next_after = list_documents(db, name, limit=limit, after=after)
        return {"collection": name, "documents": page, "next_after": next_after}

    return await run(request, work)


@router.delete("/v1/documents")
async def delete_route(
    request: Request,
    who: Annotated[Caller, Depends(caller)],
    source: Annotated[list[str], Query()],
    collection: str | None = None,
) -> Any:
    from pgrag.ingest.removal import remove

    svc = service(request)
    who.require("write")
    name = collection or svc.settings.collection

    def work(job: Work) -> dict[str, Any]:
        with svc.database(who, job) as db:
            try:
                report = remove(
                    db, source, collection=name, sources_only=True, write_for=who.principals
                )
            except DatabaseError as err:
                if getattr(err.__cause__, "sqlstate", None) == REFUSED:
                    raise Forbidden(f"refused by the database: {err}") from err
                raise
        out: dict[str, Any] = report.to_dict()
        return out

    out = await run(request, work)
    if not out["removed"]:
        missing = ", ".join(repr(s) for s in out["unmatched"])
        return JSONResponse(
            error_body(
                f"no document {missing} in collection {name!r} that this credential may see;"
                " GET /v1/documents lists them",
                "not_found_error",
            ),
            status_code=404,
        )
    return out
