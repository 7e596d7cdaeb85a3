"""The CLI's client of a running service (PGRAG_URL): what it refuses before sending."""

from __future__ import annotations

import pytest

from pgrag.errors import ConfigError
from pgrag.service.client import ServiceClient


@pytest.mark.parametrize("key", ["pgrag_abcdefgh_x\nX-Injected: 1", "pgrag_abcdefgh_x\r", "k\x00"])
def test_a_key_with_a_line_break_is_refused_without_showing_it(key: str) -> None:
    with pytest.raises(ConfigError, match="line break or NUL") as err:
        ServiceClient("http://127.0.0.1:8000", key)
    assert key.strip() not in str(err.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1/"]
)
def test_the_openai_style_base_url_names_the_same_service(url: str) -> None:
    assert ServiceClient(url).url == "http://127.0.0.1:8000"
