"""The read replica's settings in seconds (pgrag.db.replica): a value that cannot work is a
one-line ConfigError naming the variable, never read as something else."""

from __future__ import annotations

import pytest

from pgrag.config import Settings
from pgrag.db.replica import max_lag_seconds, wait_seconds
from pgrag.errors import ConfigError


@pytest.mark.parametrize("raw", ["60", "0", "0.0", " 2.5 ", "0e3", "86400"])
def test_seconds_in_range_are_taken(raw: str) -> None:
    assert max_lag_seconds(Settings(read_max_lag_seconds=raw)) == float(raw)


@pytest.mark.parametrize("raw", ["-1", "86401", "sixty", "nan", "inf", "1e-400", "-1e-400"])
def test_seconds_that_cannot_work_are_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"PGRAG_READ_MAX_LAG_SECONDS=.* from 0 to 86400"):
        max_lag_seconds(Settings(read_max_lag_seconds=raw))


def test_unset_is_the_default() -> None:
    assert max_lag_seconds(Settings(read_max_lag_seconds=None)) == 60.0
    assert wait_seconds(Settings(read_wait_seconds="")) == 2.0
