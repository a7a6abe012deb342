"""``open_store(url)``: the ledger named by a URL, loading only the backend it names.

Apart from ``base``, so that ``base`` (which both backends build on) imports neither.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from ghapp.store.base import Store, StoreError

__all__ = ["hide_passwords", "open_store", "passwords_in", "shown"]

_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*):([^/]*)@")
_PASSWORD_PARAM = re.compile(r"([?&]password=)([^&]*)", re.IGNORECASE)
MIN_HIDDEN = 4  # see hide_passwords


def open_store(url: str) -> Store:
    """Open the ledger named by ``url`` (``sqlite:///PATH`` or ``postgresql://...``)."""
    if url.startswith("sqlite:"):
        from ghapp.store.sqlite import SqliteStore  # noqa: PLC0415  # lazy: one backend

        return SqliteStore(url)
    if url.startswith(("postgresql:", "postgres:")):
        from ghapp.store.postgres import PostgresStore  # noqa: PLC0415  # lazy: psycopg

        return PostgresStore(url)
    raise StoreError(
        f"unsupported ledger URL {shown(url)!r}: use sqlite:///PATH or postgresql://USER@HOST/DB"
    )


def shown(url: str) -> str:
    """``url`` fit to print or log: a password in it is replaced by ``***``."""
    return _PASSWORD_PARAM.sub(r"\1***", _PASSWORD.sub(r"\1:***@", url))


def passwords_in(url: str) -> list[str]:
    """The passwords a ledger URL holds (after ``USER:`` or as ``password=``), as written
    and decoded: the values no message or log may show."""
    found = [m.group(2) for m in (_PASSWORD.match(url), *_PASSWORD_PARAM.finditer(url)) if m]
    return sorted({v for p in found if p for v in (p, unquote(p))}, key=len, reverse=True)


def hide_passwords(text: str, url: str) -> str:
    """``text`` (a driver's message, which may quote the URL) without ``url``'s passwords."""
    text = text.replace(url, shown(url))  # libpq quotes a URI it cannot parse
    for password in passwords_in(url):
        # Elsewhere in the text, only passwords of 4 characters or more: masking a shorter
        # one inside the words around it ("re***ched") would show it, not hide it.
        if len(password) >= MIN_HIDDEN:
            text = text.replace(password, "***")
    return text
