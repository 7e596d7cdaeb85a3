"""The one rule for what pgrag prints for people (pgrag.cli.output), and writing that fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgrag.cli.output import escape, json_text
from pgrag.cli.tables import cell

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]52;c;cHduZWQ=\x07", "\\x1b]52;c;cHduZWQ=\\x07"),  # OSC 52: the clipboard
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # the window title
        ("\x1b[2J", "\\x1b[2J"),  # CSI: click strips these from a pipe only, and not OSC
        ("a\rb\x08c\x00d\x7f", "a\\rb\\x08c\\x00d\\x7f"),
        ("\x9b31m C1", "\\x9b31m C1"),  # 8-bit CSI
        ("abc\u202efed", "abc\\u202efed"),  # a bidi override
        ("\u2066x\u2069 \u200f", "\\u2066x\\u2069 \\u200f"),
        ("line\u2028sep", "line\\u2028sep"),
        ("\ud800", "\\ud800"),  # a lone surrogate could not even be encoded
    ],
)
def test_what_a_terminal_acts_on_is_shown_escaped(raw: str, shown: str) -> None:
    assert escape(raw) == shown
    assert escape(raw, layout=False) == shown


def test_layout_and_text_stay_as_they_are() -> None:
    text = "Refunds\ttake 14 days [1].\nÜber 30 Tage: 返金 😀 👩\u200d💻 — \u00a0ok"
    assert escape(text) == text
    assert escape(text, layout=False) == text.replace("\t", "\\t").replace("\n", "\\n")
    assert cell("a\x1b]0;t\x07\nb") == "a\\x1b]0;t\\x07\\nb"  # a table cell: one line


def test_json_is_exact_and_still_safe() -> None:
    value = {"text": "a\x1b]0;t\x07 \x9b \u202e \ud800 é 😀\n", "n": 1}
    text = json_text(value)
    assert json.loads(text) == value
    for ch in ("\x1b", "\x07", "\x9b", "\u202e", "\ud800", "\n\x22"):
        assert ch not in text
    assert "é 😀" in text  # readable: non-ASCII text is not escaped


def _pgrag_into_dev_full(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "pgrag.cli", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ("search", "x", "-c", "k", "--sql"),  # a command's own output
        ("search", "x", "-c", "k", "--sql", "--mode", "vector"),
        ("--help",),  # click's
    ],
)
def test_a_full_disk_is_one_error_line(args: tuple[str, ...]) -> None:
    done = _pgrag_into_dev_full(*args)
    assert done.stderr == "error: cannot write to stdout: No space left on device\n"
    assert done.returncode == 1


def test_a_broken_pipe_stays_quiet() -> None:
    # `pgrag search ... --sql | head -c1`: the reader goes away; no traceback, no error line.
    code = 'import sys; sys.argv = ["pgrag", "search", "x" * 200000, "--sql"]; ' + (
        "from pgrag.cli import main; main()"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1  # click's status for a broken pipe
    assert err == b""
