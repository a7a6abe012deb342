"""The daily spend cap: what the turns of a day cost, and whether a new turn may start.

rules.json's top-level ``max_usd_per_day`` caps the dollars the agents report
(``cost_usd`` of each turn), and ``max_tokens_per_day`` the tokens (for agents that
report tokens but no cost). A day is a calendar day in the rules' ``timezone``; the turns
counted are those that *started* that day, with the figures their agents reported when
they finished. The runs of review agents (a delivery policy's ``review = "agent:NAME"``)
count too, from when each started: their spend is kept with the delivery
(``review_spend`` in its record's data). When a cap is reached no new turn starts:
events stay pending on their matters and run when the cap is raised or the next day
begins. A review is not run then: its delivery raises a card, answered once the cap
allows. A turn already running is never stopped by the cap (a rule's own
``budget_usd`` limits one turn).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

from ghapp.runtime.days import day_bounds, review_runs, spent_between
from kernel import facts as f
from kernel.durations import iso
from kernel.model import Rules
from kernel.records import Turn

if TYPE_CHECKING:  # the notice is made only when a cap is reached
    from kernel import inputs as k

__all__ = [
    "Usage",
    "UsageMeter",
    "cap_notice",
    "day_bounds",
    "review_runs",
    "usage_between",
]


@dataclass(frozen=True, slots=True)
class Usage:
    turns: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


def usage_between(turns: Iterable[Turn], start: str, end: str) -> Usage:
    """Turns started in [start, end) and what they reported (ISO instants compare as text)."""
    return _total(((t.started_at, t.tokens, t.cost_usd) for t in turns), start, end)


def _total(turns: Iterable[tuple[str, int | None, float | None]], start: str, end: str) -> Usage:
    """Sum of (started, tokens, usd) over the turns started in [start, end)."""
    n, tokens, cost = spent_between(turns, start, end)
    return Usage(turns=n, tokens=tokens, cost_usd=cost)


def cap_notice(rules: Rules, now: datetime, used: Usage) -> k.OwnerNotice | None:
    """The owner card to raise when today's use reached a cap, or None while under both."""
    reached: list[str] = []
    if rules.max_usd_per_day is not None and used.cost_usd >= rules.max_usd_per_day:
        reached.append(f"${used.cost_usd:.2f} of max_usd_per_day ${rules.max_usd_per_day:g}")
    if rules.max_tokens_per_day is not None and used.tokens >= rules.max_tokens_per_day:
        reached.append(f"{used.tokens} tokens of max_tokens_per_day {rules.max_tokens_per_day}")
    if not reached:
        return None
    day, _, end = day_bounds(now, rules.timezone)
    resume_at = datetime.fromisoformat(end).astimezone(ZoneInfo(rules.timezone))
    from kernel import inputs as k  # noqa: PLC0415  # only when a cap is reached: status starts fast

    return k.OwnerNotice(
        key=f"budget/{day}",
        title="Daily spend cap reached: no new agent turns today",
        text=(
            f"On {day} ({rules.timezone}) the agents used {' and '.join(reached)} "
            f"in {used.turns} turns and reviews. No new turn starts; new events wait, "
            "queued, and none is "
            f"lost. They run from {resume_at.strftime('%Y-%m-%d %H:%M %Z')}, or at once if "
            f"you raise the cap in {rules.path}. A review a delivery asks for meanwhile is "
            "not run: the delivery raises a card, to answer once the cap allows. 'autoloop "
            "status' shows the spend."
        ),
    )


class FactReader(Protocol):  # the part of a store transaction the meter reads
    def facts(
        self, after: int = 0, limit: int | None = None, *, types: tuple[str, ...] = ()
    ) -> list[tuple[int, str, f.Fact]]: ...

    def facts_since(self, at: str) -> int: ...


@dataclass(slots=True)
class _Spent:
    started: str
    tokens: int = 0
    usd: float = 0.0


@dataclass
class UsageMeter:
    """What recent turns reported, kept up to date from the facts appended since the
    last look: a claim reads the few turn facts that are new, not every turn ever run.

    Turns that started more than ``keep_days`` before the day asked about are dropped.
    """

    keep_days: int = 7
    after: int = 0  # the last fact seq read
    turns: dict[str, _Spent] = field(default_factory=dict)

    def refresh(self, tx: FactReader, since: str = "") -> None:
        """Read the facts appended since the last look; the first look starts a day
        before ``since`` (the oldest instant asked about: a turn started before it is not
        counted), not at the ledger's first fact (every delivery's decisions, decoded)."""
        if self.after == 0 and since:
            margin = iso(datetime.fromisoformat(since) - timedelta(days=1))  # clocks apart
            self.after = tx.facts_since(margin)
        types = ("TurnStarted", "TurnFinished", "PipelineAdvanced")
        for seq, _, fact in tx.facts(self.after, types=types):
            if isinstance(fact, f.TurnStarted):
                self.turns[fact.turn] = _Spent(fact.at)
            elif isinstance(fact, f.TurnFinished) and (spent := self.turns.get(fact.turn)):
                spent.tokens, spent.usd = fact.tokens or 0, fact.cost_usd or 0.0
            elif isinstance(fact, f.PipelineAdvanced):
                for at, tokens, usd, request in review_runs(fact.data):
                    self.turns.setdefault(f"{fact.pipeline}/{request}", _Spent(at, tokens, usd))
            self.after = max(self.after, seq)

    def usage(self, start: str, end: str) -> Usage:
        """Turns started in [start, end) and what they reported."""
        keep = iso(datetime.fromisoformat(start) - timedelta(days=self.keep_days))
        for tid in [t for t, spent in self.turns.items() if spent.started < keep]:
            del self.turns[tid]
        return _total(((s.started, s.tokens, s.usd) for s in self.turns.values()), start, end)
