"""Recording an event from outside: where it goes is decided by the rules (routing)."""

from __future__ import annotations

from kernel.context import Context
from kernel.inputs import Ingest, Reply

__all__ = ["ingest"]


def ingest(ctx: Context, inp: Ingest) -> Reply:
    fact = ctx.record_event(inp.event, reason=inp.ignore)
    return Reply(
        ok=True,
        code="recorded",
        message=f"event {fact.seq} recorded"
        + (
            f", to {', '.join(fact.routes)}" if fact.routes else f" (not dispatched: {fact.reason})"
        ),
        data={"seq": fact.seq, "routes": list(fact.routes), "dispatched": fact.dispatched},
    )
