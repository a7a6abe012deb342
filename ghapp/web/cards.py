"""The page a signed card link opens (``/cards/<token>``), and the answer its form sends.

Plain HTML with every value escaped; the form posts ``choice=N`` back to the same link.
"""

from __future__ import annotations

import html
from urllib.parse import parse_qs

from kernel.records import Card

__all__ = ["form_choice", "render_card_page"]


def form_choice(body: bytes) -> int | None:
    """The ``choice`` field of the card page's form (``application/x-www-form-urlencoded``).

    Parsed with the standard library: Starlette's ``request.form()`` needs
    ``python-multipart``, which Starlette does not install, and a button press needs no more.
    """
    try:
        fields = parse_qs(body.decode("ascii"), max_num_fields=8, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None
    values = fields.get("choice", [])
    if len(values) != 1 or len(values[0]) > 6 or not (values[0].isascii() and values[0].isdigit()):
        return None
    return int(values[0])


def render_card_page(card: Card, token: str) -> str:
    title = html.escape(card.title)
    text = html.escape(card.text)
    if card.kind_ != "ask" or card.state != "open":
        return f"<h1>{title}</h1><p>{text}</p><p>State: {html.escape(card.state)}</p>"
    buttons = "".join(
        f'<button name="choice" value="{i}">{html.escape(o)}</button> '
        for i, o in enumerate(card.options, 1)
    )
    return (
        f"<h1>{title}</h1><p>{text}</p>"
        f'<form method="post" action="/cards/{html.escape(token)}">{buttons}</form>'
    )
