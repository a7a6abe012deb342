"""The GitHub client against the sandbox GitHub on loopback: real HTTP, real tokens."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.client import AmbiguousWrite, Conflict, GitHubClient, Unauthorized
from ghapp.github.sansio import parse_webhook_headers, verify_signature
from ghapp.github.writes import JSON, Target, marker, say_once
from ghapp.runtime.settings import Settings
from kernel.model import Event
from plugins.sources.github import translate


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


@pytest.fixture
def waits(sandbox: SandboxHandle) -> Iterator[list[float]]:
    retry.set_testing(True)
    sandbox.world.faults.clear()
    yield []
    sandbox.world.faults.clear()
    retry.set_testing(False)


@pytest.fixture
def gh(sandbox: SandboxHandle, waits: list[float]) -> Iterator[GitHubClient]:
    with client(sandbox, waits) as made:
        yield made


def client(sandbox: SandboxHandle, waits: list[float]) -> GitHubClient:
    settings = Settings.from_env(
        {
            "AUTOLOOP_GITHUB_APP_ID": str(sandbox.app_id),
            "AUTOLOOP_GITHUB_PRIVATE_KEY": str(sandbox.private_key_path),
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET": sandbox.webhook_secret,
            "AUTOLOOP_GITHUB_URL": sandbox.api_url,
        }
    ).require_github()
    return GitHubClient.from_settings(settings, timeout_s=5.0, sleep=waits.append)


def test_the_app_authenticates_and_comments_labels_and_closes(
    sandbox: SandboxHandle, waits: list[float], gh: GitHubClient
) -> None:
    assert gh.get_app()["id"] == sandbox.app_id
    assert gh.get_repo(sandbox.repo)["default_branch"] == "main"
    number = sandbox.world.open_issue("reader", "Crash on start", body="it crashes")
    issue = gh.get_issue(sandbox.repo, number)
    assert (issue["title"], issue["user"]["login"]) == ("Crash on start", "reader")

    made = gh.create_comment(sandbox.repo, number, "<!-- autoloop:test -->\nLooking into it.")
    comments = gh.list_issue_comments(sandbox.repo, number)
    assert [c["id"] for c in comments] == [made["id"]]
    assert comments[0]["user"]["login"].endswith("[bot]")
    gh.update_comment(sandbox.repo, made["id"], "<!-- autoloop:test -->\nFixed.")

    assert [label["name"] for label in gh.add_labels(sandbox.repo, number, ["bug"])] == ["bug"]
    assert gh.remove_label(sandbox.repo, number, "bug") is True
    assert gh.remove_label(sandbox.repo, number, "bug") is False
    assert gh.set_issue_state(sandbox.repo, number, "closed")["state"] == "closed"
    assert gh.get_issue(sandbox.repo, number)["labels"] == []


class Counting(httpx.BaseTransport):
    """A real HTTP transport that remembers the paths it sent."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.sent.append((request.method, request.url.path))
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_threads_share_one_client_and_make_one_token_exchange(sandbox: SandboxHandle) -> None:
    counting = Counting()
    number = sandbox.world.open_issue("reader", "Many readers")
    results: list[int] = []
    errors: list[BaseException] = []
    with GitHubClient(
        app_id=sandbox.app_id,
        private_key=sandbox.private_key_pem,
        base_url=sandbox.api_url,
        transport=counting,
    ) as shared:

        def read() -> None:
            try:
                for _ in range(10):
                    results.append(shared.get_issue(sandbox.repo, number)["number"])
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert errors == []
    assert results == [number] * 80
    exchanges = [p for m, p in counting.sent if m == "POST" and p.endswith("/access_tokens")]
    assert len(exchanges) == 1
    assert len([p for _, p in counting.sent if p.endswith("/installation")]) == 1
    assert len(counting.sent) == 82


def test_collaborator_permissions_are_read_live(
    sandbox: SandboxHandle, waits: list[float], gh: GitHubClient
) -> None:
    assert gh.get_collaborator_permission(sandbox.repo, "maintainer") == "admin"
    assert gh.get_collaborator_permission(sandbox.repo, "reader") == "read"
    assert gh.get_collaborator_permission(sandbox.repo, "contributor") == "none"
    sandbox.world.set_collaborator("contributor", "maintain")
    assert gh.get_collaborator_permission(sandbox.repo, "contributor") == "write"


def test_the_policy_file_is_read_from_the_default_branch(
    sandbox: SandboxHandle, waits: list[float], gh: GitHubClient
) -> None:
    text = gh.get_file_contents(sandbox.repo, ".github/autoloop.toml", "main")
    assert text
    assert gh.get_file_contents(sandbox.repo, "no/such/file", "main") is None


def test_a_read_answered_502_is_retried(
    sandbox: SandboxHandle, waits: list[float], gh: GitHubClient
) -> None:
    number = sandbox.world.open_issue("reader", "Flaky gateway")
    sandbox.world.faults.add("error_502", method="GET", path=f"*/issues/{number}", times=1)
    assert gh.get_issue(sandbox.repo, number)["number"] == number
    assert waits == [0.5]


def test_a_comment_whose_answer_is_lost_is_ambiguous_and_made_once(
    sandbox: SandboxHandle, waits: list[float], gh: GitHubClient
) -> None:
    number = sandbox.world.open_issue("reader", "Lost answers")
    gh.get_issue(sandbox.repo, number)  # token ready before the fault
    sandbox.world.faults.add("response_lost", method="POST", path=f"*/issues/{number}/comments")
    with pytest.raises(AmbiguousWrite):
        gh.create_comment(sandbox.repo, number, "once")
    # reconcile by reading back: the comment was applied, exactly once
    assert [c["body"] for c in gh.list_issue_comments(sandbox.repo, number)] == ["once"]


def test_a_rate_limited_write_is_sent_again_after_the_wait(
    sandbox: SandboxHandle, waits: list[float], gh: GitHubClient
) -> None:
    number = sandbox.world.open_issue("reader", "Busy")
    gh.get_issue(sandbox.repo, number)
    sandbox.world.faults.add(
        "rate_limit", method="POST", path=f"*/issues/{number}/labels", retry_after=3
    )
    assert [label["name"] for label in gh.add_labels(sandbox.repo, number, ["bug"])] == ["bug"]
    assert waits == [3.0]
    assert (
        len(sandbox.world.audit.entries(method="POST", path_contains=f"/issues/{number}/labels"))
        == 1
    )


class Receiver:
    """A bare webhook receiver on loopback: checks the signature, translates, keeps events."""

    def __init__(self, secret: bytes, app_slug: str, app_id: int) -> None:
        self.events: list[Event] = []
        self.rejected = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = parse_webhook_headers(dict(self.headers.items()))
                if not verify_signature(secret, body, headers.signature):
                    receiver.rejected += 1
                    self.send_response(401)
                else:
                    receiver.events.extend(
                        translate(
                            headers.event or "",
                            headers.delivery or "",
                            json.loads(body),
                            app_slug=app_slug,
                            app_id=app_id,
                        )
                    )
                    self.send_response(202)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/github/webhook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_sandbox_webhooks_verify_and_translate_and_the_apps_own_are_dropped(
    sandbox: SandboxHandle, waits: list[float], gh: GitHubClient
) -> None:
    slug = gh.get_app()["slug"]
    with Receiver(sandbox.webhook_secret.encode(), slug, sandbox.app_id) as receiver:
        sandbox.world.set_app_url(receiver.url)
        try:
            number = sandbox.world.open_issue("reader", "Webhook round trip")
            gh.create_comment(sandbox.repo, number, "<!-- autoloop:ack -->\nOn it.")  # ours
            gh.add_labels(sandbox.repo, number, ["bug"])  # ours
            sandbox.world.comment("maintainer", number, "Thanks!")
            sandbox.world.add_label("maintainer", number, "enhancement")
            assert sandbox.world.settle()
        finally:
            sandbox.world.set_app_url(None)
        subject = f"{sandbox.repo}#{number}"
        mine = [(e.type, e.subject) for e in receiver.events if e.subject == subject]
        assert mine == [
            ("issues.opened", subject),
            ("issue_comment.created", subject),
            ("issues.labeled", subject),
        ]
        assert receiver.rejected == 0
        by_type = {e.type: e for e in receiver.events if e.subject == subject}
        assert by_type["issue_comment.created"].details["comment_body"] == "Thanks!"
        assert by_type["issues.labeled"].details["label"] == "enhancement"

    deliveries = gh.list_webhook_deliveries(since=time.time() - 600)
    assert {d.get("event") for d in deliveries} >= {"issues", "issue_comment"}


def test_a_pull_request_is_checked_merged_once_and_its_deployment_seen(
    sandbox: SandboxHandle, waits: list[float], gh: GitHubClient
) -> None:
    world = sandbox.world
    world.set_ci({"ci": "success"})
    world.set_deploy()
    try:
        number = world.open_pr("contributor", "fix-merge", "Fix", files={"fix.py": "ok = 1\n"})
        assert world.settle()
        head = gh.get_pull(sandbox.repo, number)["head"]["sha"]
        runs = gh.list_check_runs_for_ref(sandbox.repo, head)
        assert [(r["name"], r["conclusion"]) for r in runs] == [("ci", "success")]

        run = gh.create_check_run(
            sandbox.repo, name="autoloop/deliver", head_sha=head, status="in_progress"
        )
        done = gh.update_check_run(
            sandbox.repo, run["id"], status="completed", conclusion="success"
        )
        assert done["conclusion"] == "success"
        assert gh.get_required_status_checks(sandbox.repo, "main") is None
        world.approve("maintainer", number)
        gh.create_review(sandbox.repo, number, event="COMMENT", body="Checks are green.")
        reviews = [(r["user"]["login"], r["state"]) for r in gh.list_reviews(sandbox.repo, number)]
        assert reviews[0] == ("maintainer", "APPROVED")
        assert reviews[1][1] == "COMMENTED"

        with pytest.raises(Conflict):  # the head-SHA guard
            gh.merge_pull(sandbox.repo, number, sha="0" * 40)
        world.faults.add("response_lost", method="PUT", path=f"*/pulls/{number}/merge")
        with pytest.raises(AmbiguousWrite):
            gh.merge_pull(sandbox.repo, number, sha=head)
        pull = gh.get_pull(sandbox.repo, number)  # reconcile by reading back
        assert pull["merged"] is True
        merges = world.audit.entries(method="PUT", path_contains=f"/pulls/{number}/merge")
        assert len(merges) == 1

        assert world.settle()
        deployments = gh.list_deployments(sandbox.repo, sha=pull["merge_commit_sha"])
        assert [d["environment"] for d in deployments] == ["production"]
        states = [
            s["state"] for s in gh.list_deployment_statuses(sandbox.repo, deployments[0]["id"])
        ]
        assert states[0] == "success"  # newest first
    finally:
        world.set_ci(None)
        world.set_deploy(enabled=False)


def test_a_plain_token_says_who_it_acts_as(sandbox: SandboxHandle, waits: list[float]) -> None:
    personal = sandbox.world.user_token("maintainer")
    with GitHubClient(token=personal, base_url=sandbox.api_url) as gh:
        assert gh.token_login() == "maintainer"
    with GitHubClient(token=sandbox.world.actions_token(), base_url=sandbox.api_url) as gh:
        assert gh.token_login() == "github-actions[bot]"
        number = sandbox.world.open_issue("reader", "Token mode")
        made = gh.create_comment(sandbox.repo, number, "from a workflow")
        assert made["user"]["login"] == gh.token_login()


def test_a_token_github_refuses_is_unauthorized(sandbox: SandboxHandle, waits: list[float]) -> None:
    with (
        GitHubClient(token="ghs_not-a-token", base_url=sandbox.api_url) as gh,
        pytest.raises(Unauthorized),
    ):
        gh.token_login()


def test_a_reply_said_at_once_by_two_threads_or_two_processes_is_one_comment(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    """The refusal of a label and the reply to an answer were found-or-created: a
    webhook's handler and a sweep of the same process both found none and both wrote."""
    number = sandbox.world.open_issue("reader", "Twice")
    bot = f"{gh.get_app()['slug']}[bot]"
    t, mark = Target(sandbox.repo, number), marker("refused", "deliver.reader")
    text = f"{mark}\n@reader: refused."
    with ThreadPoolExecutor(max_workers=6) as pool:
        said = list(pool.map(lambda _: say_once(gh, bot, t, mark, text), range(6)))
    held = gh.list_issue_comments(t.repo, number)
    assert len(held) == 1 and {s["id"] for s in said} == {held[0]["id"]}  # not even a pointer

    class OtherProcessFirst:  # another process writes its comment after our look
        def __getattr__(self, name: str) -> Any:
            return getattr(gh, name)

        def create_comment(self, repo: str, n: int, body: str) -> JSON:
            gh.create_comment(repo, n, body)
            return gh.create_comment(repo, n, body)

    mark2 = marker("reply", "12345")
    kept = say_once(OtherProcessFirst(), bot, t, mark2, f"{mark2}\n@reader: not taken.")
    mine = gh.list_issue_comments(t.repo, number)
    held = [c for c in mine if mark2 in c["body"]]
    assert len(held) == 1 and kept["id"] == held[0]["id"]
    assert mine[-1]["body"] == f"(Said in the comment above: {held[0]['html_url']}.)"
