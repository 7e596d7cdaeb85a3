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


def test_a_position_past_a_page_header_is_the_record_end_before_it() -> None:
    from pgrag.db.replica import record_end

    segment = 16 * 1024 * 1024
    # An insert position just past a page's short header: the last record ended at the
    # boundary, which is what a standby that has replayed it all reports.
    assert record_end("0/3002018", segment) == "0/3002000"
    assert record_end("1/2018", segment) == "1/2000"
    # Just past a segment's first page, whose header is the long one (40 bytes).
    assert record_end("0/3000028", segment) == "0/3000000"
    assert record_end("2/28", segment) == "2/0"
    # Anything else is a record's end already, left as it is (offset 40 inside a segment, 24
    # at a segment's start, where the long header is).
    for position in ("0/3002028", "0/3000018", "0/3002019", "0/3002000", "0/0", "A/FFFFFFF0"):
        assert record_end(position, segment) == position
    # Another segment size moves where the long header is.
    assert record_end("0/100028", 1024 * 1024) == "0/100000"
    assert record_end("0/100028", segment) == "0/100028"


def test_pgrag_serve_says_a_bad_read_dsn_in_one_line() -> None:
    """Before the service starts (it printed uvicorn's traceback), and without a database."""
    from click.testing import CliRunner

    from pgrag.cli import cli

    result = CliRunner(
        env={"PGRAG_READ_DSN": "host=a,b,c port=1,2", "PGRAG_DSN": "host=/nonexistent"}
    ).invoke(cli, ["serve", "--no-auth"])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "PGRAG_READ_DSN names 3 host(s) and 2 port values" in lines[0]
