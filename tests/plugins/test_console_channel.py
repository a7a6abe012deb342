"""The console channel prints a card as text for people: an agent's card quotes text
written by others, and none of it drives the terminal."""

from __future__ import annotations

import io

from kernel.records import Card
from plugins.channels.local import ConsoleChannel


def test_a_card_with_terminal_sequences_is_printed_with_them_escaped() -> None:
    out = io.StringIO()
    card = Card(
        id="c1",
        key="k",
        matter="m",
        kind_="ask",
        title="Triage \x1b[2J\x1b]0;pwned\x07",
        text="The title was:\rhidden\u202e",
        options=("label\x1b[8m", "close"),
    )
    assert ConsoleChannel(out).send(card, None, previous_ref="") == "console:c1"
    text = out.getvalue()
    assert not any(c in text for c in "\x1b\x07\r\u202e"), repr(text)
    assert text.splitlines()[:3] == [
        "[c1] Triage \\x1b[2J\\x1b]0;pwned\\x07",
        "    The title was:\\rhidden\\u202e",
        "    1) label\\x1b[8m  2) close",
    ]


def test_every_line_of_a_cards_text_is_indented() -> None:
    """A text's own lines began at the margin, as the hub's lines do ("[c9] ...")."""
    out = io.StringIO()
    card = Card(id="c1", key="k", matter="m", kind_="notice", title="Done", text="a\n[c999] Fake")
    ConsoleChannel(out).send(card, None, previous_ref="")
    assert out.getvalue().splitlines() == ["[c1] Done", "    a", "    [c999] Fake"]
