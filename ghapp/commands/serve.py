"""``autoloop serve``: the webhook server, generic sources, card pages and the worker loop.

Settings come from the environment or ``--config FILE`` (see :mod:`ghapp.runtime.settings`).

- App id or private key given: all GitHub settings must be valid (one clear line
  otherwise), and the server both receives webhooks and writes back to GitHub.
- Only the webhook secret given: the server receives and records signed webhooks
  (a repository or organization webhook needs nothing else) and says on start that
  GitHub write-backs are off.
- None: no GitHub at all (local and HMAC sources).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from ghapp.commands import argtypes
from ghapp.commands.home import Home, configure_logs, read_master_key, require_home, reset_logs
from ghapp.commands.home_ledger import db_url
from ghapp.runtime import crash
from ghapp.runtime.inbox import Inbox, InboxError, inbox_path
from ghapp.runtime.ingest import IngestQueue
from ghapp.runtime.ledger import Outcome
from ghapp.runtime.links import LINKS_KEY_INFO, CardLinks, key_fingerprint
from ghapp.runtime.logs import batch_lines
from ghapp.runtime.settings import MIN_SECRET_CHARS, Settings, SettingsError, hmac_source
from ghapp.runtime.worker import WorkerLoop, second_stop, wait_for_turns
from ghapp.store.base import StoreError
from ghapp.store.sqlite import SqliteStore, refuse_damaged, sqlite_file
from ghapp.web.app import Server, create_app
from ghapp.web.connections import (
    HEADER_TIMEOUT_S,
    event_loop,
    guarded_protocol,
    http_config,
    raise_open_files,
    stack_names,
)
from kernel.errors import ConfigError
from kernel.model import Event

log = logging.getLogger("autoloop.serve")
LOG_BATCH_S = 0.05  # INFO lines (one per webhook) wait at most this long to share a write
SWITCH_INTERVAL_S = 0.0005


@dataclass
class Running:
    server: Server
    worker: WorkerLoop
    queue: IngestQueue
    extras: list[Any]
    notes: list[str] = field(default_factory=list)  # printed once on start
    inbox: Inbox | None = None

    def start(self, *, worker: bool = True) -> None:
        """Start the background parts: the ingest writer, the worker loop (unless
        ``worker=False``) and whatever the GitHub App wired in (sweeper, answer desk).
        Deliveries a previous process acknowledged and left in the inbox are decided
        first: by the time this returns, every acknowledged delivery is in the ledger."""
        self.queue.start()
        if self.inbox is not None:
            try:
                recovered = self.inbox.start()
            except InboxError:
                self.queue.stop()
                raise
            if recovered:
                self.notes.append(
                    f"{recovered} delivery(ies) acknowledged before a restart were decided "
                    "(recorded now, or found recorded already)"
                )
        if worker:
            self.worker.start()
        for extra in self.extras:
            start = getattr(extra, "start", None)
            if start is not None:
                start()

    def stop(self) -> None:
        for extra in self.extras:
            stop = getattr(extra, "stop", None)
            if stop is not None:
                stop()
        self.worker.stop()
        if self.inbox is not None:
            self.inbox.stop()  # decides every acknowledged delivery first
        self.queue.stop()


def build(
    ctx: Home,
    settings: Settings,
    *,
    worker_name: str = "local",
    max_parallel: int | None = None,
    base_url: str = "",
    poll_s: float = 1.0,
    connect_github: bool = True,
) -> Running:
    """Wire hub, ledger queue, worker and (when configured) the GitHub App together.

    A webhook secret alone (or ``connect_github=False``) means ingest only: webhooks
    are verified and recorded, nothing is written back to GitHub.
    """
    rules = ctx.rules()
    app_given = bool(settings.github_app_id or settings.github_private_key)
    github = settings.require_github() if app_given and connect_github else None
    secret = github.webhook_secret if github else None
    notes: list[str] = []
    given_secret = settings.github_webhook_secret or ""
    if secret is None and given_secret.strip():
        secret = settings.webhook_secret()  # refused when weak, as with the App
        notes.append(
            "GitHub write-backs are off (webhooks are verified and recorded only): "
            "set AUTOLOOP_GITHUB_APP_ID and AUTOLOOP_GITHUB_PRIVATE_KEY to turn them on"
        )
    elif secret is None:
        notes.append(
            "GitHub webhooks are answered 503 until AUTOLOOP_GITHUB_WEBHOOK_SECRET is set "
            "(local events, signed sources and card pages work without it)"
        )
    master = read_master_key(ctx.home)
    links = CardLinks(master, base_url=base_url)
    if not isinstance(ctx.store, SqliteStore):  # replicas: each must sign with the same key
        mine = key_fingerprint(master)
        with ctx.store.write() as tx:  # the last server started names it
            before = tx.swap_info(LINKS_KEY_INFO, mine)
        if before not in (None, mine):
            from ghapp.commands.doctor import OTHER_KEY  # noqa: PLC0415  # only then

            notes.append(f"{OTHER_KEY} (after a rotation of master.key, this is said once)")
        from ghapp.commands.doctor import other_rules  # noqa: PLC0415  # (as above)

        if said := other_rules(ctx.store, rules.version):
            notes.append(f"{said} (after a change of rules.json, each replica says it once)")
    hub = ctx.hub()
    # Here card pages are served: a webhook channel with "links": true carries them too.
    from plugins.channels.local import WebhookChannel  # noqa: PLC0415  # only where serve runs

    hub.channel_makers["webhook"] = lambda spec: WebhookChannel(
        spec, ctx.env, link=links.url if spec.links else None
    )
    extras: list[Any] = []
    worker = WorkerLoop(
        hub, name=worker_name, max_parallel=max_parallel or rules.max_parallel, poll_s=poll_s
    )
    queue = IngestQueue(hub.ledger, on_commit=lambda outs: worker.wake())
    sources: dict[str, tuple[str, bytes]] = {}
    for name, spec in rules.sources.items():
        if spec.adapter == "hmac":
            sources[name] = hmac_source(name, spec.options, ctx.env)
    server = Server(
        hub=hub,
        queue=queue,
        webhook_secret=secret,
        source_secrets=sources,
        links=links,
        wake=worker.wake,
        worker_problem=worker.problem,
    )
    ledger_file = sqlite_file(ctx.store.url)
    if secret is not None and ledger_file is not None:
        server.inbox = make_inbox(server, ledger_file)
    if github is not None:
        from ghapp.commands.github_app import attach  # noqa: PLC0415  # only with GitHub configured

        extras.extend(attach(server, hub, github, links=links, env=ctx.env))
    return Running(
        server=server, worker=worker, queue=queue, extras=extras, notes=notes, inbox=server.inbox
    )


def make_inbox(server: Server, ledger_file: Path) -> Inbox:
    """The webhook inbox beside a SQLite ledger: what its translator decided is counted,
    wakes the worker and reaches the GitHub App's handlers, as the webhook route did."""
    m = server.metrics
    store = server.hub.ledger.store

    def decided(events: list[Event], outs: list[Outcome]) -> None:
        codes = [o.reply.code for o in outs]
        m.inc("events_recorded_total", codes.count("recorded"))
        m.inc("events_duplicate_total", codes.count("duplicate"))
        if not events:
            return
        server.wake()
        if server.on_events is not None:
            server.on_events(events)
        if server.on_comment is not None:
            for e in events:
                if e.type == "issue_comment.created":
                    server.on_comment(e)

    return Inbox(
        inbox_path(ledger_file),
        server.hub.ledger,
        ledger_file,
        identity=lambda: (server.app_slug, server.app_id),
        on_decided=decided,
        sync=store.sync_log if isinstance(store, SqliteStore) else None,
    )


@contextlib.contextmanager
def serving_in_thread(
    running: Running,
    port: int,
    *,
    host: str = "127.0.0.1",
    header_timeout_s: float = HEADER_TIMEOUT_S,
    max_connections: int | None = None,
    http: str = "auto",
    loop: str = "auto",
) -> Iterator[str]:
    """Serve ``running`` (already started) with uvicorn in a thread of this process, for
    the demo and the tests; yields the base URL once the server listens."""
    config = http_config(
        create_app(running.server),
        host=host,
        port=port,
        log_level="error",
        header_timeout_s=header_timeout_s,
        max_connections=max_connections,
        http=http,
        loop=loop,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


#: Objects made and not yet freed that start a collection of the youngest generation
#: (Python's default: 700). See :func:`settle_heap`.
GC_YOUNG = 20_000


def settle_heap() -> None:
    """Call once everything is loaded, just before serving. What start-up made (modules,
    rules, compiled patterns, API models) lives as long as the process: it moves out of
    the garbage collector's sight, so a full collection walks only what requests made.
    Measured: a full collection paused the server for 15-26 ms before, enough to be a
    webhook's p99.

    Then the youngest generation is collected past :data:`GC_YOUNG` objects rather than
    700. Requests make no reference cycles (every object is freed by its count), but 16
    connections in flight keep more than 700 alive at once, so at Python's default the
    event loop started a collection every 16 deliveries or so, each walking what was
    alive. Measured, the server alone on one core, 16 connections saturating it for two
    rounds of 5 s, then its backlog decided: 1,700-1,800 collections and 450-520 ms
    (wall clock) spent in them at the default, of which the event loop started four in
    five; at 20,000, 4 or 5 collections and 42-73 ms, and nothing freed later. Whatever
    cycles do form are collected as before, a few MB later at most."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, for uvicorn to listen on; a port that cannot be
    had is a :class:`SettingsError` (one line) before anything else starts."""
    if not 0 <= port <= 65535:
        raise SettingsError(f"--port {port}: give a port from 1 to 65535 (default 8080)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        why = getattr(exc, "strerror", None) or str(exc)
        raise SettingsError(
            f"cannot listen on {host}:{port} ({why}): pick another --port or --host"
        ) from None
    sock.set_inheritable(True)
    return sock


# What ``serve --help`` says of the settings (ghapp.runtime.settings.KEYS, each one named).
SETTINGS_HELP = f"""settings, from the environment, else the TOML file of --config, else the home's
settings.toml:
  AUTOLOOP_GITHUB_WEBHOOK_SECRET
      webhooks to /github/webhook are verified and recorded (without it: 503);
      at least {MIN_SECRET_CHARS} characters, random: a weaker one is refused
  AUTOLOOP_GITHUB_APP_ID, AUTOLOOP_GITHUB_PRIVATE_KEY
      the App (the key as PEM text or a file's path): write-backs, cards as comments
  AUTOLOOP_GITHUB_URL
      GitHub's REST base (default https://api.github.com)
  AUTOLOOP_HOME, AUTOLOOP_DB
      the home folder (default ~/.autoloop) and the ledger (default its ledger.db)
  AUTOLOOP_SOURCE_NAME_SECRET (or a source's "secret_env" in rules.json)
      each signed source's HMAC secret, as strong as the webhook secret

'autoloop app create' registers an App and writes these; 'autoloop doctor' checks
them. docs/github-app.md and docs/deploy.md tell more."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="autoloop serve",
        description="The GitHub App: webhook server, generic sources, card pages and a worker.",
        epilog=SETTINGS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    p.add_argument(
        "--workers",
        type=argtypes.turns_at_once,
        default=None,
        help="turns run at once (max_parallel)",
    )
    p.add_argument("--name", type=argtypes.worker_name, default="local", help="this worker's name")
    p.add_argument(
        "--stop-wait",
        type=argtypes.stop_wait_seconds,
        default=None,
        metavar="SECONDS",
        help="seconds a stop (SIGTERM, Ctrl-C) waits for the running turns before it "
        "stops them (their ends recorded: they run again at the next start); default: "
        "until they end. Give less than the service manager's stop timeout",
    )
    p.add_argument("--config", type=Path, help="a TOML settings file")
    p.add_argument(
        "--base-url",
        type=argtypes.base_url,
        default=None,
        help="public URL of this server, for card links",
    )
    p.add_argument(
        "--http",
        choices=("auto", "httptools", "h11"),
        default=None,
        help="HTTP parser (default: AUTOLOOP_HTTP, else auto: httptools when installed)",
    )
    p.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default=None,
        help="event loop (default: AUTOLOOP_LOOP, else auto: uvloop when installed)",
    )
    return p


def stack(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[str, str]:
    """The HTTP parser and the event loop to serve with: the flags, else
    ``AUTOLOOP_HTTP``/``AUTOLOOP_LOOP``, else ``auto`` (the fastest one installed).
    One that is unknown or not installed is a :class:`SettingsError`."""
    http = args.http or env.get("AUTOLOOP_HTTP", "").strip().lower() or "auto"
    loop = args.loop or env.get("AUTOLOOP_LOOP", "").strip().lower() or "auto"
    try:
        guarded_protocol(http)
        event_loop(loop)
    except ValueError as exc:
        raise SettingsError(f"{exc} (--http/AUTOLOOP_HTTP, --loop/AUTOLOOP_LOOP)") from None
    return http, loop


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    env: Mapping[str, str] = os.environ
    # Every idle client holds a descriptor: take all the open files we may (before the
    # ledger and the worker open theirs), and cap connections below that (http_config).
    files = raise_open_files()
    try:
        crash.arm(env.get(crash.ENV))  # a test hook, read once: unset on a real server
    except ValueError as exc:
        print(f"autoloop serve: {exc}", file=sys.stderr)
        return 2
    if crash.armed():
        print(
            f"autoloop serve: {crash.ENV}={env[crash.ENV]} is set: a crash test hook, "
            "this process will kill itself there",
            file=sys.stderr,
        )
    try:
        settings = Settings.from_env(env, args.config)
        require_home(settings.home, env)
        http, loop = stack(args, env)
        sock = listen_socket(args.host, args.port)
    except (SettingsError, ConfigError) as exc:
        print(f"autoloop serve: {exc}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    try:
        refuse_damaged(db_url(env, settings.home))
        ctx = Home.open(env=dict(env), home=settings.home)
        configure_logs(ctx)  # every log record redacted, until this function returns
        batch_lines(LOG_BATCH_S)  # a line per webhook: written together (see the handler)
        running = build(
            ctx,
            settings,
            worker_name=args.name,
            max_parallel=args.workers,
            base_url=args.base_url or f"http://{args.host}:{port}",
        )
    except (SettingsError, ConfigError, StoreError) as exc:  # StoreError: a damaged ledger
        reset_logs()
        sock.close()
        print(f"autoloop serve: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the ledger's own error at start (read-only, damaged): a line
        from ghapp.commands.cli import ledger_failure  # noqa: PLC0415  # only on this path

        line = ledger_failure(exc)
        if line is None:
            raise
        reset_logs()
        sock.close()
        print(f"autoloop serve: {line}", file=sys.stderr)
        return 2
    try:
        running.start()
    except InboxError as exc:
        reset_logs()
        sock.close()
        ctx.store.close()
        print(f"autoloop serve: {exc}", file=sys.stderr)
        return 2
    config = http_config(
        create_app(running.server),
        host=args.host,
        port=port,
        http=http,
        loop=loop,
        log_level="warning",
        log_config=None,  # uvicorn's records go to our handler: one format, redacted
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    for note in running.notes:
        print(f"autoloop serve: {note}", flush=True)
    log.info("%s", files.line())
    # Listening from here on (uvicorn listens again, with the same backlog, when it starts
    # serving): a connection made once the line below is out waits in the listen queue.
    # Before, the line came before uvicorn's listen, and a webhook sent at once (a script,
    # a service manager's readiness check, the sandbox) was refused: GitHub marks such a
    # delivery failed, and only the sweeper's next pass, minutes later, fetched it again.
    sock.listen(config.backlog)
    on = ", ".join(stack_names(http, loop))  # the fast stack or not, said where it is seen
    print(f"autoloop serve: listening on http://{args.host}:{port} ({on})", flush=True)
    done = threading.Event()

    def _term(signum: int, frame: object) -> None:
        server.should_exit = True
        done.set()

    signal.signal(signal.SIGTERM, _term)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # (nohup: kept ignored)
        signal.signal(signal.SIGHUP, _term)  # a closed terminal: a stop, not a sudden death
    settle_heap()
    # The inbox's translator yields to requests being acknowledged, but the event loop
    # can only say so once it holds the GIL: let it have it within 0.5 ms, not Python's
    # default 5 ms (measured: the default let the translator's batches delay acks).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn raises again the Ctrl-C it stopped for: the stop is below, no traceback
    finally:
        now = second_stop()  # a second signal from here on stops the turns at once
        running.stop()
        code = wait_for_turns(running.worker, args.stop_wait, now=now)
        log.info("stopped" if not code else "stopped (running turns were stopped: they run again)")
        reset_logs()
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the turn threads hold the interpreter's exit: not waited for
    return 0
