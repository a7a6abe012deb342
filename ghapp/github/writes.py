"""What every write-back to GitHub shares: hidden markers, targets, and reading parameters.

Whatever the App writes (a comment, a review body, the delivery's sticky comment) is
found again by a hidden marker plus our own author (``<slug>[bot]``), so that a retry or
a lost answer reads GitHub back instead of writing twice. Markers start with
:data:`MARK`; text written by an agent or a person is :func:`defuse`\\ d so that it can
never pass for one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from plugins.protocols import ActionFailed

__all__ = [
    "MARK",
    "Target",
    "defuse",
    "find_marked",
    "login_of",
    "marker",
    "subject_target",
    "target_of",
]

#: Every hidden marker the App writes starts so (the webhook translator drops such comments).
MARK = "<!-- autoloop:"

_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_SUBJECT = re.compile(r"^([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)#([1-9][0-9]{0,9})$")

JSON = dict[str, Any]


def marker(kind: str, ident: str) -> str:
    return f"{MARK}{kind}={ident} -->"


def defuse(text: str) -> str:
    """Text written by an agent or a person, made unable to pass for one of our markers."""
    return text.replace(MARK, "&lt;!-- autoloop:")


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
