"""The GitHub App wired into a running server: who we are, our channel and executor.

``attach(server, hub, settings, links=...)`` is called by ``autoloop serve`` when the
GitHub settings are given. It learns the App's identity (so its own doings are not
fed back to it, and so what it wrote can be found again by author), then wires:

- every channel of ``rules.json`` with ``"use": "github-comment"``
  (:mod:`ghapp.github.channel`; card links only where the channel says ``"links": true``);
- the ``github`` executor for receipt actions (:mod:`ghapp.github.executor`);
- ``/answer CARD N`` comments (:mod:`ghapp.github.answers`), fed by ``server.on_comment``;
- the delivery pipeline's runner (:mod:`ghapp.github.deliveries`), fed the events of
  every recorded webhook by ``server.on_events`` and the sweeper's reconciled PRs;
- the sweeper for missed deliveries, labelled PRs and the outbox (:mod:`ghapp.github.sweeper`),
  every ``AUTOLOOP_GITHUB_SWEEP_S`` seconds (default 300) and once at start.

It returns the background parts (``start()``/``stop()``) for the caller to run.

GitHub out of reach at start (no answer, a 5xx, a rate limit) does not stop the server:
ingest is local and durable, so webhooks are verified and recorded as usual. One line
says so, and a :class:`PendingApp` asks ``GET /app`` again in the background (1 s, then
doubling up to a minute). Until GitHub answers, write-backs wait: receipt actions stay
allowed (``Outbox.waiting``), cards wait for their GitHub channel, and the events of
recorded webhooks (for the delivery runner and ``/answer`` comments) are held. Once the
App is known everything above is wired and started, the held events are handed over,
and the cards and actions that waited go out. Credentials GitHub refuses at start (401,
403, 404) are a configuration error: one line, and the server does not start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ghapp.github.answers import AnswerDesk
from ghapp.github.channel import GitHubCommentChannel
from ghapp.github.client import JSON, GitHubClient
from ghapp.github.deliveries import Deliveries
from ghapp.github.errors import Forbidden, GitHubError, NotFound, Unauthorized
from ghapp.github.executor import GitHubExecutor
from ghapp.github.sweeper import Sweeper
from ghapp.runtime.hub import Hub
from ghapp.runtime.links import CardLinks
from ghapp.runtime.settings import GitHubSettings, SettingsError
from ghapp.store.base import ledger_name
from ghapp.web.app import Server
from kernel.model import ChannelSpec, Event

__all__ = ["PendingApp", "attach"]

log = logging.getLogger("autoloop.github.app")

CHANNEL_ADAPTER = "github-comment"
SWEEP_VAR = "AUTOLOOP_GITHUB_SWEEP_S"
DEFAULT_SWEEP_S = 300.0
# a sweep waits this long at most for the webhooks acknowledged before it to be decided
# (the inbox decides a delivery within its deferral, 10 s, however busy it is)
SWEEP_SETTLE_S = 12.0
# GitHub out of reach: the wait before asking who the App is again, doubling up to the cap.
LOOKUP_FIRST_S = 1.0
LOOKUP_MAX_S = 60.0
HELD_MAX = 10_000  # events held for the runner while GitHub is out of reach; then dropped
# (the sweeper's first pass finds labelled pull requests again)
REFUSED = (Unauthorized, Forbidden, NotFound)


def sweep_interval(env: Mapping[str, str]) -> float:
    """``AUTOLOOP_GITHUB_SWEEP_S``: seconds between sweeps (default 300)."""
    raw = env.get(SWEEP_VAR, "").strip()
    if not raw:
        return DEFAULT_SWEEP_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 1.0 <= value <= 86_400.0:
        raise SettingsError(f"{SWEEP_VAR}={raw!r}: give seconds between 1 and 86400, e.g. 300")
    return value


def app_refused(settings: GitHubSettings, exc: Unauthorized | Forbidden | NotFound) -> str:
    """One line for a ``GET /app`` that GitHub refused: what is wrong, what to check."""
    if isinstance(exc, NotFound):
        return (
            f"{settings.api_url} has no GitHub App API ({exc}): check AUTOLOOP_GITHUB_URL "
            "(https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise)"
        )
    return (
        f"GitHub refused the App's credentials ({exc}): check that AUTOLOOP_GITHUB_APP_ID "
        f"({settings.app_id}) is the App ID shown on the App's settings page, and that "
        "AUTOLOOP_GITHUB_PRIVATE_KEY is a private key generated for that App"
    )


def attach(
    server: Server,
    hub: Hub,
    settings: GitHubSettings,
    *,
    links: CardLinks | None = None,
    env: Mapping[str, str] | None = None,
    sweep_every_s: float | None = None,
    outbox_every_s: float = 30.0,
    lookup_first_s: float = LOOKUP_FIRST_S,
    lookup_max_s: float = LOOKUP_MAX_S,
) -> list[Any]:
    if sweep_every_s is None:
        sweep_every_s = sweep_interval(env or {})
    every_s = sweep_every_s
    client = GitHubClient.from_settings(settings)
    # Known from the settings already: the App's own comments and reviews are recognised
    # by it even before GitHub says the App's name.
    server.app_id = settings.app_id

    def wire(app: JSON) -> list[Any]:
        return _wire(
            server,
            hub,
            client,
            app,
            settings=settings,
            links=links,
            sweep_every_s=every_s,
            outbox_every_s=outbox_every_s,
        )

    try:
        app = client.get_app(once=True)
    except REFUSED as exc:
        client.close()
        raise SettingsError(app_refused(settings, exc)) from None
    except GitHubError as exc:  # no answer, a 5xx, a rate limit: GitHub is out of reach
        log.warning(
            "GitHub is out of reach (%s): serving anyway, webhooks are recorded; "
            "write-backs wait until GitHub answers (asked again in the background)",
            exc,
        )
        pending = PendingApp(server, hub, client, wire, first_s=lookup_first_s, max_s=lookup_max_s)
        return [pending, _Closing(client)]
    except Exception:
        client.close()
        raise
    return [*wire(app), _Closing(client)]


def _wire(
    server: Server,
    hub: Hub,
    client: GitHubClient,
    app: JSON,
    *,
    settings: GitHubSettings,
    links: CardLinks | None,
    sweep_every_s: float,
    outbox_every_s: float,
) -> list[Any]:
    """Everything that needs the App's name, wired; returns the parts to start."""
    slug = app.get("slug")
    app_id = app.get("id")
    if not isinstance(slug, str) or not slug:
        raise GitHubError("GET /app answered without a slug: check AUTOLOOP_GITHUB_URL")
    server.app_slug = slug
    server.app_id = app_id if isinstance(app_id, int) else settings.app_id
    bot_login = f"{slug}[bot]"

    def mentions() -> tuple[str, ...]:  # rules.json's, as it is now
        return hub.rules().mentions

    ledger = ledger_name(hub.store)  # in the markers of what it writes (card ids restart)

    def comment_channel(spec: ChannelSpec) -> GitHubCommentChannel:
        return GitHubCommentChannel(
            client,
            bot_login,
            links=links if spec.links else None,
            mentions=mentions,
            ledger=ledger,
        )

    # Made per channel of the rules, again when rules.json adds, renames or changes one.
    hub.channel_makers[CHANNEL_ADAPTER] = comment_channel
    hub.executors["github"] = GitHubExecutor(client, bot_login, mentions=mentions, ledger=ledger)
    deliveries = Deliveries(hub, client, bot_login, bot_app_id=server.app_id)
    server.on_events = deliveries.on_events
    worker_wake = server.wake

    def wake() -> None:  # an answer may be to a pipeline's card: both look
        worker_wake()
        deliveries.wake()

    answers = AnswerDesk(hub, client, bot_login, wake=wake, every_s=sweep_every_s)
    server.on_comment = answers.submit
    sweeper = Sweeper(client, hub, every_s=sweep_every_s, outbox_every_s=outbox_every_s)
    sweeper.on_events = deliveries.on_events
    sweeper.labels_of = deliveries.labels_of

    def decided() -> None:  # the webhooks acknowledged until now, in the ledger first
        inbox = server.inbox
        if inbox is not None:
            inbox.settle(SWEEP_SETTLE_S, released=False)

    sweeper.before_reconcile = decided
    return [answers, sweeper, deliveries]


class PendingApp:
    """The GitHub App while GitHub is out of reach: asks ``GET /app`` again with backoff,
    then wires and starts the parts (:attr:`parts`), hands over the held events and sends
    the cards and write-backs that waited. Until then the server records webhooks only."""

    def __init__(
        self,
        server: Server,
        hub: Hub,
        client: GitHubClient,
        wire: Callable[[JSON], list[Any]],
        *,
        first_s: float = LOOKUP_FIRST_S,
        max_s: float = LOOKUP_MAX_S,
    ) -> None:
        self.server = server
        self.hub = hub
        self.client = client
        self.wire = wire
        self.first_s = first_s
        self.max_s = max_s
        self.parts: list[Any] = []
        self.known = threading.Event()
        self._lock = threading.Lock()
        self._events: list[Event] = []  # held for the delivery runner
        self._comments: list[Event] = []  # held for the answer desk
        self._dropped = 0
        self._forward: tuple[Callable[[list[Event]], None], Callable[[Event], None]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        hub.outbox.waiting["github"] = ""  # this process makes them, once GitHub answers
        server.on_events = self._on_events
        server.on_comment = self._on_comment

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="github-app", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
        with self._lock:
            parts, self.parts = self.parts, []
        for part in parts:
            part.stop()

    def _run(self) -> None:
        wait = self.first_s
        while not self._stop.wait(wait):
            try:
                app = self.client.get_app(once=True)
                parts = self.wire(app)
            except GitHubError as exc:
                wait = min(wait * 2, self.max_s)
                log.info("GitHub App still unknown (%s); asking again in %.0f s", exc, wait)
                continue
            self._go(parts)
            return

    def _go(self, parts: list[Any]) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            self.parts = parts
            for part in parts:
                part.start()
            on_events, on_comment = self.server.on_events, self.server.on_comment
            if on_events is None or on_comment is None:  # wire() sets both: a bug
                raise RuntimeError("the GitHub App was wired without its event handlers")
            events, self._events = self._events, []
            comments, self._comments = self._comments, []
            dropped, self._dropped = self._dropped, 0
            self._forward = (on_events, on_comment)
        self.hub.outbox.waiting.pop("github", None)
        self.known.set()
        log.info(
            "GitHub App %s is known now: write-backs are on (%d held event(s) handed over%s)",
            self.server.app_slug,
            len(events) + len(comments),
            f", {dropped} past the limit left to the sweeper" if dropped else "",
        )
        if events:
            on_events(events)
        for event in comments:
            on_comment(event)
        # What waited for GitHub goes out now, not at the next sweep.
        self.hub.sweep_cards()
        self.hub.sweep_actions()

    # -- events recorded meanwhile -------------------------------------------------------

    def _on_events(self, events: list[Event]) -> None:
        with self._lock:
            forward = self._forward
            if forward is None:
                room = max(0, HELD_MAX - len(self._events))
                self._events.extend(events[:room])
                self._dropped += len(events) - min(room, len(events))
                return
        forward[0](events)

    def _on_comment(self, event: Event) -> None:
        with self._lock:
            forward = self._forward
            if forward is None:
                if len(self._comments) < HELD_MAX:
                    self._comments.append(event)
                return
        forward[1](event)


class _Closing:
    """Last of the background parts: closes the client's pooled connections on stop."""

    def __init__(self, client: GitHubClient) -> None:
        self.client = client

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.client.close()
