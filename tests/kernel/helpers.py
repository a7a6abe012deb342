"""Helpers for driving the kernel in tests: a whole in-memory state and a fixed clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kernel import inputs as k
from kernel.model import AgentSpec, Event, Rule, Rules, Trigger
from kernel.state import State, replay
from kernel.step import step

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def rules_of(*rules: Rule, max_hops: int = 8) -> Rules:
    return Rules(
        version="test",
        max_hops=max_hops,
        agents={"a": AgentSpec(name="a", use="command", command=("true",))},
        rules=tuple(rules),
    )


def rule(name: str = "r", **kw: object) -> Rule:
    kw.setdefault("on", Trigger(type=("ping",)))
    return Rule(name=name, agent="a", **kw)  # type: ignore[arg-type]


def ev(id_: str, type_: str = "ping", subject: str = "s", **kw: object) -> Event:
    return Event(source="local", id=id_, type=type_, subject=subject, **kw)  # type: ignore[arg-type]


def receipt(body: str) -> str:
    return f"done\n```autoloop\n{body}\n```\n"


class Kernel:
    """The whole state in memory, every fact kept: a ledger without a database."""

    def __init__(self, rules: Rules, now: datetime = T0) -> None:
        self.rules = rules
        self.state = State()
        self.facts: list[object] = []
        self.now = now

    def step(self, inp: k.Input) -> k.Decision:
        d = step(self.state, inp, now=self.now, rules=self.rules)
        self.facts.extend(d.facts)
        return d

    def advance(self, **kw: float) -> None:
        self.now = self.now + timedelta(**kw)

    def claim(self, matter: str, worker: str = "w") -> str | None:
        d = self.step(k.Claim(matter=matter, worker=worker))
        return str(d.reply.data["turn"]) if d.reply.ok else None

    def finish(self, turn: str, message: str, *, session: str | None = "sess-1") -> k.Decision:
        fence = self.state.turns[turn].fence
        out = k.AgentOutcome(started=True, ok=True, final_message=message, session=session)
        return self.step(k.Finish(turn=turn, fence=fence, outcome=out))

    def replayed(self) -> State:
        return replay(list(self.facts))  # type: ignore[arg-type]
