"""The decision function, driven through whole scenarios in memory."""

from __future__ import annotations

import json
from dataclasses import replace

from kernel import inputs as k
from kernel.durations import parse_instant
from kernel.model import HOP_LIMIT_KEY, ReceiptError, Trigger
from kernel.receipt import parse_receipt
from kernel.state import replay
from kernel.step import needs
from kernel.turns import RETRY_WAIT_MAX_S, retry_wait_s
from tests.kernel.helpers import Kernel, ev, receipt, rule, rules_of

ASK = receipt(
    json.dumps({"ask": [{"key": "colour", "title": "Pick", "options": ["red", "green", "blue"]}]})
)


def test_same_source_and_id_twice_is_one_event() -> None:
    kn = Kernel(rules_of(rule()))
    assert kn.step(k.Ingest(event=ev("1"))).reply.code == "recorded"
    assert kn.step(k.Ingest(event=ev("1"))).reply.code == "duplicate"
    assert len(kn.state.events) == 1
    assert kn.state.pending_of("r") == (1,) and kn.state.matters["r"].waiting


def test_the_same_content_under_a_new_id_is_a_duplicate() -> None:
    kn = Kernel(rules_of(rule()))
    first = k.Ingest(event=ev("d1"), content_key="github:abc")
    assert kn.step(first).reply.code == "recorded"
    for id_ in ("d2", "d3"):
        d = kn.step(k.Ingest(event=ev(id_), content_key="github:abc"))
        assert (d.reply.code, d.facts) == ("duplicate", ())
        assert "the same body sent again" in d.reply.message
    assert kn.step(k.Ingest(event=ev("d4"), content_key="github:abd")).reply.code == "recorded"
    assert kn.step(k.Ingest(event=ev("d5"))).reply.code == "recorded"  # no key: no check
    assert len(kn.state.events) == 3
    # a replay of the facts knows the content keys too
    assert replay(kn.facts).seen_keys == kn.state.seen_keys
    assert needs(first, kn.rules).event_keys == {"event:local:d1", "content:github:abc"}


def test_events_arriving_during_a_turn_form_exactly_one_next_batch() -> None:
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("0")))
    t1 = kn.claim("r")
    assert t1 is not None
    for i in range(1, 4):
        kn.step(k.Ingest(event=ev(str(i))))
    assert kn.claim("r") is None  # one running turn per matter
    kn.finish(t1, "no receipt here")
    t2 = kn.claim("r")
    assert t2 is not None
    assert kn.state.turns[t2].events == (2, 3, 4)
    assert kn.claim("r") is None


def test_parallel_rule_gives_one_matter_per_subject() -> None:
    kn = Kernel(rules_of(rule(parallel=True)))
    for i, subject in enumerate(["a", "b", "a"]):
        kn.step(k.Ingest(event=ev(str(i), subject=subject)))
    assert kn.state.pending_of("r/a") == (1, 3)
    assert kn.state.pending_of("r/b") == (2,)


def test_ask_waits_then_answer_resumes_reported_session() -> None:
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    d = kn.finish(t1, ASK, session="agent-xyz")
    assert any(isinstance(e, k.SendCard) for e in d.effects)
    card = next(iter(kn.state.cards.values()))
    assert (card.state, card.kind_, card.options) == ("open", "ask", ("red", "green", "blue"))
    assert not kn.state.matters["r"].runnable  # nothing runs while the card waits
    assert kn.step(k.Answer(card=card.id, choice=2, by="me")).reply.ok
    again = kn.step(k.Answer(card=card.id, choice=1, by="me"))
    assert (again.reply.ok, again.reply.code) == (False, "refused")
    assert "already answered" in again.reply.message
    t2 = kn.claim("r")
    assert t2
    turn = kn.state.turns[t2]
    assert turn.resume == "agent-xyz"
    answer = kn.state.events[turn.events[0]].event
    assert (answer.type, answer.details["choice"], answer.details["index"]) == (
        "card.answered",
        "green",
        2,
    )
    assert kn.claim("r") is None


def test_unknown_card_and_bad_choice_are_refused_with_a_message() -> None:
    kn = Kernel(rules_of(rule()))
    r = kn.step(k.Answer(card="c99", choice=1, by="me")).reply
    assert (r.ok, r.code) == (False, "unknown")
    assert "autoloop cards" in r.message
    kn.step(k.Ingest(event=ev("1")))
    t = kn.claim("r")
    assert t
    kn.finish(t, ASK)
    r = kn.step(k.Answer(card="c1", choice=7, by="me")).reply
    assert (r.ok, r.code) == (False, "invalid")


def test_self_waking_chain_stops_after_max_hops_with_one_card() -> None:
    loop = rule(on=Trigger(type=("ping",)), emits=("ping",))
    kn = Kernel(rules_of(loop))
    kn.step(k.Ingest(event=ev("start")))
    turns = []
    while (t := kn.claim("r")) is not None:
        turns.append(t)
        kn.finish(t, receipt('{"events": [{"type": "ping"}]}'))
    assert [kn.state.turns[t].hops for t in turns] == list(range(9))
    cut = [e for e in kn.state.events.values() if e.event.hops == 9]
    assert len(cut) == 1 and not cut[0].dispatched
    assert "hop limit" in cut[0].reason
    hop_cards = [c for c in kn.state.cards.values() if c.key == HOP_LIMIT_KEY]
    assert len(hop_cards) == 1


def test_an_agent_cannot_close_the_hubs_own_cards_in_its_matter() -> None:
    """A looping agent closed its matter's hop-limit card, the one that told the owner
    it looped. It still closes its own cards (the test below) and may not take the
    hub's key for one of its own."""
    loop = rule(on=Trigger(type=("ping",)), emits=("ping",))
    kn = Kernel(rules_of(loop))
    kn.step(k.Ingest(event=ev("start")))
    while (t := kn.claim("r")) is not None:
        kn.finish(t, receipt('{"events": [{"type": "ping"}]}'))
    (hop,) = [c for c in kn.state.cards.values() if c.key == HOP_LIMIT_KEY]
    kn.step(k.Ingest(event=ev("more")))
    t = kn.claim("r")
    assert t is not None
    kn.finish(t, receipt(json.dumps({"resolve": [hop.id, HOP_LIMIT_KEY]})))
    assert kn.state.turns[t].outcome == "ok"
    assert kn.state.cards[hop.id].state == "open"
    taken = {"ask": [{"key": HOP_LIMIT_KEY, "title": "x", "options": ["1"]}]}
    refused = parse_receipt(receipt(json.dumps(taken)), rule=loop)
    assert isinstance(refused, ReceiptError)
    assert refused.message == "ask[0].key: 'hop-limit' is the hub's own card: choose another key"


def test_an_answer_to_a_card_resolved_before_any_answer_says_so() -> None:
    """A card closed when what it asked about moved on (a push) was answered "already
    answered ('?')": there was no answer, and no '?' option."""
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    kn.finish(t1, ASK)
    card = next(iter(kn.state.cards.values()))
    kn.step(k.Ingest(event=ev("2")))
    t2 = kn.claim("r")
    assert t2
    kn.finish(t2, receipt(f'{{"resolve": ["{card.key}"]}}'))
    assert kn.state.cards[card.id].state != "open"
    late = kn.step(k.Answer(card=card.id, choice=1, by="me")).reply
    assert (late.ok, late.code) == (False, "refused")
    assert late.message.startswith(f"card {card.id} was ")
    assert "without an answer" in late.message and "'?'" not in late.message


def test_malformed_receipt_gets_one_repair_turn_in_the_same_session() -> None:
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    kn.finish(t1, receipt('{"ask": [{"key": "x", "title": "t", "options": ["only one"]}]}'))
    assert kn.state.turns[t1].outcome == "malformed"
    # the field is named once (it was "ask[0].options: ask[0].options: needs ...")
    assert kn.state.turns[t1].error == (
        "malformed receipt: ask[0].options: needs 2 or more options, got 1"
    )
    assert kn.state.cards == {}
    t2 = kn.claim("r")
    assert t2
    repair = kn.state.turns[t2]
    assert (repair.kind_, repair.resume, repair.events) == ("repair", "sess-1", ())
    kn.finish(t2, receipt('{"notice": [{"title": "fixed"}]}'))
    assert [c.title for c in kn.state.cards.values()] == ["fixed"]
    assert kn.claim("r") is None


def test_malformed_twice_raises_a_notice_and_stops() -> None:
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    bad = receipt("{not json")
    t1 = kn.claim("r")
    assert t1
    kn.finish(t1, bad)
    t2 = kn.claim("r")
    assert t2
    kn.finish(t2, bad)
    assert kn.claim("r") is None
    (card,) = kn.state.cards.values()
    assert card.kind_ == "notice" and "malformed twice" in card.title


def test_a_repair_that_gives_no_receipt_raises_a_notice() -> None:
    """The docs promise a notice when the repair fails too: a repair that printed no
    receipt at all ended quietly, the first receipt's effects lost without a word."""
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    kn.finish(t1, receipt("{not json"))
    t2 = kn.claim("r")
    assert t2 and kn.state.turns[t2].kind_ == "repair"
    kn.finish(t2, "I could not do it.")
    assert kn.state.turns[t2].outcome == "no_receipt"
    (card,) = kn.state.cards.values()
    assert card.kind_ == "notice" and card.title == (
        "The agent's receipt was malformed and not repaired"
    )
    assert kn.claim("r") is None


def test_no_receipt_ends_quietly_without_retry() -> None:
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    d = kn.finish(t1, "all done, nothing to say")
    assert kn.state.turns[t1].outcome == "no_receipt"
    assert d.effects == ()
    assert kn.claim("r") is None


def test_later_fires_once_even_when_the_clock_goes_back() -> None:
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    kn.finish(t1, receipt('{"later": [{"in": "30m", "why": "re-check"}]}'))
    kn.advance(minutes=29)
    assert kn.step(k.Tick()).reply.data["timers_fired"] == 0
    kn.advance(minutes=2)
    assert kn.step(k.Tick()).reply.data["timers_fired"] == 1
    kn.advance(minutes=-20)
    assert kn.step(k.Tick()).reply.data["timers_fired"] == 0
    kn.advance(minutes=60)
    assert kn.step(k.Tick()).reply.data["timers_fired"] == 0
    fired = [e for e in kn.state.events.values() if e.event.type == "timer.fired"]
    assert len(fired) == 1 and fired[0].routes == ("r",)


def test_actions_follow_allow_approve_and_refuse_the_rest() -> None:
    r = rule(allow=("github.comment",), approve=("github.close",))
    kn = Kernel(rules_of(r))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    body = {
        "actions": [
            {"do": "github.comment", "repo": "o/r", "number": 1, "body": "hi"},
            {"do": "github.close", "repo": "o/r", "number": 1},
            {"do": "github.merge", "repo": "o/r", "number": 1},
        ]
    }
    d = kn.finish(t1, receipt(json.dumps(body)))
    statuses = {a.do: a.status for a in kn.state.actions.values()}
    assert statuses == {
        "github.comment": "allowed",
        "github.close": "awaiting_approval",
        "github.merge": "refused",
    }
    assert [e.action for e in d.effects if isinstance(e, k.PerformAction)] == [f"{t1}.a0"]
    approval = next(c for c in kn.state.cards.values() if c.action == f"{t1}.a1")
    d2 = kn.step(k.Answer(card=approval.id, choice=1, by="owner"))
    assert kn.state.actions[f"{t1}.a1"].status == "allowed"
    assert [e.action for e in d2.effects if isinstance(e, k.PerformAction)] == [f"{t1}.a1"]


def test_one_performer_at_a_time_claims_a_write_back() -> None:
    kn = Kernel(rules_of(rule(allow=("github.comment",))))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    body = {"actions": [{"do": "github.comment", "repo": "o/r", "number": 1, "body": "hi"}]}
    kn.finish(t1, receipt(json.dumps(body)))
    aid = f"{t1}.a0"

    def tried(by: str, error: str = "") -> k.Reply:
        return kn.step(k.ActionTried(action=aid, by=by, lease_s=60, error=error)).reply

    first = tried("hub-a")
    assert (first.ok, first.data["attempts"]) == (True, 0)
    busy = tried("hub-b")  # hub-a's claim is live: hub-b must not write
    assert (busy.ok, busy.code) == (False, "busy") and "hub-a" in busy.message
    kn.advance(seconds=61)  # hub-a died mid-attempt: its claim lapses
    taken = tried("hub-b")
    assert taken.ok and taken.data["attempts"] == 1  # 1: read back before writing
    assert tried("", error="timed out").ok  # the failure releases the claim
    assert kn.state.actions[aid].claimed_by == ""
    again = tried("hub-a")
    assert again.ok and again.data["attempts"] == 3
    kn.step(k.ActionDone(action=aid, ok=True))
    late = tried("hub-b")
    assert (late.ok, late.code) == (False, "not_allowed")
    assert kn.state.actions[aid].claimed_by == ""
    assert kn.replayed().records() == kn.state.records()


def test_a_claim_whose_performer_was_found_dead_is_taken_over_before_its_lease_ends() -> None:
    kn = Kernel(rules_of(rule(allow=("github.comment",))))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    body = {"actions": [{"do": "github.comment", "repo": "o/r", "number": 1, "body": "hi"}]}
    kn.finish(t1, receipt(json.dumps(body)))
    aid = f"{t1}.a0"

    def tried(by: str, lapsed: str = "") -> k.Reply:
        return kn.step(k.ActionTried(action=aid, by=by, lease_s=300, lapsed=lapsed)).reply

    assert tried("hub-a").ok
    # naming another claimant as dead does not lift hub-a's claim
    assert tried("hub-b", lapsed="hub-c").code == "busy"
    taken = tried("hub-b", lapsed="hub-a")  # hub-b found hub-a's process gone
    assert taken.ok and taken.data["attempts"] == 1  # read back before writing
    assert kn.state.actions[aid].claimed_by == "hub-b"
    assert tried("hub-a").code == "busy"
    assert kn.replayed().records() == kn.state.records()


def test_late_receipt_from_an_old_claim_is_refused() -> None:
    kn = Kernel(rules_of(rule(timeout_s=60)))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    kn.advance(seconds=400)  # the default lease in Claim is 300 s
    kn.step(k.Tick())
    assert kn.state.turns[t1].outcome == "lease_expired"
    t2 = kn.claim("r")  # at once: the lease was the wait, not the agent's failure
    assert t2 and kn.state.turns[t2].kind_ == "retry"
    late = kn.finish(t1, receipt('{"notice": [{"title": "late"}]}'))
    assert late.reply.code == "refused"
    assert all(c.title != "late" for c in kn.state.cards.values())


def test_failed_turn_retries_after_a_doubling_backoff_then_tells_the_owner() -> None:
    kn = Kernel(rules_of(rule(max_retries=2, retry_backoff_s=30)))
    kn.step(k.Ingest(event=ev("1")))
    resumes = []
    waits = []
    for n in range(3):
        if n:
            wait = (parse_instant(kn.state.matters["r"].retry_after) - kn.now).total_seconds()
            waits.append(wait)
            kn.advance(seconds=wait - 1)
            early = kn.step(k.Claim(matter="r", worker="w"))
            assert early.reply.code == "later" and not early.facts  # not before its time
            kn.advance(seconds=1)
        t = kn.claim("r")
        assert t
        assert kn.state.matters["r"].retry_after == ""  # started: nothing to wait for
        resumes.append(kn.state.turns[t].resume)
        out = k.AgentOutcome(started=True, ok=False, session="keep-me", error="boom")
        kn.step(k.Finish(turn=t, fence=kn.state.turns[t].fence, outcome=out))
    assert waits == [30, 60]
    assert resumes == [None, "keep-me", "keep-me"]
    assert kn.state.matters["r"].retry_after == ""  # no retry left: nothing waits
    assert kn.claim("r") is None
    (card,) = kn.state.cards.values()
    assert "failed" in card.title
    assert kn.replayed().records() == kn.state.records()


def test_a_rule_with_no_backoff_retries_at_once_and_the_wait_is_capped() -> None:
    kn = Kernel(rules_of(rule(max_retries=1, retry_backoff_s=0)))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    out = k.AgentOutcome(started=True, ok=False, error="boom")
    kn.step(k.Finish(turn=t1, fence=kn.state.turns[t1].fence, outcome=out))
    assert kn.claim("r")  # at once
    assert retry_wait_s(rule(retry_backoff_s=600), 5) == RETRY_WAIT_MAX_S
    assert retry_wait_s(rule(retry_backoff_s=600), 1) == 1200


ASK_ONE = '{"key": "k", "title": "Which?", "options": ["a", "b"]}'


def test_an_agent_whose_program_is_missing_is_not_retried_and_the_card_says_so() -> None:
    kn = Kernel(rules_of(rule(max_retries=2)))
    kn.step(k.Ingest(event=ev("1")))
    t = kn.claim("r")
    assert t
    out = k.AgentOutcome(
        started=False, ok=False, error="could not start the agent: x: not found", retry=False
    )
    kn.step(k.Finish(turn=t, fence=kn.state.turns[t].fence, outcome=out))
    assert kn.claim("r") is None  # no retry: it would fail the same way at once
    (card,) = kn.state.cards.values()
    assert card.title == "Agent 'a' could not start"
    assert card.key.startswith("failed/") and card.kind_ == "notice"
    assert "not found" in card.text and "agents.a" in card.text
    assert kn.replayed().records() == kn.state.records()


def test_a_notice_is_dismissed_once_and_a_question_is_not() -> None:
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    kn.finish(t1, receipt('{"notice": [{"title": "FYI"}], "ask": [' + ASK_ONE + "]}"))
    notice = next(c for c in kn.state.cards.values() if c.kind_ == "notice")
    ask = next(c for c in kn.state.cards.values() if c.kind_ == "ask")
    done = kn.step(k.Dismiss(card=notice.id, by="me"))
    assert done.reply.code == "dismissed"
    assert done.effects == (k.SendCard(card=notice.id),)
    assert kn.state.cards[notice.id].state == "closed"
    assert kn.state.cards[notice.id].version == notice.version + 1
    again = kn.step(k.Dismiss(card=notice.id))
    assert (again.reply.code, again.reply.message) == (
        "refused",
        f"card {notice.id} is already closed",
    )
    question = kn.step(k.Dismiss(card=ask.id))
    assert question.reply.code == "refused" and "autoloop answer" in question.reply.message
    assert kn.step(k.Dismiss(card="c99")).reply.code == "unknown"
    assert kn.replayed().records() == kn.state.records()


def test_never_started_turn_retries_in_a_fresh_session() -> None:
    kn = Kernel(rules_of(rule()))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    kn.finish(t1, "no receipt", session="old")
    kn.step(k.Ingest(event=ev("2")))
    t2 = kn.claim("r")
    assert t2 and kn.state.turns[t2].resume == "old"
    out = k.AgentOutcome(started=False, ok=False, error="no such session")
    kn.step(k.Finish(turn=t2, fence=kn.state.turns[t2].fence, outcome=out))
    kn.advance(seconds=30)  # the retry's backoff
    t3 = kn.claim("r")
    assert t3 and kn.state.turns[t3].resume is None


def test_replay_equals_the_state_reached_step_by_step() -> None:
    kn = Kernel(rules_of(rule(emits=("ping",))))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")
    assert t1
    kn.finish(t1, ASK)
    kn.step(k.Answer(card="c1", choice=3, by="me"))
    assert kn.replayed().records() == kn.state.records()


def _branching(kn: Kernel, fan: int, limit: int = 500) -> list[str]:
    """Run every waiting matter until none waits (at most ``limit`` turns), each turn
    emitting ``fan`` pings with subjects of their own (so each founds a matter): the
    turns run, in order."""
    turns: list[str] = []
    n = 0
    while waiting := sorted(m.id for m in kn.state.matters.values() if m.waiting):
        for mid in waiting:
            t = kn.claim(mid)
            assert t is not None
            turns.append(t)
            assert len(turns) <= limit, "the chain did not end"
            emits = []
            for _ in range(fan):
                n += 1
                emits.append({"type": "ping", "subject": f"s{n}"})
            kn.finish(t, receipt(json.dumps({"events": emits})))
    return turns


def test_a_branching_chain_emits_at_most_max_chain_events_in_all() -> None:
    """max_hops bounds a chain's depth only: three events a receipt over eight hops were
    3^8 turns from one outside event. Each turn now shares what its chain has left among
    the events it emits."""
    fan_out = rule(on=Trigger(type=("ping",)), emits=("ping",), parallel=True)
    kn = Kernel(replace(rules_of(fan_out), max_chain_events=30))
    kn.step(k.Ingest(event=ev("start")))
    turns = _branching(kn, 3)
    emitted = [e for e in kn.state.events.values() if e.event.source == "agent"]
    sent = [e for e in emitted if e.dispatched]
    # 3 + 9 + 18: the root's turn leaves (30-3)//3 = 9 to each of its events, theirs
    # (9-3)//3 = 2 to each of theirs, which send 2 of their 3 and then nothing
    assert len(sent) == 30
    assert len(turns) == 1 + 3 + 9 + 18
    cut = [e for e in emitted if not e.dispatched]
    assert len(cut) == 9 * 1 + 18 * 3
    assert {e.reason for e in cut} == {"chain limit 30 reached"}
    cards = [c for c in kn.state.cards.values() if c.key == HOP_LIMIT_KEY]
    assert len(cards) == 9 + 18  # one a matter whose turn was cut
    assert "max_chain_events 30" in cards[0].text and "recorded but not dispatched" in cards[0].text
    assert replay(kn.facts) == kn.state


def test_an_outside_event_starts_a_new_chain_and_an_answer_keeps_its_matters() -> None:
    fan_out = rule(on=Trigger(type=("ping",)), emits=("ping",), parallel=True)
    kn = Kernel(replace(rules_of(fan_out), max_chain_events=4))
    kn.step(k.Ingest(event=ev("start")))
    _branching(kn, 2)  # 2 sent, sharing 1 each; then 1 each; then none
    spent = [m for m in kn.state.matters.values() if m.chain == 0]
    assert spent
    again = spent[0]
    # a person comments there: a new outside event, a whole chain
    kn.step(k.Ingest(event=ev("comment", subject=again.subject)))
    t = kn.claim(again.id)
    assert t is not None and kn.state.turns[t].chain == 4
    kn.finish(t, ASK)
    # an answer wakes the matter with the chain of its last batch, not a new one
    (card,) = [c for c in kn.state.cards.values() if c.key == "colour"]
    kn.step(k.Answer(card=card.id, choice=1, by="me"))
    t2 = kn.claim(again.id)
    assert t2 is not None and kn.state.turns[t2].chain == 4
    pings = [{"type": "ping", "subject": f"x{i}"} for i in range(6)]
    kn.finish(t2, receipt(json.dumps({"events": pings})))
    mine = [e for e in kn.state.events.values() if e.event.id.startswith(f"{t2}.")]
    assert [e.dispatched for e in mine] == [True] * 4 + [False] * 2


def test_a_recheck_that_rearms_itself_ends_with_its_chain() -> None:
    """A `later` kept the hops of its matter: an agent that re-armed its re-check every
    turn ran until a daily cap stopped it, and none is set by default."""
    kn = Kernel(replace(rules_of(rule()), max_chain_events=5))
    kn.step(k.Ingest(event=ev("start")))
    turns = []
    for _ in range(20):
        t = kn.claim("r")
        if t is None:
            kn.advance(minutes=2)
            kn.step(k.Tick())
            t = kn.claim("r")
            if t is None:
                break
        turns.append(t)
        kn.finish(t, receipt(json.dumps({"later": [{"in": "1m", "why": "look again"}]})))
    assert len(turns) == 1 + 5  # the first, then five re-checks
    assert [kn.state.turns[t].chain for t in turns] == [5, 4, 3, 2, 1, 0]
    assert len(kn.state.timers) == 5  # the last turn's re-check was not armed
    (card,) = [c for c in kn.state.cards.values() if c.key == HOP_LIMIT_KEY]
    assert "re-checks not armed" in card.text and card.turn == turns[-1]
    assert replay(kn.facts) == kn.state


def test_an_event_two_rules_take_shares_its_chain_between_them() -> None:
    """Each matter an event went to took its whole chain: two rules on one type doubled
    the bound at every hop (1,022 turns from one event, against a bound of 10)."""
    rules = [rule(name, emits=("ping",), parallel=True) for name in ("a", "b")]
    kn = Kernel(replace(rules_of(*rules), max_chain_events=10))
    kn.step(k.Ingest(event=ev("start")))
    turns = 0
    while waiting := sorted(m.id for m in kn.state.matters.values() if m.waiting):
        for mid in waiting:
            t = kn.claim(mid)
            assert t is not None
            turns += 1
            assert turns <= 200, "the chain did not end"
            # one event, a subject of its own: a matter of each rule's
            kn.finish(t, receipt(json.dumps({"events": [{"type": "ping", "subject": t}]})))
    sent = [e for e in kn.state.events.values() if e.event.source == "agent" and e.dispatched]
    assert 0 < len(sent) <= 10
    assert kn.state.turns["t1"].chain == 5  # the outside event's 10, in two
    assert replay(kn.facts) == kn.state


def test_a_comment_batched_with_a_spent_recheck_starts_a_whole_chain() -> None:
    """A turn took the least chain of its batch: a person's comment that came with a
    re-check whose chain was spent could not emit anything."""
    kn = Kernel(replace(rules_of(rule()), max_chain_events=3))
    kn.step(k.Ingest(event=ev("start")))
    t1 = kn.claim("r")
    assert t1 is not None
    later = [{"in": "1m", "why": f"look {i}"} for i in range(3)]
    kn.finish(t1, receipt(json.dumps({"later": later})))  # each with a share of 0
    kn.advance(minutes=2)
    kn.step(k.Tick())
    kn.step(k.Ingest(event=ev("comment")))
    t2 = kn.claim("r")
    assert t2 is not None and len(kn.state.turns[t2].events) == 4
    assert kn.state.turns[t2].chain == 3


def test_an_event_no_rule_takes_leaves_the_chain_to_those_one_does() -> None:
    """An event said for the record (no rule takes it) took a share of the chain that
    then went unused: the event a rule took got half of what was left."""
    said = rule(on=Trigger(type=("ping",)), emits=("ping", "noted"), parallel=True)
    kn = Kernel(replace(rules_of(said), max_chain_events=10))
    kn.step(k.Ingest(event=ev("start")))
    t = kn.claim("r/s")
    assert t is not None
    emits = [{"type": "noted"}, {"type": "ping", "subject": "next"}, {"type": "noted"}]
    kn.finish(t, receipt(json.dumps({"events": emits})))
    rows = {e.event.id: e for e in kn.state.events.values() if e.event.source == "agent"}
    assert rows[f"{t}.1"].dispatched and rows[f"{t}.1"].event.chain == 9  # (10-1)//1
    assert [rows[f"{t}.{i}"].reason for i in (0, 2)] == ["no rule matches"] * 2
    assert not [c for c in kn.state.cards.values() if c.key == HOP_LIMIT_KEY]
