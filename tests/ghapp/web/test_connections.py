"""Idle connections cannot take the server down: a header deadline, shedding the idlest,
and ``autoloop serve`` taking all the open files it may.

The last two tests run ``autoloop serve`` as a process under the common 1,024 open-file
soft limit (set for it alone, with ``preexec_fn``), hold idle sockets against it, and
time a signed delivery: it must get its 2xx within 1 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from ghapp.commands.home import init_home
from ghapp.github.sansio import sign
from ghapp.web import app as web_app
from ghapp.web.connections import backlog_for, max_connections_for
from tests import paths
from tests.ghapp.web.logged import logs as caught_logs
from tests.ghapp.web.test_app import ENV, FIXTURES, RULES, SECRET, post
from tests.servers import free_port, live_server, stuck_ledger

BODY = (FIXTURES / "issues" / "opened.json").read_bytes()
# Each test runs on both stacks: httptools on uvloop (the default when both are installed)
# and h11 on asyncio (where those extras cannot install).
STACKS = {"httptools": ("httptools", "uvloop"), "h11": ("h11", "asyncio")}


@pytest.fixture(params=sorted(STACKS))
def stack(request: pytest.FixtureRequest) -> tuple[str, str]:
    http, loop = STACKS[request.param]
    return http, loop


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closes ``sock`` within ``within_s`` (it sends nothing first)."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


# ------------------------------------------------------------------------ the deadline


def test_a_connection_that_sends_no_request_is_closed_at_the_header_deadline(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    http = {"header_timeout_s": 0.5, "http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        with socket.create_connection(address(live.url)) as silent:
            started = time.monotonic()
            assert closed_by_server(silent, 5)
            assert 0.4 < time.monotonic() - started < 3
        with socket.create_connection(address(live.url)) as slow:
            # headers a few bytes at a time, never complete: the deadline still holds
            started = time.monotonic()
            closed = False
            # (valid header lines, so that no parser refuses them before the deadline)
            pieces = [b"POST /github/webhook HTTP/1.1\r\n", b"Host: x\r\n"]
            for piece in pieces + [b"X-A: %d\r\n" % n for n in range(10)]:
                try:
                    slow.sendall(piece)
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                if closed_by_server(slow, 0.1):
                    closed = True
                    break
            assert closed or closed_by_server(slow, 3)
            assert time.monotonic() - started < 3


def test_the_deadline_never_cuts_a_request_whose_headers_are_in(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    http = {"header_timeout_s": 0.3, "http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        head = webhook_head(host)
        with socket.create_connection((host, port)) as sock:
            sock.sendall(head + BODY[:50])
            time.sleep(0.8)  # well past the deadline: the body is the app's to wait for
            sock.sendall(BODY[50:])
            sock.settimeout(5)
            answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200 ")


def test_a_head_past_the_bound_is_refused_at_once_and_holds_no_webhook_back(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    """Under httptools a request's headers had no bound: one sender feeding a header
    value of megabytes (no secret needed) held the event loop for seconds each read, and
    a signed webhook beside three such senders waited 9.5 s."""
    http = {"http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        with socket.create_connection((host, port)) as big:
            big.sendall(b"POST /github/webhook HTTP/1.1\r\nHost: x\r\nX-A: ")
            started = time.monotonic()
            refused = b""
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for _ in range(64):  # up to 4 MiB, 64 KiB at a time
                    big.sendall(b"a" * 65536)
                    big.settimeout(0.05)
                    with contextlib.suppress(TimeoutError):
                        refused = big.recv(4096)
                        break
            refused = refused or read_response(big)
            assert time.monotonic() - started < 2
        # h11's own bound answers 400; ours, under httptools, 431
        assert refused.startswith(b"HTTP/1.1 4"), refused[:200]
        if stack[0] == "httptools":
            assert refused.startswith(b"HTTP/1.1 431 "), refused[:200]
            assert b"request headers over 32 KiB" in refused
        with socket.create_connection((host, port)) as sock:  # a delivery, as ever
            sock.sendall(webhook_head(host) + BODY)
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")


def read_all(sock: socket.socket, within_s: float = 3.0) -> bytes:
    """Everything the server sends until it closes, or ``within_s`` of silence."""
    sock.settimeout(within_s)
    data = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_the_head_bound_counts_heads_only_whatever_comes_around_them(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    """The bound counted from one answer to the next: the rest of a body that came after
    its answer (a 413 sent before the body was read) was counted as a head, and a second
    answer, a 431, followed the first; and a head that came while an earlier request was
    answered was not counted at all (a header of a megabyte was parsed in full)."""
    http = {"http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        # bodies in pieces after their heads, three on one connection: all answered
        with socket.create_connection((host, port)) as sock:
            for _ in range(3):
                sock.sendall(webhook_head(host))
                for at in range(0, len(BODY), 8000):
                    sock.sendall(BODY[at : at + 8000])
                    time.sleep(0.01)
                assert read_response(sock).startswith(b"HTTP/1.1 200 ")
        # answered 413 before its body was read: the rest of the body is no head
        with socket.create_connection((host, port)) as sock:
            head = webhook_head(host).replace(
                f"Content-Length: {len(BODY)}".encode(), b"Content-Length: 30000000"
            )
            sock.sendall(head)
            first = read_response(sock)
            assert first.startswith(b"HTTP/1.1 413 "), first[:200]
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for _ in range(4):
                    sock.sendall(b"x" * 65536)
            rest = read_all(sock, 1.0)
            assert b"431" not in rest, rest[:300]
        # a head over the bound behind a request being answered: that answer comes whole,
        # then the refusal
        with socket.create_connection((host, port)) as sock:
            big = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-A: ".encode()
            sock.sendall(webhook_head(host) + BODY + big)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for _ in range(16):
                    sock.sendall(b"a" * 65536)
            answers = read_all(sock)
        assert answers.startswith(b"HTTP/1.1 200 "), answers[:300]
        assert answers.count(b"HTTP/1.1 ") == 2, answers[:600]
        second = answers[answers.index(b"HTTP/1.1 ", 10) :]
        assert second.startswith(b"HTTP/1.1 4"), second[:200]  # (h11: its own 400)
        if stack[0] == "httptools":
            assert second.startswith(b"HTTP/1.1 431 "), second[:200]


def test_a_pipelined_request_is_answered_whole_however_long_past_the_header_deadline(
    tmp_path: Path, stack: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under httptools, the answer to the first of two pipelined requests armed the
    header deadline for the second, whose head was in already: the connection was closed
    in the middle of the second's answer."""
    monkeypatch.setattr(web_app, "HEALTH_READ_S", 0.6)
    monkeypatch.setattr(web_app, "METRICS_READ_S", 0.6)
    http = {"header_timeout_s": 0.3, "http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        with stuck_ledger(live.hub.store), socket.create_connection((host, port)) as sock:
            two = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
            two += f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
            sock.sendall(two)  # each waits 0.6 s for the ledger, past the 0.3 s deadline
            answers = read_all(sock, 3.0)
        assert answers.count(b"HTTP/1.1 503 ") == 2, answers
        assert answers.rstrip().endswith(b"the ledger did not answer within 0.6 s"), answers


def test_a_signed_delivery_with_an_upgrade_header_is_taken_or_told_never_a_wrong_secret(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    """``curl --http2`` sends ``Upgrade: h2c``: httptools then reads no body, and the
    signed delivery was refused 401 with a warning that the secret did not match."""
    http = {"http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        head = webhook_head(host).replace(
            b"Content-Type:",
            b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
            b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nContent-Type:",
        )
        with caught_logs() as seen, socket.create_connection((host, port)) as sock:
            sock.sendall(head + BODY)
            answer = read_response(sock)
        said = [r.getMessage() for r in seen.records if r.levelname == "WARNING"]
        assert not [line for line in said if "secret" in line or "WebSocket" in line], said
        if stack[0] == "httptools":
            assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
            assert b"send the request as HTTP/1.1 without it (curl: --http1.1)" in answer
        else:  # h11 reads the body and answers the delivery
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
        with socket.create_connection((host, port)) as sock:
            sock.sendall(webhook_head(host) + BODY)
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")


def test_a_body_that_trickles_in_does_not_hold_back_the_deciding_of_others(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    # A request waiting for its body asks nothing of the processor: counted as work of
    # the ack path, it kept the translator waiting for DEFER_MAX_S (10 s), so one slow
    # (or hostile) sender delayed the routing of every other delivery.
    http = {"http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        inbox = live.running.inbox
        assert inbox is not None
        with socket.create_connection((host, port)) as slow:
            slow.sendall(webhook_head(host) + BODY[:50])  # headers in, the body trickles
            time.sleep(0.3)
            began = time.monotonic()
            assert post(live.url, "issues", BODY).status_code == 200
            while inbox.waiting() and time.monotonic() - began < 20:
                time.sleep(0.01)
            took = time.monotonic() - began
            slow.sendall(BODY[50:])
            slow.settimeout(5)
            assert read_response(slow).startswith(b"HTTP/1.1 200 ")
        assert took < 2.0, f"decided {took:.1f} s after its ack"


# ------------------------------------------------------------------------ bodies


def test_an_unsigned_body_is_refused_before_it_is_read(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    """A body is read before it can be verified: unsigned 24 MB bodies that never ended
    took a gigabyte of memory from 40 connections."""
    http = {"http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        for signature in ("", "X-Hub-Signature-256: sha256=nothex\r\n"):
            with socket.create_connection((host, port)) as sock:
                sock.sendall(
                    b"POST /github/webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issues\r\n"
                    + signature.encode()
                    + f"Content-Length: {24 * 1024 * 1024}\r\n\r\n".encode()
                    + b"{" * 1000
                )
                started = time.monotonic()
                answer = read_response(sock)
            assert answer.startswith(b"HTTP/1.1 401 "), answer
            assert b"X-Hub-Signature-256" in answer
            assert time.monotonic() - started < 2


def test_a_body_that_stops_half_way_is_answered_408_and_its_connection_freed(
    tmp_path: Path, stack: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_app, "BODY_S", 0.5)
    http = {"http": stack[0], "loop": stack[1]}
    with (
        live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live,
        caught_logs() as seen,
    ):
        host, port = address(live.url)
        with socket.create_connection((host, port)) as sock:
            sock.sendall(webhook_head(host) + BODY[:100])
            started = time.monotonic()
            answer = read_response(sock)
            took = time.monotonic() - started
            assert closed_by_server(sock, 5)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"did not arrive in time" in answer
        assert 0.4 < took < 0.5 + len(BODY) / web_app.BODY_RATE + 1.5
        said = [
            r.getMessage() for r in seen.records if "did not arrive in time (" in r.getMessage()
        ]
        assert said == [
            f"POST /github/webhook: the body did not arrive in time (100 of {len(BODY)} "
            "byte(s)); nothing was stored"
        ]
        assert post(live.url, "issues", BODY).status_code == 200  # and it serves on


def test_bodies_being_read_share_a_bound_and_give_it_back(
    tmp_path: Path, stack: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_app, "BODY_BUDGET", len(BODY) + 1000)
    http = {"http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        with socket.create_connection((host, port)) as holder:
            holder.sendall(webhook_head(host) + BODY[:-10])  # most of the bound, held
            time.sleep(0.3)
            busy = post(live.url, "issues", BODY)
            assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
            assert "too many large requests at once" in busy.json()["error"]
            holder.sendall(BODY[-10:])
            assert read_response(holder).startswith(b"HTTP/1.1 200 ")
        assert post(live.url, "issues", BODY).status_code == 200  # the bound was given back


def test_a_body_that_stalls_gives_its_room_to_a_delivery_and_gets_its_503(
    tmp_path: Path, stack: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Senders of bodies that stall (a signature header of the right shape, no secret)
    held the whole bound for minutes: every webhook was refused 503 meanwhile."""
    monkeypatch.setattr(web_app, "BODY_BUDGET", len(BODY) + 1000)
    http = {"http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        with socket.create_connection((host, port)) as holder, caught_logs() as seen:
            holder.sendall(webhook_head(host) + BODY[:-10])  # most of the bound, then stalls
            time.sleep(web_app.EVICT_AFTER_S + 0.3)
            assert post(live.url, "issues", BODY).status_code == 200
            holder.sendall(BODY[-10:])
            answer = read_response(holder)
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        said = [r.getMessage() for r in seen.records if "gave its room" in r.getMessage()]
        assert len(said) == 1 and "answered 503 when it ends" in said[0]
        assert post(live.url, "issues", BODY).status_code == 200  # the bound was given back


def test_the_slowest_bodies_give_their_room_up_first_and_only_what_is_needed() -> None:
    now = [0.0]
    budget = web_app.BodyBudget(1000, clock=lambda: now[0])
    slow, slower = budget.reading(), budget.reading()
    assert budget.take(slow, 300) and budget.take(slower, 100)
    now[0] = 1.5
    fresh = budget.reading()  # read for under EVICT_AFTER_S when room is needed
    assert budget.take(fresh, 100)
    now[0] = 2.0
    assert budget.take(slow, 300)  # 600 in 2 s; slower: 100 in 2 s
    assert budget.held == 800 and not slower.let_go  # there was room
    big, fast = budget.reading(), budget.reading()
    assert budget.take(big, 100)  # room for it: no one is let go
    huge = budget.reading()
    assert not budget.take(huge, 1000)  # the slow ones' 700 would not be enough
    assert not (slow.let_go or slower.let_go) and budget.held == 900
    assert budget.take(fast, 250)  # needs 150: slower's 100 first, then slow's
    assert (slower.let_go, slow.let_go, fresh.let_go, big.let_go) == (True, True, False, False)
    assert budget.held == 100 + 100 + 250 and fast.taken == 250
    assert slow.chunks == [] and slow.taken == 0
    for r in (slow, slower, fresh, fast, big, huge):
        budget.done(r)
    assert budget.held == 0


def test_after_a_response_the_next_headers_have_the_whole_deadline_again(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    # The deadline's one timer is set when the connection opens; a request answered in
    # between moves the deadline, and the timer sets itself again for what is left.
    http = {"header_timeout_s": 0.6, "http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        with socket.create_connection((host, port)) as sock:
            time.sleep(0.4)  # most of the first deadline gone
            head = webhook_head(host)
            sock.sendall(head + BODY)
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")
            answered = time.monotonic()
            assert not closed_by_server(sock, 0.3)  # open past the first timer (0.6 s)
            assert closed_by_server(sock, 3)  # then closed, 0.6 s after the answer
            assert time.monotonic() - answered < 3


def webhook_head(host: str) -> bytes:
    """The head of a signed ``issues`` delivery of ``BODY`` (a new delivery id each)."""
    return (
        "POST /github/webhook HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        "Content-Type: application/json\r\n"
        "X-GitHub-Event: issues\r\n"
        f"X-GitHub-Delivery: {uuid.uuid4()}\r\n"
        f"X-Hub-Signature-256: {sign(SECRET.encode(), BODY)}\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode()


def read_response(sock: socket.socket) -> bytes:
    """One whole response (its head and body may come in separate segments)."""
    sock.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "closed before the answer"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")[1:]
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(4096)
        assert chunk, "closed in the middle of the answer"
        body += chunk
    return head + b"\r\n\r\n" + body


# ------------------------------------------------------------------------ shedding


def test_past_the_cap_the_idlest_connections_are_closed_first(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    http = {"max_connections": 20, "http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        idle: list[socket.socket] = []
        try:
            for _ in range(50):
                idle.append(socket.create_connection(address(live.url)))
                time.sleep(0.002)  # one at a time: their order is their age
            started = time.monotonic()
            assert post(live.url, "issues", BODY).status_code == 200
            assert time.monotonic() - started < 1
            time.sleep(0.3)
            closed = [closed_by_server(s, 0.05) for s in idle]
        finally:
            for s in idle:
                s.close()
    # The oldest went first; the newest are still open.
    assert closed.count(True) >= 30
    first_open = closed.index(False)
    assert all(closed[:first_open]) and not any(closed[first_open:])


def test_the_cap_leaves_room_for_the_rest_of_the_process() -> None:
    assert backlog_for(1024) == 128
    assert max_connections_for(1024) == 1024 - (64 + 4 * 128)
    assert max_connections_for(1_048_576) == 1_048_576 - 1_048_576 // 8
    assert backlog_for(1_048_576) == 2048


# ------------------------------------------------------------------------ autoloop serve


@contextlib.contextmanager
def own_open_files(at_least: int) -> Iterator[None]:
    """This test process needs descriptors for its own idle sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = at_least + 200
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the hard open-file limit {hard} is below {want}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def limited_to(soft: int, hard: int | None) -> Callable[[], None]:
    def apply() -> None:
        _, given = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, given if hard is None else hard))

    return apply


@contextlib.contextmanager
def serve_limited(
    tmp_path: Path, soft: int, hard: int | None, stack: tuple[str, str]
) -> Iterator[tuple[str, Callable[[], str]]]:
    home = tmp_path / "home"
    init_home(home, rules_text=json.dumps(RULES))
    port = free_port()
    log = tmp_path / "serve.log"
    env = {
        **os.environ,
        **ENV,
        "AUTOLOOP_HOME": str(home),
        "AUTOLOOP_LOG_LEVEL": "INFO",
        "AUTOLOOP_HTTP": stack[0],
        "AUTOLOOP_LOOP": stack[1],
        "PYTHONPATH": str(paths.ROOT),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(port)],
            cwd=paths.ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=limited_to(soft, hard),  # noqa: PLW1509  # only setrlimit, no threads involved
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield url, log.read_text
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def hold_idle(url: str, count: int) -> list[socket.socket]:
    held = []
    for _ in range(count):
        sock = socket.create_connection(address(url), timeout=10)
        held.append(sock)
    return held


def timed_delivery(url: str) -> tuple[int, float]:
    started = time.monotonic()
    try:
        resp = post(url, "issues", BODY)
    except httpx.TimeoutException:
        return 0, time.monotonic() - started
    return resp.status_code, time.monotonic() - started


@pytest.mark.timeout(90)
def test_serve_takes_the_open_files_it_may_and_answers_beside_2000_idle_connections(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    with own_open_files(2100), serve_limited(tmp_path, 1024, None, stack) as (url, logs):
        held = hold_idle(url, 2000)
        try:
            status, took = timed_delivery(url)
        finally:
            for sock in held:
                sock.close()
        text = logs()
    assert status == 200 and took < 1.0, (status, took, text[-2000:])
    assert "open-file limit raised from 1024 to " in text
    assert "Traceback" not in text and "accept() failed" not in text


@pytest.mark.timeout(90)
def test_serve_under_a_hard_1024_limit_sheds_idle_connections_and_answers(
    tmp_path: Path, stack: tuple[str, str]
) -> None:
    with own_open_files(1200), serve_limited(tmp_path, 1024, 1024, stack) as (url, logs):
        held = hold_idle(url, 1100)  # the probe's figure: more than the limit allows
        try:
            status, took = timed_delivery(url)
            time.sleep(0.3)
            shed = sum(closed_by_server(s, 0.01) for s in held)
        finally:
            for sock in held:
                sock.close()
        text = logs()
    assert status == 200 and took < 1.0, (status, took, text[-2000:])
    assert shed >= 1100 - max_connections_for(1024)
    assert "open-file limit 1024 (hard limit 1024): up to 448 client connections" in text
    assert "Traceback" not in text and "accept() failed" not in text


def test_a_large_body_refused_for_the_bound_gets_its_503_not_a_reset(
    tmp_path: Path, stack: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused with bytes of its body still coming, the connection was closed unread: a
    sender that writes its whole body before it reads (as most do) had its write reset,
    a broken connection where the 503 says "send it again shortly"."""
    monkeypatch.setattr(web_app, "BODY_BUDGET", 1_000_000)
    big = json.dumps({"action": "opened", "pad": "x" * 20_000_000}).encode()
    http = {"http": stack[0], "loop": stack[1]}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False, http=http) as live:
        host, port = address(live.url)
        for _ in range(2):
            with socket.create_connection((host, port)) as sender:
                head = webhook_head(host).replace(
                    f"Content-Length: {len(BODY)}".encode(), f"Content-Length: {len(big)}".encode()
                )
                sender.sendall(head + big)  # (without the fix: ConnectionResetError)
                answer = read_response(sender)
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
            assert b"too many large requests at once" in answer
            assert b"retry-after: 5" in answer.lower()
        assert post(live.url, "issues", BODY).status_code == 200  # the bound was given back
