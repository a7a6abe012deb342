"""The GitHub App wired into a running server: who we are, our channel and executor.

``attach(server, hub, settings, links=...)`` is called by ``autoloop serve`` when the
GitHub settings are given. It learns the App's identity (so its own doings are not
fed back to it) and returns the background parts to start and stop.
"""

from __future__ import annotations

from typing import Any

from ghapp.app import Server
from ghapp.github import GitHubClient
from ghapp.hub import Hub
from ghapp.links import CardLinks
from ghapp.settings import GitHubSettings


def attach(
    server: Server, hub: Hub, settings: GitHubSettings, *, links: CardLinks | None = None
) -> list[Any]:
    client = GitHubClient.from_settings(settings)
    app = client.get_app()
    slug = app.get("slug")
    server.app_slug = slug if isinstance(slug, str) else None
    app_id = app.get("id")
    server.app_id = app_id if isinstance(app_id, int) else settings.app_id
    return []
