"""What every write-back to GitHub shares: hidden markers, targets, and reading parameters.

Whatever the App writes (a comment, a review body, the delivery's sticky comment) is
found again by a hidden marker plus our own author (``<slug>[bot]``), so that a retry or
a lost answer reads GitHub back instead of writing twice. Markers start with
:data:`MARK`; text written by an agent or a person is :func:`defuse`\\ d so that it can
never pass for one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ghapp.github.errors import AmbiguousWrite
from ghapp.github.names import REPO, REPO_NAME
from plugins.protocols import ActionFailed

__all__ = [
    "MARK",
    "Target",
    "defuse",
    "find_marked",
    "login_of",
    "marker",
    "say_once",
    "subject_target",
    "target_of",
    "thread_mentions",
]

#: Every hidden marker the App writes starts so (the webhook translator drops such comments).
MARK = "<!-- autoloop:"

_REPO = REPO
_SUBJECT = re.compile(r"^(" + REPO_NAME + r")#([1-9][0-9]{0,9})$")

JSON = dict[str, Any]


def marker(kind: str, ident: str, ledger: str = "") -> str:
    """The hidden marker of what the hub wrote: ``<!-- autoloop:card=c3 -->``. With
    ``ledger`` (the ledger's name), ``<!-- autoloop:card=c3 ledger=NAME -->``: card and
    action ids restart in every ledger, so a comment is found as ours by both (a home
    made afresh edited the cards an earlier one posted on the same issue)."""
    return f"{MARK}{kind}={ident}{f' ledger={ledger}' if ledger else ''} -->"


#: An @mention as GitHub reads one: not inside a word or an e-mail address.
_MENTION = re.compile(r"(?<![A-Za-z0-9_/.-])@([A-Za-z0-9][A-Za-z0-9-]*(?:/[A-Za-z0-9][\w.-]*)?)")
QUIET = "@\u200b"  # an @ GitHub shows but does not read as a mention (a zero-width space)


def defuse(text: str, mentions: Iterable[str] = ()) -> str:
    """Text written by an agent or a person, made unable to pass for one of our markers,
    and unable to notify anyone but ``mentions`` (rules.json's, lower case; ``"*"``: any).

    An agent writes what the issue it read asked for: ``@everyone-in-the-org, approve
    this`` posted by the App would notify each of them, under the App's name. Every other
    ``@name`` and ``@org/team`` is posted with a zero-width space after the ``@``: it
    reads the same and notifies nobody."""
    text = text.replace(MARK, "&lt;!-- autoloop:")
    allowed = {m.lower() for m in mentions}
    if "*" in allowed or "@" not in text:
        return text

    def quiet(found: re.Match[str]) -> str:
        name = found.group(1)
        return found.group(0) if name.lower() in allowed else QUIET + name

    return _MENTION.sub(quiet, text)


class _Issues(Protocol):
    def get_issue(self, repo: str, number: int) -> JSON: ...


def thread_mentions(
    client: _Issues, t: Target, texts: Iterable[str], mentions: Iterable[str]
) -> tuple[str, ...]:
    """``mentions`` and, when ``texts`` mention anyone else, the login of whoever opened
    the issue or pull request ``t``: the thread notifies them of every comment anyway, so
    a triage agent's "thanks, @author" stays as written (one read of the issue, only
    then)."""
    allowed = tuple(m.lower() for m in mentions)
    if "*" in allowed:
        return allowed
    named = {m.group(1).lower() for text in texts for m in _MENTION.finditer(text)}
    if named <= set(allowed):
        return allowed
    author = login_of(client.get_issue(t.repo, t.number).get("user"))
    return (*allowed, author) if author else allowed


def login_of(user: object) -> str:
    """The lower-cased ``login`` of a GitHub user object ("" when there is none)."""
    login = user.get("login") if isinstance(user, Mapping) else None
    return login.lower() if isinstance(login, str) else ""


def find_marked(items: Iterable[Mapping[str, Any]], mark: str, bot_login: str) -> JSON | None:
    """The first comment or review written by ``bot_login`` whose body holds ``mark``."""
    for item in items:
        body = item.get("body")
        mine = login_of(item.get("user")) == bot_login.lower()
        if mine and isinstance(body, str) and mark in body:
            return dict(item)
    return None


class _Comments(Protocol):
    def list_issue_comments(self, repo: str, number: int) -> list[JSON]: ...

    def create_comment(self, repo: str, number: int, body: str) -> JSON: ...

    def update_comment(self, repo: str, comment_id: int, body: str) -> JSON: ...


# Finding then creating is two calls: the webhook's handler and a sweep of the same
# process (a thread each) both found none and both replied. One lock per target here;
# across processes, the newer of two comments made at once points to the older.
_SAYING = [threading.Lock() for _ in range(64)]


def say_once(client: _Comments, bot_login: str, t: Target, mark: str, text: str) -> JSON:
    """The comment of ours on ``t`` holding ``mark`` (``text`` starting with it): the one
    found, else the one made now. A comment another process made at the same time
    (older than ours) is kept, and ours says where it is instead."""
    with _SAYING[hash((t.repo.lower(), t.number, mark)) % len(_SAYING)]:
        found = find_marked(client.list_issue_comments(t.repo, t.number), mark, bot_login)
        if found is not None:
            return found
        try:
            made = client.create_comment(t.repo, t.number, text)
        except AmbiguousWrite:  # made or not: GitHub says
            found = find_marked(client.list_issue_comments(t.repo, t.number), mark, bot_login)
            if found is None:
                raise
            return found
        first = find_marked(client.list_issue_comments(t.repo, t.number), mark, bot_login)
        if first is None or int(first["id"]) >= int(made["id"]):
            return dict(made)
        where = first.get("html_url") or f"comment {first['id']}"
        client.update_comment(t.repo, int(made["id"]), f"(Said in the comment above: {where}.)")
        return first


@dataclass(frozen=True, slots=True)
class Target:
    repo: str
    number: int

    def __str__(self) -> str:
        return f"{self.repo}#{self.number}"


def subject_target(subject: str) -> Target | None:
    """``owner/repo#N`` as a target; None for any other subject."""
    found = _SUBJECT.match(subject or "")
    return Target(found.group(1), int(found.group(2))) if found else None


def target_of(params: Mapping[str, Any]) -> Target:
    repo, number = params.get("repo"), params.get("number")
    if not isinstance(repo, str) or not _REPO.match(repo):
        raise ActionFailed(
            f"'repo' must be 'owner/name', not {repo!r}: name the repository of the issue or PR"
        )
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ActionFailed(
            f"'number' must be the issue or pull request number (a whole number), not {number!r}"
        )
    return Target(repo, number)
