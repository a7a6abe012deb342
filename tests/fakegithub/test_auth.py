"""The sandbox refuses credentials as GitHub does, and honours per-repo permissions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fakegithub.auth import (
    BAD_CREDENTIALS,
    JWT_EXPIRED,
    JWT_IAT,
    JWT_TOO_LONG,
    JWT_UNDECODABLE,
)
from fakegithub.server import SandboxHandle, running_sandbox

HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox(token_lifetime=timedelta(seconds=2)) as handle:
        yield handle


def app_jwt(
    handle: SandboxHandle,
    *,
    key: str | None = None,
    iat: float | None = None,
    exp: float | None = None,
) -> str:
    now = time.time()
    claims = {
        "iat": int(now - 60 if iat is None else iat),
        "exp": int(now + 540 if exp is None else exp),
        "iss": str(handle.app_id),
    }
    return jwt.encode(claims, key or handle.private_key_pem, algorithm="RS256")


def call(
    handle: SandboxHandle, method: str, path: str, token: str | None, **kw: object
) -> httpx.Response:
    headers = dict(HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.request(method, handle.api_url + path, headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


def installation_token(handle: SandboxHandle, body: dict[str, object] | None = None) -> str:
    answer = call(
        handle,
        "POST",
        f"/app/installations/{handle.installation_id}/access_tokens",
        app_jwt(handle),
        json=body or {},
    )
    assert answer.status_code == 201, answer.text
    token: str = answer.json()["token"]
    return token


def test_a_jwt_signed_with_another_key_is_refused(sandbox: SandboxHandle) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    answer = call(sandbox, "GET", "/app", app_jwt(sandbox, key=pem))
    assert answer.status_code == 401
    assert answer.json()["message"] == JWT_UNDECODABLE
    assert "documentation_url" in answer.json()


def test_an_expired_jwt_is_refused(sandbox: SandboxHandle) -> None:
    now = time.time()
    answer = call(sandbox, "GET", "/app", app_jwt(sandbox, iat=now - 900, exp=now - 300))
    assert answer.status_code == 401
    assert answer.json()["message"] == JWT_EXPIRED


def test_a_jwt_living_longer_than_ten_minutes_is_refused(sandbox: SandboxHandle) -> None:
    now = time.time()
    answer = call(sandbox, "GET", "/app", app_jwt(sandbox, iat=now, exp=now + 3600))
    assert answer.status_code == 401
    assert answer.json()["message"] == JWT_TOO_LONG


def test_a_jwt_issued_in_the_future_is_refused(sandbox: SandboxHandle) -> None:
    now = time.time()
    answer = call(sandbox, "GET", "/app", app_jwt(sandbox, iat=now + 300, exp=now + 540))
    assert answer.status_code == 401
    assert answer.json()["message"] == JWT_IAT


def test_an_installation_token_cannot_call_app_routes(sandbox: SandboxHandle) -> None:
    answer = call(sandbox, "GET", "/app/hook/deliveries", installation_token(sandbox))
    assert answer.status_code == 401
    assert answer.json()["message"] == JWT_UNDECODABLE


def test_garbage_in_place_of_a_jwt_is_refused(sandbox: SandboxHandle) -> None:
    answer = call(sandbox, "GET", "/app", "not.a.jwt")
    assert answer.status_code == 401
    assert answer.json()["message"] == JWT_UNDECODABLE


def test_a_good_jwt_reads_the_app(sandbox: SandboxHandle) -> None:
    answer = call(sandbox, "GET", "/app", app_jwt(sandbox))
    assert answer.status_code == 200
    assert answer.json()["id"] == sandbox.app_id
    assert answer.json()["slug"] == "autoloop-sandbox"


def test_an_expired_installation_token_is_refused(sandbox: SandboxHandle) -> None:
    token = installation_token(sandbox)
    assert call(sandbox, "GET", "/repos/sandbox/demo/pulls", token).status_code == 200
    time.sleep(2.1)
    answer = call(sandbox, "GET", "/repos/sandbox/demo/pulls", token)
    assert answer.status_code == 401
    assert answer.json()["message"] == BAD_CREDENTIALS


def test_an_unknown_token_is_bad_credentials(sandbox: SandboxHandle) -> None:
    answer = call(sandbox, "GET", "/repos/sandbox/demo/pulls", "ghs_" + "x" * 36)
    assert answer.status_code == 401
    assert answer.json()["message"] == BAD_CREDENTIALS


def test_no_token_cannot_see_the_private_repository(sandbox: SandboxHandle) -> None:
    assert call(sandbox, "GET", "/repos/sandbox/demo/pulls", None).status_code == 404


def test_a_token_narrowed_to_read_cannot_write(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Read-only token")
    token = installation_token(sandbox, {"permissions": {"issues": "read", "metadata": "read"}})
    assert call(sandbox, "GET", f"/repos/sandbox/demo/issues/{number}", token).status_code == 200
    answer = call(
        sandbox, "POST", f"/repos/sandbox/demo/issues/{number}/comments", token, json={"body": "hi"}
    )
    assert answer.status_code == 403
    assert answer.json()["message"] == "Resource not accessible by integration"
    assert [e for e in sandbox.world.audit.entries() if "/comments" in e.path] == []


def test_an_installation_token_only_works_on_its_installations_repos(
    sandbox: SandboxHandle,
) -> None:
    token = installation_token(sandbox)
    assert call(sandbox, "GET", "/repos/sandbox/elsewhere/pulls", token).status_code == 404


def test_a_user_token_acts_as_that_user(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("maintainer", "Who comments?")
    token = sandbox.world.user_token("reader")
    answer = call(
        sandbox, "POST", f"/repos/sandbox/demo/issues/{number}/comments", token, json={"body": "me"}
    )
    assert answer.status_code == 201
    assert answer.json()["user"]["login"] == "reader"
    assert answer.json()["author_association"] == "COLLABORATOR"


def test_a_reader_cannot_label_or_merge(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("maintainer", "Labels need triage")
    token = sandbox.world.user_token("reader")
    answer = call(
        sandbox,
        "POST",
        f"/repos/sandbox/demo/issues/{number}/labels",
        token,
        json={"labels": ["x"]},
    )
    assert answer.status_code == 403


def test_an_installation_token_acts_as_the_apps_bot(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Bot comments")
    token = installation_token(sandbox)
    answer = call(
        sandbox,
        "POST",
        f"/repos/sandbox/demo/issues/{number}/comments",
        token,
        json={"body": "bot"},
    )
    assert answer.status_code == 201
    body = answer.json()
    assert body["user"] == {**body["user"], "login": "autoloop-sandbox[bot]", "type": "Bot"}
    assert body["performed_via_github_app"]["id"] == sandbox.app_id
    event = sandbox.world.events[-1]
    assert (event.name, event.action) == ("issue_comment", "created")
    assert event.payload["sender"]["login"] == "autoloop-sandbox[bot]"
