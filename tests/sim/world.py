"""The simulated world: the rules under test and what the fake agents answer.

The rules are built in code so that the interesting paths come up often: a parallel rule
whose emits loop back to itself, a second parallel rule fed by the first (an emit with no
subject must reach the matter of the *emitting* subject), a non-parallel rule that two
triggers share, one event type that two rules take, allow / approve lists, a small
``max_hops`` so chains are cut, and one or two retries.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from kernel import inputs as k
from kernel.model import AgentSpec, Rule, Rules, Trigger

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
MAX_HOPS = 3

RULES = Rules(
    version="sim-1",
    max_hops=MAX_HOPS,
    agents={"bot": AgentSpec(name="bot", use="command", command=("true",))},
    rules=(
        Rule(
            name="triage",
            agent="bot",
            on=Trigger(source=("hub", "shop"), type=("issue.*",)),
            parallel=True,
            emits=("triage.done", "issue.poke"),
            allow=("notes.append",),
            approve=("repo.close",),
            max_retries=1,
        ),
        Rule(
            name="follow",
            agent="bot",
            on=Trigger(type=("triage.done",)),
            parallel=True,
            emits=("ping",),
            allow=("notes.append", "repo.label"),
            max_retries=2,
        ),
        Rule(
            name="ops",
            agent="bot",
            on=Trigger(type=("ping", "ops.*", "issue.urgent")),
            emits=("ping", "ops.report"),
            approve=("service.restart",),
            max_retries=1,
        ),
        Rule(name="nightly", agent="bot", every="0 2 * * *", emits=("ops.report",)),
    ),
)

SUBJECTS = ("acme/web#1", "acme/web#2", "acme/web#3", "acme/api#7", "acme/api#8")
SOURCES = ("hub", "shop", "probe")
EXTERNAL_TYPES = (
    "issue.opened",
    "issue.opened",
    "issue.commented",
    "issue.urgent",
    "ops.alert",
    "ping",
    "noise.ignored",  # no rule takes it: recorded, not dispatched
)
CARD_KEYS = ("shipping", "colour", "deploy", "owner")
ACTIONS = ("notes.append", "repo.label", "repo.close", "service.restart", "repo.delete")
DURATIONS = ("90s", "5m", "30m", "2h", "1d")


def receipt(body: Any) -> str:
    return f"Here is what I did.\n\n```autoloop\n{json.dumps(body)}\n```\n"


def valid_receipt(rnd: random.Random, rule: Rule, now: datetime, open_keys: list[str]) -> str:
    """A receipt the parser accepts: any mix of ask, notice, later, resolve, events, actions."""
    body: dict[str, Any] = {}
    if rnd.random() < 0.3:
        keys = rnd.sample(CARD_KEYS, rnd.randint(1, 2))
        body["ask"] = [
            {
                "key": key,
                "title": f"Which {key}?",
                "options": [f"{key}-{i}" for i in range(rnd.randint(2, 3))],
            }
            for key in keys
        ]
    if rnd.random() < 0.25:
        body["notice"] = [{"title": "Checked", "text": "all fine"}]
        if rnd.random() < 0.3:
            body["notice"].append({"title": "Keyed", "key": "status"})
    if rnd.random() < 0.25:
        if rnd.random() < 0.8:
            body["later"] = [{"in": rnd.choice(DURATIONS), "why": "re-check"}]
        else:
            at = now + timedelta(minutes=rnd.randint(-30, 600))  # may already be due
            at = at.astimezone(timezone(timedelta(hours=rnd.choice((0, 8, -5)))))
            body["later"] = [{"at": at.isoformat(), "why": "at a time"}]
    if rnd.random() < 0.25:
        pool = [*open_keys, *rnd.sample(CARD_KEYS, 1)]
        body["resolve"] = sorted(set(rnd.sample(pool, min(len(pool), rnd.randint(1, 2)))))
    if rule.emits and rnd.random() < 0.7:
        events = []
        for _ in range(rnd.randint(1, 2)):
            spec: dict[str, Any] = {"type": rnd.choice(rule.emits), "summary": "next"}
            roll = rnd.random()
            if roll < 0.3:
                spec["subject"] = rnd.choice(SUBJECTS)
            elif roll < 0.35:
                spec["subject"] = "nobody/home#0"
            events.append(spec)
        body["events"] = events
    if rnd.random() < 0.3:
        body["actions"] = [
            {"do": rnd.choice(ACTIONS), "repo": "acme/web", "number": rnd.randint(1, 9)}
            for _ in range(rnd.randint(1, 2))
        ]
    return receipt(body)


MALFORMED = (
    "Done.\n```autoloop\n{not json\n```\n",
    receipt({"ask": [{"key": "x", "title": "t", "options": ["only one"]}]}),
    receipt({"events": [{"type": "not.in.emits"}]}),
    receipt({"later": [{"in": "soon"}]}),
    receipt({"surprise": True}),
    "Done.\n```autoloop\n{}\n",  # never closed
)


def outcome(rnd: random.Random, kind: str, rule: Rule, now: datetime, keys: list[str]) -> Any:
    """An :class:`AgentOutcome` of the given kind (see :data:`OUTCOME_WEIGHTS`)."""
    session = rnd.choice((None, f"agent-{rnd.randint(1, 5)}"))
    if kind == "valid":
        msg = valid_receipt(rnd, rule, now, keys)
        return k.AgentOutcome(started=True, ok=True, final_message=msg, session=session)
    if kind == "no_receipt":
        return k.AgentOutcome(started=True, ok=True, final_message="nothing to do", session=session)
    if kind == "malformed":
        msg = rnd.choice(MALFORMED)
        return k.AgentOutcome(started=True, ok=True, final_message=msg, session=session)
    if kind == "failed_started":
        return k.AgentOutcome(started=True, ok=False, error="exit 1", session=session)
    if kind == "failed_not_started":
        return k.AgentOutcome(started=False, ok=False, error="no such session")
    return k.AgentOutcome(started=True, ok=False, timed_out=True, error="killed at timeout")


OUTCOME_WEIGHTS = {
    "valid": 60,
    "no_receipt": 12,
    "malformed": 12,
    "failed_started": 9,
    "failed_not_started": 6,
    "timeout": 6,
}
