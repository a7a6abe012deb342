"""The daily spend cap, end to end through the command line with the fake CLIs.

The fake ``claude`` reports $0.0123 and 200 tokens per turn; the fake ``codex`` reports
24885 tokens and no cost. Time is pinned with AUTOLOOP_CLOCK; the rules' timezone sets
where a day begins.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ghapp.runtime.budget import Usage, UsageMeter, cap_notice, day_bounds, usage_between
from ghapp.runtime.ledger import Ledger
from ghapp.store.open import open_store
from kernel import inputs as k
from kernel.records import Turn
from kernel.rules import parse_rules
from tests.hub_cli import Home, fake_agent
from tests.kernel.helpers import T0, ev, rule, rules_of

# 18:00 in Shanghai on 30 November; 01:00 on 1 December there is 17:00 UTC.
MORNING = "2026-11-30T10:00:00+00:00"
NEXT_DAY_THERE = "2026-11-30T17:00:00+00:00"


def doc(use: str = "claude", **caps: Any) -> dict[str, Any]:
    return {
        "timezone": "Asia/Shanghai",
        **caps,
        "agents": {"coder": fake_agent(use)},
        "rules": [
            {"name": "r", "on": {"type": ["ping"]}, "agent": "coder", "parallel": True},
        ],
    }


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path)
    h.base["AUTOLOOP_CLOCK"] = MORNING
    return h


def budget_cards(st: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in st["cards"] if c["key"].startswith("budget/")]


def pending(st: dict[str, Any]) -> list[int]:
    return sorted(s for m in st["matters"] for s in m["pending"])


def test_over_the_dollar_cap_no_turn_starts_one_card_and_events_wait(home: Home) -> None:
    home.rules(doc(max_usd_per_day=0.02))
    for i in range(3):
        home.emit("ping", f"acme/web#{i}", f"e{i}")
    out = home.run("drain").stdout
    st = home.status()
    # Two turns ($0.0123 each): the second started under the cap and crossed it.
    assert [t["outcome"] for t in st["turns"]] == ["ok", "ok"]
    assert pending(st) == [3]
    (card,) = budget_cards(st)
    assert card["key"] == "budget/2026-11-30" and card["matter"] == "_owner"
    assert card["kind"] == "notice"
    assert "$0.02 of max_usd_per_day $0.02" in card["text"] and "2 turns" in card["text"]
    assert "2026-12-01 00:00 CST" in card["text"] and "raise the cap" in card["text"]
    assert card["title"] in out  # the drain showed the card
    # More events and more drains: nothing starts, nothing is lost, no second card.
    home.emit("ping", "acme/web#9", "e9")
    home.run("drain")
    home.run("drain")
    st = home.status()
    assert len(st["turns"]) == 2 and pending(st) == [3, 4]
    assert len(budget_cards(st)) == 1
    text = home.run("status").stdout
    assert "today: 2 turns, 400 tokens, $0.0246" in text
    assert "daily cap (Asia/Shanghai): $0.02, REACHED" in text
    usage = st["usage"]
    assert usage["today"]["turns"] == 2 and usage["today"]["cost_usd"] == pytest.approx(0.0246)

    # Raising the cap in rules.json releases the queued events.
    home.write_rules(doc(max_usd_per_day=1))
    home.run("drain")
    st = home.status()
    assert len(st["turns"]) == 4 and pending(st) == []
    assert sorted(s for t in st["turns"] for s in t["events"]) == [1, 2, 3, 4]
    assert "not reached" in home.run("status").stdout


def test_the_next_local_day_releases_the_queue_and_counts_afresh(home: Home) -> None:
    home.rules(doc(max_usd_per_day=0.01))
    home.emit("ping", "acme/web#1", "e1")
    home.emit("ping", "acme/web#2", "e2")
    home.run("drain")
    st = home.status()
    assert len(st["turns"]) == 1 and pending(st) == [2]
    home.run("drain", AUTOLOOP_CLOCK="2026-11-30T15:59:00+00:00")  # 23:59 there: same day
    assert len(home.status()["turns"]) == 1
    home.run("drain", AUTOLOOP_CLOCK=NEXT_DAY_THERE)
    st = home.json("status", AUTOLOOP_CLOCK=NEXT_DAY_THERE)
    assert len(st["turns"]) == 2 and pending(st) == []
    assert st["usage"]["today"]["turns"] == 1  # the new day counts only its own turn
    assert st["usage"]["week"]["turns"] == 2
    assert [c["key"] for c in budget_cards(st)] == ["budget/2026-11-30"]
    # yesterday's card says nothing true any more: it stayed open after turns ran again
    assert [c["state"] for c in budget_cards(st)] == ["closed"]


def test_the_token_cap_holds_agents_that_report_no_cost(home: Home) -> None:
    home.rules(doc("codex", max_tokens_per_day=30000))
    for i in range(3):
        home.emit("ping", f"acme/web#{i}", f"e{i}")
    home.run("drain")
    st = home.status()
    assert [t["cost_usd"] for t in st["turns"]] == [None, None]
    assert [t["tokens"] for t in st["turns"]] == [24885, 24885]
    (card,) = budget_cards(st)
    assert "49770 tokens of max_tokens_per_day 30000" in card["text"]
    assert pending(st) == [3]


def test_without_caps_nothing_is_held(home: Home) -> None:
    home.rules(doc())
    for i in range(3):
        home.emit("ping", f"acme/web#{i}", f"e{i}")
    home.run("drain")
    st = home.status()
    assert len(st["turns"]) == 3 and budget_cards(st) == []
    assert "daily cap" not in home.run("status").stdout


def _turn(n: int, at: str, *, cost: float | None = None, tokens: int | None = None) -> Turn:
    return Turn(
        id=f"t{n}", matter="m", rule="r", agent="a", worker="w", started_at=at,
        cost_usd=cost, tokens=tokens,
    )  # fmt: skip


def test_a_day_is_a_local_calendar_day_and_counts_turns_that_started_in_it() -> None:
    now = datetime(2026, 11, 30, 17, 0, tzinfo=UTC)  # 01:00 on 1 December in Shanghai
    day, start, end = day_bounds(now, "Asia/Shanghai")
    assert day == "2026-12-01"
    assert start.startswith("2026-11-30T16:00:00") and end.startswith("2026-12-01T16:00:00")
    turns = [
        _turn(1, "2026-11-30T15:59:59.000000+00:00", cost=5.0, tokens=1),
        _turn(2, "2026-11-30T16:00:00.000000+00:00", cost=0.5, tokens=10),
        _turn(3, "2026-11-30T16:30:00.000000+00:00", tokens=20),
    ]
    assert usage_between(turns, start, end) == Usage(turns=2, tokens=30, cost_usd=0.5)


def test_the_cap_notice_names_what_was_reached_and_is_none_under_the_caps() -> None:
    rules = parse_rules(
        json.dumps({"max_usd_per_day": 1, "max_tokens_per_day": 100, "agents": {}, "rules": []}),
        path="rules.json",
    )
    now = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    assert cap_notice(rules, now, Usage(turns=3, tokens=99, cost_usd=0.99)) is None
    both = cap_notice(rules, now, Usage(turns=3, tokens=100, cost_usd=1.0))
    assert both is not None and both.key == "budget/2026-11-30"
    assert "$1.00 of max_usd_per_day $1" in both.text and "100 tokens of" in both.text


def test_the_usage_meter_reads_only_new_turn_facts_and_agrees_with_the_turns(
    tmp_path: Path,
) -> None:
    """Over a real ledger: each refresh reads the turn facts appended since the last one,
    and the sums equal those over the turn records."""
    rules = rules_of(rule(parallel=True))
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    led = Ledger(store, lambda: rules, lambda: T0)
    meter = UsageMeter()
    _, start, end = day_bounds(T0, "UTC")

    def run_turn(n: int, tokens: int, usd: float) -> None:
        led.decide(k.Ingest(event=ev(str(n), subject=f"s{n}")))
        turn = str(led.decide(k.Claim(matter=f"r/s{n}", worker="w")).reply.data["turn"])
        out = k.AgentOutcome(started=True, ok=True, final_message="", tokens=tokens, cost_usd=usd)
        led.decide(k.Finish(turn=turn, fence=n, outcome=out))

    try:
        run_turn(1, 10, 0.25)
        with store.read() as tx:
            meter.refresh(tx)
        assert meter.usage(start, end) == Usage(turns=1, tokens=10, cost_usd=0.25)
        seen = meter.after
        run_turn(2, 5, 0.5)
        with store.read() as tx:
            assert len(tx.facts(seen, types=("TurnStarted", "TurnFinished"))) == 2
            meter.refresh(tx)
            turns = [t for t in tx.query("turn") if isinstance(t, Turn)]
        assert meter.usage(start, end) == usage_between(turns, start, end)
        assert meter.usage(start, end) == Usage(turns=2, tokens=15, cost_usd=0.75)
        # a day far later: the old turns are dropped from memory
        _, later, later_end = day_bounds(datetime(2026, 12, 30, tzinfo=UTC), "UTC")
        assert meter.usage(later, later_end) == Usage()
        assert meter.turns == {}
    finally:
        store.close()


def test_the_meters_first_look_starts_a_day_before_the_window_not_at_the_first_fact(
    tmp_path: Path,
) -> None:
    """With caps set, the first claim after a start read every fact of the ledger's life
    (every delivery's decisions among them): it starts a day before today."""
    rules = rules_of(rule(parallel=True))
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    clock = [T0]
    led = Ledger(store, lambda: rules, lambda: clock[0])

    def run_turn(n: int, usd: float) -> None:
        led.decide(k.Ingest(event=ev(str(n), subject=f"s{n}")))
        turn = str(led.decide(k.Claim(matter=f"r/s{n}", worker="w")).reply.data["turn"])
        out = k.AgentOutcome(started=True, ok=True, final_message="", tokens=1, cost_usd=usd)
        led.decide(k.Finish(turn=turn, fence=n, outcome=out))

    try:
        for day in range(10):
            clock[0] = T0 + timedelta(days=day)
            run_turn(day + 1, 1.0)
        _, start, end = day_bounds(clock[0], "UTC")
        meter = UsageMeter()
        with store.read() as tx:
            meter.refresh(tx, since=start)
        assert sorted(meter.turns) == ["t10", "t9"]  # read from a day before today only
        assert meter.usage(start, end) == Usage(turns=1, tokens=1, cost_usd=1.0)
    finally:
        store.close()
