"""The page a signed card link opens (``/cards/<token>``), and the answer its form sends.

Plain HTML with every value escaped; the form posts ``choice=N`` back to the same link.
"""

from __future__ import annotations

import html
from urllib.parse import parse_qs

from starlette.responses import HTMLResponse

from kernel.records import Card

__all__ = ["PAGE_HEADERS", "form_choice", "page", "render_card_page"]

# The link in the address bar is the capability to answer: no cache keeps the page, no
# request made from it carries the link, no other site frames it, nothing but this page's
# own form runs or posts (a value escaped wrongly one day still could not load a script).
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


def page(body: str, status: int = 200, *, title: str = "Autoloop card") -> HTMLResponse:
    """A card page: ``body`` (HTML, its values escaped) in a document a phone shows at
    its own width, with :data:`PAGE_HEADERS`."""
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    )
    return HTMLResponse(document, status, headers=PAGE_HEADERS)


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


def render_card_page(card: Card, *, answers: bool = True) -> str:
    """The page of ``card``: with a button per option while it is open, when its link
    answers (the form posts back to the page's own address, wherever it is served)."""
    title = html.escape(card.title)
    text = html.escape(card.text)
    if card.kind_ != "ask" or card.state != "open":
        return f"<h1>{title}</h1><p>{text}</p><p>State: {html.escape(card.state)}</p>"
    if not answers:
        listed = "".join(f"<li>{html.escape(o)}</li>" for o in card.options)
        return (
            f"<h1>{title}</h1><p>{text}</p><ol>{listed}</ol>"
            f"<p>To answer, comment <code>/answer {html.escape(card.id)} N</code> where "
            "this card was posted (people with write access).</p>"
        )
    buttons = "".join(
        f'<button name="choice" value="{i}">{html.escape(o)}</button> '
        for i, o in enumerate(card.options, 1)
    )
    return f'<h1>{title}</h1><p>{text}</p><form method="post">{buttons}</form>'
