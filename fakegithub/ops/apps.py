"""Apps registered from a manifest, the code that hands over their credentials, and
installing an App on an account.

GitHub's manifest flow: a page POSTs a manifest (JSON) to "create an App from a
manifest"; GitHub creates the App and redirects to the manifest's ``redirect_url`` with
a ``code``; ``POST /app-manifests/{code}/conversions`` exchanges that code, once and
within an hour, for the App's id, private key (``pem``) and webhook secret.
"""

from __future__ import annotations

import re
import secrets
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from fakegithub.errors import SandboxError, not_found
from fakegithub.keys import make_key
from fakegithub.model import App, Installation, ManifestCode
from fakegithub.seed import add_app
from fakegithub.state import State

CODE_LIFETIME = timedelta(hours=1)
NAME_MAX = 34  # GitHub's limit on an App's name
PERMISSION_LEVELS = frozenset({"read", "write", "admin"})
MANIFEST_KEYS = frozenset(
    {
        "name",
        "url",
        "description",
        "hook_attributes",
        "redirect_url",
        "callback_urls",
        "setup_url",
        "public",
        "default_permissions",
        "default_events",
        "request_oauth_on_install",
        "setup_on_update",
    }
)


class ManifestError(Exception):
    """The manifest cannot make an App; the message is what GitHub's page would show."""


def slug_of(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _http_url(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ManifestError(f"{what} can't be blank")
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ManifestError(f"{what} must be an http(s) URL, not {value!r}")
    return value


def check_manifest(state: State, manifest: object) -> dict[str, Any]:
    """The manifest, checked as GitHub checks it before it shows the page."""
    if not isinstance(manifest, dict):
        raise ManifestError("the manifest must be a JSON object")
    unknown = sorted(set(manifest) - MANIFEST_KEYS)
    if unknown:
        raise ManifestError(f"unknown manifest keys: {', '.join(unknown)}")
    name = manifest.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ManifestError("Name can't be blank")
    if len(name) > NAME_MAX:
        raise ManifestError(f"Name is too long (maximum is {NAME_MAX} characters)")
    slug = slug_of(name)
    if not slug or any(a.slug == slug for a in state.apps.values()):
        raise ManifestError(f"Name {name!r} is already in use")
    _http_url(manifest.get("url"), "Homepage URL")
    hook = manifest.get("hook_attributes") or {}
    if not isinstance(hook, dict):
        raise ManifestError("hook_attributes must be an object")
    if hook.get("active", True):
        _http_url(hook.get("url"), "Webhook URL")
    permissions = manifest.get("default_permissions") or {}
    if not isinstance(permissions, dict) or not all(
        isinstance(k, str) and v in PERMISSION_LEVELS for k, v in permissions.items()
    ):
        raise ManifestError("default_permissions must map permission names to read or write")
    events = manifest.get("default_events") or []
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise ManifestError("default_events must be a list of event names")
    if "redirect_url" in manifest:
        _http_url(manifest["redirect_url"], "Redirect URL")
    return manifest


def create_from_manifest(state: State, manifest: object, owner: str) -> tuple[App, str]:
    """Registers the App the manifest describes, owned by ``owner``; returns it and the
    ``code`` for its credentials."""
    with state.lock:
        checked = check_manifest(state, manifest)
        private, public = make_key()
        name = str(checked["name"])
        app = add_app(
            state,
            slug_of(name),
            name,
            webhook_secret=secrets.token_hex(20),
            public_pem=public,
            owner=owner,
        )
        app.permissions = {"metadata": "read", **dict(checked.get("default_permissions") or {})}
        app.events = list(checked.get("default_events") or [])
        hook = checked.get("hook_attributes") or {}
        app.webhook_url = str(hook["url"]) if hook.get("active", True) else None
        code = secrets.token_hex(10)
        state.manifest_codes[code] = ManifestCode(code, app.id, private, state.now())
        return app, code


def convert_code(state: State, code: str) -> tuple[App, str]:
    """The App and private key a manifest ``code`` stands for; a code works once, for an
    hour (404 otherwise, as on GitHub)."""
    with state.lock:
        found = state.manifest_codes.get(code)
        if found is None or found.used or state.now() - found.created_at > CODE_LIFETIME:
            raise not_found()
        found.used = True
        return state.apps[found.app_id], found.private_key_pem


def app_by_slug(state: State, slug: str) -> App:
    for app in state.apps.values():
        if app.slug == slug:
            return app
    raise not_found()


def install(state: State, app: App, account: str) -> Installation:
    """Installs ``app`` on every repository of ``account`` (a user or an organization)
    with the permissions it asks for; installing twice answers the same installation."""
    with state.lock:
        if account not in state.users:
            raise SandboxError(f"no account {account!r}: name a user or an organization")
        for found in state.installations.values():
            if found.app_id == app.id and found.account == account:
                return found
        repo_ids = [r.id for r in state.repos.values() if r.owner == account]
        made = Installation(
            state.new_id(), app.id, account, repo_ids, dict(app.permissions), state.now()
        )
        state.installations[made.id] = made
        return made
