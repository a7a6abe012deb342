"""Text written by others drives no terminal: every control character is shown escaped."""

from __future__ import annotations

import pytest

from kernel.text import for_terminal


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("clear\x1b[2Jscreen", "clear\\x1b[2Jscreen"),  # ESC: a terminal sequence
        ("title\x1b]0;pwned\x07", "title\\x1b]0;pwned\\x07"),  # OSC: retitle the window
        ("hidden\rvisible", "hidden\\rvisible"),  # CR: overwrite what came before
        ("ab\x08\x08xy", "ab\\x08\\x08xy"),  # backspaces
        ("\x00nul\x7fdel\x9bcsi", "\\x00nul\\x7fdel\\x9bcsi"),  # NUL, DEL, a C1 control
        ("admin\u202etxt.exe", "admin\\u202etxt.exe"),  # a right-to-left override
        ("iso\u2066late\u2069", "iso\\u2066late\\u2069"),
    ],
)
def test_each_control_character_is_shown_escaped(text: str, shown: str) -> None:
    assert for_terminal(text) == shown


def test_newlines_tabs_and_ordinary_text_stay_as_they_are() -> None:
    text = "Crash on start\n\tat main.py:3 — café, 日本語, emoji 🎉, [bot] and {json}"
    assert for_terminal(text) is text  # nothing to escape: the same string, no copy


def test_what_it_shows_is_already_safe() -> None:
    once = for_terminal("a\x1b[31mred\r")
    assert for_terminal(once) == once
