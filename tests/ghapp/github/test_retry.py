"""The one retry policy: reads retry transient failures, writes never resend blindly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from ghapp.github import retry
from ghapp.github.retry import (
    AmbiguousWrite,
    Conflict,
    Forbidden,
    GitHubError,
    NotFound,
    Policy,
    RateLimited,
    ServerError,
    Unauthorized,
    Unprocessable,
    Unreachable,
    call,
)

URL = "http://github.test/repos/acme/web/issues/1"
NOW = 1_700_000_000.0


@pytest.fixture(autouse=True)
def _no_waits() -> Iterator[None]:
    retry.set_testing(True)
    yield
    retry.set_testing(False)


Step = httpx.Response | Exception


class Script:
    """A transport that answers each request with the next scripted step."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []
        self.client = httpx.Client(transport=httpx.MockTransport(self.handle))

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def sender(self, method: str, url: str = URL) -> Callable[[], httpx.Response]:
        return lambda: self.client.request(method, url, json={} if method != "GET" else None)


def run(script: Script, method: str, waits: list[float] | None = None, **kw: Any) -> httpx.Response:
    sleep = waits.append if waits is not None else None
    return call(method, URL, script.sender(method), now=lambda: NOW, sleep=sleep, **kw)


def gh(status: int, message: str = "boom", headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        json={"message": message, "documentation_url": "https://docs.github.test/x"},
        headers=headers,
    )


def test_a_read_is_retried_after_a_502_then_succeeds() -> None:
    script = Script(gh(502), gh(503), httpx.Response(200, json={"ok": True}))
    waits: list[float] = []
    response = run(script, "GET", waits)
    assert response.json() == {"ok": True}
    assert len(script.requests) == 3
    assert waits == [0.5, 1.0]  # exponential backoff


def test_a_read_is_retried_after_a_lost_connection_and_a_timeout() -> None:
    req = httpx.Request("GET", URL)
    script = Script(
        httpx.ConnectError("refused", request=req),
        httpx.ReadTimeout("slow", request=req),
        httpx.Response(200, json=[]),
    )
    assert run(script, "GET").json() == []
    assert len(script.requests) == 3


def test_a_read_that_keeps_failing_raises_server_error_after_the_attempts() -> None:
    script = Script(*(gh(500) for _ in range(4)))
    with pytest.raises(ServerError) as info:
        run(script, "GET")
    assert len(script.requests) == 4
    assert info.value.status == 500
    assert info.value.documentation_url == "https://docs.github.test/x"


def test_a_read_with_no_answer_at_all_raises_unreachable_with_the_cause() -> None:
    req = httpx.Request("GET", URL)
    script = Script(*(httpx.ConnectError("refused", request=req) for _ in range(4)))
    with pytest.raises(Unreachable) as info:
        run(script, "GET")
    assert isinstance(info.value.cause, httpx.ConnectError)


def test_a_post_answered_502_is_ambiguous_and_sent_once() -> None:
    script = Script(gh(502, "Bad Gateway"), httpx.Response(201, json={}))
    with pytest.raises(AmbiguousWrite) as info:
        run(script, "POST")
    assert len(script.requests) == 1
    assert (info.value.method, info.value.url, info.value.status) == ("POST", URL, 502)


def test_a_merge_that_timed_out_is_ambiguous_and_sent_once() -> None:
    req = httpx.Request("PUT", URL)
    script = Script(httpx.ReadTimeout("slow", request=req), httpx.Response(200, json={}))
    with pytest.raises(AmbiguousWrite) as info:
        run(script, "PUT")
    assert len(script.requests) == 1
    assert isinstance(info.value.cause, httpx.ReadTimeout)
    assert info.value.status is None
    assert "may or may not have been applied" in str(info.value)


def test_an_idempotent_post_is_retried_like_a_read() -> None:
    script = Script(gh(502), httpx.Response(201, json={"token": "t"}))
    assert run(script, "POST", idempotent=True).json() == {"token": "t"}
    assert len(script.requests) == 2


def test_retry_after_is_honoured_on_a_read() -> None:
    script = Script(gh(403, "secondary", {"retry-after": "7"}), httpx.Response(200, json={}))
    waits: list[float] = []
    run(script, "GET", waits)
    assert waits == [7.0]


def test_an_exhausted_primary_rate_limit_waits_until_the_reset() -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 42)}
    script = Script(gh(403, "API rate limit exceeded", headers), httpx.Response(200, json={}))
    waits: list[float] = []
    run(script, "GET", waits)
    assert waits == [42.0]


def test_a_429_without_headers_waits_one_minute() -> None:
    script = Script(gh(429, "too many"), httpx.Response(200, json={}))
    waits: list[float] = []
    run(script, "GET", waits)
    assert waits == [60.0]


def test_a_rate_limit_longer_than_the_max_wait_is_raised_at_once() -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 3600)}
    script = Script(gh(403, "API rate limit exceeded", headers))
    waits: list[float] = []
    with pytest.raises(RateLimited) as info:
        run(script, "GET", waits)
    assert info.value.retry_after_s == 3600.0
    assert waits == []
    assert len(script.requests) == 1


def test_a_rate_limited_write_was_refused_so_it_is_sent_again_after_the_wait() -> None:
    script = Script(
        gh(403, "You have exceeded a secondary rate limit", {"retry-after": "3"}),
        httpx.Response(201, json={"id": 1}),
    )
    waits: list[float] = []
    assert run(script, "POST", waits).json() == {"id": 1}
    assert waits == [3.0]
    assert len(script.requests) == 2


def test_max_wait_is_configurable() -> None:
    script = Script(gh(429, "slow down", {"retry-after": "30"}))
    with pytest.raises(RateLimited):
        run(script, "GET", policy=Policy(max_wait_s=10))


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (422, Unprocessable),
        (405, GitHubError),
    ],
)
def test_client_errors_are_raised_at_once_as_their_kind(
    status: int, kind: type[GitHubError]
) -> None:
    for method in ("GET", "PUT"):
        script = Script(gh(status, "nope"), httpx.Response(200))
        with pytest.raises(kind) as info:
            run(script, method)
        assert type(info.value) is kind
        assert len(script.requests) == 1
        assert info.value.status == status
        assert info.value.message == "nope"


def test_validation_errors_are_part_of_the_message() -> None:
    body = {"message": "Validation Failed", "errors": [{"code": "invalid", "message": "bad sha"}]}
    script = Script(httpx.Response(422, json=body))
    with pytest.raises(Unprocessable, match=r"Validation Failed \(bad sha\)"):
        run(script, "POST")


def test_an_error_without_json_still_has_a_message() -> None:
    script = Script(httpx.Response(404, text="<html>gone</html>"))
    with pytest.raises(NotFound, match="gone"):
        run(script, "GET")


def test_a_post_redirected_into_a_get_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/old":
            return httpx.Response(301, headers={"location": "http://github.test/new"})
        return httpx.Response(200, json={"method": request.method})

    client = httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=True)
    with pytest.raises(GitHubError, match="moved") as info:
        call("POST", "http://github.test/old", lambda: client.post("http://github.test/old"))
    assert info.value.status == 301
    ok = call("GET", "http://github.test/old", lambda: client.get("http://github.test/old"))
    assert ok.json() == {"method": "GET"}


def test_waits_are_slept_for_real_unless_testing(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)
    retry.set_testing(False)
    script = Script(gh(502), httpx.Response(200))
    call("GET", URL, script.sender("GET"))
    assert slept == [0.5]
    retry.set_testing(True)
    script = Script(gh(502), httpx.Response(200))
    call("GET", URL, script.sender("GET"))
    assert slept == [0.5]
