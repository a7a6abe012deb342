"""Answers to a level-triggered delivery's card, read from its pull request's comments.

A run that keeps no ledger cannot keep a card either, so the card of a blocked delivery
(:mod:`ghapp.github.level`) lives where people see it: the sticky comment names it
``d<n>`` (the n-th card of the pull request's deliveries: a new run goes on counting)
and lists its options. Its answer is the first comment on the pull request with a line
``/answer d<n> <choice>``

- written after the card was raised (give or take :data:`ANSWER_SLACK` of clock
  difference between the runner and GitHub), so an answer to an earlier card of the
  same name is not taken for this one;
- by a person with write, maintain or admin permission on the repository, asked of
  GitHub (once per person per run);
- naming one of the card's options.

Any other answer to it gets one reply (``<!-- autoloop:reply=<comment id> -->``, found
again before it is written, so no run replies twice) saying why, and changes nothing.

These names never look like a ledger card's (``c<n>``), so the rules' answer desk
(:mod:`ghapp.github.answers`) leaves them alone, even in a workflow that runs only it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from ghapp.github.client import WRITERS, GitHubClient
from ghapp.github.executor import GitHubExecutor
from ghapp.github.writes import Target, find_marked, login_of, marker
from pipeline import CARDS, CardAnswer, Delivery

__all__ = ["ANSWER_SLACK", "DELIVERY_ANSWER", "CardAnswers", "card_name"]

ANSWER_SLACK = timedelta(minutes=2)  # the runner's clock and GitHub's may differ a little
DELIVERY_ANSWER = re.compile(r"^[ \t]*/answer[ \t]+(d[0-9]{1,6})[ \t]+([0-9]{1,6})\b", re.I | re.M)
# A line meant for a delivery's card that may not be one (``/answer d1 one``, ``/answer
# d2 1`` while d1 is open): it gets a reply, where it got none and the person waited.
DELIVERY_TRIED = re.compile(r"^[ \t]*/answer[ \t]+d([0-9]{1,6})\b[^\n]{0,80}", re.I | re.M)

JSON = dict[str, Any]


def card_name(delivery: Delivery) -> str:
    """What people call the delivery's open card: ``d<n>`` ("" when none is open)."""
    return f"d{delivery.cards}" if delivery.card is not None else ""


class CardAnswers:
    """Finds the answer to a delivery's open card (see the module docstring); one per run."""

    def __init__(self, client: GitHubClient, executor: GitHubExecutor, bot_login: str) -> None:
        self.client = client
        self.executor = executor
        self.bot_login = bot_login
        self._permissions: dict[str, str] = {}
        self._found: dict[str, tuple[CardAnswer | None, str]] = {}  # card key -> answer

    def answer(self, t: Target, d: Delivery, comments: list[JSON]) -> tuple[CardAnswer | None, str]:
        """The answer to ``d``'s open card among ``comments`` (as listed), and how it reads
        (``/answer d1 2 by maintainer``); ``(None, "")`` when there is none yet."""
        card = d.card
        if card is None or not CARDS[card.kind]:
            return None, ""  # no card, or a notice: nothing to answer
        if card.key not in self._found:
            self._found[card.key] = self._find(t, d, comments)
        return self._found[card.key]

    def _find(self, t: Target, d: Delivery, comments: list[JSON]) -> tuple[CardAnswer | None, str]:
        card, name = d.card, card_name(d)
        if card is None:
            return None, ""
        raised = next((h.at for h in reversed(d.history) if h.stage == "blocked"), d.stage_since)
        since = instant(raised) - ANSWER_SLACK if raised else None
        for comment in sorted(comments, key=lambda c: int(c.get("id") or 0)):
            login = login_of(comment.get("user"))
            body = comment.get("body")
            if not login or login == self.bot_login.lower() or not isinstance(body, str):
                continue
            found = DELIVERY_ANSWER.search(body)
            created = comment.get("created_at")
            if found is None or found.group(1).lower() != name:
                tried = DELIVERY_TRIED.search(body)
                # An answer to the card before this one may have been taken by the run
                # that raised this one: with the runner's clock behind GitHub's, it looks
                # written after; it is given the clocks' slack.
                earlier = tried is not None and int(tried.group(1)) < d.cards
                slack = ANSWER_SLACK if earlier else timedelta(0)
                if tried is not None and _after(created, raised, slack):
                    # Written while this card was open, and not an answer to it.
                    why = (
                        f"card {name} is the one open on this pull request: write "
                        f"`/answer {name} N` on a line of its own, N from 1 to "
                        f"{len(card.options)}. Nothing was changed."
                    )
                    self._reply(t, comment, _said(tried.group(0)), why)
                continue
            if since is not None and isinstance(created, str) and instant(created) < since:
                continue  # an answer to an earlier card of the same name
            choice = int(found.group(2))
            permission = self._permission(t.repo, login)
            if permission not in WRITERS:
                why = (
                    f"only people with write access to {t.repo} can answer the delivery's "
                    f"cards (yours: {permission}). Nothing was changed."
                )
                self._reply(t, comment, f"{name} {choice}", why)
                continue
            if not 1 <= choice <= len(card.options):
                why = f"card {name} has options 1 to {len(card.options)}. Nothing was changed."
                self._reply(t, comment, f"{name} {choice}", why)
                continue
            return CardAnswer(card=card.key, choice=choice, by=login), (
                f"/answer {name} {choice} by {login}"
            )
        return None, ""

    def no_card(self, t: Target, d: Delivery | None, comment: Mapping[str, Any]) -> None:
        """Reply to ``comment`` (the run's own event) when it answers a delivery card that
        was never raised on the pull request (``/answer d7 1``). A card that was raised
        and is no longer open gets none: a re-run of the run that took its answer sees
        the same comment."""
        body = comment.get("body")
        tried = DELIVERY_TRIED.search(body) if isinstance(body, str) else None
        if tried is None or (d is not None and d.card is not None):
            return  # not a delivery answer, or a card is open (:meth:`answer` replies)
        raised = d.cards if d is not None else 0
        n = int(tried.group(1))
        if n <= raised:
            return
        where = f"there is no card d{n} on this pull request, and no delivery card is open"
        self._reply(t, comment, _said(tried.group(0)), f"{where}. Nothing was changed.")

    def _permission(self, repo: str, login: str) -> str:
        if login not in self._permissions:
            self._permissions[login] = self.client.get_collaborator_permission(repo, login)
        return self._permissions[login]

    def _reply(self, t: Target, comment: Mapping[str, Any], said: str, why: str) -> None:
        """One reply per refused answer, however many runs see it."""
        mark = marker("reply", str(comment.get("id")))
        if find_marked(self.client.list_issue_comments(t.repo, t.number), mark, self.bot_login):
            return
        login = login_of(comment.get("user"))
        text = f"{mark}\n@{login}: your `/answer {said}` was not taken: {why}"
        self.executor.sticky_comment(t, mark, text)


def _said(line: str) -> str:
    """What a person wrote after ``/answer``, as the reply quotes it (in a code span)."""
    return line.strip()[len("/answer") :].strip().replace("`", "'")[:80]


def _after(created: object, raised: str, slack: timedelta = timedelta(0)) -> bool:
    """Whether a comment made at ``created`` (GitHub's time, to the second) came after
    the card was raised at ``raised`` (and ``slack`` more): strictly, in a later second
    (one made in the same second may have answered the card before it)."""
    if not isinstance(created, str) or not raised:
        return False
    try:
        return instant(created) > instant(raised).replace(microsecond=0) + slack
    except ValueError:
        return False


def instant(text: str) -> datetime:
    """An ISO 8601 instant, GitHub's ``...Z`` form included."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
