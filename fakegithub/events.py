"""Publishing webhook events: the common envelope every GitHub payload carries."""

from __future__ import annotations

from typing import Any

from fakegithub.model import Repo
from fakegithub.render.core import node_id, repository, user
from fakegithub.state import Actor, Event, State


def emit(state: State, name: str, body: dict[str, Any], *, repo: Repo, actor: Actor) -> None:
    """Publishes ``body`` plus ``repository``, ``sender`` and ``installation``."""
    payload = dict(body)
    payload["repository"] = repository(state, repo)
    payload["sender"] = user(state, actor.login)
    inst = state.installation_for(repo)
    if inst is not None:
        payload["installation"] = {
            "id": inst.id,
            "node_id": node_id("MDIzOkludGVncmF0aW9u", inst.id),
        }
    state.publish(
        Event(
            name,
            body.get("action"),
            payload,
            repo.id,
            inst.id if inst is not None else None,
        )
    )
