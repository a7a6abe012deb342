"""The story of a delivery as a fold over ledger facts (the end-to-end story, told by
``autoloop why`` after a real delivery, is in ``tests/e2e/test_delivery_why.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from ghapp.github.story import parse_ref, story_lines, tell
from kernel import facts as f

PID = "deliver/acme/web#12"
H1, H2 = "1" * 40, "2" * 40


def at(second: int) -> str:
    return f"2026-03-02T09:30:{second:02d}.000000+00:00"


def row(stage: str, second: int, outcome: str, note: str = "") -> dict[str, str]:
    return {"stage": stage, "at": at(second), "outcome": outcome, "note": note}


def advanced(
    version: int,
    second: int,
    history: list[dict[str, str]],
    *,
    run: int = 1,
    head: str = H1,
    waiting: str = "",
    restarted: bool = False,
    ended: bool = False,
    pipeline: str = PID,
    **data: Any,
) -> f.PipelineAdvanced:
    return f.PipelineAdvanced(
        pipeline=pipeline,
        subject=pipeline.removeprefix("deliver/"),
        version=version,
        stage=history[-1]["stage"],
        data={
            "run": run,
            "mode": "deliver",
            "head_sha": head,
            "history": history,
            "waiting_on": "webhook" if waiting else "",
            "waiting_for": waiting,
            **data,
        },
        at=at(second),
        ended=ended,
        restarted=restarted,
    )


def asked(action: str, do: str, **params: Any) -> f.ActionRequested:
    return f.ActionRequested(action=action, matter=PID, turn="", do=do, params=params)


START = [row("review", 0, "started", "label deliver added by maintainer")]
TO_CHECKS = [*START, row("ready", 1, "passed"), row("checks", 1, "ready")]


@pytest.mark.parametrize(
    ("text", "pid"),
    [
        ("acme/web#12", PID),
        ("deliver/acme/web#12", PID),
        ("https://github.com/acme/web/pull/12", PID),
        ("https://github.example.com/acme/web/pull/12/files#diff", PID),
        (" acme/web#012 ", PID),
        ("acme/web.js#3", "deliver/acme/web.js#3"),
        ("t12", None),
        ("acme#12", None),
        ("acme/web#", None),
        ("acme/web/12", None),
    ],
)
def test_a_delivery_is_named_as_people_name_pull_requests(text: str, pid: str | None) -> None:
    assert parse_ref(text) == pid


def test_stages_come_in_order_with_what_each_waited_for() -> None:
    story = tell(
        [
            advanced(1, 0, START),
            advanced(2, 1, TO_CHECKS, waiting="required checks ci"),
            f.PipelineWoken(pipeline=PID, at=at(5)),
            advanced(3, 5, TO_CHECKS, waiting="required checks lint"),
            advanced(4, 6, TO_CHECKS, waiting="required checks lint"),
            f.PipelineWoken(pipeline="deliver/acme/web#13", at=at(6)),  # another delivery
            advanced(1, 6, START, pipeline="deliver/acme/web#13"),
        ],
        PID,
    )
    (run,) = story["runs"]
    assert [(s["stage"], s["at"], s["how"]) for s in run["stages"]] == [
        ("review", at(0), "started"),
        ("ready", at(1), "passed"),
        ("checks", at(1), "ready"),
    ]
    checks = run["stages"][-1]
    assert [(w["at"], w["for"]) for w in checks["waited"]] == [
        (at(1), "required checks ci"),
        (at(5), "required checks lint"),
    ]
    assert checks["woken"] == [at(5)] and checks["decisions"] == 3
    assert [s["until"] for s in run["stages"]] == [at(1), at(1), ""]
    assert story["decisions"] == 4 and story["stage"] == "checks" and not story["ended"]


def test_each_write_is_told_at_the_stage_that_asked_for_it() -> None:
    to_merge = [*TO_CHECKS, row("merge", 3, "passed", "required checks passed: ci")]
    story = tell(
        [
            advanced(1, 0, START),
            asked("r1/review", "github.review", event="COMMENT", sha=H1, body="x" * 5000),
            asked("r1/progress/1", "github.progress", seq=1, head_sha=H1, check_status="x"),
            advanced(2, 1, TO_CHECKS, waiting="required checks ci"),
            asked("r1/merge", "github.merge", sha=H1, method="squash"),
            advanced(3, 3, to_merge, waiting="GitHub's answer to the merge"),
            f.ActionAttempted(action="r1/merge", at=at(3), by="hub"),
            f.ActionAttempted(action="r1/merge", at=at(4), error="502 Bad Gateway"),
            f.ActionAttempted(action="r1/merge", at=at(5), by="hub"),
            f.ActionCompleted(
                action="r1/merge", ok=True, result={"sha": H2, "read_back": True}, at=at(5)
            ),
        ],
        PID,
    )
    stages = {s["stage"]: s for s in story["runs"][0]["stages"]}
    assert [w["id"] for w in stages["review"]["writes"]] == ["r1/review"]
    assert [w["id"] for w in stages["checks"]["writes"]] == ["r1/progress/1"]
    (merge,) = stages["merge"]["writes"]
    assert (merge["attempts"], merge["errors"], merge["status"]) == (2, ["502 Bad Gateway"], "done")
    assert merge["requested_at"] == at(3) and merge["ended_at"] == at(5)
    assert "body" not in stages["review"]["writes"][0]["params"]  # bulky text is left out
    text = "\n".join(story_lines(story))
    merged = "merged, merge commit 2222222 (read back)"
    assert f"write merge 1111111 (squash, guarded by that head): {merged}" in text
    assert "write review COMMENT on 1111111: not answered yet" in text
    assert story["writes"] == {"github.review": 1, "github.progress": 1, "github.merge": 1}


def test_a_write_that_failed_says_why() -> None:
    story = tell(
        [
            advanced(1, 0, TO_CHECKS),
            asked("r1/merge", "github.merge", sha=H1, method="merge"),
            advanced(2, 1, [*TO_CHECKS, row("merge", 1, "passed")]),
            f.ActionCompleted(
                action="r1/merge", ok=False, error="[head_moved] Head branch was modified"
            ),
        ],
        PID,
    )
    text = "\n".join(story_lines(story))
    assert "write merge 1111111 (merge, guarded by that head): failed: [head_moved]" in text


def test_a_card_is_told_where_it_was_raised_with_its_answer() -> None:
    blocked = [*TO_CHECKS, row("blocked", 9, "timeout", "Required checks never reported")]
    key = f"{PID}/r1/card/1/checks_timeout"
    story = tell(
        [
            advanced(1, 1, TO_CHECKS, waiting="required checks ci", deadline=at(9)),
            f.CardOpened(
                card="c7",
                key=key,
                matter=PID,
                kind="ask",
                title="Required checks never reported",
                text="never reported: ci",
                options=("wait for the checks again", "stop this delivery"),
                at=at(9),
            ),
            advanced(2, 9, blocked, card={"key": key, "blocked_at": "checks"}),
            f.CardAnswered(card="c7", choice=2, by="maintainer", via="github", at=at(20)),
            f.PipelineWoken(pipeline=PID, at=at(20)),
            f.CardResolved(card="c7"),
            advanced(3, 20, [*blocked, row("cancelled", 20, "stop", "maintainer chose: stop")]),
        ],
        PID,
    )
    stages = story["runs"][0]["stages"]
    assert [s["stage"] for s in stages] == ["review", "ready", "checks", "blocked", "cancelled"]
    assert stages[2]["deadline"] == at(9)
    (card,) = stages[3]["cards"]
    assert (card["kind"], card["blocked_at"], card["choice"], card["answer"]) == (
        "checks_timeout",
        "checks",
        2,
        "stop this delivery",
    )
    assert (card["answered_by"], card["via"], card["resolved"]) == ("maintainer", "github", True)
    assert stages[3]["woken"] == [at(20)]
    text = "\n".join(story_lines(story))
    assert "card c7 (checks_timeout) raised at checks at 09:30:09.000" in text
    assert "options: 1) wait for the checks again; 2) stop this delivery" in text
    assert "answered 2 (stop this delivery) by maintainer via github at 09:30:20.000" in text


def test_a_new_push_and_a_new_run_are_told_as_restarts() -> None:
    pushed = [*TO_CHECKS, row("review", 4, "new_head", "new head 2222222")]
    story = tell(
        [
            advanced(1, 0, START),
            advanced(2, 1, TO_CHECKS),
            advanced(3, 4, [*pushed, row("ready", 4, "passed")], head=H2),
            advanced(
                4,
                5,
                [*pushed, row("ready", 4, "passed"), row("cancelled", 5, "unlabeled")],
                head=H2,
                ended=True,
            ),
            advanced(5, 8, START[:1], run=2, restarted=True, head=H2),
        ],
        PID,
    )
    first, second = story["runs"]
    assert [s["stage"] for s in first["stages"]] == [
        "review",
        "ready",
        "checks",
        "review",
        "ready",
        "cancelled",
    ]
    assert first["heads"] == [H1, H2] and first["ended_at"] == at(5)
    assert first["stages"][3]["head_sha"] == H2
    assert (second["run"], second["started_at"], second["heads"]) == (2, at(8), [H2])
    assert [s["stage"] for s in second["stages"]] == ["review"]
    text = "\n".join(story_lines(story))
    assert "restarted: a new push: new head 2222222" in text
    assert "from the review again, on the new head 2222222" in text
    assert "run 2 (deliver) from 2026-03-02 09:30:08, still going: review" in text


def test_a_history_cut_at_its_oldest_rows_still_adds_only_the_new_ones() -> None:
    rows = [row("checks" if i % 2 else "merge", i, "passed") for i in range(1, 40)]
    story = tell(
        [
            advanced(1, 0, [*START, *rows[:30]]),
            advanced(2, 50, [*rows[10:]]),  # the machine keeps the newest rows only
        ],
        PID,
    )
    stages = story["runs"][0]["stages"]
    assert [s["at"] for s in stages] == [at(0), *(r["at"] for r in rows)]


def test_live_version_probes_are_told_once_each() -> None:
    watch = [*START, row("live_version", 2, "deployed")]
    probe1 = {"attempt": 1, "at": at(2), "sha": H2, "matches": True, "error": ""}
    probe2 = {"attempt": 2, "at": at(3), "sha": None, "matches": False, "error": "HTTP 503"}
    story = tell(
        [
            advanced(1, 2, watch, versions=[probe1]),
            advanced(2, 3, watch, versions=[probe1, probe2]),
        ],
        PID,
    )
    (_, live) = story["runs"][0]["stages"]
    assert [p["attempt"] for p in live["probes"]] == [1, 2]
    text = "\n".join(story_lines(story))
    assert "probe 1 at 09:30:02.000: 2222222, the merge commit or later" in text
    assert "probe 2 at 09:30:03.000: no answer (HTTP 503)" in text
