"""A ledger URL's password is never shown: not in a printed URL, not in a driver's message
that quotes it, not in what the process logs or stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ghapp.commands.home import init_home, make_redact
from ghapp.commands.home_ledger import open_ledger
from ghapp.store.base import StoreError
from ghapp.store.sqlite import SqliteStore
from ghapp.store.urls import hide_passwords, passwords_in, shown
from kernel.model import Rules, SourceSpec


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://ops:s3cret-pw@db:5432/ledger", "postgresql://ops:***@db:5432/ledger"),
        ("postgresql://ops:p@ss@db/ledger", "postgresql://ops:***@db/ledger"),  # '@' unquoted
        ("postgresql://ops:p%40ss@db/ledger", "postgresql://ops:***@db/ledger"),
        ("postgresql://db/ledger?user=ops&password=s3cret", "postgresql://db/ledger?user=ops&password=***"),
        ("postgresql://db/ledger?PASSWORD=s3cret&x=1", "postgresql://db/ledger?PASSWORD=***&x=1"),
        ("postgresql://ops@db/ledger", "postgresql://ops@db/ledger"),
        ("sqlite:///var/lib/autoloop/ledger.db", "sqlite:///var/lib/autoloop/ledger.db"),
    ],
)  # fmt: skip
def test_shown_replaces_the_password_and_nothing_else(url: str, expected: str) -> None:
    assert shown(url) == expected


def test_passwords_in_gives_the_written_and_the_decoded_form() -> None:
    assert passwords_in("postgresql://ops:p%40ss%2Fw@db/ledger") == ["p%40ss%2Fw", "p@ss/w"]
    assert passwords_in("postgresql://ops@db/ledger?password=a%20b") == ["a%20b", "a b"]
    assert passwords_in("postgresql://ops@db/ledger") == []
    assert passwords_in("") == []


def test_a_message_that_quotes_the_url_or_the_password_hides_it() -> None:
    url = "postgresql://ops:hunter2-long@[::1/ledger"
    message = f'bad URI: "{url}"; password hunter2-long rejected'
    assert hide_passwords(message, url) == (
        'bad URI: "postgresql://ops:***@[::1/ledger"; password *** rejected'
    )


def test_a_short_password_is_hidden_in_the_url_and_left_alone_in_words() -> None:
    url = "postgresql://ops:a@[::1/ledger"
    message = f'end of string reached in URI: "{url}"'
    assert hide_passwords(message, url) == (
        'end of string reached in URI: "postgresql://ops:***@[::1/ledger"'
    )


def test_the_process_redactor_masks_the_ledger_password(tmp_path: Path) -> None:
    """What ``serve`` and ``work`` log and store goes through this redactor."""
    env = {"AUTOLOOP_DB": "postgresql://ops:correct%20horse%20battery@db/ledger"}
    redact = make_redact(tmp_path, Rules(version="v"), env)
    for text in ("with correct horse battery now", "with correct%20horse%20battery now"):
        masked = redact(text)
        assert masked.startswith("with ") and masked.endswith(" now"), masked
        assert "horse" not in masked, masked


def test_the_process_redactor_masks_each_signed_sources_secret(tmp_path: Path) -> None:
    """A signed source's secret, sent back inside an event, was stored in clear (the
    webhook secret was masked)."""
    rules = Rules(
        version="v",
        sources={
            "shop": SourceSpec(name="shop", adapter="hmac"),
            "my-feed": SourceSpec(
                name="my-feed", adapter="hmac", options={"secret_env": "FEED_KEY"}
            ),
        },
    )
    env = {
        "AUTOLOOP_SOURCE_SHOP_SECRET": "0f3b5c9e2a7d4f61b8c0e3a9d2f7b41c",
        "FEED_KEY": "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d",
    }
    redact = make_redact(tmp_path, rules, env)
    for value in env.values():
        masked = redact(f"key {value} here")
        assert value not in masked and masked.startswith("key [REDACTED"), masked


def test_a_sqlite_url_into_a_folder_that_does_not_exist_is_refused_not_made(
    tmp_path: Path,
) -> None:
    """A typo in AUTOLOOP_DB made the folders it named (as whoever ran it) and a ledger
    there, and recorded into it."""
    home = tmp_path / "home"
    init_home(home)
    missing = tmp_path / "no" / "such" / "dir"
    env = {"AUTOLOOP_HOME": str(home), "AUTOLOOP_DB": f"sqlite:///{missing / 'x.db'}"}
    with pytest.raises(StoreError, match=r"the folder .*dir does not exist; create it"):
        open_ledger(env, home)
    assert not (tmp_path / "no").exists()


def test_a_ledger_another_process_holds_locked_is_said_so_not_a_wrong_setting(
    tmp_path: Path,
) -> None:
    """After the lock's wait, the line said "check AUTOLOOP_HOME/AUTOLOOP_DB": the setting
    was right, another process held the ledger."""
    path = tmp_path / "ledger.db"
    SqliteStore(f"sqlite:///{path}").close()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError) as err:
            SqliteStore(f"sqlite:///{path}", timeout_s=0.2)
        said = str(err.value)
        assert said.startswith(f"cannot open the ledger at {path}: another process held it")
        assert "AUTOLOOP_DB" not in said
    finally:
        holder.close()
    SqliteStore(f"sqlite:///{path}").close()  # free again: it opens
