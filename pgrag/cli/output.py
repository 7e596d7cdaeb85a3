"""What pgrag prints for people, made safe for a terminal: the one rule, and the one writer.

Document text, LLM answers, file and model names and error messages that quote user input can
hold bytes a terminal acts on: ESC starts a sequence that can set the window title, write the
clipboard (OSC 52) or clear the screen; BEL, CR and backspace rewrite what is shown; bidi
overrides (U+202E) reorder it. :func:`escape` writes every such character visibly, the way
Python writes it in a string literal (``\\x1b``, ``\\r``, ``\\u202e``), so the text still reads
and nothing reaches the terminal as a command. Newline and tab stay where they are layout
(``layout=True``: messages, answers); a table cell or a one-line field escapes them too.

Escaped are: C0 controls and DEL, C1 controls (U+0080..U+009F), the bidi embedding, override,
isolate and mark characters, the line and paragraph separators, and lone surrogates (which
could not even be encoded). Everything else, non-Latin scripts, emoji and their joiners
included, prints as it is.

:func:`echo` is ``click.echo`` with that rule applied; :func:`write` prints text that is
already safe (styled lines whose parts went through :func:`escape`). Both turn a failure to
write stdout (``> /dev/full``) into :class:`OutputError`: one line, exit status 1. ``--json``
output does not go through here: ``json.dumps`` escapes control characters itself, and what
it leaves (C1, bidi marks, with ``ensure_ascii=False``) is data inside a JSON string.
"""

from __future__ import annotations

import errno
import json
import re
from typing import Any

import click

from pgrag.errors import PgragError

# Characters a terminal may act on, or that would break the layout.
_C0 = "\x00-\x08\x0b-\x1f"  # but tab and newline
_BEYOND_C0 = (
    "\x7f-\x9f"  # DEL; C1
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides, isolates
    "\u2028\u2029"  # line and paragraph separators
    "\ud800-\udfff"  # lone surrogates
)
_LAYOUT_SAFE = re.compile(f"[{_C0}{_BEYOND_C0}]")
_LINE_SAFE = re.compile(f"[{_C0}{_BEYOND_C0}\t\n]")
_JSON_UNSAFE = re.compile(f"[{_BEYOND_C0}]")  # json.dumps escapes C0 itself


def _visible(match: re.Match[str]) -> str:
    return ascii(match.group())[1:-1]


def escape(text: str, *, layout: bool = True) -> str:
    """``text`` with the characters a terminal would act on written as escapes (``\\x1b``).

    ``layout``: keep newline and tab (answers, messages); without it they are escaped too
    (table cells, names on one line)."""
    return (_LAYOUT_SAFE if layout else _LINE_SAFE).sub(_visible, text)


def json_text(value: Any) -> str:
    """``value`` as indented JSON, readable (non-ASCII as it is) yet terminal-safe."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class OutputError(PgragError):
    """stdout (or stderr) cannot be written: a full disk, a closed descriptor."""


def write(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print ``text`` as it is (it is safe already: its parts went through :func:`escape`)."""
    try:
        click.echo(text, err=err, nl=nl)
    except OSError as error:
        problem = output_error(error, "stderr" if err else "stdout")
        if problem is error:  # a broken pipe: click's main ends quietly
            raise
        raise problem from error


def echo(text: str = "", *, err: bool = False, nl: bool = True, layout: bool = True) -> None:
    """Print ``text`` for a person, through :func:`escape`."""
    write(escape(text, layout=layout), err=err, nl=nl)


def output_error(error: OSError, stream: str = "stdout") -> OSError | OutputError:
    """The one-line error for a failed write (a broken pipe stays itself: click ends quietly)."""
    if error.errno == errno.EPIPE:
        return error
    reason = error.strerror or str(error)
    return OutputError(f"cannot write to {stream}: {reason}")
