"""Tables for people: on a terminal (rich), a cell is shown as it is."""

from __future__ import annotations

import io

import pytest

from ghapp.commands.show import Out


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_cell_that_looks_like_markup_is_shown_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    screen = Terminal()
    out = Out(screen)
    assert out.tty
    out.table("checks", ["check", "detail"], [["bot", "autoloop-sandbox[bot] said [/x]"]])
    assert "autoloop-sandbox[bot] said [/x]" in screen.getvalue()


def test_a_pipe_gets_plain_aligned_columns() -> None:
    pipe = io.StringIO()
    Out(pipe).table("checks", ["check", "detail"], [["a", "fine"], ["longer", "[x]"]])
    assert pipe.getvalue().splitlines() == [
        "checks:",
        "  check   detail",
        "  a       fine",
        "  longer  [x]",
    ]
