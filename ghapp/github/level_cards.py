"""Answers to a level-triggered delivery's card, read from its pull request's comments.

A run that keeps no ledger cannot keep a card either, so the card of a blocked delivery
(:mod:`ghapp.github.level`) lives where people see it: the sticky comment names it
``d<n>`` (the delivery's n-th card in its current run) and lists its options. Its answer
is the first comment on the pull request with a line ``/answer d<n> <choice>``

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
            if found is None or found.group(1).lower() != name:
                continue
            created = comment.get("created_at")
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


def instant(text: str) -> datetime:
    """An ISO 8601 instant, GitHub's ``...Z`` form included."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
