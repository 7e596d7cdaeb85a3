"""The README documents every command the CLI has, and the SQL and configuration entry points;
docs/cli.md is every command's --help as the commands print it now; the README, docs/ and the
changelog name only what exists: current SQL functions, modules, files and headings."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from pgrag.cli import cli

README = Path(__file__).resolve().parents[2] / "README.md"
ROOT = README.parent
CLI_REFERENCE = ROOT / "docs" / "cli.md"
CHANGELOG = ROOT / "CHANGELOG.md"
OPERATIONS = ROOT / "docs" / "operations.md"
# What users read, written by hand (docs/cli.md is generated, and checked above).
DOCS = sorted(
    [README, CHANGELOG, ROOT / "docker" / "README.md", ROOT / "examples" / "questions.md"]
    + [p for p in (ROOT / "docs").glob("*.md") if p != CLI_REFERENCE]
)
# The changelog names old functions and modules on purpose; so may a text about release 0.1's
# measurements, when it says so within this many characters before the name.
HISTORY_WINDOW = 120
# The documents that describe this release only (the changelog describes the others too).
CURRENT = [p for p in DOCS if p != CHANGELOG]


def _doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def command_lines() -> list[str]:
    """``pgrag <cmd>`` for every command and ``pgrag <group> <sub>`` for every subcommand."""
    names = []
    for name, command in sorted(cli.commands.items()):
        names.append(f"pgrag {name}")
        if isinstance(command, click.Group):
            names.extend(f"pgrag {name} {sub}" for sub in sorted(command.commands))
    return names


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_the_cli_has_the_expected_shape() -> None:
    # Guards the walk below: if the group stops exposing its commands, the README test
    # would pass vacuously.
    lines = command_lines()
    assert {"pgrag ask", "pgrag search", "pgrag ingest", "pgrag db upgrade"} <= set(lines)


def test_readme_mentions_every_command(readme: str) -> None:
    # "pgrag db" counts when written as "pgrag db upgrade"; "pgrag search" does not count
    # inside "pgrag searches" or "pgrag search_v1".
    def mentioned(line: str) -> bool:
        words = r" +".join(map(re.escape, line.split()))
        return re.search(rf"(?<![\w.-]){words}(?![\w-])", readme) is not None

    missing = [line for line in command_lines() if not mentioned(line)]
    assert not missing, f"README.md does not mention: {', '.join(missing)}"


def test_cli_reference_is_current() -> None:
    from pgrag.cli.reference import COMMAND, render

    written = CLI_REFERENCE.read_text(encoding="utf-8") if CLI_REFERENCE.exists() else ""
    assert written == render(), f"docs/cli.md is out of date; regenerate it: {COMMAND}"


def test_cli_reference_has_every_command() -> None:
    # Guards the walk the generator does: a command it skipped would pass the test above.
    text = CLI_REFERENCE.read_text(encoding="utf-8")
    headings = re.findall(r"^## (pgrag.*)$", text, flags=re.MULTILINE)
    assert set(headings) == {"pgrag", *command_lines()}
    for line in command_lines():
        assert f"Usage: {line} [OPTIONS]" in text, line


def test_cli_reference_does_not_depend_on_the_terminal() -> None:
    from pgrag.cli.reference import render

    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "pgrag.cli.reference"],
        cwd=README.parent,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == render()


def test_readme_links_the_cli_reference(readme: str) -> None:
    terminal = readme.split("### 4. The terminal", 1)[1].split("\n## ", 1)[0]
    assert "(docs/cli.md)" in terminal


def test_readme_mentions_sql_entry_point_and_dsn(readme: str) -> None:
    assert "pgrag.search_v5(" in readme
    assert "PGRAG_DSN" in readme


# -- configuration ------------------------------------------------------------------------------


def test_readme_configuration_table_is_config_variables(readme: str) -> None:
    from pgrag.config import VARIABLES

    section = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \| (.*) \|$", section, flags=re.MULTILINE)
    expected = [(variable, meaning) for variable, _, meaning in VARIABLES]
    table = "\n".join(f"| `{v}` | {m} |" for v, m in expected)
    assert rows == expected, (
        f"README's Configuration table must be pgrag.config.VARIABLES:\n{table}"
    )


# -- names the docs use ---------------------------------------------------------------------------


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _migration_modules() -> list[Any]:
    modules = []
    for path in sorted((ROOT / "migrations" / "versions").glob("[0-9]*.py")):
        spec = importlib.util.spec_from_file_location(f"_pgrag_migration_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return modules


def _sql_objects() -> set[str]:
    """Functions, tables, indexes and settings of schema pgrag that this release has (and the
    ones `pgrag db partition` makes for the upgrade to 0015)."""
    names: set[str] = set()
    db = ROOT / "pgrag" / "db"
    for path in [*(ROOT / "sql").rglob("*.sql"), db / "schema.sql", db / "partition.sql"]:
        text = _text(path)
        names |= set(
            re.findall(r"(?:FUNCTION|TABLE|INDEX|VIEW)\s+(?:IF NOT EXISTS\s+)?pgrag\.(\w+)", text)
        )
        names |= set(re.findall(r"current_setting\('pgrag\.(\w+)'", text))
    return names


def _deprecated_functions() -> set[str]:
    text = _text(ROOT / "sql" / "functions" / "search.sql")
    return set(re.findall(r"COMMENT ON FUNCTION pgrag\.(\w+)\([^)]*\) IS\s+'Deprecated", text))


def _gone_names() -> set[str]:
    """SQL functions this release dropped, renamed or deprecated, and Python names it renamed."""
    names = {"keyword_maintain_v1", "keyword_sync_v1", "reranker_from_config"}
    for module in _migration_modules():
        names |= set(getattr(module, "DROPPED", ()))
        names |= set(getattr(module, "RENAMED", {}))
    return names | _deprecated_functions()


def test_the_name_lists_are_not_empty() -> None:
    # Guards the checks below: an empty list would let them pass vacuously.
    gone = _gone_names()
    assert {"search_v1", "search_v2", "grant_roles_v4", "principals_v1"} <= gone
    assert {"search_v3", "search_v4"} <= _deprecated_functions()
    assert {"search_v5", "search_engine", "grant_roles", "release", "chunks", "principals"} <= (
        _sql_objects()
    )
    assert len(DOCS) > 10 and OPERATIONS in DOCS


@pytest.mark.parametrize("path", CURRENT, ids=_doc_id)
def test_docs_name_no_dropped_renamed_or_deprecated_name(path: Path) -> None:
    text = " ".join(_text(path).split())
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _gone_names()))) + r")\b")
    stale = [
        m.group(1)
        for m in pattern.finditer(text)
        if "0.1" not in text[max(0, m.start() - HISTORY_WINDOW) : m.start()]
    ]
    assert not stale, (
        f"{path.name} names {sorted(set(stale))}: use the current names (CHANGELOG.md maps old"
        " to new), or say it is release 0.1's"
    )
    assert not re.search(r"never (changes|edited) in place|functions? [^.]{0,40}frozen", text)


def _resolves(parts: list[str]) -> bool:
    """Whether pgrag.<parts> is a module or an attribute reached through modules."""
    for i in range(len(parts), -1, -1):
        try:
            obj: Any = importlib.import_module(".".join(["pgrag", *parts[:i]]))
        except ImportError:
            continue
        for part in parts[i:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


@pytest.mark.parametrize("path", CURRENT, ids=_doc_id)
def test_docs_name_python_and_sql_that_exist(path: Path) -> None:
    sql_objects = _sql_objects()
    missing = set()
    for m in re.finditer(r"(?<![\w/.-])pgrag((?:\.[A-Za-z_]\w*)+)", _text(path)):
        parts = m.group(1)[1:].split(".")
        if parts[0] in sql_objects:  # pgrag.search_v5(...), pgrag.queries.checks, pgrag.principals
            continue
        if not _resolves(parts):
            missing.add(m.group(0))
    assert not missing, f"{path.name} names what neither Python nor SQL has: {sorted(missing)}"


def test_changelog_new_names_exist() -> None:
    # The right-hand column of the layout table: where each 0.1 module went.
    text = _text(CHANGELOG)
    table = text.split("**The package is laid out by family.**", 1)[1].split("\n\n")[1]
    rows = [row.strip().strip("|").split("|") for row in table.splitlines()]
    new = [cells[1] for cells in rows if cells[0].strip().startswith("`pgrag")]
    assert len(new) > 15
    missing = []
    for cell in new:
        base = None
        for name in re.findall(r"`(pgrag[\w.]*|\.\w+)", cell):
            if name.startswith("pgrag"):
                base = name.rsplit(".", 1)[0]
            else:
                name = f"{base}{name}"
            if name != "pgrag" and not _resolves(name.split(".")[1:]):
                missing.append(name)
    assert not missing, f"CHANGELOG.md's layout table names what does not exist: {missing}"


def test_changelog_lists_every_dropped_and_renamed_function() -> None:
    text = _text(CHANGELOG)
    for module in _migration_modules():
        for old in getattr(module, "DROPPED", ()):
            assert f"`{old}`" in text or old in text, f"CHANGELOG.md does not say {old} is gone"
        for old, new in getattr(module, "RENAMED", {}).items():
            assert old in text and f"`{new}`" in text, f"CHANGELOG.md misses {old} -> {new}"
    for name in _deprecated_functions():
        deprecated = text.split("### Deprecated", 1)[1].split("\n### ", 1)[0]
        assert name in deprecated, f"CHANGELOG.md's Deprecated section does not name {name}"


def test_changelog_states_the_public_api() -> None:
    import pgrag

    text = " ".join(_text(CHANGELOG).split())
    stated = text.split("`pgrag.__all__` is ", 1)[1].split(".", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", stated)) == sorted(pgrag.__all__)


def _code_imports(text: str) -> list[str]:
    """The pgrag imports in the python blocks and the inline code of a document."""
    statements = []
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pgrag"):
                statements.append(ast.unparse(node))
            elif isinstance(node, ast.Import):
                statements += [f"import {a.name}" for a in node.names if a.name.startswith("pgrag")]
    for code in re.findall(r"`([^`\n]+)`", _without_code_blocks(text)):
        statements += re.findall(r"(?:from pgrag[\w.]* import [\w, ]*\w|import pgrag[\w.]*)", code)
    return statements


@pytest.mark.parametrize("path", DOCS, ids=_doc_id)
def test_docs_imports_work(path: Path) -> None:
    for statement in _code_imports(_text(path)):
        try:
            exec(statement, {})  # noqa: S102 - import statements from our own documentation
        except ImportError as err:
            pytest.fail(f"{path.name}: `{statement}` fails: {err}")


def test_the_import_check_sees_imports() -> None:
    imports = _code_imports(_text(README)) + _code_imports(_text(ROOT / "docs" / "reranking.md"))
    assert "from pgrag.db import schema" in imports
    assert any(i.startswith("from pgrag.retrieval.rerank import") for i in imports)


# -- files and links ------------------------------------------------------------------------------

PATH = re.compile(
    r"(?<![\w./~-])((?:pgrag|sql|migrations|docs|tests|benchmarks|scripts|examples|docker)"
    r"/[\w./-]*\w)"
)


@pytest.mark.parametrize("path", DOCS, ids=_doc_id)
def test_docs_paths_exist(path: Path) -> None:
    text = _text(path)
    # "(was `sql/RELEASED.sha256`)": the changelog says where a file used to be.
    found = {m.group(1) for m in PATH.finditer(text) if text[: m.start()][-5:] != "was `"}
    missing = sorted(m for m in found if not (ROOT / m).exists())
    assert not missing, f"{path.name} names files that do not exist: {missing}"


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for a document's headings."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.*)$", _without_code_blocks(_text(path)), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("path", DOCS, ids=_doc_id)
def test_docs_links_resolve(path: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code_blocks(_text(path))):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(target)
    assert not broken, f"{path.name} has broken links: {broken}"


def test_readme_links_operations_and_changelog(readme: str) -> None:
    database = readme.split("\n## Database and schema\n", 1)[1].split("\n## ", 1)[0]
    assert "(docs/operations.md)" in database
    for command in ("pgrag db check", "pgrag db repair", "pgrag db downgrade 0008 --yes"):
        assert command in database
    assert "from pgrag.db import schema; schema.upgrade(dsn)" in database
    assert "(CHANGELOG.md)" in readme


def test_operations_lists_every_downgrade_item() -> None:
    from pgrag.db import roundtrip

    text = _text(OPERATIONS)
    for item in roundtrip.ITEMS:
        row = f"| {item.revision} | {item.what} | {item.fate} |"
        assert row in text, f"docs/operations.md's downgrade table lacks: {row}"
    rows = re.findall(r"^\| \d{4} \|", text, flags=re.MULTILINE)
    assert len(rows) == len(roundtrip.ITEMS)


def test_search_docs_state_search_v5s_defaults() -> None:
    # The defaults live in sql/functions/search.sql and, for readers, in docs/search.md's table.
    sql_text = _text(ROOT / "sql" / "functions" / "search.sql")
    signature = sql_text.split("FUNCTION pgrag.search_v5(", 1)[1].split(") RETURNS", 1)[0]
    defaults = dict(re.findall(r"^\s*(\w+)\s+[\w ]+? DEFAULT (.+?),?$", signature, re.MULTILINE))
    arguments = re.findall(r"^\s*(\w+)\s", signature, flags=re.MULTILINE)
    table = _text(ROOT / "docs" / "search.md").split("| argument | default |", 1)[1]
    stated: dict[str, str | None] = {}
    for row in table.split("\n\n", 1)[0].splitlines()[2:]:
        names_cell, default_cell = row.strip("|").split("|")[:2]
        names = re.findall(r"`(\w+)`", names_cell)
        value = default_cell.strip()
        if value.startswith("NULL"):
            values: list[str | None] = ["NULL"] * len(names)
        elif not value:
            values = [None] * len(names)
        else:
            values = [v.strip().strip("`").replace(",", "") for v in value.split(", ")]
        assert len(values) == len(names), row
        stated.update(zip(names, values, strict=True))
    assert list(stated) == arguments, "docs/search.md's table lists search_v5's arguments in order"
    for name, value in stated.items():
        assert value == defaults.get(name), (
            f"docs/search.md: {name} defaults to {defaults.get(name)}"
        )
