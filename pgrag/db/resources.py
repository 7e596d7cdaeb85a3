"""Where the migrations and SQL files are: inside the installed wheel, or in a source checkout."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pgrag.errors import ConfigError

_PACKAGE = Path(__file__).resolve().parents[1]  # pgrag/


def _find(name: str, marker: str) -> Path:
    # In a wheel they are package data (pgrag/migrations, pgrag/sql); in a source checkout
    # or an editable install they sit at the top of the repository.
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if (candidate / marker).exists():
            return candidate
    raise ConfigError(f"pgrag's {name}/ directory is missing from {_PACKAGE}; reinstall pgrag")


def migrations_dir() -> Path:
    return _find("migrations", "env.py")


def sql_dir() -> Path:
    return _find("sql", "functions/search.sql")


@cache
def sql_file(name: str) -> str:
    return (sql_dir() / name).read_text(encoding="utf-8")
