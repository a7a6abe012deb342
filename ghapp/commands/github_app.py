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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ghapp.github.answers import AnswerDesk
from ghapp.github.channel import GitHubCommentChannel
from ghapp.github.client import GitHubClient, NotFound, Unauthorized
from ghapp.github.deliveries import Deliveries
from ghapp.github.executor import GitHubExecutor
from ghapp.github.sweeper import Sweeper
from ghapp.runtime.hub import Hub
from ghapp.runtime.links import CardLinks
from ghapp.runtime.settings import GitHubSettings, SettingsError
from ghapp.web.app import Server
from kernel.model import ChannelSpec

__all__ = ["attach"]

CHANNEL_ADAPTER = "github-comment"
SWEEP_VAR = "AUTOLOOP_GITHUB_SWEEP_S"
DEFAULT_SWEEP_S = 300.0


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


def app_refused(settings: GitHubSettings, exc: Unauthorized | NotFound) -> str:
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
) -> list[Any]:
    if sweep_every_s is None:
        sweep_every_s = sweep_interval(env or {})
    client = GitHubClient.from_settings(settings)
    try:
        app = client.get_app()
    except (Unauthorized, NotFound) as exc:
        client.close()
        raise SettingsError(app_refused(settings, exc)) from None
    except Exception:
        client.close()
        raise
    slug = app.get("slug")
    server.app_slug = slug if isinstance(slug, str) else None
    app_id = app.get("id")
    server.app_id = app_id if isinstance(app_id, int) else settings.app_id
    if not server.app_slug:
        raise RuntimeError("GET /app answered without a slug: check AUTOLOOP_GITHUB_URL")
    bot_login = f"{server.app_slug}[bot]"

    def comment_channel(spec: ChannelSpec) -> GitHubCommentChannel:
        return GitHubCommentChannel(client, bot_login, links=links if spec.links else None)

    # Made per channel of the rules, again when rules.json adds, renames or changes one.
    hub.channel_makers[CHANNEL_ADAPTER] = comment_channel
    hub.executors["github"] = GitHubExecutor(client, bot_login)
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
    return [answers, sweeper, deliveries, _Closing(client)]


class _Closing:
    """Last of the background parts: closes the client's pooled connections on stop."""

    def __init__(self, client: GitHubClient) -> None:
        self.client = client

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.client.close()
