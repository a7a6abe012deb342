"""Text for one line of output: made one line, and safe to show on a terminal.

Issue titles, comments, event subjects and an agent's card text reach ``autoloop
status``, ``why``, ``cards``, ``drain`` and the server's log lines. A control character
in them (ESC starting a terminal sequence, a carriage return, a backspace) or a
bidirectional override would let whoever wrote the text clear the screen, retitle the
window, overwrite what was printed before it or reorder what follows. :func:`for_terminal`
shows each such character escaped (``\\x1b``, ``\\r``, ``\\u202e``); newlines and tabs stay.
"""

from __future__ import annotations

import re

__all__ = ["escaped_line", "for_terminal", "one_line"]

# C0 controls but tab and newline; DEL and the C1 controls; the bidirectional embeddings,
# overrides and isolates (U+202A-U+202E, U+2066-U+2069).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# ... and what ends or splits a line too: tab, newline, U+2028 and U+2029.
_UNSAFE_IN_A_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def for_terminal(text: str) -> str:
    """``text`` with every character that could drive a terminal shown escaped."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escaped, text)


def escaped_line(text: str) -> str:
    """``text`` as :func:`for_terminal` shows it, and with its line breaks and tabs shown
    escaped too (``\\n``): a value from others that must stay on its own line of a log
    (a log line per request: a newline in it began a line of the sender's own)."""
    if text.isprintable():
        return text
    return _UNSAFE_IN_A_LINE.sub(_escaped, text)


def one_line(text: str) -> str:
    """``text`` on one line: each run of whitespace (newlines too) as one space."""
    return " ".join(text.split())
