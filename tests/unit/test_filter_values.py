"""pgrag.retrieval.filter_values: what JSON may hold that jsonb may not, refused in one line."""

from __future__ import annotations

from typing import Any

import pytest

from pgrag.errors import InputError
from pgrag.retrieval.filter_values import check_filter_values, parse_filter_json


def _nots(count: int) -> dict[str, Any]:
    f: dict[str, Any] = {"n": 1}
    for _ in range(count):
        f = {"$not": f}
    return f


def test_ordinary_filters_parse_unchanged() -> None:
    raw = '{"n": {"$gt": 1.5e10, "$lt": 2}, "tags": ["eu"], "$or": [{"t": "\\u00e9"}]}'
    assert parse_filter_json(raw) == {
        "n": {"$gt": 1.5e10, "$lt": 2},
        "tags": ["eu"],
        "$or": [{"t": "é"}],
    }
    assert parse_filter_json('{"n": 0.0, "m": 0e5}') == {"n": 0.0, "m": 0.0}  # zero is zero


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"n": 1e-99999}', "beyond double precision"),
        ('{"n": 1e99999}', "beyond double precision"),
        ('{"n": -Infinity}', "-Infinity, which is not JSON"),
        ('{"n": 1' + "0" * 5000 + "}", "too long to read"),
        ('{"\\u0000": 1}', "NUL character"),
        ("[1]", "must be a JSON object"),
        ("{", "not valid JSON"),
        ("{" + '"$and": [{' * 3000 + '"n": 1' + "}]" * 3000 + "}", "more than 32 levels"),
    ],
)
def test_what_postgres_or_python_would_mangle_is_one_line(raw: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        parse_filter_json(raw, "--filter")
    assert str(caught.value).startswith("--filter ")
    assert "\n" not in str(caught.value)


def test_levels_are_counted_as_the_database_counts_them() -> None:
    check_filter_values(_nots(31))  # 32 levels
    check_filter_values({"n": {"$in": [[[[1]]]]}})
    nested_and: dict[str, Any] = {"n": 1}
    for _ in range(31):
        nested_and = {"$and": [nested_and]}
    check_filter_values(nested_and)
    for too_deep in (_nots(32), {"$and": [nested_and]}):
        with pytest.raises(InputError, match="more than 32 levels"):
            check_filter_values(too_deep)
