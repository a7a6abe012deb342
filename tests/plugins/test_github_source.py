"""The GitHub source: every example payload GitHub publishes becomes the right events."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.codec import dumps
from kernel.model import Event
from plugins.sources import github as github_source
from plugins.sources.github import KNOWN_EVENTS, MARKER, event_type, translate
from tests import paths

FIXTURES = paths.FIXTURES / "github"
MANIFEST = json.loads((FIXTURES / "webhooks" / "MANIFEST.json").read_text())

HW = "Codertocat/Hello-World"
HW_SHA = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
OCTO = "octo-org/octo-repo"
RUN_SHA = "3484a3fb816e0859fd6e1cea078d76385ff50625"
DEPLOY = f"{HW}/deployments/145988746"

# file (under webhooks/) -> the (type, subject) of each event it must yield
EXPECTED: dict[str, list[tuple[str, str]]] = {
    "issues/assigned.json": [("issues.assigned", f"{HW}#1")],
    "issues/assigned.with-installation.json": [("issues.assigned", f"{HW}#1")],
    "issues/assigned.with-organization.json": [("issues.assigned", f"{HW}#1")],
    "issues/edited.json": [("issues.edited", f"{HW}#1")],
    "issues/edited.with-organization.json": [("issues.edited", f"{HW}#1")],
    "issues/labeled.json": [("issues.labeled", f"{HW}#1")],
    "issues/labeled.with-organization.json": [("issues.labeled", f"{HW}#1")],
    "issues/opened.json": [("issues.opened", f"{HW}#1")],
    "issues/opened.with-empty-body.json": [("issues.opened", f"{HW}#1")],
    "issues/opened.with-organization.json": [("issues.opened", f"{HW}#1")],
    "issues/opened.with-transfer.json": [("issues.opened", f"{HW}#1")],
    "issues/reopened.json": [("issues.reopened", f"{HW}#1")],
    "issues/unlabeled.json": [("issues.unlabeled", f"{HW}#1")],
    "issues/unlabeled.with-organization.json": [("issues.unlabeled", f"{HW}#1")],
    "issue_comment/created.1.json": [("issue_comment.created", f"{HW}#1")],
    "issue_comment/created.json": [("issue_comment.created", f"{HW}#1")],
    "issue_comment/created.with-installation.json": [("issue_comment.created", f"{HW}#1")],
    "issue_comment/created.with-organization.json": [("issue_comment.created", f"{HW}#1")],
    "issue_comment/deleted.json": [("issue_comment.deleted", f"{HW}#1")],
    "issue_comment/deleted.with-organization.json": [("issue_comment.deleted", f"{HW}#1")],
    "issue_comment/edited.json": [("issue_comment.edited", f"{HW}#1")],
    "issue_comment/edited.with-organization.json": [("issue_comment.edited", f"{HW}#1")],
    "pull_request/closed.json": [("pull_request.closed", f"{HW}#2")],
    "pull_request/closed.with-organization.json": [("pull_request.closed", f"{HW}#2")],
    "pull_request/labeled.json": [("pull_request.labeled", f"{HW}#2")],
    "pull_request/labeled.with-organization.json": [("pull_request.labeled", f"{HW}#2")],
    "pull_request/opened.json": [("pull_request.opened", f"{HW}#2")],
    "pull_request/opened.with-null-body.json": [("pull_request.opened", f"{HW}#2")],
    "pull_request/opened.with-organization.json": [("pull_request.opened", f"{HW}#2")],
    "pull_request/ready_for_review.json": [("pull_request.ready_for_review", f"{HW}#2")],
    "pull_request/ready_for_review.with-installation.json": [
        ("pull_request.ready_for_review", f"{HW}#2")
    ],
    "pull_request/ready_for_review.with-organization.json": [
        ("pull_request.ready_for_review", f"{HW}#2")
    ],
    "pull_request/reopened.json": [("pull_request.reopened", f"{HW}#2")],
    "pull_request/reopened.with-organization.json": [("pull_request.reopened", f"{HW}#2")],
    "pull_request/synchronize.json": [("pull_request.synchronize", f"{HW}#2")],
    "pull_request/unlabeled.json": [("pull_request.unlabeled", f"{HW}#2")],
    "pull_request/unlabeled.with-organization.json": [("pull_request.unlabeled", f"{HW}#2")],
    "pull_request_review/dismissed.json": [("pull_request_review.dismissed", f"{HW}#2")],
    "pull_request_review/submitted.json": [("pull_request_review.submitted", f"{HW}#2")],
    "pull_request_review/submitted.with-organization.json": [
        ("pull_request_review.submitted", f"{HW}#2")
    ],
    "check_run/completed.1.json": [("check_run.completed", f"{HW}#2")],
    "check_run/completed.json": [("check_run.completed", f"{HW}#2")],
    "check_run/completed.with-organization.json": [("check_run.completed", f"{HW}#2")],
    "check_run/created.json": [("check_run.created", f"{HW}#2")],
    "check_run/created.with-organization.json": [("check_run.created", f"{HW}#2")],
    "check_run/requested_action.json": [("check_run.requested_action", "electron/electron#26764")],
    "check_run/rerequested.json": [
        ("check_run.rerequested", "github/hello-world@d6fde92930d4715a2b49857d24b940956b26d2d3")
    ],
    "check_run/rerequested.with-organization.json": [
        ("check_run.rerequested", "github/hello-world@d6fde92930d4715a2b49857d24b940956b26d2d3")
    ],
    "check_suite/completed.1.json": [("check_suite.completed", f"{HW}@{HW_SHA}")],
    "check_suite/completed.json": [("check_suite.completed", f"{HW}#2")],
    "check_suite/completed.with-organization.json": [("check_suite.completed", f"{HW}#2")],
    "check_suite/requested.json": [
        ("check_suite.requested", f"{HW}@f95f852bd8fca8fcc58a9a2d6c842781e32a215e")
    ],
    "check_suite/requested.with-email-with-special-characters.json": [
        ("check_suite.requested", f"{HW}@f95f852bd8fca8fcc58a9a2d6c842781e32a215e")
    ],
    "check_suite/requested.with-organization.json": [
        ("check_suite.requested", f"{HW}@f95f852bd8fca8fcc58a9a2d6c842781e32a215e")
    ],
    "check_suite/rerequested.json": [("check_suite.rerequested", f"{HW}#2")],
    "check_suite/rerequested.with-organization.json": [("check_suite.rerequested", f"{HW}#2")],
    "status/payload.json": [("status.success", f"{HW}@6113728f27ae82c7b1a177c8d03f9e96e0adf246")],
    "status/with-author-committer-null.json": [
        ("status.success", f"{HW}@6113728f27ae82c7b1a177c8d03f9e96e0adf246")
    ],
    "status/with-installation.json": [
        ("status.success", f"{HW}@6113728f27ae82c7b1a177c8d03f9e96e0adf246")
    ],
    "deployment/gh-pages.json": [("deployment.created", DEPLOY)],
    "deployment/payload.json": [("deployment.created", DEPLOY)],
    "deployment/with-installation.json": [("deployment.created", DEPLOY)],
    "deployment_status/gh-pages.json": [("deployment_status.in_progress", DEPLOY)],
    "deployment_status/payload.json": [("deployment_status.success", DEPLOY)],
    "deployment_status/with-installation.json": [("deployment_status.success", DEPLOY)],
    "release/created.json": [("release.created", HW)],
    "release/created.with-discussion-url.json": [("release.created", HW)],
    "release/created.with-installation.json": [("release.created", HW)],
    "release/deleted.json": [("release.deleted", HW)],
    "release/deleted.with-reactions.json": [("release.deleted", HW)],
    "release/edited.json": [("release.edited", HW)],
    "release/edited.with-reactions.json": [("release.edited", HW)],
    "release/prereleased.json": [("release.prereleased", HW)],
    "release/prereleased.with-discussion-url.json": [("release.prereleased", HW)],
    "release/published.json": [("release.published", HW)],
    "release/published.with-discussion-url.json": [("release.published", HW)],
    "release/released.json": [("release.released", HW)],
    "push/1.json": [("push", HW)],
    "push/payload.json": [("push", HW)],
    "push/with-installation.json": [("push", HW)],
    "push/with-new-branch.json": [("push", HW)],
    "push/with-no-username-committer.json": [("push", HW)],
    "push/with-organization.json": [("push", HW)],
    "installation/created.json": [("installation.created", "Codertocat")],
    "installation/created.with-requester.json": [("installation.created", "Codertocat")],
    "installation/deleted.json": [("installation.deleted", "octocat")],
    "installation/new_permissions_accepted.json": [
        ("installation.new_permissions_accepted", "Codertocat")
    ],
    "installation/suspend.json": [("installation.suspend", "Codertocat")],
    "installation/unsuspend.json": [("installation.unsuspend", "Codertocat")],
    "installation_repositories/added.json": [("installation_repositories.added", "Codertocat")],
    "installation_repositories/removed.json": [("installation_repositories.removed", "octocat")],
    "ping/payload.json": [("ping", "Octocoders/Hello-World")],
    "ping/with-app_id.json": [("ping", "Octocoders/Hello-World")],
    "ping/with-organization.json": [("ping", "Octocoders")],
    "workflow_run/completed.json": [("workflow_run.completed", f"{OCTO}@{RUN_SHA}")],
    # The example lists a pull request of another repository (Codertocat/Hello-World):
    # its number means nothing in octo-org/octo-repo, so the run stays commit-level.
    "workflow_run/completed.with-pull-requests.json": [
        ("workflow_run.completed", f"{OCTO}@{RUN_SHA}")
    ],
    "workflow_run/requested.json": [("workflow_run.requested", f"{OCTO}@{RUN_SHA}")],
    "workflow_run/requested.with-conclusion.json": [
        ("workflow_run.requested", f"{OCTO}@{RUN_SHA}")
    ],
    "merge_group/checks_requested.json": [
        ("merge_group.checks_requested", f"{OCTO}@2ffea6db159f6b6c47a24e778fb9ef40cf6b1c7d")
    ],
}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "webhooks" / name).read_text())
    return data


def one(event: str, payload: dict[str, Any], **kw: Any) -> Event:
    events = translate(event, "d-1", payload, **kw)
    assert len(events) == 1, events
    return events[0]


def test_the_expected_table_covers_every_example_payload() -> None:
    files = {entry["file"].removeprefix("webhooks/") for entry in MANIFEST["files"]}
    assert files == set(EXPECTED)
    # one handled event has no example payload in the copied corpus; it is tested below
    assert KNOWN_EVENTS - {entry["event"] for entry in MANIFEST["files"]} == {
        "pull_request_review_comment"
    }


@pytest.mark.parametrize("entry", MANIFEST["files"], ids=lambda e: e["file"])
def test_every_example_payload_translates_to_its_expected_events(entry: dict[str, Any]) -> None:
    name = entry["file"].removeprefix("webhooks/")
    events = translate(entry["event"], "delivery-1", load(name))
    assert [(e.type, e.subject) for e in events] == EXPECTED[name]
    for e in events:
        assert e.source == "github"
        assert e.id == "delivery-1"
        assert e.hops == 0
        assert 0 < len(e.summary) <= 160
        assert e.details["event"] == entry["event"]
        assert e.details.get("action") == entry["action"]
        json.dumps(e.details)  # details are plain JSON data


def test_issue_details_carry_what_rules_and_agents_need() -> None:
    e = one("issues", load("issues/labeled.json"))
    d = e.details
    assert d["repo"] == HW
    assert d["number"] == 1
    assert d["title"] == "Spelling error in the README file"
    assert d["body"] == "It looks like you accidently spelled 'commit' with two 't's."
    assert d["labels"] == ["bug"]
    assert d["label"] == "bug"
    assert d["user"] == "Codertocat"
    assert d["author_association"] == "OWNER"
    assert d["sender"] == "Codertocat"
    assert d["sender_type"] == "User"
    assert e.link == "https://github.com/Codertocat/Hello-World/issues/1"
    assert e.summary == "issue #1 labeled: Spelling error in the README file"


def test_installation_id_is_kept_when_the_payload_has_one() -> None:
    assert (
        one("issues", load("issues/assigned.with-installation.json")).details["installation_id"]
        == 1
    )
    assert "installation_id" not in one("issues", load("issues/assigned.json")).details


def test_comment_details_carry_the_comment_and_its_author() -> None:
    d = one("issue_comment", load("issue_comment/created.json")).details
    assert d["comment_id"] == 492700400
    assert d["comment_body"] == "You are totally right! I'll get this fixed right away."
    assert d["comment_user"] == "Codertocat"
    assert d["comment_author_association"] == "OWNER"
    assert "is_pull_request" not in d


def test_a_comment_on_a_pull_request_says_so() -> None:
    payload = load("issue_comment/created.json")
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/a/b/pulls/1"}
    assert one("issue_comment", payload).details["is_pull_request"] is True


def test_pull_request_details_carry_head_base_and_merge_state() -> None:
    d = one("pull_request", load("pull_request/closed.json")).details
    assert d["number"] == 2
    assert d["head_sha"] == HW_SHA
    assert d["head_ref"] == "changes"
    assert d["base_ref"] == "master"
    assert d["base_sha"] == "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"
    assert d["merged"] is False
    assert d["draft"] is False
    assert d["state"] == "closed"


def test_pull_request_label_event_names_the_label() -> None:
    payload = load("pull_request/labeled.json")
    assert one("pull_request", payload).details["label"] == payload["label"]["name"]


def test_null_pull_request_body_is_left_out() -> None:
    assert (
        "body" not in one("pull_request", load("pull_request/opened.with-null-body.json")).details
    )


def test_review_details_carry_the_review_state() -> None:
    e = one("pull_request_review", load("pull_request_review/submitted.json"))
    assert e.details["review_state"] == "commented"
    assert e.details["review_user"] == "Codertocat"
    assert e.link.endswith("#pullrequestreview-237895671")


def test_check_run_details_carry_conclusion_name_and_sha() -> None:
    d = one("check_run", load("check_run/completed.1.json")).details
    assert (d["check_name"], d["conclusion"], d["head_sha"]) == (
        "Octocoders-linter",
        "failure",
        HW_SHA,
    )
    assert d["pull_requests"] == [2]
    assert d["number"] == 2


def test_a_check_suite_for_several_pull_requests_yields_one_event_each() -> None:
    payload = load("check_suite/completed.json")
    second = copy.deepcopy(payload["check_suite"]["pull_requests"][0])
    second["number"] = 7
    payload["check_suite"]["pull_requests"].append(second)
    events = translate("check_suite", "abc", payload)
    assert [(e.id, e.subject) for e in events] == [
        ("abc:pr2", f"{HW}#2"),
        ("abc:pr7", f"{HW}#7"),
    ]
    assert [e.details["number"] for e in events] == [2, 7]


def test_a_pull_request_of_another_repository_is_not_used_as_subject() -> None:
    payload = load("check_suite/completed.json")
    payload["check_suite"]["pull_requests"][0]["base"]["repo"]["id"] = 1
    assert one("check_suite", payload).subject == f"{HW}@{HW_SHA}"


def test_status_type_names_the_state() -> None:
    payload = load("status/payload.json")
    payload["state"] = "failure"
    e = one("status", payload)
    assert e.type == "status.failure"
    assert (e.details["context"], e.details["sha"]) == (
        "default",
        "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
    )


def test_deployment_status_type_names_the_state_and_keeps_the_deployment() -> None:
    e = one("deployment_status", load("deployment_status/payload.json"))
    assert e.type == "deployment_status.success"
    d = e.details
    assert (d["deployment_id"], d["environment"], d["state"], d["action"]) == (
        145988746,
        "production",
        "success",
        "created",
    )
    assert d["sha"] == "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"


def test_push_details_carry_ref_and_shas() -> None:
    d = one("push", load("push/with-new-branch.json")).details
    assert d["ref"] == "refs/heads/master"
    assert d["branch"] == "master"
    assert d["after"] == "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
    assert d["created"] is True
    assert d["deleted"] is False
    assert one("push", load("push/payload.json")).details["tag"] == "simple-tag"
    assert d["policy_changed"] is False  # it added README.md


def test_a_push_that_changes_the_policy_on_the_default_branch_says_so() -> None:
    payload = load("push/with-new-branch.json")
    payload["commits"][0]["modified"] = [".github/autoloop.toml"]
    assert one("push", payload).details["policy_changed"] is True
    payload["repository"]["default_branch"] = "main"  # a push to another branch
    assert one("push", payload).details["policy_changed"] is False
    payload["repository"]["default_branch"] = "master"
    payload["commits"] = "not a list"
    assert one("push", payload).details["policy_changed"] is False


def test_installation_repositories_lists_the_added_repositories() -> None:
    d = one("installation_repositories", load("installation_repositories/added.json")).details
    assert d["installation_id"] == 957387
    assert d["repositories_added"] == ["Codertocat/Space"]


def test_ping_is_one_harmless_event() -> None:
    e = one("ping", load("ping/with-app_id.json"))
    assert (e.type, e.details["app_id"], e.details["hook_id"]) == ("ping", 29310, 109948940)


def test_ping_without_repository_or_organization_names_the_hook() -> None:
    assert one("ping", {"hook_id": 5, "zen": "z"}).subject == "hook/5"


def test_unknown_event_becomes_a_generic_event_on_the_repository() -> None:
    payload = {
        "action": "created",
        "repository": {"full_name": "acme/web", "html_url": "https://example.test/acme/web"},
        "label": {"name": "bug"},
        "sender": {"login": "someone", "type": "User"},
    }
    e = one("label", payload)
    assert (e.type, e.subject, e.link) == (
        "label.created",
        "acme/web",
        "https://example.test/acme/web",
    )
    assert e.details["sender"] == "someone"


def test_review_comment_is_about_the_pull_request_and_carries_the_comment() -> None:
    payload = load("pull_request_review/submitted.json")
    del payload["review"]
    payload["action"] = "created"
    payload["comment"] = {
        "id": 11,
        "body": "Typo here.\nAnd here.",
        "user": {"login": "reviewer"},
        "path": "README.md",
        "line": 3,
        "html_url": "https://example.test/pull/2#discussion_r11",
    }
    e = one("pull_request_review_comment", payload)
    assert (e.type, e.subject) == ("pull_request_review_comment.created", f"{HW}#2")
    d = e.details
    assert (d["comment_id"], d["comment_user"], d["path"], d["line"]) == (
        11,
        "reviewer",
        "README.md",
        3,
    )
    assert e.summary == "reviewer created a review comment on #2: Typo here."
    assert e.link.endswith("#discussion_r11")


def test_unknown_event_carrying_a_pull_request_is_about_that_pull_request() -> None:
    payload = load("pull_request/opened.json")
    payload["action"] = "resolved"
    e = one("pull_request_review_thread", payload)
    assert (e.type, e.subject, e.details["number"]) == (
        "pull_request_review_thread.resolved",
        f"{HW}#2",
        2,
    )


def test_unknown_event_without_action_or_repository_still_yields_one_event() -> None:
    e = one("fork", {})
    assert (e.type, e.subject) == ("fork", "github")


def test_odd_action_text_is_kept_out_of_the_type() -> None:
    payload = load("issues/opened.json")
    payload["action"] = "opened; rm -rf /"
    e = one("issues", payload)
    assert e.type == "issues"
    assert e.details["action"] == "opened; rm -rf /"


# --------------------------------------------------------------------------- own events

SLUG = "autoloop-test"
APP_ID = 4242


def as_app(payload: dict[str, Any]) -> dict[str, Any]:
    payload["sender"] = {"login": f"{SLUG}[bot]", "type": "Bot", "id": 1}
    return payload


def test_events_sent_by_the_apps_bot_are_ignored() -> None:
    assert translate("issues", "d", as_app(load("issues/labeled.json")), app_slug=SLUG) == []
    assert translate("check_run", "d", as_app(load("check_run/created.json")), app_slug=SLUG) == []


def test_the_example_bot_sender_is_ignored_only_by_its_own_app() -> None:
    payload = load("check_suite/rerequested.json")  # sent by octocoders-linter[bot]
    assert translate("check_suite", "d", payload, app_slug="octocoders-linter") == []
    assert len(translate("check_suite", "d", payload, app_slug=SLUG)) == 1
    assert len(translate("check_suite", "d", payload)) == 1


def test_a_user_named_like_the_bot_is_not_ignored() -> None:
    payload = load("issues/opened.json")
    payload["sender"] = {"login": f"{SLUG}[bot]", "type": "User"}
    assert len(translate("issues", "d", payload, app_slug=SLUG)) == 1


def test_a_comment_made_through_the_app_is_ignored() -> None:
    payload = load("issue_comment/created.json")
    payload["comment"]["performed_via_github_app"] = {"id": APP_ID, "slug": SLUG}
    assert translate("issue_comment", "d", payload, app_id=APP_ID) == []
    assert len(translate("issue_comment", "d", payload, app_id=APP_ID + 1)) == 1


def test_a_person_labelling_an_issue_the_app_opened_is_not_ignored() -> None:
    payload = load("issues/labeled.json")
    payload["issue"]["performed_via_github_app"] = {"id": APP_ID}
    assert len(translate("issues", "d", payload, app_id=APP_ID)) == 1
    opened = load("issues/opened.json")
    opened["issue"]["performed_via_github_app"] = {"id": APP_ID}
    assert translate("issues", "d", opened, app_id=APP_ID) == []


def test_edits_to_the_apps_marked_comment_are_ignored() -> None:
    payload = load("issue_comment/edited.json")  # a person edits...
    payload["comment"]["user"] = {"login": f"{SLUG}[bot]", "type": "Bot"}  # ...the app's comment
    payload["comment"]["body"] = f"{MARKER} sticky -->\nDelivering..."
    assert translate("issue_comment", "d", payload, app_slug=SLUG) == []


def test_a_person_quoting_the_marker_is_not_ignored() -> None:
    payload = load("issue_comment/created.json")
    payload["comment"]["body"] = f"look: {MARKER} sticky -->"
    assert len(translate("issue_comment", "d", payload, app_slug=SLUG, app_id=APP_ID)) == 1


# --------------------------------------------------------------------------- fuzz

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=25,
)
KEYS = [
    "action", "repository", "sender", "issue", "comment", "pull_request", "review", "check_run",
    "check_suite", "workflow_run", "deployment", "deployment_status", "installation", "release",
    "merge_group", "hook", "label", "organization", "sha", "state", "ref", "commits",
    "head_commit", "number", "repositories_added", "performed_via_github_app", "full_name",
    "pull_requests", "id", "base", "repo", "login", "type", "body", "name", "owner", "user",
]  # fmt: skip
payloads = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), json_values, max_size=8)
shaped = st.fixed_dictionaries(
    {},
    optional={
        k: st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6) | json_values
        for k in KEYS
    },
)


@settings(max_examples=300, deadline=None)
@given(
    event=st.sampled_from(sorted(KNOWN_EVENTS)) | st.text(max_size=15),
    payload=payloads | shaped,
    slug=st.none() | st.text(max_size=5),
    app_id=st.none() | st.integers(),
)
def test_translate_never_raises_on_arbitrary_json(
    event: str, payload: dict[str, Any], slug: str | None, app_id: int | None
) -> None:
    events = translate(event, "fuzz", payload, app_slug=slug, app_id=app_id)
    for e in events:
        assert e.source == "github"
        assert e.type and e.subject
        assert e.id.startswith("fuzz")
        json.dumps(e.details)


@settings(max_examples=150, deadline=None)
@given(entry=st.sampled_from(MANIFEST["files"]), data=st.data())
def test_translate_never_raises_when_a_real_payload_is_damaged(
    entry: dict[str, Any], data: st.DataObject
) -> None:
    payload = load(entry["file"].removeprefix("webhooks/"))
    node: dict[str, Any] = payload
    while node:
        key = data.draw(st.sampled_from(sorted(node)))
        child = node[key]
        if isinstance(child, dict) and child and data.draw(st.booleans()):
            node = child  # go deeper
            continue
        node[key] = data.draw(json_values)  # replace a real field with arbitrary JSON
        break
    for e in translate(entry["event"], "fuzz", payload, app_slug="x", app_id=1):
        json.dumps(e.details)


# --------------------------------------------------------------------------- bounds


def every_string(value: Any, text: str) -> Any:
    """``value`` with each string in it replaced by ``text`` (one shared object)."""
    if isinstance(value, dict):
        return {k: every_string(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [every_string(v, text) for v in value]
    return text if isinstance(value, str) else value


@pytest.mark.parametrize("entry", MANIFEST["files"], ids=lambda e: e["file"])
def test_the_caps_leave_every_example_payload_intact(
    entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = load(entry["file"].removeprefix("webhooks/"))
    capped = translate(entry["event"], "d", payload)
    for name in ("TEXT_MAX", "FIELD_MAX", "NAME_MAX", "LIST_MAX"):
        monkeypatch.setattr(github_source, name, 1 << 40)
    assert translate(entry["event"], "d", payload) == capped


@pytest.mark.parametrize("entry", MANIFEST["files"], ids=lambda e: e["file"])
def test_a_megabyte_in_every_field_gives_a_bounded_event(entry: dict[str, Any]) -> None:
    huge = "token x/" * (1 << 17)  # 1 MiB, and slow to redact were it stored whole
    payload = every_string(load(entry["file"].removeprefix("webhooks/")), huge)
    events = translate(entry["event"], "d", payload)
    assert events
    for e in events:
        assert len(dumps(e)) < 300_000  # three texts of 64 K, the rest at most 2 K each
        assert len(e.subject) <= 2 * github_source.FIELD_MAX + 2
        assert len(e.link) <= 2 * github_source.FIELD_MAX + 16  # a base URL and a SHA


def test_a_14_mb_repository_name_is_cut_to_the_field_cap() -> None:
    payload = load("issues/opened.json")
    payload["repository"]["full_name"] = "o/" + "r" * 14_000_000
    event = one("issues", payload)
    assert event.subject == f"o/{'r' * (github_source.FIELD_MAX - 2)}#1"
    assert event.details["repo"] == event.subject.removesuffix("#1")


def test_a_list_keeps_at_most_its_cap_of_names() -> None:
    payload = load("issues/labeled.json")
    payload["issue"]["labels"] = [{"name": "n" * 5000}] * 100_000
    labels = one("issues", payload).details["labels"]
    assert len(labels) == github_source.LIST_MAX
    assert {len(x) for x in labels} == {github_source.NAME_MAX}


def test_the_app_marker_is_found_past_any_cap() -> None:
    payload = load("issue_comment/edited.json")
    payload["comment"]["user"] = {"login": f"{SLUG}[bot]", "type": "Bot"}
    payload["comment"]["body"] = "x" * (github_source.TEXT_MAX + 10) + f"{MARKER} sticky -->"
    assert translate("issue_comment", "d", payload, app_slug=SLUG) == []


def test_event_type_is_bounded_whatever_the_header_and_action() -> None:
    assert event_type("issues", {"action": "opened"}) == "issues.opened"
    assert event_type("x" * 20_000, {"action": "y" * 1_000_000}) == "unknown"
    assert event_type("issues", {"action": "a" * 1_000_000}) == "issues"
