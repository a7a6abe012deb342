"""Pipelines in the kernel: versions, exactly-once writes, cards on the pipeline, waking."""

from __future__ import annotations

from kernel import inputs as k
from kernel.durations import iso
from kernel.records import Action, Card, Pipeline
from tests.kernel.helpers import T0, Kernel, rule, rules_of

PIPE = "deliver/acme/web#12"
SUBJECT = "acme/web#12"


def kernel() -> Kernel:
    return Kernel(rules_of(rule()))


def advance(kn: Kernel, version: int, stage: str, **kw: object) -> k.Decision:
    return kn.step(
        k.Advance(pipeline=PIPE, subject=SUBJECT, version=version, stage=stage, **kw)  # type: ignore[arg-type]  # test data: fields by name
    )


def pipe(kn: Kernel) -> Pipeline:
    return kn.state.pipelines[PIPE]


def merge(sha: str = "a" * 40) -> k.ActionSpec:
    return k.ActionSpec(id=f"{PIPE}/r1/merge/{sha}/1", do="github.merge", params={"sha": sha})


def test_a_new_pipeline_is_recorded_at_version_one_with_its_stage_and_wake_time() -> None:
    kn = kernel()
    due = iso(T0.replace(hour=T0.hour + 1))
    out = advance(kn, 0, "checks", data={"head": "abc"}, wake_at=due)
    assert out.reply.code == "advanced"
    p = pipe(kn)
    assert (p.stage, p.version, p.wake_at, dict(p.data)) == ("checks", 1, due, {"head": "abc"})
    assert out.wake_at is None or out.wake_at >= T0


def test_a_decision_made_on_an_old_version_is_stale_and_changes_nothing() -> None:
    kn = kernel()
    advance(kn, 0, "checks")
    advance(kn, 1, "merge", actions=(merge(),))
    late = advance(kn, 1, "merge", actions=(merge("b" * 40),))
    assert late.reply.code == "stale"
    assert late.facts == ()
    assert len(kn.state.actions) == 1


def test_a_write_is_requested_once_whatever_the_shell_asks() -> None:
    kn = kernel()
    advance(kn, 0, "checks")
    first = advance(kn, 1, "merge", actions=(merge(),))
    again = advance(kn, 2, "merge", actions=(merge(), merge()))
    assert [type(e).__name__ for e in first.effects] == ["PerformAction"]
    assert again.effects == ()
    (action,) = kn.state.actions.values()
    assert isinstance(action, Action)
    assert (action.matter, action.turn, action.do) == (PIPE, "", "github.merge")


def test_its_write_result_wakes_it_and_opens_no_card() -> None:
    kn = kernel()
    advance(kn, 0, "merge", actions=(merge(),), wake_at=iso(T0.replace(hour=T0.hour + 2)))
    kn.advance(minutes=1)
    done = kn.step(k.ActionDone(action=merge().id, ok=False, error="[head_moved] 409"))
    assert done.reply.code == "recorded"
    assert pipe(kn).wake_at == iso(kn.now)
    assert pipe(kn).version == 2  # a decision made before the answer is stale
    assert kn.state.cards == {}


def test_a_quiet_write_wakes_nobody_when_it_ends() -> None:
    kn = kernel()
    show = k.ActionSpec(id=f"{PIPE}/progress/1", do="github.progress", params={"quiet": True})
    advance(kn, 0, "checks", actions=(show,), wake_at=iso(T0.replace(hour=T0.hour + 2)))
    kn.advance(minutes=1)
    kn.step(k.ActionDone(action=show.id, ok=True))
    assert (pipe(kn).version, pipe(kn).wake_at) == (1, iso(T0.replace(hour=T0.hour + 2)))


def test_one_card_per_key_while_open_and_an_answer_wakes_the_pipeline() -> None:
    kn = kernel()
    ask = k.CardSpec(key="merge_unclear", title="Merged?", options=("yes", "no"))
    out = advance(kn, 0, "blocked", cards=(ask,))
    (cid,) = out.reply.data["cards"].values()
    advance(kn, 1, "blocked", cards=(ask,))
    assert len(kn.state.cards) == 1
    kn.advance(minutes=5)
    answered = kn.step(k.Answer(card=cid, choice=2, by="maintainer", via="github"))
    assert answered.reply.code == "answered"
    card = kn.state.cards[cid]
    assert isinstance(card, Card) and card.choice == 2
    assert pipe(kn).wake_at == iso(kn.now)
    assert not kn.state.events  # no agent is woken: the pipeline reads the answer
    assert advance(kn, 2, "checks").reply.code == "stale"  # decided without the answer
    advance(kn, pipe(kn).version, "checks", resolve=("merge_unclear",))
    assert kn.state.cards[cid].state == "done"
    assert pipe(kn).cards == {}


def test_wake_marks_active_pipelines_due_now_once_an_instant() -> None:
    kn = kernel()
    advance(kn, 0, "checks", wake_at=iso(T0.replace(hour=T0.hour + 1)))
    kn.advance(minutes=1)
    woken = kn.step(k.Wake(pipelines=(PIPE, "deliver/other#1", PIPE)))
    assert woken.reply.data["pipelines"] == [PIPE]
    assert kn.step(k.Wake(pipelines=(PIPE,))).reply.data["pipelines"] == []  # woken this instant
    kn.advance(seconds=1)
    again = kn.step(k.Wake(pipelines=(PIPE,)))  # due already, and something new happened
    assert again.reply.data["pipelines"] == [PIPE] and pipe(kn).wake_at == iso(kn.now)
    advance(kn, pipe(kn).version, "delivered", ended=True)
    assert pipe(kn).ended and pipe(kn).wake_at == ""
    assert kn.step(k.Wake(pipelines=(PIPE,))).facts == ()
    assert advance(kn, pipe(kn).version, "review").reply.code == "ended"


def test_replay_gives_the_pipeline_reached_step_by_step() -> None:
    kn = kernel()
    advance(kn, 0, "checks", cards=(k.CardSpec(key="n", title="FYI"),))
    advance(kn, 1, "merge", actions=(merge(),))
    kn.step(k.ActionDone(action=merge().id, ok=True, result={"merged": True}))
    advance(kn, pipe(kn).version, "delivered", ended=True, resolve=("n",))
    assert kn.replayed().records() == kn.state.records()


def test_a_pipeline_that_ended_starts_a_new_run_only_when_asked() -> None:
    kn = kernel()
    advance(kn, 0, "checks")
    assert advance(kn, 1, "review", restart=True).reply.code == "active"  # still running
    advance(kn, 1, "cancelled", ended=True)
    assert advance(kn, 2, "review").reply.code == "ended"
    again = advance(kn, 2, "review", restart=True)
    assert again.reply.code == "advanced"
    assert (pipe(kn).stage, pipe(kn).ended, pipe(kn).version) == ("review", False, 3)
    assert kn.replayed().records() == kn.state.records()


def test_an_ended_pipeline_takes_a_note_of_data_and_nothing_else() -> None:
    """What a review agent spent after its delivery ended is kept with the ended record
    (the daily caps count it): only its data changes, it stays ended, and when it ended."""
    kn = kernel()
    advance(kn, 0, "review")
    kn.advance(minutes=1)
    advance(kn, 1, "cancelled", ended=True)
    ended = pipe(kn)
    kn.advance(minutes=2)
    note = advance(kn, 2, "cancelled", ended=True, data={"review_spend": [{"at": "x"}]})
    assert note.reply.code == "advanced"
    p = pipe(kn)
    assert (p.ended, p.stage, p.version, p.wake_at) == (True, "cancelled", 3, "")
    assert dict(p.data) == {"review_spend": [{"at": "x"}]}
    assert (p.started_at, p.updated_at) == (ended.started_at, ended.updated_at)
    asks: list[dict[str, object]] = [
        {"actions": (merge(),)},
        {"cards": (k.CardSpec(key="n", title="FYI"),)},
        {"resolve": ("n",)},
        {"wake_at": iso(kn.now)},
    ]
    for more in asks:  # a note asks for nothing
        assert advance(kn, 3, "cancelled", ended=True, **more).reply.code == "ended", more
    assert advance(kn, 3, "review", ended=True).reply.code == "ended"  # another stage
    other = k.Advance(
        pipeline=PIPE, subject="acme/web#13", version=3, stage="cancelled", ended=True
    )
    assert kn.step(other).reply.code == "ended"  # another subject
    assert advance(kn, 3, "cancelled").reply.code == "ended"  # not ended: a decision
    assert kn.state.actions == {} and kn.state.cards == {}
    assert kn.replayed().records() == kn.state.records()
