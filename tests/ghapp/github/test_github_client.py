"""The GitHub client at its HTTP edge (httpx.MockTransport): auth, retries, timeouts, shapes."""

from __future__ import annotations

import base64
import functools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ghapp.github import retry
from ghapp.github.client import (
    AmbiguousWrite,
    Conflict,
    GitHubClient,
    GitHubError,
    GraphQLError,
    NotFound,
    ServerError,
    Unauthorized,
)
from ghapp.runtime.settings import GitHubSettings

BASE = "http://github.test/api/v3"
NOW = 1_700_000_000.0
APP_ID = 4242
INSTALLATION = 77


@functools.cache
def keypair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


@pytest.fixture(autouse=True)
def _no_waits() -> Iterator[None]:
    retry.set_testing(True)
    yield
    retry.set_testing(False)


def iso(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Handler = Callable[[httpx.Request], httpx.Response | Exception]


class FakeGitHub:
    """Answers the App endpoints itself; other routes come from ``routes`` (lists are
    consumed one answer per request, the last one repeats)."""

    def __init__(self) -> None:
        self.clock = NOW
        self.requests: list[httpx.Request] = []
        self.routes: dict[tuple[str, str], list[Handler]] = {}
        self.tokens_issued = 0

    def now(self) -> float:
        return self.clock

    def on(self, method: str, path: str, *answers: Handler | httpx.Response | Exception) -> None:
        handlers: list[Handler] = []
        for a in answers:
            if callable(a):
                handlers.append(a)
            else:
                handlers.append(lambda _req, a=a: a)
        self.routes[(method, path)] = handlers

    def seen(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == path]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path.removeprefix("/api/v3")
        key = (request.method, path)
        if key in self.routes:
            handlers = self.routes[key]
            answer = handlers.pop(0)(request) if len(handlers) > 1 else handlers[0](request)
            if isinstance(answer, Exception):
                raise answer
            return answer
        if key == ("GET", "/repos/acme/web/installation"):
            return httpx.Response(200, json={"id": INSTALLATION})
        if key == ("POST", f"/app/installations/{INSTALLATION}/access_tokens"):
            self.tokens_issued += 1
            return httpx.Response(
                201,
                json={"token": f"ghs_{self.tokens_issued}", "expires_at": iso(self.clock + 3600)},
            )
        return httpx.Response(404, json={"message": "Not Found"})


@pytest.fixture
def fake() -> FakeGitHub:
    return FakeGitHub()


def client_for(fake: FakeGitHub, **kw: Any) -> GitHubClient:
    return GitHubClient(
        app_id=APP_ID,
        private_key=keypair()[0],
        base_url=BASE,
        transport=httpx.MockTransport(fake.handle),
        now=fake.now,
        **kw,
    )


def test_repo_calls_carry_the_installation_token_got_with_the_app_jwt(fake: FakeGitHub) -> None:
    fake.on("GET", "/repos/acme/web/issues/1", httpx.Response(200, json={"number": 1}))
    gh = client_for(fake)
    assert gh.get_issue("acme/web", 1) == {"number": 1}
    lookup, exchange, call = fake.requests
    assert lookup.url.path == "/api/v3/repos/acme/web/installation"
    assert exchange.url.path == f"/api/v3/app/installations/{INSTALLATION}/access_tokens"
    for app_call in (lookup, exchange):
        scheme, token = app_call.headers["authorization"].split(" ", 1)
        assert scheme == "Bearer"
        claims = jwt.decode(
            token, keypair()[1], algorithms=["RS256"], options={"verify_exp": False}
        )
        assert claims == {"iss": str(APP_ID), "iat": int(NOW) - 60, "exp": int(NOW) + 540}
    assert call.headers["authorization"] == "token ghs_1"
    assert call.headers["x-github-api-version"] == "2022-11-28"
    assert call.headers["user-agent"] == "autoloop"


def test_the_token_is_reused_then_renewed_five_minutes_before_it_expires(fake: FakeGitHub) -> None:
    fake.on("GET", "/repos/acme/web/issues/1", httpx.Response(200, json={}))
    gh = client_for(fake)
    gh.get_issue("acme/web", 1)
    fake.clock += 3600 - 301
    gh.get_issue("acme/web", 1)
    assert fake.tokens_issued == 1
    fake.clock += 2
    gh.get_issue("acme/web", 1)
    assert fake.tokens_issued == 2
    auths = [
        r.headers["authorization"] for r in fake.seen("GET", "/api/v3/repos/acme/web/issues/1")
    ]
    assert auths == ["token ghs_1", "token ghs_1", "token ghs_2"]
    assert len(fake.seen("GET", "/api/v3/repos/acme/web/installation")) == 1


def test_every_call_has_a_timeout(fake: FakeGitHub) -> None:
    fake.on("GET", "/repos/acme/web/pulls/3", httpx.Response(200, json={}))
    client_for(fake, timeout_s=7.0).get_pull("acme/web", 3)
    for request in fake.requests:
        assert request.extensions["timeout"] == {
            "connect": 5.0,
            "read": 7.0,
            "write": 7.0,
            "pool": 7.0,
        }


def test_each_request_is_logged_once(fake: FakeGitHub, caplog: pytest.LogCaptureFixture) -> None:
    # githubkit's client sends through the pool's own httpx client: both used to log it.
    fake.on("GET", "/repos/acme/web/pulls/3", httpx.Response(200, json={}))
    with caplog.at_level(logging.INFO, logger="httpx"):
        client_for(fake).get_pull("acme/web", 3)
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert len(fake.requests) == 3  # installation lookup, token, the read
    assert len(lines) == 3, lines
    assert len([line for line in lines if "/repos/acme/web/pulls/3" in line]) == 1


def test_a_get_answered_502_is_retried_then_succeeds(fake: FakeGitHub) -> None:
    fake.on(
        "GET",
        "/repos/acme/web/pulls/3",
        httpx.Response(502, json={"message": "Bad Gateway"}),
        httpx.Response(200, json={"number": 3, "merged": False}),
    )
    assert client_for(fake).get_pull("acme/web", 3)["number"] == 3
    assert len(fake.seen("GET", "/api/v3/repos/acme/web/pulls/3")) == 2


def test_githubkit_does_not_retry_on_its_own(fake: FakeGitHub) -> None:
    fake.on("GET", "/repos/acme/web/pulls/3", httpx.Response(500, json={"message": "oops"}))
    with pytest.raises(ServerError):
        client_for(fake).get_pull("acme/web", 3)
    assert len(fake.seen("GET", "/api/v3/repos/acme/web/pulls/3")) == retry.DEFAULT_POLICY.attempts


def test_a_post_answered_502_raises_ambiguous_write_after_exactly_one_request(
    fake: FakeGitHub,
) -> None:
    fake.on(
        "POST",
        "/repos/acme/web/issues/1/comments",
        httpx.Response(502, json={"message": "Bad Gateway"}),
        httpx.Response(201, json={"id": 1}),
    )
    with pytest.raises(AmbiguousWrite) as info:
        client_for(fake).create_comment("acme/web", 1, "hello")
    assert len(fake.seen("POST", "/api/v3/repos/acme/web/issues/1/comments")) == 1
    assert info.value.method == "POST"
    assert info.value.status == 502


def test_a_merge_whose_answer_is_lost_is_ambiguous_and_not_resent(fake: FakeGitHub) -> None:
    def lost(request: httpx.Request) -> Exception:
        return httpx.ReadTimeout("no answer", request=request)

    fake.on("PUT", "/repos/acme/web/pulls/3/merge", lost)
    with pytest.raises(AmbiguousWrite) as info:
        client_for(fake).merge_pull("acme/web", 3, sha="abc123")
    merges = fake.seen("PUT", "/api/v3/repos/acme/web/pulls/3/merge")
    assert len(merges) == 1
    assert json.loads(merges[0].content) == {"sha": "abc123", "merge_method": "merge"}
    assert isinstance(info.value.cause, httpx.ReadTimeout)


def test_a_merge_refused_because_the_head_moved_is_a_conflict(fake: FakeGitHub) -> None:
    fake.on(
        "PUT",
        "/repos/acme/web/pulls/3/merge",
        httpx.Response(409, json={"message": "Head branch was modified."}),
    )
    with pytest.raises(Conflict, match="Head branch was modified"):
        client_for(fake).merge_pull("acme/web", 3, sha="old")


def test_retry_after_is_honoured_with_the_computed_wait(fake: FakeGitHub) -> None:
    waits: list[float] = []
    fake.on(
        "GET",
        "/repos/acme/web/commits/abc/check-runs",
        httpx.Response(429, json={"message": "slow down"}, headers={"retry-after": "9"}),
        httpx.Response(200, json={"total_count": 1, "check_runs": [{"id": 5}]}),
    )
    runs = client_for(fake, sleep=waits.append).list_check_runs_for_ref("acme/web", "abc")
    assert runs == [{"id": 5}]
    assert waits == [9.0]


def test_a_refused_token_is_replaced_once(fake: FakeGitHub) -> None:
    fake.on(
        "GET",
        "/repos/acme/web/issues/1",
        httpx.Response(401, json={"message": "Bad credentials"}),
        httpx.Response(200, json={"number": 1}),
    )
    gh = client_for(fake)
    assert gh.get_issue("acme/web", 1) == {"number": 1}
    auths = [
        r.headers["authorization"] for r in fake.seen("GET", "/api/v3/repos/acme/web/issues/1")
    ]
    assert auths == ["token ghs_1", "token ghs_2"]


def test_a_token_refused_twice_raises_unauthorized(fake: FakeGitHub) -> None:
    fake.on("GET", "/repos/acme/web/issues/1", httpx.Response(401, json={"message": "Bad"}))
    with pytest.raises(Unauthorized):
        client_for(fake).get_issue("acme/web", 1)
    assert len(fake.seen("GET", "/api/v3/repos/acme/web/issues/1")) == 2


def test_a_refused_app_jwt_is_not_sent_again(fake: FakeGitHub) -> None:
    # GitHub refuses a JWT issued in its future (our clock ran ahead): once refused, the
    # next call mints a new one instead of sending the refused one until it expires.
    fake.on(
        "GET",
        "/app/hook/deliveries",
        httpx.Response(401, json={"message": "'Issued at' claim ('iat') must be ..."}),
        httpx.Response(200, json=[]),
    )
    gh = client_for(fake)
    with pytest.raises(Unauthorized):
        gh.list_webhook_deliveries()
    fake.clock += 1
    assert gh.list_webhook_deliveries() == []
    auths = [r.headers["authorization"] for r in fake.seen("GET", "/api/v3/app/hook/deliveries")]
    assert len(auths) == 2 and auths[0] != auths[1]


def test_lists_follow_next_page_links(fake: FakeGitHub) -> None:
    path = "/repos/acme/web/issues/1/comments"

    def page(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("page") == "2":
            return httpx.Response(200, json=[{"id": 3}])
        assert request.url.params["per_page"] == "100"
        nxt = f"{BASE}{path}?per_page=100&page=2"
        return httpx.Response(
            200, json=[{"id": 1}, {"id": 2}], headers={"link": f'<{nxt}>; rel="next"'}
        )

    fake.on("GET", path, page)
    comments = client_for(fake).list_issue_comments("acme/web", 1)
    assert [c["id"] for c in comments] == [1, 2, 3]


def test_a_next_page_on_another_host_is_not_followed_with_our_token(fake: FakeGitHub) -> None:
    fake.on(
        "GET",
        "/repos/acme/web/pulls",
        httpx.Response(
            200, json=[{"number": 1}], headers={"link": '<http://elsewhere.test/x>; rel="next"'}
        ),
    )
    with pytest.raises(GitHubError, match="another host"):
        client_for(fake).list_pulls("acme/web")
    assert all(r.url.host == "github.test" for r in fake.requests)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"permission": "admin", "role_name": "admin"}, "admin"),
        ({"permission": "write", "role_name": "maintain"}, "write"),
        ({"permission": "write", "role_name": "write"}, "write"),
        ({"permission": "read", "role_name": "triage"}, "read"),
        ({"permission": "read", "role_name": "read"}, "read"),
        ({"permission": "write", "role_name": "release-manager"}, "write"),  # custom role
        ({"permission": "none", "role_name": "none"}, "none"),
        ({}, "none"),
    ],
)
def test_collaborator_permission_is_normalised(
    fake: FakeGitHub, answer: dict[str, str], expected: str
) -> None:
    fake.on(
        "GET", "/repos/acme/web/collaborators/someone/permission", httpx.Response(200, json=answer)
    )
    assert client_for(fake).get_collaborator_permission("acme/web", "someone") == expected


def test_a_stranger_has_no_permission(fake: FakeGitHub) -> None:
    assert client_for(fake).get_collaborator_permission("acme/web", "nobody") == "none"


def test_file_contents_are_decoded(fake: FakeGitHub) -> None:
    text = 'title = "naïve"\n'
    content = base64.encodebytes(text.encode()).decode()

    def contents(request: httpx.Request) -> httpx.Response:
        assert request.url.params["ref"] == "main"
        return httpx.Response(200, json={"type": "file", "encoding": "base64", "content": content})

    fake.on("GET", "/repos/acme/web/contents/.github/autoloop.toml", contents)
    gh = client_for(fake)
    assert gh.get_file_contents("acme/web", ".github/autoloop.toml", "main") == text
    assert gh.get_file_contents("acme/web", "absent.toml", "main") is None


def test_removing_a_label_that_is_not_there_is_already_done(fake: FakeGitHub) -> None:
    fake.on(
        "DELETE",
        "/repos/acme/web/issues/1/labels/needs review",
        httpx.Response(404, json={"message": "Label does not exist"}),
    )
    fake.on("DELETE", "/repos/acme/web/issues/1/labels/bug", httpx.Response(200, json=[]))
    gh = client_for(fake)
    assert gh.remove_label("acme/web", 1, "needs review") is False
    assert gh.remove_label("acme/web", 1, "bug") is True
    raw = [r.url.raw_path for r in fake.requests if r.method == "DELETE"]
    assert raw[0] == b"/api/v3/repos/acme/web/issues/1/labels/needs%20review"
    with pytest.raises(NotFound):
        gh.remove_label("acme/nope", 1, "bug")


def test_write_methods_send_githubs_documented_bodies(fake: FakeGitHub) -> None:
    for method, path in [
        ("POST", "/repos/acme/web/issues/1/labels"),
        ("PATCH", "/repos/acme/web/issues/1"),
        ("POST", "/repos/acme/web/issues/1/assignees"),
        ("POST", "/repos/acme/web/pulls/2/reviews"),
        ("PUT", "/repos/acme/web/pulls/2/update-branch"),
        ("POST", "/repos/acme/web/check-runs"),
        ("PATCH", "/repos/acme/web/check-runs/9"),
        ("PATCH", "/repos/acme/web/issues/comments/5"),
    ]:
        fake.on(method, path, httpx.Response(200, json={}))
    gh = client_for(fake)
    gh.add_labels("acme/web", 1, ["bug", "triaged"])
    gh.set_issue_state("acme/web", 1, "closed", state_reason="completed")
    gh.add_assignees("acme/web", 1, ["someone"])
    gh.create_review("acme/web", 2, event="APPROVE", body="ok", commit_id="abc")
    gh.update_branch("acme/web", 2, expected_head_sha="abc")
    gh.create_check_run("acme/web", name="autoloop/deliver", head_sha="abc", status="in_progress")
    gh.update_check_run("acme/web", 9, status="completed", conclusion="success")
    gh.update_comment("acme/web", 5, "new text")
    bodies = [
        (r.method, r.url.path.removeprefix("/api/v3/repos/acme/web"), json.loads(r.content))
        for r in fake.requests
        if r.method != "GET" and "/app/" not in r.url.path
    ]
    assert bodies == [
        ("POST", "/issues/1/labels", {"labels": ["bug", "triaged"]}),
        ("PATCH", "/issues/1", {"state": "closed", "state_reason": "completed"}),
        ("POST", "/issues/1/assignees", {"assignees": ["someone"]}),
        ("POST", "/pulls/2/reviews", {"event": "APPROVE", "body": "ok", "commit_id": "abc"}),
        ("PUT", "/pulls/2/update-branch", {"expected_head_sha": "abc"}),
        (
            "POST",
            "/check-runs",
            {"name": "autoloop/deliver", "head_sha": "abc", "status": "in_progress"},
        ),
        ("PATCH", "/check-runs/9", {"status": "completed", "conclusion": "success"}),
        ("PATCH", "/issues/comments/5", {"body": "new text"}),
    ]


def test_misuse_is_refused_before_any_request(fake: FakeGitHub) -> None:
    gh = client_for(fake)
    with pytest.raises(ValueError, match="review event"):
        gh.create_review("acme/web", 2, event="LGTM")
    with pytest.raises(ValueError, match="owner/name"):
        gh.get_issue("acme/web/../x", 1)
    with pytest.raises(ValueError, match="head sha"):
        gh.merge_pull("acme/web", 2, sha="")
    with pytest.raises(TypeError, match="app_id and private_key, or a token"):
        GitHubClient(base_url=BASE)
    assert fake.requests == []


def test_missing_protection_and_release_read_as_none(fake: FakeGitHub) -> None:
    gh = client_for(fake)
    assert gh.get_required_status_checks("acme/web", "main") is None
    assert gh.get_latest_release("acme/web") is None
    fake.on(
        "GET",
        "/repos/acme/web/branches/main/protection/required_status_checks",
        httpx.Response(200, json={"strict": True, "contexts": ["ci"]}),
    )
    assert gh.get_required_status_checks("acme/web", "main") == {"strict": True, "contexts": ["ci"]}


def test_deliveries_since_a_time_stop_at_older_ones_and_use_the_jwt(fake: FakeGitHub) -> None:
    deliveries = [
        {"id": 3, "guid": "c", "delivered_at": iso(NOW - 10)},
        {"id": 2, "guid": "b", "delivered_at": iso(NOW - 100)},
        {"id": 1, "guid": "a", "delivered_at": iso(NOW - 1000)},
    ]
    fake.on("GET", "/app/hook/deliveries", httpx.Response(200, json=deliveries))
    fake.on("POST", "/app/hook/deliveries/2/attempts", httpx.Response(202, json={}))
    gh = client_for(fake)
    assert [d["guid"] for d in gh.list_webhook_deliveries(since=NOW - 500)] == ["c", "b"]
    assert len(gh.list_webhook_deliveries()) == 3
    gh.redeliver(2)
    for request in fake.requests:
        assert request.headers["authorization"].startswith("Bearer ")


def test_get_app_uses_the_jwt(fake: FakeGitHub) -> None:
    fake.on("GET", "/app", httpx.Response(200, json={"id": APP_ID, "slug": "autoloop"}))
    assert client_for(fake).get_app()["slug"] == "autoloop"


def test_a_plain_token_is_used_as_is(fake: FakeGitHub) -> None:
    fake.on("GET", "/repos/acme/web/issues/1", httpx.Response(200, json={"number": 1}))
    gh = GitHubClient(token="ghs_action", base_url=BASE, transport=httpx.MockTransport(fake.handle))
    gh.get_issue("acme/web", 1)
    assert [r.headers["authorization"] for r in fake.requests] == ["token ghs_action"]


def test_a_known_installation_skips_the_lookup(fake: FakeGitHub) -> None:
    fake.on("GET", "/repos/acme/web/issues/1", httpx.Response(200, json={}))
    client_for(fake, installation_id=INSTALLATION).get_issue("acme/web", 1)
    assert not fake.seen("GET", "/api/v3/repos/acme/web/installation")


def test_client_from_settings(fake: FakeGitHub) -> None:
    settings = GitHubSettings(
        app_id=APP_ID, private_key=keypair()[0], webhook_secret=b"s", api_url=BASE
    )
    fake.on("GET", "/app", httpx.Response(200, json={"id": APP_ID}))
    gh = GitHubClient.from_settings(settings, transport=httpx.MockTransport(fake.handle))
    assert gh.get_app() == {"id": APP_ID}
    assert str(fake.requests[0].url) == f"{BASE}/app"


def test_repository_and_reviews_are_read(fake: FakeGitHub) -> None:
    fake.on("GET", "/repos/acme/web", httpx.Response(200, json={"default_branch": "trunk"}))
    fake.on(
        "GET",
        "/repos/acme/web/pulls/2/reviews",
        httpx.Response(200, json=[{"id": 1, "state": "APPROVED"}]),
    )
    gh = client_for(fake)
    assert gh.get_repo("acme/web")["default_branch"] == "trunk"
    assert [r["state"] for r in gh.list_reviews("acme/web", 2)] == ["APPROVED"]


def test_a_repository_without_the_app_says_to_install_it(fake: FakeGitHub) -> None:
    with pytest.raises(NotFound, match=r"not installed on acme/other .*install the App") as info:
        client_for(fake).get_issue("acme/other", 1)
    assert info.value.status == 404
    assert not fake.seen("GET", "/api/v3/repos/acme/other/issues/1")


def test_a_failing_token_exchange_is_retried_once_over_not_per_request_attempt(
    fake: FakeGitHub,
) -> None:
    fake.on(
        "POST",
        f"/app/installations/{INSTALLATION}/access_tokens",
        httpx.Response(502, json={"message": "Bad Gateway"}),
    )
    with pytest.raises(ServerError):
        client_for(fake).get_issue("acme/web", 1)
    exchanges = fake.seen("POST", f"/api/v3/app/installations/{INSTALLATION}/access_tokens")
    assert len(exchanges) == retry.DEFAULT_POLICY.attempts
    assert not fake.seen("GET", "/api/v3/repos/acme/web/issues/1")


def test_graphql_goes_beside_the_rest_base_with_the_installation_token(fake: FakeGitHub) -> None:
    answer = {
        "data": {"markPullRequestReadyForReview": {"pullRequest": {"id": "PR_1", "isDraft": False}}}
    }
    fake.on("POST", "/api/graphql", httpx.Response(200, json=answer))
    gh = client_for(fake)
    assert gh.graphql_url() == "http://github.test/api/graphql"
    assert gh.mark_ready_for_review("acme/web", "PR_1") == {"id": "PR_1", "isDraft": False}
    (sent,) = fake.seen("POST", "/api/graphql")
    assert sent.headers["authorization"] == "token ghs_1"
    assert json.loads(sent.content)["variables"] == {"id": "PR_1"}
    assert GitHubClient(token="t", base_url="https://api.github.com").graphql_url() == (
        "https://api.github.com/graphql"
    )


def test_graphql_errors_beside_a_200_are_refusals_with_their_type(fake: FakeGitHub) -> None:
    refused = {
        "data": None,
        "errors": [{"type": "FORBIDDEN", "message": "Resource not accessible"}],
    }
    fake.on("POST", "/api/graphql", httpx.Response(200, json=refused))
    with pytest.raises(GraphQLError, match="Resource not accessible") as caught:
        client_for(fake).mark_ready_for_review("acme/web", "PR_1")
    assert caught.value.type == "FORBIDDEN"


def test_a_mutation_without_an_answer_is_an_ambiguous_write(fake: FakeGitHub) -> None:
    fake.on("POST", "/api/graphql", httpx.ReadTimeout("lost"))
    with pytest.raises(AmbiguousWrite):
        client_for(fake).mark_ready_for_review("acme/web", "PR_1")
    assert len(fake.seen("POST", "/api/graphql")) == 1  # never resent
