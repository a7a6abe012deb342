"""What the App needs is said in one place, and it holds together."""

from __future__ import annotations

from fakegithub.seed import APP_EVENTS, APP_PERMISSIONS
from ghapp.github.manifest import (
    EVENTS,
    PERMISSIONS,
    WEBHOOK_PATH,
    events_missing,
    manifest,
    markdown_table,
    permissions_missing,
)
from plugins.sources.github import KNOWN_EVENTS


def test_every_event_comes_with_a_permission_the_app_asks_for() -> None:
    asked = {p.name for p in PERMISSIONS}
    assert [e.name for e in EVENTS if e.permission not in asked] == []


def test_every_event_is_one_the_github_source_translates() -> None:
    assert [e.name for e in EVENTS if e.name not in KNOWN_EVENTS] == []


def test_names_are_unique_and_every_need_says_why() -> None:
    assert len({p.name for p in PERMISSIONS}) == len(PERMISSIONS)
    assert len({e.name for e in EVENTS}) == len(EVENTS)
    assert all(p.level in {"read", "write"} and p.why for p in PERMISSIONS)
    assert all(e.why for e in EVENTS)


def test_the_manifest_carries_exactly_the_needs() -> None:
    made = manifest(
        name="autoloop-acme",
        url="https://autoloop.example.com",
        webhook_url="https://autoloop.example.com" + WEBHOOK_PATH,
        redirect_url="http://127.0.0.1:1234/callback",
    )
    assert made["default_permissions"] == {p.name: p.level for p in PERMISSIONS}
    assert made["default_events"] == [e.name for e in EVENTS]
    assert made["hook_attributes"] == {
        "url": "https://autoloop.example.com/github/webhook",
        "active": True,
    }
    assert made["public"] is False
    assert made["redirect_url"] == "http://127.0.0.1:1234/callback"


def test_missing_permissions_name_what_is_lower_than_needed() -> None:
    granted = {p.name: p.level for p in PERMISSIONS}
    assert permissions_missing(granted) == []
    assert permissions_missing({**granted, "admin_extra": "write"}) == []
    lower = {**granted, "issues": "read"}
    del lower["checks"]
    assert permissions_missing(lower) == ["issues:write (has read)", "checks:write"]
    assert permissions_missing({**granted, "contents": "admin"}) == []


def test_missing_events_are_listed_in_order() -> None:
    every = [e.name for e in EVENTS]
    assert events_missing(every) == []
    assert events_missing([e for e in every if e not in {"push", "status"}]) == ["status", "push"]


def test_the_sandbox_app_is_registered_as_the_manifest_asks() -> None:
    # The sandbox imports no Autoloop package, so it keeps its own copy: the same needs.
    assert permissions_missing(APP_PERMISSIONS) == []
    assert events_missing(APP_EVENTS) == []


def test_the_table_has_one_row_per_need() -> None:
    rows = markdown_table().splitlines()[2:]
    assert len(rows) == len(PERMISSIONS) + len(EVENTS)
    assert rows[0].startswith("| `metadata` | read |")
    assert any(r.startswith("| event `push` | (with `contents`) |") for r in rows)
