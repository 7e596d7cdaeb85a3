"""Named queries (pgrag/db/queries.py), checked by reading the package's source.

For every module of pgrag with a sibling ``.sql`` file: the file parses; every ``Q.<name>``
the module uses is defined there; every query defined there is used, by the module itself or
by another one as ``module.Q.<name>``. And nowhere in pgrag does an ``execute``,
``executemany``, ``copy`` or ``stream`` call get SQL text as its query: no string literal,
f-string, concatenation or ``%``/``.format`` of a literal (directly, or through a variable
assigned one) -- only named queries and ``psycopg.sql`` compositions.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

import pgrag
from pgrag.db import queries

PACKAGE = Path(pgrag.__file__).resolve().parent
ROOT = PACKAGE.parent
QUERY_METHODS = frozenset({"names", "doc"})  # Queries' own methods, not query names
EXECUTING = frozenset({"execute", "executemany", "copy", "stream"})

# Modules that pick queries by a computed name (``getattr(Q, ...)``): the names they can ask
# for, computed from the module's own tables, so that they are checked like ``Q.name`` is.
DYNAMIC: dict[str, Callable[[ModuleType], list[str]]] = {
    "pgrag.db.roundtrip": lambda m: (
        [item.count for item in m.ITEMS]
        + [f"save_{item.saved_as}" for item in m.ITEMS if item.saved_as]
        + [f"restore_{kind}" for kind in m.RESTORE]
    ),
}

# Known violations in pgrag/ (not this suite's to fix): file -> reason. Their tests xfail
# strictly, so fixing one makes its test pass and this entry has to go.
KNOWN_LITERAL_SQL: dict[str, str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@dataclass
class Uses:
    """The named queries one module uses: its own (``Q.x``) and other modules' (``m.Q.x``)."""

    own: dict[str, list[int]] = field(default_factory=dict)  # name -> lines
    other: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # module -> name -> ..
    dynamic: list[int] = field(default_factory=list)  # lines of getattr(Q, <not a literal>)
    loads_own: bool = False  # Q = queries.load(__name__)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _imports(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Local name -> the module (or dotted name) it stands for."""
    names: dict[str, str] = {}
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def uses_of(path: Path, module: str | None = None) -> Uses:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    module = module or module_name(path)
    imports = _imports(tree, module, path.name == "__init__.py")
    uses = Uses()

    def own(name: str, line: int) -> None:
        uses.own.setdefault(name, []).append(line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "Q" for t in node.targets
        ):
            call = node.value
            uses.loads_own = (
                isinstance(call, ast.Call)
                and _dotted(call.func) in ("queries.load", "load")
                and len(call.args) == 1
                and isinstance(call.args[0], ast.Name)
                and call.args[0].id == "__name__"
            )
        if isinstance(node, ast.Attribute):
            if node.attr in QUERY_METHODS or node.attr.startswith("_"):
                continue
            if isinstance(node.value, ast.Name) and node.value.id == "Q":
                own(node.attr, node.lineno)
            elif isinstance(node.value, ast.Attribute) and node.value.attr == "Q":
                dotted = _dotted(node.value.value)
                if dotted is None:
                    continue
                head, _, rest = dotted.partition(".")
                target = imports.get(head, head) + (f".{rest}" if rest else "")
                uses.other.setdefault(target, {}).setdefault(node.attr, []).append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "Q"
        ):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                own(name.value, node.lineno)
            else:
                uses.dynamic.append(node.lineno)
        elif isinstance(node, ast.Compare):
            # "name" in Q
            if (
                isinstance(node.left, ast.Constant)
                and isinstance(node.left.value, str)
                and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
                and any(isinstance(c, ast.Name) and c.id == "Q" for c in node.comparators)
            ):
                own(node.left.value, node.lineno)
    return uses


ALL_USES = {module_name(p): uses_of(p) for p in source_files()}
WITH_SQL = [p for p in source_files() if p.with_suffix(".sql").exists()]


def defined(path: Path) -> list[str]:
    sql = path.with_suffix(".sql")
    return [name for name, _, _ in queries.parse(sql.read_text(encoding="utf-8"), rel(sql))]


def test_the_modules_with_named_queries_are_found() -> None:
    # A check that finds nothing passes for the wrong reason.
    assert len(WITH_SQL) >= 20
    assert PACKAGE / "ingest" / "writer.py" in WITH_SQL


@pytest.mark.parametrize("path", WITH_SQL, ids=rel)
def test_queries_used_are_defined_and_queries_defined_are_used(path: Path) -> None:
    import importlib

    module = module_name(path)
    names = defined(path)
    assert names, f"{rel(path.with_suffix('.sql'))} defines no query"
    uses = ALL_USES[module]
    assert uses.loads_own, f"{rel(path)} has a .sql file but no Q = queries.load(__name__)"
    used = dict(uses.own)
    if uses.dynamic:
        assert module in DYNAMIC, (
            f"{rel(path)}:{uses.dynamic[0]} picks a query by a computed name; list the names it"
            " can ask for in DYNAMIC"
        )
    if module in DYNAMIC:
        for name in DYNAMIC[module](importlib.import_module(module)):
            used.setdefault(name, []).extend(uses.dynamic)

    undefined = {n: lines for n, lines in used.items() if n not in names}
    assert not undefined, "\n".join(
        f"{rel(path)}:{lines[0]} uses Q.{n}, which {rel(path.with_suffix('.sql'))} does not define"
        for n, lines in undefined.items()
    )
    elsewhere = {
        name
        for other in ALL_USES.values()
        for target, by_name in other.other.items()
        if target == module
        for name in by_name
    }
    unused = [n for n in names if n not in used and n not in elsewhere]
    assert not unused, f"{rel(path.with_suffix('.sql'))} defines queries nothing runs: {unused}"


def test_other_modules_queries_exist() -> None:
    by_module = {module_name(p): set(defined(p)) for p in WITH_SQL}
    problems = []
    for user, uses in ALL_USES.items():
        for target, by_name in uses.other.items():
            for name, lines in by_name.items():
                if target not in by_module:
                    problems.append(f"{user}:{lines[0]} uses {target}.Q.{name}: no such .sql")
                elif name not in by_module[target]:
                    problems.append(f"{user}:{lines[0]} uses {target}.Q.{name}: not defined")
    assert not problems, "\n".join(problems)


def test_a_module_that_uses_q_has_its_own_queries() -> None:
    strays = [
        f"{module}:{lines[0]} uses Q.{name}"
        for module, uses in ALL_USES.items()
        if uses.own and not (PACKAGE.parent / module.replace(".", "/")).with_suffix(".sql").exists()
        for name, lines in uses.own.items()
    ]
    assert not strays, "\n".join(strays)


def test_the_usage_check_sees_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from pgrag.db import queries, schema\n"
        "from pgrag.db import fingerprint as fp\n"
        "from . import writer\n"
        "import pgrag.db.drift\n"
        "Q = queries.load(__name__)\n"
        "def f(conn, kind):\n"
        "    conn.execute(Q.plain)\n"
        "    conn.execute(getattr(Q, 'by_getattr'))\n"
        "    conn.execute(getattr(Q, f'save_{kind}'))\n"
        "    if 'tested' in Q:\n"
        "        Q.doc('plain'), Q.names()\n"
        "    conn.execute(schema.Q.grant_roles)\n"
        "    conn.execute(fp.Q.columns)\n"
        "    conn.execute(writer.Q.insert_chunks)\n"
        "    conn.execute(pgrag.db.drift.Q.functions)\n"
    )
    uses = uses_of(sample, "pgrag.ingest.sample")
    assert uses.loads_own
    assert sorted(uses.own) == ["by_getattr", "plain", "tested"]
    assert uses.dynamic == [9]
    assert {k: sorted(v) for k, v in uses.other.items()} == {
        "pgrag.db.schema": ["grant_roles"],
        "pgrag.db.fingerprint": ["columns"],
        "pgrag.ingest.writer": ["insert_chunks"],
        "pgrag.db.drift": ["functions"],
    }


# --- no SQL text reaches execute() -------------------------------------------------------------


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _scopes(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> Iterator[ast.AST]:
    """The enclosing function scopes of ``node``, innermost first, then the module."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
            yield node


def _assigned(scope: ast.AST, name: str) -> Iterator[ast.expr]:
    """Every value ``name`` is given in ``scope`` (tuple assignments are paired up)."""
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == name:
                    yield node.value
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for t, v in zip(target.elts, node.value.elts, strict=False):
                        if isinstance(t, ast.Name) and t.id == name:
                            yield v
        elif isinstance(node, ast.NamedExpr) and node.target.id == name:
            yield node.value


def _is_text(node: ast.expr, scopes: list[ast.AST], depth: int = 0) -> bool:
    """Whether ``node`` is SQL written as text in the Python."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str | bytes)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _is_text(node.left, scopes, depth) or _is_text(node.right, scopes, depth)
    if isinstance(node, ast.IfExp):
        return _is_text(node.body, scopes, depth) or _is_text(node.orelse, scopes, depth)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        # "...".format(...), "".join(...), "x" "y".replace(...)
        return node.func.attr in ("format", "join", "replace") and _is_text(
            node.func.value, scopes, depth
        )
    if isinstance(node, ast.Name) and depth < 3:
        return any(
            _is_text(value, scopes, depth + 1)
            for scope in scopes
            for value in _assigned(scope, node.id)
        )
    return False


def literal_sql_calls(path: Path, label: str | None = None) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    label = label or rel(path)
    parents = _parents(tree)
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in EXECUTING
        ):
            continue
        query = node.args[0] if node.args else None
        for keyword in node.keywords:
            if keyword.arg == "query":
                query = keyword.value
        if query is not None and _is_text(query, list(_scopes(node, parents))):
            found.append(f"{label}:{node.lineno}: .{node.func.attr}({ast.unparse(query)})")
    return found


def _literal_sql_params() -> list[object]:
    params: list[object] = []
    for path in source_files():
        reason = KNOWN_LITERAL_SQL.get(rel(path))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(path, id=rel(path), marks=marks))
    return params


@pytest.mark.parametrize("path", _literal_sql_params())
def test_no_sql_text_reaches_execute(path: Path) -> None:
    found = literal_sql_calls(path)
    assert not found, "SQL written as text (use a named query):\n" + "\n".join(found)


def test_the_literal_check_sees_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from psycopg import sql\n"
        "Q = queries.load(__name__)\n"
        "TABLE = 'pgrag.chunks'\n"
        "def f(conn, cur, name, x):\n"
        "    conn.execute('SELECT 1')\n"  # 5: a literal
        "    conn.execute(f'SELECT {x}')\n"  # 6: an f-string
        "    conn.execute('SELECT ' + x)\n"  # 7: concatenation
        "    cur.executemany('SELECT %s' % x, [])\n"  # 8: % formatting
        "    conn.execute('SELECT {}'.format(x))\n"  # 9: .format
        "    query = 'DELETE FROM ' + TABLE\n"
        "    conn.execute(query)\n"  # 11: through a variable
        "    cur.copy(query=f'COPY {name} FROM STDIN')\n"  # 12: as a keyword
        "    conn.execute(Q.fine, {'x': x})\n"  # named queries and compositions pass
        "    conn.execute(sql.SQL(Q.drop).format(sql.Identifier(name)))\n"
        "    conn.execute(sql.SQL('SELECT {}').format(sql.Literal(x)))\n"
        "    rows.copy()\n"
        "    conn.execute(name)\n"
    )
    found = literal_sql_calls(sample, "sample.py")
    assert [int(f.split(":")[1]) for f in found] == [5, 6, 7, 8, 9, 11, 12], found
