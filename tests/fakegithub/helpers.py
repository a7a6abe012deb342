"""Shared helpers for the fake GitHub's tests: schema validators over the copied GitHub
material, a real webhook receiver on loopback, and ready-made clients."""

from __future__ import annotations

import json
import threading
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
from openapi_schema_validator import OAS30Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

FIXTURES = Path(__file__).parent.parent / "fixtures" / "github"
HOOK_SCHEMAS = FIXTURES / "webhook-schemas"


def _null_in_nullable_enums(node: Any) -> Any:
    """OpenAPI 3.0 ``nullable: true`` next to an ``enum`` without null: GitHub's own
    description means "or null" (a check run in progress has ``conclusion: null``), but a
    strict 3.0.3 reading refuses null. We read it as GitHub means it, by adding null."""
    if isinstance(node, dict):
        enum = node.get("enum")
        if node.get("nullable") is True and isinstance(enum, list) and None not in enum:
            node["enum"] = [*enum, None]
        for value in node.values():
            _null_in_nullable_enums(value)
    elif isinstance(node, list):
        for value in node:
            _null_in_nullable_enums(value)
    return node


@cache
def openapi() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "openapi_subset.deref.json").read_text())
    return _null_in_nullable_enums(data)  # type: ignore[no-any-return]  # same dict back


def operation(method: str, path: str) -> dict[str, Any]:
    op: dict[str, Any] = openapi()["paths"][path][method.lower()]
    return op


def subset_operations() -> list[tuple[str, str]]:
    return [
        (m.upper(), p)
        for p, ops in openapi()["paths"].items()
        for m in ops
        if m in {"get", "post", "put", "patch", "delete"}
    ]


def check_response(method: str, path: str, status: int, body: Any) -> None:
    """Fails unless ``status`` is documented for the operation and ``body`` fits its schema."""
    responses = operation(method, path)["responses"]
    assert str(status) in responses, f"{method} {path} answered {status}, not in {list(responses)}"
    content = responses[str(status)].get("content")
    if content is None:
        assert body in (None, b"", ""), f"{method} {path} {status} should have no body"
        return
    schema = content["application/json"]["schema"]
    OAS30Validator(schema).validate(body)


@cache
def _hook_registry() -> Registry:
    resources = []
    for file in HOOK_SCHEMAS.rglob("*.schema.json"):
        schema = json.loads(file.read_text())
        resource = Resource.from_contents(schema, default_specification=DRAFT7)
        resources.append((schema["$id"], resource))
        resources.append((file.relative_to(HOOK_SCHEMAS).as_posix(), resource))
    return Registry().with_resources(resources)


def hook_schema_path(event: str, action: str | None) -> Path:
    name = f"{action}.schema.json" if action else "event.schema.json"
    return HOOK_SCHEMAS / event / name


def check_webhook(event: str, payload: dict[str, Any]) -> None:
    """Validates a payload against octokit's schema for ``<event>/<action>``."""
    path = hook_schema_path(
        event, payload.get("action") if event not in {"push", "status"} else None
    )
    assert path.exists(), f"no schema for {event}.{payload.get('action')}"
    schema = json.loads(path.read_text())
    validator = jsonschema.Draft7Validator(schema, registry=_hook_registry())
    errors = sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{event}.{payload.get('action')}: {'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
        for e in errors[:10]
    )


class Receiver:
    """A real HTTP server on loopback that records every webhook POSTed to it."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.received: list[tuple[dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                with outer._lock:
                    outer.received.append(({k: v for k, v in self.headers.items()}, body))
                self.send_response(outer.status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/github/webhook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return [(h["X-GitHub-Event"], json.loads(b)) for h, b in self.received]


def githubkit_for(handle: Any) -> Any:
    """A githubkit client authenticating as the sandbox App's installation."""
    from githubkit import AppInstallationAuthStrategy, GitHub

    return GitHub(
        AppInstallationAuthStrategy(handle.app_id, handle.private_key_pem, handle.installation_id),
        base_url=handle.api_url,
        auto_retry=False,
        timeout=10,
        http_cache=False,
        trust_env=False,
    )


def githubkit_app(handle: Any) -> Any:
    """A githubkit client authenticating as the App itself (JWT)."""
    from githubkit import AppAuthStrategy, GitHub

    return GitHub(
        AppAuthStrategy(handle.app_id, handle.private_key_pem),
        base_url=handle.api_url,
        auto_retry=False,
        timeout=10,
        http_cache=False,
        trust_env=False,
    )
