"""``pgrag ingest`` and ``pgrag rm``: documents in, documents out."""

from __future__ import annotations

import signal
import sys

import click

from pgrag.cli.options import collection_option, database, emit_json, json_option
from pgrag.cli.output import echo
from pgrag.cli.progress import ChunkProgress
from pgrag.ingest.formats.jsonl import JsonlFields
from pgrag.ingest.pipeline import ingest as run_ingest
from pgrag.ingest.removal import remove


@click.command()
# readable=False: an unreadable path is reported by the ingest itself, on one line, and
# does not stop the other paths.
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False, path_type=str))
@collection_option
@click.option(
    "--allow",
    multiple=True,
    metavar="PRINCIPAL",
    help="Who may read these documents (repeatable), e.g. --allow alice --allow group:billing;"
    " public is everyone. Default: public for new documents, unchanged for stored ones.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Write nothing; say what would be added, updated, deleted and left alone.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Also remove the documents of files that are gone from the directories given.",
)
@click.option(
    "--jsonl-text",
    default="text",
    show_default=True,
    metavar="FIELD",
    help="JSON Lines and Parquet: the field holding a record's text.",
)
@click.option(
    "--jsonl-title",
    default="title",
    show_default=True,
    metavar="FIELD",
    help="JSON Lines and Parquet: the field holding a record's title.",
)
@click.option(
    "--jsonl-id",
    default=None,
    metavar="FIELD",
    help="JSON Lines and Parquet: the field identifying a record (default: _id or id, else"
    " the line or row).",
)
@click.option(
    "--jsonl-metadata",
    default=None,
    metavar="FIELD,...",
    help="JSON Lines and Parquet: the fields kept as metadata (default: all the others).",
)
@click.option(
    "--jsonl-embedding",
    default="embedding",
    show_default=True,
    metavar="FIELD",
    help="JSON Lines and Parquet: the field holding a record's vector, made already with the"
    " collection's"
    " model: the record is then one chunk, stored with it, not embedded"
    " (docs/ingest.md#bring-your-own-vectors). '' for none.",
)
@click.option(
    "--contextual",
    is_flag=True,
    help="Have the configured language model (PGRAG_LLM_BASE_URL or PGRAG_LLM_GGUF) write a line"
    " situating each new chunk in its document, embedded and keyword-indexed with the chunk"
    " (docs/ingest.md#contextual-retrieval). Slow: one model call per chunk.",
)
@click.option(
    "--context-window",
    type=click.IntRange(min=1),
    default=None,
    metavar="TOKENS",
    help="With --contextual: how much of each document the model is shown, from its"
    " beginning (default 2000; a local model's window also bounds it).",
)
@click.option(
    "--chunking",
    type=click.Choice(["fixed", "semantic"]),
    default=None,
    metavar="fixed|semantic",
    help="How documents are cut into chunks: fixed (whole sentences packed up to the chunk"
    " size) or semantic (cut where adjacent sentences stop resembling each other; embeds every"
    " sentence, so slower). Recorded for a new collection; default: the collection's, else"
    " fixed (docs/ingest.md#semantic-chunking).",
)
@click.option(
    "--rechunk",
    is_flag=True,
    help="Chunk every document read again, unchanged ones too, and record --chunking as the"
    " collection's: how a collection switches chunking.",
)
@json_option
@click.pass_context
def ingest(
    ctx: click.Context,
    paths: tuple[str, ...],
    collection: str,
    allow: tuple[str, ...],
    dry_run: bool,
    prune: bool,
    jsonl_text: str,
    jsonl_title: str,
    jsonl_id: str | None,
    jsonl_metadata: str | None,
    jsonl_embedding: str,
    contextual: bool,
    context_window: int | None,
    chunking: str | None,
    rechunk: bool,
    as_json: bool,
) -> None:
    """Chunk, embed and index files and directories: Markdown, text, HTML, PDF, JSON Lines,
    CSV, mail, Word, Excel, PowerPoint, EPUB, Parquet.

    The content decides the format (a directory walk picks .md .markdown .txt .text .html .htm
    .xhtml .pdf .jsonl .ndjson .csv .tsv .docx .xlsx .pptx .epub .eml .mbox .parquet, and Office's
    .docm .dotx .xlsm .pptm .ppsx and other variants). A CSV is
    one table, its first row the header, which every chunk of it repeats; Word, Excel and
    PowerPoint files need pip install 'pgrag[office]'; scanned PDF pages, and images named here,
    are read by OCR with pip install 'pgrag[ocr]' and Tesseract. Each attachment of a message
    (.eml, .mbox) that pgrag reads is a document of its own. Unchanged files are skipped (with
    --allow, their access is updated without re-embedding); in a changed one only the chunks
    whose text changed are embedded again. A file that cannot be read is reported on one line
    and the others are still ingested; the exit status is then 1. With --contextual each new
    chunk also gets a context line from the configured language model. A JSON Lines record or
    Parquet row (pip install 'pgrag[parquet]') with an embedding field brings its own vector: it
    is stored as one chunk with it, and not embedded.
    """
    # `kill`, systemd and Kubernetes stop with SIGTERM: unwind normally, so an interrupted
    # bulk load still rebuilds the index it dropped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    db = database(ctx)
    bar: ChunkProgress | None = None
    fields = JsonlFields(
        text=jsonl_text,
        title=jsonl_title or None,
        id=jsonl_id,
        metadata=None
        if jsonl_metadata is None
        else tuple(f.strip() for f in jsonl_metadata.split(",") if f.strip()),
        embedding=jsonl_embedding or None,
    )

    def on_error(path: str, reason: str) -> None:
        echo(f"error: {path}: {reason}", err=True, layout=False)

    def on_warning(path: str, reason: str) -> None:
        echo(f"warning: {path}: {reason}", err=True, layout=False)

    def on_plan(total: int) -> None:
        nonlocal bar
        if total and not contextual:
            bar = ChunkProgress(total)

    def on_context(done: int, total: int) -> None:
        # (With --contextual the model's calls take the time: the bar counts them.)
        nonlocal bar
        if bar is None and total:
            bar = ChunkProgress(total, label="context lines")
        elif bar is not None and done:
            bar.advance(1)

    def on_batch(files_done: int, files_total: int) -> None:
        if bar is not None:
            bar.files_done(files_done, files_total)

    def progress(n: int) -> None:
        if bar is not None and not contextual:
            bar.advance(n)

    try:
        report = run_ingest(
            db,
            list(paths),
            collection=collection,
            on_error=on_error,
            on_warning=on_warning,
            on_plan=on_plan,
            progress=progress,
            on_batch=on_batch,
            allow=list(allow) if allow else None,
            jsonl=fields,
            dry_run=dry_run,
            prune=prune,
            on_wait=lambda line: echo(line, err=True, layout=False),
            contextual=contextual,
            context_window=context_window,
            on_context=on_context,
            chunking=chunking,
            rechunk=rechunk,
        )
    finally:
        if bar is not None:
            bar.close()
    if dry_run and not as_json:
        for f in report.files:
            if f.status in ("added", "updated") and f.reason:
                echo(f"{f.status:9} {f.path} ({f.reason})", layout=False)
            elif f.status in ("added", "updated"):
                echo(f"{f.status:9} {f.path} ({f.chunks} chunks, {f.embed} to embed)", layout=False)
            elif f.status == "deleted":
                echo(f"{f.status:9} {f.path} ({f.chunks} chunks)", layout=False)
            elif f.status == "duplicate":
                echo(f"{f.status:9} {f.path} ({f.reason}: stored once)", layout=False)
            elif f.status != "failed":
                echo(f"{f.status:9} {f.path}", layout=False)
    if as_json:
        emit_json(report.to_dict())
    echo(report.summary(), err=True)
    if report.failed:
        sys.exit(1)


@click.command("rm")
@click.argument("targets", nargs=-1, required=True)
@collection_option
@click.option("--dry-run", is_flag=True, help="Remove nothing; list what would be removed.")
@json_option
@click.pass_context
def rm(
    ctx: click.Context, targets: tuple[str, ...], collection: str, dry_run: bool, as_json: bool
) -> None:
    """Remove documents: by file path, by directory (every document under it), or by source.

    Chunks, vectors and keyword postings go with them, in one transaction. A target that
    names no document is an error (exit status 1); the others are still removed.
    """
    report = remove(database(ctx), list(targets), collection=collection, dry_run=dry_run)
    if as_json:
        emit_json(report.to_dict())
    else:
        for source, chunks in report.documents:
            echo(
                f"{'would remove' if dry_run else 'removed'} {source} ({chunks} chunks)",
                layout=False,
            )
    for target in report.unmatched:
        echo(
            f"error: {target}: no document in collection {collection!r} has this"
            " path or source; `pgrag search` or pgrag.documents_v1 shows sources",
            err=True,
        )
    echo(report.summary(), err=True)
    if report.unmatched:
        sys.exit(1)
