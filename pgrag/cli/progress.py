"""Progress on stderr: a live bar or counter on a terminal, plain numbered lines in a log.

A terminal gets click's bar (ingest) or a counter rewritten in place with ``\\r`` (reembed).
Anywhere else (``2> ingest.log``, a CI job) nothing is rewritten: each report is a line of its
own with its numbers, ``embedding: 32/80 files, 1,200/3,000 chunks``, one per batch of files,
and within a long stretch of one file one per tenth of the chunks, so that a log says how far
it got without a line per chunk.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from pgrag.cli.output import write


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class ChunkProgress:
    """Chunks embedded out of ``total``, with the files done as its label (ingest)."""

    def __init__(self, total: int, label: str = "embedding") -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.files = ""
        self._logged_at = 0  # chunks done at the last plain line
        self._last = ""
        self._bar: Any = None
        if stderr_is_terminal():
            self._bar = click.progressbar(
                length=total, label=label, file=sys.stderr, show_pos=True, show_eta=True
            )
            self._bar.__enter__()

    def advance(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.done - self._logged_at >= max(self.total // 10, 1):
            self._line()

    def files_done(self, done: int, total: int) -> None:
        self.files = f"{done}/{total} files"
        if self._bar is not None:
            self._bar.label = f"{self.files}, chunks"
        else:
            self._line()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)

    def _line(self) -> None:
        counts = ", ".join(x for x in (self.files, f"{self.done:,}/{self.total:,} chunks") if x)
        line = f"{self.label}: {counts}"
        self._logged_at = self.done
        if line != self._last:
            self._last = line
            write(line, err=True)


class Counter:
    """A count rewritten in place on a terminal, a line per report elsewhere (reembed)."""

    def __init__(self) -> None:
        self.terminal = stderr_is_terminal()
        self._shown = False

    def show(self, text: str) -> None:
        if self.terminal:
            write(f"\r{text}", err=True, nl=False)
        else:
            write(text, err=True)
        self._shown = True

    def close(self) -> None:
        if self.terminal and self._shown:
            write("", err=True)
