"""The whole fake GitHub as one object, in memory, not yet serving.

``Sandbox`` holds the world (:class:`~fakegithub.state.State`), the token authority, the
webhook sender, faults, the audit log, the scheduler and the scripted
:class:`~fakegithub.world.World`. The routes reach it as ``request.app.state.sandbox``;
:mod:`fakegithub.server` makes the ASGI app around it and serves it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime, timedelta

from fakegithub.audit import AuditLog
from fakegithub.auth import Auth
from fakegithub.faults import Faults
from fakegithub.keys import KeyPair
from fakegithub.scheduler import Scheduler
from fakegithub.seed import seed
from fakegithub.state import State, utc_now
from fakegithub.webhooks import WebhookSender
from fakegithub.world import World

# Each sandbox in a process numbers its objects from a different base, so that clients
# which cache JWTs and tokens per App id or installation id (githubkit does, process-wide)
# never mix up two sandboxes.
_INSTANCES = itertools.count()


class Sandbox:
    """The whole sandbox GitHub, in memory, not yet serving."""

    def __init__(
        self,
        *,
        app_url: str | None = None,
        base_url: str = "http://127.0.0.1",
        clock: Callable[[], datetime] = utc_now,
        token_lifetime: timedelta = timedelta(hours=1),
        fault_seed: int | None = None,
        key: KeyPair | None = None,
        webhook_senders: int = 1,
    ) -> None:
        self.state = State(clock=clock, base_url=base_url)
        self.state.first_ids(1000 + 100_000 * next(_INSTANCES))
        seeded = seed(self.state, app_url=app_url, key=key)
        self.app = seeded.app
        self.ci_app = seeded.ci_app
        self.private_key_pem = seeded.private_key_pem
        self.installation_id = seeded.installation.id
        self.repo = seeded.repo.full_name
        self.auth = Auth(self.state, token_lifetime=token_lifetime)
        self.audit = AuditLog(self.state)
        self.faults = Faults(fault_seed)
        self.hooks = WebhookSender(self.state, self.app, self.faults, senders=webhook_senders)
        self.state.listeners.append(self.hooks.on_event)
        self.scheduler = Scheduler()
        self.world = World(self)
        initial = seeded.repo.branches[seeded.repo.default_branch]
        self.world.live_versions[self.repo] = {"sha": initial, "version": f"v-{initial[:7]}"}

    def start(self) -> None:
        self.hooks.start()
        self.scheduler.start()

    def stop(self) -> None:
        self.scheduler.stop()
        self.hooks.stop()
