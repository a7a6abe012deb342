"""A GitHub webhook's body: decoded, named, and made into ledger inputs.

Shared by the webhook route (which checks the body before its ack) and the inbox's
translator (which records it): :func:`webhook_payload` decodes JSON or form-encoded
bodies, :func:`content_digest` names what a delivery is made of (the same body under a
new delivery id is a replay), :func:`inputs_for` makes the events and their ``Ingest``
inputs with the GitHub source's pure translator.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import parse_qs

import orjson

from kernel import inputs as k
from kernel.model import Event
from plugins.sources.github import event_type, translate

__all__ = ["BadBody", "content_digest", "inputs_for", "webhook_payload"]


class BadBody(ValueError):
    """A webhook body that is not a JSON object (answered 400)."""


def webhook_payload(body: bytes, *, form: bool) -> dict[str, Any]:
    """The decoded payload of a webhook body, JSON or form-encoded.

    A repository or organization webhook may be set to send
    ``application/x-www-form-urlencoded``: the JSON is then the one ``payload`` field
    (the signature still covers the raw body, checked before this)."""
    raw: str | bytes = body
    if form:
        try:
            fields = parse_qs(
                body.decode("ascii"), keep_blank_values=True, max_num_fields=16, errors="strict"
            )
        except ValueError:  # non-ASCII bytes, bad UTF-8 escapes, too many fields
            raise BadBody("form body is not URL-encoded: send payload=<JSON>") from None
        values = fields.get("payload", [])
        if len(values) != 1:
            raise BadBody('a form-encoded webhook needs one "payload" field holding the JSON')
        raw = values[0]
    try:
        payload = orjson.loads(raw)
    except ValueError:
        what = "the payload field" if form else "body"
        raise BadBody(f"{what} is not JSON: send application/json payloads") from None
    if not isinstance(payload, dict):
        raise BadBody("body must be a JSON object")
    return payload


def content_digest(event_name: str, body: bytes) -> str:
    """What a delivery is made of, hashed: its event name and raw body (SHA-256)."""
    digest = hashlib.sha256(event_name.encode("latin-1", "replace"))  # as the header came
    digest.update(b"\n")
    digest.update(body)
    return digest.hexdigest()


def inputs_for(
    name: str,
    delivery: str,
    payload: dict[str, Any],
    digest: str,
    *,
    app_slug: str | None,
    app_id: int | None,
) -> tuple[list[Event], list[k.Input]]:
    """The events of one delivery and the ledger inputs that record them.

    GitHub signs the body only: the same body under a new delivery id is a replay (or
    the same event sent twice), recorded once. Each event of the delivery gets the
    body's key with its own suffix (``:pr<N>``). A delivery that yields no event (the
    App's own doing) is recorded as ignored, so that it is a duplicate next time too."""
    events = translate(name, delivery, payload, app_slug=app_slug, app_id=app_id)
    content = "github:" + digest
    if events:
        return events, [
            k.Ingest(event=e, content_key=content + e.id[len(delivery) :]) for e in events
        ]
    own = Event(source="github", id=delivery, type=event_type(name, payload), subject="github")
    return [], [k.Ingest(event=own, ignore="caused by this app", content_key=content)]
