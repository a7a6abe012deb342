"""The ``github-comment`` channel: a card is one comment on the issue or PR it is about.

A rule's ``notify`` naming a channel with ``"use": "github-comment"`` shows each card of
the rule's matters as ONE comment on the matter's subject (``owner/repo#N``): title,
text, the numbered options and how to answer (``/answer c3 2``), plus a signed card link
when the channel has ``"links": true``. Cards whose matter has no such subject (owner
notices, schedules) are skipped by this channel.

Each new version of the card (answered, resolved, updated) edits the same comment: the
ref returned by :meth:`GitHubCommentChannel.send` is the comment id, and the hub hands it
back as ``previous_ref``. The comment carries the hidden marker
``<!-- autoloop:card=<id> ledger=<name> -->``; before creating a comment (first send, or
after a create whose answer was lost) the channel looks for ours by marker and our bot
author, so a crash or a lost answer never leaves two comments for one card. The marker
names the ledger (:func:`~ghapp.store.base.ledger_name`) because card ids restart in
each: an Action run on a home made afresh found the card ``c1`` an earlier run had
posted on the same issue, and edited it (the answered card was gone).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ghapp.github.client import GitHubClient, NotFound
from ghapp.github.errors import AmbiguousWrite
from ghapp.github.executor import Target, defuse, find_marked, marker, subject_target
from ghapp.github.writes import thread_mentions
from ghapp.runtime.links import CardLinks
from kernel.cards import for_operator
from kernel.records import Card, Matter

__all__ = ["GitHubCommentChannel", "render_card", "render_operator_notice"]

_LINK_TOKEN = re.compile(r"/cards/[A-Za-z0-9._-]+")


def _same(a: object, b: str) -> bool:
    """Equal apart from the card link's token (a fresh token is minted on every render)."""
    return isinstance(a, str) and _LINK_TOKEN.sub("/cards/", a) == _LINK_TOKEN.sub("/cards/", b)


def render_card(
    card: Card, *, link: str | None = None, mentions: Iterable[str] = (), ledger: str = ""
) -> str:
    """The comment's markdown (agent text is defused: it cannot carry our markers, nor
    mention anyone but ``mentions``); its marker names ``ledger`` when one is given."""
    mentions = tuple(mentions)
    lines = [marker("card", card.id, ledger), f"**{defuse(card.title, mentions)}**"]
    if card.text:
        lines += ["", defuse(card.text, mentions)]
    if card.kind_ == "ask" and card.options:
        lines.append("")
        answered = card.choice if card.state != "open" else None
        for i, option in enumerate(card.options, 1):
            item = f"{i}. {defuse(option, mentions)}"
            lines.append(f"{item} **(chosen)**" if answered == i else item)
    lines.append("")
    if card.kind_ == "ask" and card.state == "open":
        how = (
            f"To answer, comment `/answer {card.id} N` with the number of your choice "
            "(people with write access to this repository)"
        )
        lines.append(f"{how}; it has a [card page]({link}) too." if link else f"{how}.")
    elif card.choice is not None and 1 <= card.choice <= len(card.options):
        by = f" by @{card.answered_by}" if card.answered_via == "github" else ""
        by = by or (f" by {card.answered_by}" if card.answered_by else "")
        lines.append(f"Answered: **{defuse(card.options[card.choice - 1], mentions)}**{by}.")
    if card.state in ("done", "closed"):
        lines.append(f"This card is {card.state}.")
    lines.append(f"<sub>card {card.id}, version {card.version}</sub>")
    return "\n".join(lines)


def render_operator_notice(card: Card, *, ledger: str = "") -> str:
    """The public face of a notice meant for whoever runs Autoloop (a turn that failed
    for good): that something needs them, never the error or the local commands."""
    lines = [
        marker("card", card.id, ledger),
        "**Autoloop could not finish its work here.**",
        "",
        f"The people who run it have been told (card {card.id}).",
    ]
    if card.state in ("done", "closed"):
        lines.append(f"This card is {card.state}.")
    return "\n".join(lines)


class GitHubCommentChannel:
    def __init__(
        self,
        client: GitHubClient,
        bot_login: str,
        *,
        links: CardLinks | None = None,
        mentions: Callable[[], Iterable[str]] = tuple,
        ledger: str = "",
    ) -> None:
        self.client = client
        self.bot_login = bot_login
        self.ledger = ledger  # the ledger's name, in each card's marker (see marker())
        self.links = links
        self.mentions = mentions  # rules.json's "mentions", read at each render
        self._locks: dict[str, threading.Lock] = {}
        self._sent: dict[str, tuple[int, str]] = {}  # card -> (version, ref) sent last
        self._guard = threading.Lock()

    def _lock(self, card: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(card, threading.Lock())

    def send(self, card: Card, matter: Matter | None, *, previous_ref: str) -> str:
        target = subject_target(matter.subject if matter is not None else "")
        if target is None:
            return ""  # not about an issue or pull request: nothing to show here
        if for_operator(card.key):  # its text is for the operator: not on a public issue
            text = render_operator_notice(card, ledger=self.ledger)
        else:
            said = (card.title, card.text, *card.options)
            text = render_card(
                card,
                # (it shows the card only: a comment's readers may lack write access)
                link=self.links.url(card, answer=False) if self.links else None,
                mentions=thread_mentions(self.client, target, said, self.mentions()),
                ledger=self.ledger,
            )
        # A turn's thread and a sweep may deliver the same card at once: one at a time,
        # and never an older version over a newer one.
        with self._lock(card.id):
            sent = self._sent.get(card.id)
            if sent is not None and sent[0] > card.version:
                return sent[1]
            ref = self._write(target, card, text, previous_ref)
            self._sent[card.id] = (card.version, ref)
            return ref

    def _write(self, t: Target, card: Card, text: str, previous_ref: str) -> str:
        if previous_ref.isdigit():
            try:
                self.client.update_comment(t.repo, int(previous_ref), text)
            except NotFound:
                pass  # someone deleted it: write a new one below
            except AmbiguousWrite:
                # An edit may be resent safely, but read first: no write twice.
                found = self._find(t, self._mark(card))
                if found is None or str(found.get("id")) != previous_ref:
                    raise
                if not _same(found.get("body"), text):
                    self.client.update_comment(t.repo, int(previous_ref), text)
                return previous_ref
            else:
                return previous_ref
        return self._create_once(t, self._mark(card), text)

    def _mark(self, card: Card) -> str:
        return marker("card", card.id, self.ledger)

    def _create_once(self, t: Target, mark: str, text: str) -> str:
        found = self._find(t, mark)
        if found is None:
            try:
                made = self.client.create_comment(t.repo, t.number, text)
            except AmbiguousWrite:
                found = self._find(t, mark)
                if found is None:
                    made = self.client.create_comment(t.repo, t.number, text)
                    return str(made["id"])
            else:
                return str(made["id"])
        if not _same(found.get("body"), text):
            self.client.update_comment(t.repo, int(found["id"]), text)
        return str(found["id"])

    def _find(self, t: Target, mark: str) -> dict[str, Any] | None:
        return find_marked(self.client.list_issue_comments(t.repo, t.number), mark, self.bot_login)
