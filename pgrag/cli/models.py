"""``pgrag models``: embedding models as data; ``pgrag worker``: the embedding queue."""

from __future__ import annotations

import signal
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from pgrag.cli.options import (
    checked_collection,
    collection_option,
    database,
    emit_json,
    json_option,
    plural,
    state,
)
from pgrag.cli.output import echo
from pgrag.cli.progress import Counter
from pgrag.cli.tables import print_table
from pgrag.embeddings.local import SentenceTransformerEmbedder
from pgrag.embeddings.models import (
    add_model,
    check_model_name,
    collection_models,
    get_model,
    list_models,
)
from pgrag.embeddings.reembed import activate, reembed, retire
from pgrag.embeddings.remote import RemoteEmbedder
from pgrag.embeddings.worker import run
from pgrag.errors import command_line


@click.group()
def models() -> None:
    """Embedding models: list, add, reembed, activate, retire (zero-downtime switching)."""


@models.command("list")
@click.option(
    "--collection",
    "-c",
    default=None,
    help="Only this collection's models.",
    callback=checked_collection,
)
@json_option
@click.pass_context
def models_list(ctx: click.Context, collection: str | None, as_json: bool) -> None:
    """Registered models, with the collections that use them and their status there."""
    db = database(ctx)
    if collection is not None:
        rows = [(m, [f"{collection} ({m.status})"]) for m in collection_models(db, collection)]
    else:
        rows = list_models(db)
    if as_json:
        emit_json([{**asdict(m), "collections": used} for m, used in rows])
        return
    if not rows:
        echo("no models yet; `pgrag ingest` or `pgrag models add` registers one", err=True)
    print_table(
        [
            {
                "name": m.name,
                "provider": m.provider,
                "dimension": m.dimension,
                "distance": m.distance,
                "index": m.index_type,
                "from": m.settings.get("url")
                or m.settings.get("path")
                or m.settings.get("package"),
                "collections": used,
            }
            for m, used in rows
        ]
    )


@models.command("add")
@click.argument("name")
@click.option(
    "--provider",
    type=click.Choice(["sentence-transformers", "openai"]),
    default="sentence-transformers",
    show_default=True,
    help="A local sentence-transformers directory, or an OpenAI-compatible /v1/embeddings server.",
)
@click.option("--path", type=click.Path(exists=True, file_okay=False), help="Model directory.")
@click.option("--url", help="Server base URL (openai), e.g. http://localhost:8080/v1.")
@click.option("--remote-model", help="The model name the server expects (default: NAME).")
@click.option("--dimension", type=click.IntRange(1, 16000), help="Skip probing the server.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="The model's input limit (openai).")
@click.option("--tokenizer", type=click.Path(exists=True, dir_okay=False), help="tokenizer.json.")
@click.option("--batch-size", type=click.IntRange(1, 2048), help="Texts per request (openai).")
@click.option("--concurrency", type=click.IntRange(1, 64), help="Requests in flight (openai).")
@click.option(
    "--api-key-env",
    default="PGRAG_EMBEDDING_API_KEY",
    show_default=True,
    help="Environment variable holding the API key (the key itself is never stored).",
)
@click.option(
    "--index-type",
    type=click.Choice(["vector", "halfvec"]),
    default="vector",
    show_default=True,
    help="halfvec: the HNSW index holds 2-byte floats (half the memory; up to 4,000 dims).",
)
@click.pass_context
def models_add(ctx: click.Context, /, name: str, **opts: Any) -> None:
    """Register embedding model NAME (then `pgrag models reembed NAME -c COLLECTION`)."""
    check_model_name(name)  # before the server is probed
    embedder: Any
    if opts["provider"] == "openai":
        if not opts["url"]:
            raise click.UsageError("--provider openai needs --url")
        extra = {
            k: opts[k]
            for k in ("dimension", "max_tokens", "tokenizer", "batch_size", "concurrency")
            if opts[k] is not None
        }
        embedder = RemoteEmbedder.from_settings(
            {
                "url": opts["url"],
                "model": opts["remote_model"] or name,
                "name": name,
                "api_key_env": opts["api_key_env"],
                **extra,
            },
            state(ctx).settings,
        )
        embedder.dimension  # noqa: B018  (probes the server now, not at the first query)
    else:
        if not opts["path"]:
            raise click.UsageError("--provider sentence-transformers needs --path DIRECTORY")
        embedder = SentenceTransformerEmbedder(Path(opts["path"]).resolve(), name=name)
    model = add_model(database(ctx), embedder, index_type=opts["index_type"])
    echo(f"registered {model.name}: {model.dimension} dimensions, {model.distance}", layout=False)


@models.command("reembed")
@click.argument("name")
@collection_option
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(1, 10000))
@click.pass_context
def models_reembed(ctx: click.Context, name: str, collection: str, batch_size: int) -> None:
    """Backfill model NAME's vectors for a collection while searches use the active model.

    Resumable: interrupted, run it again and it continues where it stopped."""
    db = database(ctx)
    model = get_model(db, name)
    counter = Counter()  # rewritten in place on a terminal, a line per batch in a log
    try:
        report = reembed(
            db,
            model,
            collection,
            batch_size=batch_size,
            on_batch=lambda r: counter.show(f"{r.embedded:,}/{r.missing_before:,} chunks"),
        )
    finally:
        counter.close()
    echo(
        f"{name}: {report.embedded} chunks embedded ({report.reused} copied from identical"
        f" text) for {collection};"
        f" {command_line('pgrag', 'models', 'activate', name, '-c', collection)} switches"
    )


@models.command("activate")
@click.argument("name")
@collection_option
@click.pass_context
def models_activate(ctx: click.Context, name: str, collection: str) -> None:
    """Make NAME the collection's active model, atomically (the old one stays on standby)."""
    db = database(ctx)
    report = activate(db, get_model(db, name), collection)
    caught = f" (after embedding {report.embedded} new chunks)" if report.embedded else ""
    echo(f"{collection} now searches with {name}{caught}", layout=False)


@models.command("retire")
@click.argument("name")
@collection_option
@click.pass_context
def models_retire(ctx: click.Context, name: str, collection: str) -> None:
    """Retire NAME in a collection and delete its vectors there (in batches; resumable)."""
    db = database(ctx)
    deleted = retire(db, get_model(db, name), collection)
    echo(f"retired {name} in {collection}: {plural(deleted, 'vector')} deleted", layout=False)


@click.command()
@click.option("--once", is_flag=True, help="Exit when nothing is left to do.")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(1, 10000))
@click.option("--poll", default=1.0, show_default=True, type=click.FloatRange(min=0.05))
@click.option(
    "--lease",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds a claimed item is this worker's; a killed worker's items wait this long.",
)
@click.pass_context
def worker(ctx: click.Context, once: bool, batch_size: int, poll: float, lease: float) -> None:
    """Embed what the queue holds (documents written with SQL; new chunks for other models).

    Run as many as you like: they share the queue (FOR UPDATE SKIP LOCKED)."""
    stop = {"now": False}

    def _stop(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    from pgrag.db.waits import reporting_waits

    db = database(ctx)

    def say(line: str) -> None:
        echo(line, err=True, layout=False)

    with reporting_waits(db, say):
        total = run(
            db,
            on_wait=say,
            batch_size=batch_size,
            once=once,
            poll=poll,
            lease=lease,
            should_stop=lambda: stop["now"],
            on_batch=lambda r: echo(
                f"embedded {r.embedded}"
                + (f", failed {r.failed}: {r.errors[-1]}" if r.failed else ""),
                err=True,
                layout=False,  # one line per batch, whatever the error quotes
            ),
        )
    echo(f"worker: {total.embedded} embedded, {total.failed} failed")
