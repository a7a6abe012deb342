"""Which `/answer` lines the rules' answer desk takes, tells how to answer, or leaves."""

from __future__ import annotations

from ghapp.github.answers import parse_answer
from kernel.model import Event


def comment(body: str) -> Event:
    details = {"comment_body": body, "comment_user": "maintainer", "comment_id": 7}
    return Event(
        source="github", id="d", type="issue_comment.created", subject="acme/web#3", details=details
    )


def test_a_delivery_cards_answer_is_the_deliverys_in_the_action_and_told_in_the_app() -> None:
    """In the Action a deliver run reads `/answer d1 2` (the desk replied "not an answer"
    while the delivery took it); the App has no d cards, so there it is told how to
    answer, not met with silence."""
    assert parse_answer(comment("/answer d1 2"), delivery_cards=True) is None
    told = parse_answer(comment("/answer d1 2"))
    assert told is not None and (told.card, told.choice, told.written) == ("", 0, "/answer d1 2")
    taken = parse_answer(comment("/answer c1 2"), delivery_cards=True)
    assert taken is not None and (taken.card, taken.choice) == ("c1", 2)
