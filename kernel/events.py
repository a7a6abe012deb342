"""Recording an event from outside: once per ``(source, id)``, where the rules route it.

Whether an event's key is stored is in :attr:`kernel.records.State.seen_keys`: the shell
loads it (``Needs.event_keys``), and each event recorded adds its own, so the same
event twice in one group of decisions is a duplicate the second time. An ingest may
carry a second key, its ``content_key`` (a webhook's event name and signed body, hashed): an
event whose content key is stored is a duplicate too, whatever its id, so that a
captured signed body sent again under new delivery ids is recorded once.
"""

from __future__ import annotations

from kernel.context import Context
from kernel.facts import content_key, event_key
from kernel.inputs import Ingest, Reply

__all__ = ["ingest"]


def ingest(ctx: Context, inp: Ingest) -> Reply:
    ev = inp.event
    seen = ctx.state.seen_keys
    if event_key(ev) in seen:
        message = f"duplicate: ({ev.source}, {ev.id}) was recorded before"
        return Reply(ok=True, code="duplicate", message=message)
    if inp.content_key and content_key(inp.content_key) in seen:
        message = (
            f"duplicate: ({ev.source}, {ev.id}) has the content of an event recorded "
            "before (the same body sent again under a new id)"
        )
        return Reply(ok=True, code="duplicate", message=message)
    fact = ctx.record_event(inp.event, reason=inp.ignore, content_key=inp.content_key)
    return Reply(
        ok=True,
        code="recorded",
        message=f"event {fact.seq} recorded"
        + (
            f", to {', '.join(fact.routes)}" if fact.routes else f" (not dispatched: {fact.reason})"
        ),
        data={"seq": fact.seq, "routes": list(fact.routes), "dispatched": fact.dispatched},
    )
