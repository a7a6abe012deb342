"""What a run tells the workflow: outputs, annotations and a summary that keeps text
written by others as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ghapp.commands.action_report import (
    ActionRun,
    Recorded,
    Spent,
    annotation,
    cell,
    code,
    outputs,
    subject_link,
    summary,
    write_outputs,
)
from kernel.model import Event
from kernel.records import Card, Turn

SERVER = "https://github.example"


def report(**kw: object) -> ActionRun:
    base = ActionRun(
        event_name="issues",
        repository="acme/web",
        mode="triage",
        attempt=1,
        delivery="action-7-issues",
        run_url=f"{SERVER}/acme/web/actions/runs/7",
        server_url=SERVER,
    )
    for name, value in kw.items():
        setattr(base, name, value)
    return base


def test_an_annotation_is_one_line_whatever_the_message() -> None:
    assert annotation("error", "50% done\nthen\r::warning::x") == (
        "::error::50%25 done%0Athen%0D::warning::x"
    )


def test_a_cell_keeps_others_text_as_text() -> None:
    assert cell("a | b\n<script>alert(1)</script> [x](http://evil) `code` *bold*") == (
        r"a \| b &lt;script&gt;alert(1)&lt;/script&gt; \[x\](http://evil) \`code\` \*bold\*"
    )
    assert len(cell("x" * 500)) == 120


def test_subjects_link_to_the_issue_others_stay_text() -> None:
    assert subject_link(SERVER, "acme/web#4", "#issuecomment-9") == (
        f"[acme/web#4]({SERVER}/acme/web/issues/4#issuecomment-9)"
    )
    assert subject_link(SERVER, "acme/web") == "acme/web"
    assert subject_link(SERVER, "") == "-"


def test_outputs_are_counts_and_a_clean_stage(tmp_path: Path) -> None:
    card = Card(id="c1", key="k", matter="m1", kind_="ask", options=("a", "b"))
    out = tmp_path / "output"
    out.write_text("earlier=1\n")
    write_outputs(out, report(new_cards=[card], cards=[card], stage="checks\nevil=1"))
    assert out.read_text() == (
        "earlier=1\nturns=0\ncards=1\nstage=checksevil1\ncost-usd=0.0000\ntokens=0\n"
    )


def test_the_summary_tables_the_event_and_the_cards_with_links() -> None:
    event = Event(source="github", id="action-7-issues", type="issues.opened", subject="acme/web#4")
    card = Card(
        id="c1",
        key="k",
        matter="m1",
        kind_="ask",
        title="Ship | now?",
        options=("yes", "no"),
        delivered={"gh": {"version": 1, "ref": "99"}},
    )
    text = summary(
        report(
            events=[Recorded(event, "recorded")],
            cards=[card],
            new_cards=[card],
            subjects={"m1": "acme/web#4"},
            warnings=["careful"],
        )
    )
    assert text.startswith(
        f"### Autoloop: `issues.opened` on [acme/web#4]({SERVER}/acme/web/issues/4)"
    )
    assert (
        "| triage | 0 | 1 | - | - | [attempt 1](https://github.example/acme/web/actions/runs/7) |"
        in text
    )
    assert (
        r"| c1 | Ship \| now? | waiting for `/answer c1 N` | "
        f"[acme/web#4]({SERVER}/acme/web/issues/4#issuecomment-99) |"
    ) in text
    assert "> **Note:** careful" in text


def test_names_in_code_spans_keep_only_the_characters_names_have() -> None:
    assert code("issue_comment.created") == "`issue_comment.created`"
    assert code("x`y|z <b>") == "`xyzb`"


def test_each_turn_says_what_it_spent_and_the_run_adds_them_up() -> None:
    def turn(tid: str, state: str, **spent: Any) -> Turn:
        return Turn(id=tid, matter="m1", rule="triage", agent="a", worker="w", state=state, **spent)

    turns = [
        turn("t1", "done", cost_usd=0.5, tokens=1000),
        turn("t2", "done", tokens=20),
        turn("t3", "failed"),
    ]
    ran = report(turns=turns, subjects={"m1": "acme/web#4"})
    text = summary(ran)
    assert "| triage | 3 | 0 | - | $0.50, 1,020 tokens |" in text
    link = f"[acme/web#4]({SERVER}/acme/web/issues/4)"
    assert f"| t1 | triage | {link} | done | $0.50, 1,000 tokens |" in text
    assert "| done | cost not reported, 20 tokens |" in text
    assert "| failed | not reported |" in text
    assert outputs(ran)["cost-usd"] == "0.5000" and outputs(ran)["tokens"] == "1020"
    assert Spent.of([]).text() == "-" and Spent.of([(None, None)]).text() == "not reported"
    assert Spent.of([(None, 0.25)]).text() == "$0.25, tokens not reported"
    assert Spent.of([(5, 0.0042)]).text() == "$0.0042, 5 tokens"  # not "$0.00"
    assert Spent.of([(0, 0.0)]).text() == "$0.00, 0 tokens"  # reported as nothing
