"""Named queries: every statement the Python runs lives in a ``.sql`` file beside the module
that runs it (``pgrag/ingest/writer.py`` runs the queries in ``pgrag/ingest/writer.sql``), one
block per statement::

    -- name: document_by_source
    -- The stored document of a source in a collection, if any.
    SELECT id, content_hash, principals FROM pgrag.documents
     WHERE collection_id = %(collection_id)s AND source = %(source)s;

and is called by name::

    Q = queries.load(__name__)
    conn.execute(Q.document_by_source, {"collection_id": 1, "source": "a.md"})

Parameters are always named (``%(name)s``); a query run without parameters is sent as written,
so a literal ``%`` is written once there and doubled (``%%``) in a query that takes parameters.
Each statement is a ``LiteralString``, so a type checker that knows PEP 675 rejects SQL built
with f-strings where psycopg expects a query; identifiers that must vary are composed with
``psycopg.sql`` around a named query, never spliced in as text. ``tests/unit/test_queries.py``
checks that every name a module uses is defined in its file, that every query defined is used,
and that no ``execute`` in the package is given SQL as a string literal."""

from __future__ import annotations

import re
import sys
from functools import cache
from importlib import resources
from typing import LiteralString, cast

_NAME = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$")


class Queries:
    """The named queries of one ``.sql`` file, as attributes."""

    def __init__(self, source: str, text: str) -> None:
        self._source = source
        self._queries: dict[str, LiteralString] = {}
        self._docs: dict[str, str] = {}
        for name, doc, sql in parse(text, source):
            # (mypy reads LiteralString as str; pyright and PEP 675 checkers do not)
            self._queries[name] = cast(LiteralString, sql)  # type: ignore[redundant-cast]
            self._docs[name] = doc

    def __getattr__(self, name: str) -> LiteralString:
        try:
            return self.__dict__["_queries"][name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(f"{self._source} has no query named {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._queries

    def names(self) -> list[str]:
        return list(self._queries)

    def doc(self, name: str) -> str:
        return self._docs[name]


def parse(text: str, source: str = "<sql>") -> list[tuple[str, str, str]]:
    """The (name, comment, statement) blocks of a named-query file."""
    blocks: list[tuple[str, list[str]]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        match = _NAME.match(line)
        if match:
            blocks.append((match.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
        elif line.strip() and not line.startswith("--"):
            raise ValueError(f"{source}:{lineno}: a statement before the first '-- name:' line")
    out: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for name, lines in blocks:
        if name in seen:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        seen.add(name)
        doc: list[str] = []
        while lines and lines[0].startswith("--"):
            doc.append(lines.pop(0)[2:].strip())
        sql = "\n".join(lines).strip()
        sql = sql[:-1].rstrip() if sql.endswith(";") else sql
        if not sql:
            raise ValueError(f"{source}: query {name!r} has no statement")
        if ";" in _without_literals(sql):
            raise ValueError(f"{source}: query {name!r} holds more than one statement")
        out.append((name, " ".join(doc), sql))
    return out


def _without_literals(sql: str) -> str:
    # Semicolons inside dollar-quoted bodies, quoted literals, identifiers and comments do not
    # end a statement.
    sql = re.sub(r"\$(\w*)\$.*?\$\1\$", "''", sql, flags=re.DOTALL)
    sql = re.sub(r"'(?:[^']|'')*'", "''", sql)
    sql = re.sub(r'"(?:[^"]|"")*"', '""', sql)
    return re.sub(r"--[^\n]*", "", sql)


@cache
def load(module: str) -> Queries:
    """The queries of ``module``'s ``.sql`` file (``pgrag.ingest.writer`` →
    ``pgrag/ingest/writer.sql``)."""
    if module == "__main__":  # run with python -m: the module's own name
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else module
    package, _, leaf = module.rpartition(".")
    if not package or module.endswith(".__init__"):
        raise ValueError(f"named queries belong to a module inside a package, not {module!r}")
    mod = sys.modules.get(module)
    if mod is not None and getattr(mod, "__path__", None) is not None:
        package, leaf = module, "__init__"  # a package's own queries: pkg/__init__.sql
    path = resources.files(package) / f"{leaf}.sql"
    return Queries(f"{package.replace('.', '/')}/{leaf}.sql", path.read_text(encoding="utf-8"))
