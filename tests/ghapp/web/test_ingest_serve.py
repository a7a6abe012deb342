"""Which GitHub settings ``autoloop serve`` needs: a webhook secret alone runs ingest only;
a partial GitHub App configuration is refused with one line naming what is missing."""

from __future__ import annotations

import gc
import json
import os
import re
import socket
from pathlib import Path

import pytest
import uvicorn

from ghapp.commands import serve
from ghapp.commands.home import Home, init_home
from ghapp.commands.serve import build
from ghapp.runtime.settings import Settings, SettingsError


def test_a_webhook_secret_alone_runs_ingest_only_and_says_write_backs_are_off(
    tmp_path: Path,
) -> None:
    init_home(tmp_path, rules_text=json.dumps({"rules": []}))
    env = {
        "AUTOLOOP_HOME": str(tmp_path),
        "AUTOLOOP_GITHUB_WEBHOOK_SECRET": "s3cret-for-the-ingest-tests",
    }
    ctx = Home.open(env=env, home=tmp_path)
    try:
        running = build(ctx, Settings.from_env(env))
        assert running.server.webhook_secret == b"s3cret-for-the-ingest-tests"
        assert running.extras == []  # nothing that writes to GitHub
        (note,) = running.notes
        assert "GitHub write-backs are off" in note
        assert "AUTOLOOP_GITHUB_APP_ID" in note
    finally:
        ctx.store.close()


def test_no_github_settings_means_webhooks_are_refused_and_a_note_says_so(
    tmp_path: Path,
) -> None:
    init_home(tmp_path, rules_text=json.dumps({"rules": []}))
    env = {"AUTOLOOP_HOME": str(tmp_path)}
    ctx = Home.open(env=env, home=tmp_path)
    try:
        running = build(ctx, Settings.from_env(env))
        assert running.server.webhook_secret is None
        assert running.notes == [
            "GitHub webhooks are answered 503 until AUTOLOOP_GITHUB_WEBHOOK_SECRET is set "
            "(local events, signed sources and card pages work without it)"
        ]
    finally:
        ctx.store.close()


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (
            {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": "hunter2"},
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET is too weak (7 characters: at least 16 are needed)",
        ),
        (
            {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": "x" * 64},
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET is too weak (only 1 different character",
        ),
        (
            {"AUTOLOOP_SOURCE_SHOP_SECRET": "shop"},
            "source 'shop': AUTOLOOP_SOURCE_SHOP_SECRET is too weak (4 characters",
        ),
    ],
)
def test_serve_refuses_a_weak_secret_before_it_listens(
    tmp_path: Path, env: dict[str, str], words: str
) -> None:
    """A short or repeated secret is found from one signed request by trying them all; then
    anyone can sign webhooks that start agents. ``autoloop serve`` does not start on one."""
    rules = {"sources": {"shop": {"adapter": "hmac"}}, "rules": []}
    init_home(tmp_path, rules_text=json.dumps(rules))
    env = {
        "AUTOLOOP_HOME": str(tmp_path),
        "AUTOLOOP_SOURCE_SHOP_SECRET": "shop-secret-long-enough",
        **env,
    }
    ctx = Home.open(env=env, home=tmp_path)
    try:
        with pytest.raises(SettingsError) as info:
            build(ctx, Settings.from_env(env))
        assert str(info.value).startswith(words), info.value
        assert "secrets.token_hex(32)" in str(info.value)
    finally:
        ctx.store.close()


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"AUTOLOOP_GITHUB_APP_ID": "12"}, "AUTOLOOP_GITHUB_PRIVATE_KEY"),
        ({"AUTOLOOP_GITHUB_PRIVATE_KEY": "/nowhere/key.pem"}, "AUTOLOOP_GITHUB_APP_ID"),
    ],
)
def test_a_partial_github_app_configuration_is_refused_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    given: dict[str, str],
    named: str,
) -> None:
    init_home(tmp_path, rules_text=json.dumps({"rules": []}))
    for var in ("AUTOLOOP_GITHUB_APP_ID", "AUTOLOOP_GITHUB_PRIVATE_KEY", "AUTOLOOP_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AUTOLOOP_HOME", str(tmp_path))
    monkeypatch.setenv("AUTOLOOP_GITHUB_WEBHOOK_SECRET", "s3cret-for-the-ingest-tests")
    for var, value in given.items():
        monkeypatch.setenv(var, value)
    assert serve.main(["--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("autoloop serve: ") and named in err


def test_the_http_stack_defaults_to_the_fastest_installed_and_env_or_flags_pick_another() -> None:
    args = serve.build_parser().parse_args([])
    assert serve.stack(args, {}) == ("auto", "auto")
    assert serve.stack(args, {"AUTOLOOP_HTTP": "H11", "AUTOLOOP_LOOP": "asyncio"}) == (
        "h11",
        "asyncio",
    )
    flags = serve.build_parser().parse_args(["--http", "httptools", "--loop", "uvloop"])
    assert serve.stack(flags, {"AUTOLOOP_HTTP": "h11"}) == ("httptools", "uvloop")
    from ghapp.web.connections import guarded_httptools, guarded_protocol

    # with httptools installed, auto is httptools; h11 stays available
    assert guarded_httptools() is not None
    assert issubclass(guarded_protocol("auto"), guarded_httptools())  # type: ignore[arg-type]
    assert guarded_protocol("h11").__name__ == "GuardedH11"


def test_an_unknown_http_stack_is_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    init_home(tmp_path, rules_text=json.dumps({"rules": []}))
    monkeypatch.setenv("AUTOLOOP_HOME", str(tmp_path))
    monkeypatch.setenv("AUTOLOOP_LOOP", "tokio")
    assert serve.main(["--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown event loop 'tokio'" in err and "AUTOLOOP_LOOP" in err


def test_listening_is_said_once_connections_are_queued_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A webhook sent as soon as "listening on" is out must wait for the server, not be
    # refused: GitHub marks a refused delivery failed (found again only by the sweeper).
    init_home(tmp_path, rules_text=json.dumps({"rules": []}))
    for var in list(os.environ):
        if var.startswith("AUTOLOOP_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("AUTOLOOP_HOME", str(tmp_path))
    monkeypatch.setenv("AUTOLOOP_GITHUB_WEBHOOK_SECRET", "s3cret-for-the-ingest-tests")
    seen: list[tuple[str, bool]] = []

    def run(self: uvicorn.Server, sockets: list[socket.socket]) -> None:
        said = capsys.readouterr().out  # what was printed before uvicorn starts serving
        host, port = sockets[0].getsockname()[:2]
        try:
            socket.create_connection((host, port), timeout=2).close()
            seen.append((said, True))
        except ConnectionRefusedError:
            seen.append((said, False))
        finally:
            sockets[0].close()  # (uvicorn closes it when it stops)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    assert serve.main(["--port", "0"]) == 0
    # the plain stack, picked on purpose, is named where the fast one was
    assert serve.main(["--port", "0", "--loop", "asyncio", "--http", "h11"]) == 0
    (said, accepted), (plain, _) = seen
    assert re.search(
        r"autoloop serve: listening on http://127\.0\.0\.1:\d+ \(uvloop, httptools\)\n", said
    )
    assert accepted, "a connection right after 'listening on' was refused"
    assert re.search(r"listening on http://127\.0\.0\.1:\d+ \(asyncio, h11\)\n", plain)


def test_settle_heap_leaves_requests_in_flight_to_their_reference_counts() -> None:
    """What 16 connections in flight keep alive at once (a few thousand objects, freed
    by their counts) starts no collection once the heap is settled; at Python's default
    threshold the same starts several."""
    before = gc.get_threshold()
    started: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    def in_flight() -> list[int]:
        started.clear()
        gc.callbacks.append(note)
        try:
            alive = [{"n": n} for n in range(5_000)]
            del alive
        finally:
            gc.callbacks.remove(note)
        return list(started)

    try:
        gc.collect()
        gc.set_threshold(700, *before[1:])  # Python's default
        assert len(in_flight()) >= 5
        serve.settle_heap()
        assert gc.get_threshold()[0] == serve.GC_YOUNG
        assert in_flight() == []
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_source_named_with_a_dash_takes_its_secret_from_a_shell_variable(
    tmp_path: Path,
) -> None:
    rules = {"sources": {"my-shop": {"adapter": "hmac"}}, "rules": []}
    init_home(tmp_path, rules_text=json.dumps(rules))
    env = {"AUTOLOOP_HOME": str(tmp_path), "AUTOLOOP_SOURCE_MY_SHOP_SECRET": "my-shop-secret-16+"}
    ctx = Home.open(env=env, home=tmp_path)
    try:
        running = build(ctx, Settings.from_env(env))
        assert running.server.source_secrets == {
            "my-shop": ("x-signature-256", b"my-shop-secret-16+")
        }
    finally:
        ctx.store.close()
