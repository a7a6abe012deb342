"""GitHub webhooks as events: a pure translator, no I/O.

The webhook endpoint verifies the signature, then hands the ``X-GitHub-Event``
name, the ``X-GitHub-Delivery`` id and the decoded payload to :func:`translate`,
which returns the events to record. Payloads are read leniently (``.get`` chains,
type checks on every value): a field that is missing or of the wrong type is
simply absent from the result, and no input makes ``translate`` raise. We never
parse with a strict model of GitHub's JSON (such models reject many of GitHub's
own example payloads).

Every event has ``source="github"``, ``hops=0``, ``id`` = the delivery id (with
``:pr<N>`` appended when one delivery yields several events, one per pull
request), a short ``summary`` and ``details``: the fields below, all untrusted
data (titles and bodies are written by people; the kernel never puts them in a
prompt). ``R`` is ``owner/repo``.

| X-GitHub-Event | type | subject | link |
|---|---|---|---|
| issues | ``issues.<action>`` | ``R#<number>`` | issue |
| issue_comment | ``issue_comment.<action>`` | ``R#<number>`` | comment |
| pull_request | ``pull_request.<action>`` | ``R#<number>`` | pull request |
| pull_request_review | ``pull_request_review.<action>`` | ``R#<number>`` | review |
| pull_request_review_comment | ``pull_request_review_comment.<action>`` | ``R#<n>`` | comment |
| check_run | ``check_run.<action>`` | ``R#<n>`` per listed PR, else ``R@<head_sha>`` | check run |
| check_suite | ``check_suite.<action>`` | ``R#<n>`` per listed PR, else ``R@<head_sha>`` | commit |
| workflow_run | ``workflow_run.<action>`` | ``R#<n>`` per listed PR, else ``R@<head_sha>`` | run |
| merge_group | ``merge_group.<action>`` | ``R@<head_sha>`` | (none) |
| status | ``status.<state>`` (success, failure, error, pending) | ``R@<sha>`` | commit |
| push | ``push`` | ``R`` | compare view |
| deployment | ``deployment.<action>`` (``created``) | ``R/deployments/<id>`` | environment/run |
| deployment_status | ``deployment_status.<state>`` | ``R/deployments/<id>`` | target |
| release | ``release.<action>`` | ``R`` | release |
| installation | ``installation.<action>`` | the account login | installation |
| installation_repositories | ``installation_repositories.<action>`` | account | installation |
| ping | ``ping`` | ``R``, else the organization, else ``hook/<id>`` | (none) |
| other | ``<event>.<action>`` or ``<event>`` | ``R#<n>`` if it carries an issue or PR, | |
| | | else ``R``, else org or account, else ``github`` | |

Every stored string is bounded, so that the size of an event does not follow the size
of a payload field: texts people write (titles, bodies, messages) at ``TEXT_MAX``
(65,536 characters, GitHub's own limit), any other string (names, refs, SHAs, URLs) at
``FIELD_MAX`` (2,048), and a list keeps at most ``LIST_MAX`` (1,000) names of at most
``NAME_MAX`` (256) characters. Real payloads are far inside these bounds.

``status`` and ``deployment_status`` carry no useful action (GitHub sends none, or
always ``created``), so their type names the state instead: a rule can listen to
``deployment_status.failure``. The raw ``action`` is still in ``details``.

A pull request listed in a check or workflow payload whose base repository is not
the payload's repository (a fork's) is left out: its number belongs to another repo.

Events the App caused itself are dropped (``[]``), so that its own comments, labels
and check runs never wake it up again:

- the sender is ``<app_slug>[bot]`` of type ``Bot``;
- the object just created (``issues.opened``, ``issue_comment.created``/``edited``)
  says ``performed_via_github_app.id == app_id``;
- a comment written by the App (author ``<app_slug>[bot]`` or made via the App)
  that holds the hidden marker ``<!-- autoloop:``, whoever edited or deleted it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel.model import Event
from pipeline.policy import POLICY_PATH

__all__ = [
    "ACTIONS",
    "KNOWN_EVENTS",
    "MARKER",
    "SOURCE",
    "event_type",
    "translate",
]

#: The verbs of the ``github`` executor: a rule's ``allow``/``approve`` may name no other
#: (the rules loader is told, so that "github.coment" is a one-line error).
ACTIONS = (
    "comment",
    "label",
    "unlabel",
    "close",
    "reopen",
    "assign",
    "review",
    "merge",
    "update_branch",
    "ready",
    "progress",
    "delete_branch",
)

SOURCE = "github"
#: The hidden marker the App puts in every comment it writes.
MARKER = "<!-- autoloop:"
SUMMARY_MAX = 160
TEXT_MAX = 65_536  # bodies longer than this are cut (GitHub's own limit is 65,536)
FIELD_MAX = 2_048  # any other string (names, refs, SHAs, URLs) is cut to this
NAME_MAX = 256  # each name in a list (labels, logins, repositories, branches)
LIST_MAX = 1_000  # names kept of a list

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_WS = re.compile(r"\s+")

Payload = Mapping[str, Any]
Details = dict[str, Any]


# --------------------------------------------------------------------------- lenient readers


_EMPTY: Mapping[str, Any] = {}


def _m(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # what a decoded payload holds: skip the ABC check
        return value
    return value if isinstance(value, Mapping) else _EMPTY


def _s(value: object) -> str | None:
    """A string field as stored: at most FIELD_MAX characters."""
    return value[:FIELD_MAX] if isinstance(value, str) else None


def _text(value: object) -> str | None:
    """A text people write (a title, a body): at most TEXT_MAX characters."""
    return value[:TEXT_MAX] if isinstance(value, str) else None


def _i(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _b(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _login(value: object) -> str | None:
    return _s(_m(value).get("login"))


def _names(value: object, key: str = "name") -> list[str]:
    """Names from a list of objects (labels, repositories); other items are skipped."""
    if not isinstance(value, list):
        return []
    out: list[str] = []
    for item in value:
        name = _m(item).get(key)
        if isinstance(name, str):
            out.append(name[:NAME_MAX])
            if len(out) == LIST_MAX:
                break
    return out


def _logins(value: object) -> list[str]:
    return _names(value, "login")


def _name(value: object) -> str | None:
    """An event name or action usable in a type, or None."""
    text = _s(value)
    return text if text is not None and _NAME.match(text) else None


def _summary(*parts: str | None) -> str:
    text = _WS.sub(" ", " ".join(p for p in parts if p)).strip()
    if len(text) > SUMMARY_MAX:
        text = text[: SUMMARY_MAX - 1].rstrip() + "…"
    return text


def _first_line(text: str | None, limit: int = 80) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit] or None


def _compact(details: Details) -> Details:
    return {k: v for k, v in details.items() if v not in (None, "", [])}


# --------------------------------------------------------------------------- shared parts


def _repo(p: Payload) -> str | None:
    repo = _m(p.get("repository"))
    full = _s(repo.get("full_name"))
    if full:
        return full
    owner, name = _login(repo.get("owner")), _s(repo.get("name"))
    return f"{owner}/{name}" if owner and name else None


def _owner_subject(p: Payload) -> str:
    """Repo if there is one, else the organization, else the installation account."""
    return (
        _repo(p)
        or _login(p.get("organization"))
        or _login(_m(p.get("installation")).get("account"))
        or SOURCE
    )


def _common(event: str, p: Payload) -> Details:
    sender = _m(p.get("sender"))
    return {
        "event": event,
        "action": _s(p.get("action")),
        "repo": _repo(p),
        "sender": _s(sender.get("login")),
        "sender_type": _s(sender.get("type")),
        "installation_id": _i(_m(p.get("installation")).get("id")),
    }


def _type(event: str, action: object) -> str:
    name = _name(action)
    return f"{event}.{name}" if name else event


@dataclass(slots=True)
class _Draft:
    type: str
    subject: str
    summary: str
    link: str = ""
    details: Details = field(default_factory=dict)
    suffix: str = ""


def _numbered(p: Payload, number: int | None) -> str:
    repo = _repo(p)
    if repo and number is not None:
        return f"{repo}#{number}"
    return _owner_subject(p)


def _at_sha(p: Payload, sha: str | None) -> str:
    repo = _repo(p)
    if repo and sha:
        return f"{repo}@{sha}"
    return _owner_subject(p)


def _commit_link(p: Payload, sha: str | None) -> str:
    base = _s(_m(p.get("repository")).get("html_url"))
    return f"{base}/commit/{sha}" if base and sha else ""


def _pr_numbers(p: Payload, prs: object) -> list[int]:
    """Numbers of listed pull requests that belong to the payload's repository."""
    repo_id = _i(_m(p.get("repository")).get("id"))
    out: list[int] = []
    if not isinstance(prs, list):
        return out
    for item in prs:
        pr = _m(item)
        number = _i(pr.get("number"))
        if number is None:
            continue
        base_repo_id = _i(_m(_m(pr.get("base")).get("repo")).get("id"))
        if repo_id is not None and base_repo_id is not None and base_repo_id != repo_id:
            continue
        if number not in out:
            out.append(number)
    return out


def _per_pr(p: Payload, event: str, summary: str, link: str, d: Details) -> list[_Draft]:
    """One draft per listed pull request, or one about the head commit if none."""
    type_, prs = _type(event, p.get("action")), d["pull_requests"]
    if not prs:
        return [_Draft(type_, _at_sha(p, d["head_sha"]), summary, link, d)]
    return [
        _Draft(type_, _numbered(p, n), summary, link, {**d, "number": n}, suffix=f"pr{n}")
        for n in prs
    ]


# --------------------------------------------------------------------------- per event


def _issue_fields(issue: Mapping[str, Any]) -> Details:
    return {
        "number": _i(issue.get("number")),
        "title": _text(issue.get("title")),
        "body": _text(issue.get("body")),
        "labels": _names(issue.get("labels")),
        "user": _login(issue.get("user")),
        "author_association": _s(issue.get("author_association")),
        "state": _s(issue.get("state")),
        "assignees": _logins(issue.get("assignees")),
    }


def _issues(event: str, p: Payload) -> list[_Draft]:
    issue = _m(p.get("issue"))
    d = {**_common(event, p), **_issue_fields(issue)}
    d["label"] = _s(_m(p.get("label")).get("name"))
    d["assignee"] = _login(p.get("assignee"))
    d["is_pull_request"] = "pull_request" in issue or None
    number = d["number"]
    summary = _summary(f"issue #{number} {d['action'] or 'changed'}:", d["title"])
    return [
        _Draft(
            _type(event, p.get("action")),
            _numbered(p, number),
            summary,
            _s(issue.get("html_url")) or "",
            d,
        )
    ]


def _issue_comment(event: str, p: Payload) -> list[_Draft]:
    issue, comment = _m(p.get("issue")), _m(p.get("comment"))
    d = {**_common(event, p), **_issue_fields(issue)}
    d["is_pull_request"] = isinstance(issue.get("pull_request"), Mapping) or None
    d.update(
        comment_id=_i(comment.get("id")),
        comment_body=_text(comment.get("body")),
        comment_user=_login(comment.get("user")),
        comment_author_association=_s(comment.get("author_association")),
    )
    number = d["number"]
    summary = _summary(
        d["comment_user"] or d["sender"],
        f"{d['action'] or 'wrote'} a comment on #{number}:",
        _first_line(d["comment_body"]),
    )
    link = _s(comment.get("html_url")) or _s(issue.get("html_url")) or ""
    return [_Draft(_type(event, p.get("action")), _numbered(p, number), summary, link, d)]


def _pull_fields(pr: Mapping[str, Any]) -> Details:
    head, base = _m(pr.get("head")), _m(pr.get("base"))
    return {
        "number": _i(pr.get("number")),
        "title": _text(pr.get("title")),
        "body": _text(pr.get("body")),
        "labels": _names(pr.get("labels")),
        "user": _login(pr.get("user")),
        "author_association": _s(pr.get("author_association")),
        "state": _s(pr.get("state")),
        "draft": _b(pr.get("draft")),
        "merged": _b(pr.get("merged")),
        "merge_commit_sha": _s(pr.get("merge_commit_sha")),
        "head_sha": _s(head.get("sha")),
        "head_ref": _s(head.get("ref")),
        "head_repo": _s(_m(head.get("repo")).get("full_name")),
        "base_sha": _s(base.get("sha")),
        "base_ref": _s(base.get("ref")),
    }


def _pull_request(event: str, p: Payload) -> list[_Draft]:
    pr = _m(p.get("pull_request"))
    d = {**_common(event, p), **_pull_fields(pr)}
    if d["number"] is None:
        d["number"] = _i(p.get("number"))
    d.update(
        label=_s(_m(p.get("label")).get("name")),
        before=_s(p.get("before")),
        after=_s(p.get("after")),
    )
    number = d["number"]
    summary = _summary(f"pull request #{number} {d['action'] or 'changed'}:", d["title"])
    link = _s(pr.get("html_url")) or ""
    return [_Draft(_type(event, p.get("action")), _numbered(p, number), summary, link, d)]


def _pull_request_review(event: str, p: Payload) -> list[_Draft]:
    pr, review = _m(p.get("pull_request")), _m(p.get("review"))
    d = {**_common(event, p), **_pull_fields(pr)}
    d.update(
        review_id=_i(review.get("id")),
        review_state=_s(review.get("state")),
        review_body=_text(review.get("body")),
        review_user=_login(review.get("user")),
        review_commit_id=_s(review.get("commit_id")),
        review_author_association=_s(review.get("author_association")),
    )
    number = d["number"]
    summary = _summary(
        d["review_user"] or d["sender"],
        f"review {d['review_state'] or d['action'] or ''} on pull request #{number}",
    )
    link = _s(review.get("html_url")) or _s(pr.get("html_url")) or ""
    return [_Draft(_type(event, p.get("action")), _numbered(p, number), summary, link, d)]


def _check_run(event: str, p: Payload) -> list[_Draft]:
    run = _m(p.get("check_run"))
    app = _m(run.get("app"))
    prs = _pr_numbers(p, run.get("pull_requests"))
    d = {
        **_common(event, p),
        "check_run_id": _i(run.get("id")),
        "check_name": _s(run.get("name")),
        "check_status": _s(run.get("status")),
        "conclusion": _s(run.get("conclusion")),
        "head_sha": _s(run.get("head_sha")),
        "external_id": _s(run.get("external_id")),
        "check_suite_id": _i(_m(run.get("check_suite")).get("id")),
        "app_id": _i(app.get("id")),
        "app_slug": _s(app.get("slug")),
        "requested_action": _s(_m(p.get("requested_action")).get("identifier")),
        "pull_requests": prs,
    }
    summary = _summary(
        "check", d["check_name"], d["action"], f"({d['conclusion']})" if d["conclusion"] else None
    )
    link = _s(run.get("html_url")) or _commit_link(p, d["head_sha"])
    return _per_pr(p, event, summary, link, d)


def _check_suite(event: str, p: Payload) -> list[_Draft]:
    suite = _m(p.get("check_suite"))
    app = _m(suite.get("app"))
    prs = _pr_numbers(p, suite.get("pull_requests"))
    d = {
        **_common(event, p),
        "check_suite_id": _i(suite.get("id")),
        "check_status": _s(suite.get("status")),
        "conclusion": _s(suite.get("conclusion")),
        "head_sha": _s(suite.get("head_sha")),
        "head_ref": _s(suite.get("head_branch")),
        "app_id": _i(app.get("id")),
        "app_slug": _s(app.get("slug")),
        "pull_requests": prs,
    }
    summary = _summary(
        "check suite",
        d["app_slug"],
        d["action"],
        f"({d['conclusion']})" if d["conclusion"] else None,
    )
    link = _commit_link(p, d["head_sha"])
    return _per_pr(p, event, summary, link, d)


def _workflow_run(event: str, p: Payload) -> list[_Draft]:
    run = _m(p.get("workflow_run"))
    prs = _pr_numbers(p, run.get("pull_requests"))
    d = {
        **_common(event, p),
        "run_id": _i(run.get("id")),
        "workflow_id": _i(run.get("workflow_id")),
        "workflow": _s(run.get("name")) or _s(_m(p.get("workflow")).get("name")),
        "trigger": _s(run.get("event")),
        "run_status": _s(run.get("status")),
        "conclusion": _s(run.get("conclusion")),
        "head_sha": _s(run.get("head_sha")),
        "head_ref": _s(run.get("head_branch")),
        "run_attempt": _i(run.get("run_attempt")),
        "pull_requests": prs,
    }
    summary = _summary(
        "workflow run",
        d["workflow"],
        d["action"],
        f"({d['conclusion']})" if d["conclusion"] else None,
    )
    link = _s(run.get("html_url")) or _commit_link(p, d["head_sha"])
    return _per_pr(p, event, summary, link, d)


def _merge_group(event: str, p: Payload) -> list[_Draft]:
    group = _m(p.get("merge_group"))
    d = {
        **_common(event, p),
        "head_sha": _s(group.get("head_sha")),
        "head_ref": _s(group.get("head_ref")),
        "base_sha": _s(group.get("base_sha")),
        "base_ref": _s(group.get("base_ref")),
    }
    summary = _summary("merge group", d["action"], "into", d["base_ref"])
    return [_Draft(_type(event, p.get("action")), _at_sha(p, d["head_sha"]), summary, "", d)]


def _status(event: str, p: Payload) -> list[_Draft]:
    d = {
        **_common(event, p),
        "status_id": _i(p.get("id")),
        "sha": _s(p.get("sha")),
        "state": _s(p.get("state")),
        "context": _s(p.get("context")),
        "description": _text(p.get("description")),
        "target_url": _s(p.get("target_url")),
        "branches": _names(p.get("branches")),
    }
    summary = _summary("status", d["context"], d["state"])
    link = _s(_m(p.get("commit")).get("html_url")) or _commit_link(p, d["sha"])
    return [_Draft(_type(event, p.get("state")), _at_sha(p, d["sha"]), summary, link, d)]


def _push(event: str, p: Payload) -> list[_Draft]:
    head = _m(p.get("head_commit"))
    ref = _s(p.get("ref"))
    commits = p.get("commits")
    d = {
        **_common(event, p),
        "ref": ref,
        "before": _s(p.get("before")),
        "after": _s(p.get("after")),
        "created": _b(p.get("created")),
        "deleted": _b(p.get("deleted")),
        "forced": _b(p.get("forced")),
        "base_ref": _s(p.get("base_ref")),
        "pusher": _s(_m(p.get("pusher")).get("name")),
        "head_commit": _s(head.get("id")),
        "head_message": _text(head.get("message")),
        "commit_count": len(commits) if isinstance(commits, list) else None,
        # the delivery policy's file added, changed or removed by a listed commit on the
        # default branch (where it is read from): the deliveries of the repository decide
        # again under the policy as it is now
        "policy_changed": bool(ref)
        and ref == f"refs/heads/{_s(_m(p.get('repository')).get('default_branch'))}"
        and any(
            POLICY_PATH in files
            for c in (commits if isinstance(commits, list) else ())
            for key in ("added", "modified", "removed")
            if isinstance(files := _m(c).get(key), list)
        ),
    }
    if ref and ref.startswith("refs/heads/"):
        d["branch"] = ref.removeprefix("refs/heads/")
    elif ref and ref.startswith("refs/tags/"):
        d["tag"] = ref.removeprefix("refs/tags/")
    what = "deleted" if d["deleted"] else "push to"
    summary = _summary(d["sender"], what, ref)
    link = _s(p.get("compare")) or _s(head.get("url")) or ""
    return [_Draft(event, _owner_subject(p), summary, link, d)]


def _deployment_fields(p: Payload) -> Details:
    dep = _m(p.get("deployment"))
    return {
        "deployment_id": _i(dep.get("id")),
        "sha": _s(dep.get("sha")),
        "ref": _s(dep.get("ref")),
        "environment": _s(dep.get("environment")),
        "task": _s(dep.get("task")),
        "creator": _login(dep.get("creator")),
        "description": _text(dep.get("description")),
        "workflow_run_id": _i(_m(p.get("workflow_run")).get("id")),
    }


def _deployment_subject(p: Payload, deployment_id: int | None) -> str:
    repo = _repo(p)
    if repo and deployment_id is not None:
        return f"{repo}/deployments/{deployment_id}"
    return _owner_subject(p)


def _deployment(event: str, p: Payload) -> list[_Draft]:
    d = {**_common(event, p), **_deployment_fields(p)}
    summary = _summary("deployment", d["action"], "to", d["environment"], "of", d["sha"])
    link = _s(_m(p.get("workflow_run")).get("html_url")) or ""
    subject = _deployment_subject(p, d["deployment_id"])
    return [_Draft(_type(event, p.get("action")), subject, summary, link, d)]


def _deployment_status(event: str, p: Payload) -> list[_Draft]:
    status = _m(p.get("deployment_status"))
    d = {
        **_common(event, p),
        **_deployment_fields(p),
        "deployment_status_id": _i(status.get("id")),
        "state": _s(status.get("state")),
        "environment_url": _s(status.get("environment_url")),
        "target_url": _s(status.get("target_url")) or _s(status.get("log_url")),
    }
    if d["environment"] is None:
        d["environment"] = _s(status.get("environment"))
    summary = _summary("deployment to", d["environment"], d["state"], "of", d["sha"])
    link = d["target_url"] or d["environment_url"] or ""
    subject = _deployment_subject(p, d["deployment_id"])
    return [_Draft(_type(event, status.get("state")), subject, summary, link, d)]


def _release(event: str, p: Payload) -> list[_Draft]:
    rel = _m(p.get("release"))
    d = {
        **_common(event, p),
        "release_id": _i(rel.get("id")),
        "tag": _s(rel.get("tag_name")),
        "name": _text(rel.get("name")),
        "body": _text(rel.get("body")),
        "draft": _b(rel.get("draft")),
        "prerelease": _b(rel.get("prerelease")),
        "target_commitish": _s(rel.get("target_commitish")),
    }
    summary = _summary("release", d["tag"], d["action"])
    link = _s(rel.get("html_url")) or ""
    return [_Draft(_type(event, p.get("action")), _owner_subject(p), summary, link, d)]


def _installation(event: str, p: Payload) -> list[_Draft]:
    inst = _m(p.get("installation"))
    account = _m(inst.get("account"))
    d = {
        **_common(event, p),
        "account": _s(account.get("login")),
        "account_type": _s(account.get("type")),
        "app_id": _i(inst.get("app_id")),
        "app_slug": _s(inst.get("app_slug")),
        "repository_selection": _s(p.get("repository_selection"))
        or _s(inst.get("repository_selection")),
        "repositories": _names(p.get("repositories"), "full_name"),
        "repositories_added": _names(p.get("repositories_added"), "full_name"),
        "repositories_removed": _names(p.get("repositories_removed"), "full_name"),
    }
    summary = _summary(event.replace("_", " "), d["action"], "for", d["account"])
    link = _s(inst.get("html_url")) or ""
    return [_Draft(_type(event, p.get("action")), _owner_subject(p), summary, link, d)]


def _ping(event: str, p: Payload) -> list[_Draft]:
    hook = _m(p.get("hook"))
    d = {
        **_common(event, p),
        "hook_id": _i(p.get("hook_id")) or _i(hook.get("id")),
        "app_id": _i(hook.get("app_id")),
        "zen": _text(p.get("zen")),
    }
    subject = _repo(p) or _login(p.get("organization"))
    if subject is None:
        subject = f"hook/{d['hook_id']}" if d["hook_id"] is not None else SOURCE
    return [_Draft(event, subject, _summary("ping from GitHub"), "", d)]


def _pull_request_review_comment(event: str, p: Payload) -> list[_Draft]:
    pr, comment = _m(p.get("pull_request")), _m(p.get("comment"))
    d = {**_common(event, p), **_pull_fields(pr)}
    d.update(
        comment_id=_i(comment.get("id")),
        comment_body=_text(comment.get("body")),
        comment_user=_login(comment.get("user")),
        comment_author_association=_s(comment.get("author_association")),
        path=_s(comment.get("path")),
        line=_i(comment.get("line")),
        review_commit_id=_s(comment.get("commit_id")),
    )
    number = d["number"]
    summary = _summary(
        d["comment_user"] or d["sender"],
        f"{d['action'] or 'wrote'} a review comment on #{number}:",
        _first_line(d["comment_body"]),
    )
    link = _s(comment.get("html_url")) or _s(pr.get("html_url")) or ""
    return [_Draft(_type(event, p.get("action")), _numbered(p, number), summary, link, d)]


def _generic(event: str, p: Payload) -> list[_Draft]:
    """Any other event: about the issue or pull request it carries, else the repo."""
    d = _common(event, p)
    thing = _m(p.get(event))
    number = _i(_m(p.get("pull_request")).get("number")) or _i(_m(p.get("issue")).get("number"))
    d["number"] = number
    link = _s(thing.get("html_url")) or _s(_m(p.get("repository")).get("html_url")) or ""
    summary = _summary(event.replace("_", " "), d["action"])
    subject = _numbered(p, number) if number is not None else _owner_subject(p)
    return [_Draft(_type(event, p.get("action")), subject, summary, link, d)]


_HANDLERS: dict[str, Callable[[str, Payload], list[_Draft]]] = {
    "check_run": _check_run,
    "check_suite": _check_suite,
    "deployment": _deployment,
    "deployment_status": _deployment_status,
    "installation": _installation,
    "installation_repositories": _installation,
    "issue_comment": _issue_comment,
    "issues": _issues,
    "merge_group": _merge_group,
    "ping": _ping,
    "pull_request": _pull_request,
    "pull_request_review": _pull_request_review,
    "pull_request_review_comment": _pull_request_review_comment,
    "push": _push,
    "release": _release,
    "status": _status,
    "workflow_run": _workflow_run,
}

#: The event names with their own translation; others get the generic one.
KNOWN_EVENTS: frozenset[str] = frozenset(_HANDLERS)


# --------------------------------------------------------------------------- own events


def _is_app(user: object, via: object, app_slug: str | None, app_id: int | None) -> bool:
    if app_slug and _login(user) == f"{app_slug}[bot]":
        return True
    return app_id is not None and _i(_m(via).get("id")) == app_id


def _caused_by_app(event: str, p: Payload, app_slug: str | None, app_id: int | None) -> bool:
    sender = _m(p.get("sender"))
    if app_slug and sender.get("type") == "Bot" and sender.get("login") == f"{app_slug}[bot]":
        return True
    action = _s(p.get("action"))
    created = {"issues": ("issue", {"opened"}), "issue_comment": ("comment", {"created", "edited"})}
    if app_id is not None and event in created:
        key, actions = created[event]
        via = _m(_m(p.get(key)).get("performed_via_github_app"))
        if action in actions and _i(via.get("id")) == app_id:
            return True
    comment = _m(p.get("comment"))
    body = comment.get("body")  # read whole: the marker may sit past any cap
    if isinstance(body, str) and MARKER in body:
        return _is_app(
            comment.get("user"), comment.get("performed_via_github_app"), app_slug, app_id
        )
    return False


# --------------------------------------------------------------------------- entry point


def event_type(event_name: str, payload: Mapping[str, Any]) -> str:
    """The type of an event of this name and payload (``issues.opened``), as
    :func:`translate` would give it: bounded, whatever the header and payload hold."""
    p: Payload = payload if isinstance(payload, Mapping) else {}
    return _type(_name(event_name) or "unknown", p.get("action"))


def translate(
    event_name: str,
    delivery_id: str,
    payload: Mapping[str, Any],
    *,
    app_slug: str | None = None,
    app_id: int | None = None,
) -> list[Event]:
    """The events one webhook delivery stands for; ``[]`` for the App's own doings."""
    p: Payload = payload if isinstance(payload, Mapping) else {}
    event = _name(event_name) or "unknown"
    if _caused_by_app(event, p, app_slug, app_id):
        return []
    drafts = _HANDLERS.get(event, _generic)(event, p)
    several = len(drafts) > 1
    return [
        Event(
            source=SOURCE,
            id=f"{delivery_id}:{draft.suffix}" if several and draft.suffix else delivery_id,
            type=draft.type,
            subject=draft.subject,
            summary=draft.summary,
            link=draft.link,
            hops=0,
            details=_compact(draft.details),
        )
        for draft in drafts
    ]
