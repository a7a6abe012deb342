"""Who may start a delivery: a person with write access to the repository.

A delivery label (``deliver``, ``deliver-review``) sets an agent to work and, for
``deliver``, ends in a merge. GitHub lets more people label than merge (the triage role,
labelling automations, an App asked by an agent to add the label), so a label counts only
when a person added it who could have merged: ``admin``, ``maintain`` or ``write``, asked
of GitHub at that moment, as for a ``/answer``. A bot's label never counts (an account
whose login ends in ``[bot]``: this App's own, which an agent's ``github.label`` write-back
acts as, or another App's), whatever access it has. Who added it is the labelled event's sender;
for a pull request found labelled later (a webhook lost, a run on another event), the
last ``labeled`` event of the pull request's own history. A label that does not count gets
one reply on the pull request saying why, and starts nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime

from ghapp.github.client import WRITERS, GitHubClient
from ghapp.github.errors import GitHubError
from ghapp.github.writes import Target, marker, say_once
from pipeline.policy import Labels

__all__ = ["added_after", "other_label", "refused_label", "say_refused"]

log = logging.getLogger("autoloop.deliveries")


def added_after(at: str, ended_at: str) -> bool | None:
    """Whether a label added at ``at`` came after a delivery run that ended at
    ``ended_at`` (a run that ended starts again only on a label added after its end: a
    person's "stop", a closed pull request, must not be undone by a restart or a re-run).
    Both are ISO 8601 instants; GitHub's are to the second, so the end is compared at its
    second. None when either is missing or unreadable: the caller says what that means."""
    if not at or not ended_at:
        return None
    try:
        added = datetime.fromisoformat(at.replace("Z", "+00:00"))
        ended = datetime.fromisoformat(ended_at.replace("Z", "+00:00"))
        return added >= ended.replace(microsecond=0)
    except (ValueError, TypeError):  # (naive against aware: unreadable as an order)
        return None


def other_label(running: str, labels: Labels, added: str) -> tuple[str, str] | None:
    """(the label, why it starts nothing) when ``added`` is the other delivery label of a
    pull request whose run of mode ``running`` goes on (one run at a time: it was ignored
    without a word); None for any other label."""
    added = added.casefold()
    if running == "review" and added == labels.deliver.casefold():
        return labels.deliver, (
            f"a review-only delivery (`{labels.review}`) runs on this pull request; "
            f"remove `{labels.review}`, then add `{labels.deliver}` again"
        )
    if running == "deliver" and added == labels.review.casefold():
        return labels.review, (
            f"a delivery (`{labels.deliver}`) runs on this pull request, and it is "
            f"reviewed as part of it; `{labels.review}` is for a review without a merge"
        )
    return None


def refused_label(client: GitHubClient, t: Target, label: str, sender: str) -> tuple[str, str]:
    """(who added ``label`` to ``t``, why that may not start a delivery: "" when it may).
    ``sender``: who added it, when the event says; otherwise it is read from GitHub."""
    login = sender or client.labeller(t.repo, t.number, label)
    if not login:
        return "", f"who added the `{label}` label cannot be read from GitHub"
    if login.lower().endswith("[bot]"):
        # An App's account: this App's own (an agent's write-back), or another's (a
        # labelling automation). Both may have write access; neither is a person.
        return login, "a bot's label starts nothing; only a person with write access can"
    permission = client.get_collaborator_permission(t.repo, login)
    if permission in WRITERS:
        return login, ""
    return login, (
        f"only people with write access to {t.repo} can start a delivery (@{login}: {permission})"
    )


def say_refused(
    client: GitHubClient,
    bot_login: str,
    t: Target,
    label: str,
    *,
    login: str,
    why: str,
    then: str = " A person with write access can add it again.",
) -> None:
    """Log the refusal and say it on the pull request, once per label and person."""
    log.warning("delivery %s: the %r label was not taken: %s", t, label, why)
    mark = marker("refused", f"{label.casefold()}.{login.lower() or '-'}")
    text = (
        f"{mark}\n{f'@{login}: ' if login else ''}the `{label}` label did not start a "
        f"delivery: {why}.{then}"
    )
    try:
        say_once(client, bot_login, t, mark, text)
    except GitHubError as exc:  # the refusal stands; only its reply is missing
        log.warning("delivery %s: the refusal could not be said on GitHub: %s", t, exc)
