"""A ledger URL's password, kept out of what is printed, logged or stored.

Apart from the backends, so that :mod:`ghapp.store.open` (which loads them) and
:mod:`ghapp.store.postgres` (whose driver's messages may quote the URL) both use it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["hide_passwords", "passwords_in", "shown"]

_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*):([^/]*)@")
_PASSWORD_PARAM = re.compile(r"([?&]password=)([^&]*)", re.IGNORECASE)
MIN_HIDDEN = 4  # see hide_passwords


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
