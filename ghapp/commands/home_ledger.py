"""Where a home is, and the ledger it uses: found, refused when lost, opened.

``open_ledger`` is what :meth:`ghapp.commands.home.Home.open` and ``autoloop status``
share: the ledger named by ``AUTOLOOP_DB`` (default ``ledger.db`` in the home), checked
against the home's list of ledgers it has used, then opened (created when new). Nothing
here loads the kernel's classes or the rules parser, so that status starts fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

from ghapp.store.base import Store, StoreError
from ghapp.store.open import open_store
from ghapp.store.sqlite import sqlite_file
from kernel.errors import ConfigError

__all__ = [
    "HOME_MARKS",
    "KNOWN_LEDGERS",
    "check_ledger_kept",
    "db_url",
    "home_from_env",
    "open_ledger",
    "remember_ledger",
    "require_home",
    "start_new_ledger",
]


def home_from_env(env: Mapping[str, str]) -> Path:
    raw = env.get("AUTOLOOP_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".autoloop"


HOME_MARKS = ("rules.json", "rules.toml", "master.key", "ledger.db")


def not_a_folder(home: Path) -> None:
    """Refuse a home that exists and is no folder (a file of the same name): 'init'
    would fail on it with a traceback, and 'status' advised running 'init'."""
    if home.exists() and not home.is_dir():
        raise ConfigError(
            "AUTOLOOP_HOME is not a folder: set AUTOLOOP_HOME to a folder (or to a path "
            "that does not exist yet, which 'autoloop init' makes)",
            file=str(home),
        )


def require_home(home: Path, env: Mapping[str, str]) -> None:
    """Refuse a folder that holds no Autoloop home, before anything is made in it.

    A mistyped or unset ``AUTOLOOP_HOME`` must not look like a healthy, empty install:
    opening the ledger there would create it. With ``AUTOLOOP_DB`` set the ledger lives
    elsewhere, and the commands that need the rules say so themselves.
    """
    not_a_folder(home)
    if env.get("AUTOLOOP_DB"):
        return
    if home.is_dir() and any((home / name).exists() for name in HOME_MARKS):
        return
    how = "AUTOLOOP_HOME" if env.get("AUTOLOOP_HOME") else "AUTOLOOP_HOME is not set; its default"
    raise ConfigError(
        f"no Autoloop home here ({how}): run 'autoloop init' to make one, or set "
        "AUTOLOOP_HOME to the folder 'autoloop init' made",
        file=str(home),
    )


def db_url(env: Mapping[str, str], home: Path) -> str:
    return env.get("AUTOLOOP_DB") or f"sqlite:///{home / 'ledger.db'}"


# -- the ledgers a home has used ------------------------------------------------------
#
# SQLite makes a new, empty database wherever it is asked to open a missing or empty
# file. For a home that has used its ledger, that would quietly start over without its
# history. So the home lists the SQLite ledgers it has opened (KNOWN_LEDGERS, one path a
# line), and a listed ledger that is missing or empty is refused until it is restored
# or ``autoloop init --new-ledger`` says to start anew. ``autoloop init`` starts the list
# of a new home; a home from before the list counts as used when it holds turn folders.

KNOWN_LEDGERS = "known-ledgers"
NEW_LEDGER_HINT = (
    "restore it from a backup (with its -wal file if there is one), or run "
    "'autoloop init --new-ledger' to start anew with an empty ledger"
)


_ANEW = "!"  # a line "!ledger.db": that ledger may start anew (init --new-ledger)


def _known_ledgers(home: Path) -> list[str] | None:
    """The ledgers listed in the home; None when there is no list."""
    try:
        text = (home / KNOWN_LEDGERS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return [line for line in text.splitlines() if line.strip()]


def _ledger_key(ledger: Path, home: Path | None = None) -> str:
    """How the list names ``ledger``: its path in the home when it is in the home (so
    that a home moved, restored elsewhere, or mounted at another path still knows it),
    else its whole path."""
    path = ledger.expanduser().resolve()
    if home is not None:
        with contextlib.suppress(ValueError, OSError):
            return path.relative_to(home.expanduser().resolve()).as_posix()
    return str(path)


def _used(home: Path, ledger: Path) -> bool:
    known = _known_ledgers(home)
    key = _ledger_key(ledger, home)
    if known is not None:
        if key in known or _ledger_key(ledger) in known:
            return True
        if _ANEW + key in known:
            return False  # 'autoloop init --new-ledger' said to start anew
        # Listed under another whole path: a home moved, or copied, with the list an
        # older autoloop wrote (a copy took its missing ledger for a new one).
        if not any(_home_ledger_elsewhere(line, ledger.name) for line in known):
            return False
    # Turn folders say the home's own ledger was used (a home from before the list too).
    turns = home / "turns"
    return ledger == home / "ledger.db" and turns.is_dir() and any(turns.iterdir())


def _home_ledger_elsewhere(line: str, name: str) -> bool:
    """Whether a whole path of the list names a home's own ledger of this ``name`` at
    another place: its folder is gone (the home was moved) or is a home (it was copied).
    A ledger outside any home (``AUTOLOOP_DB``) is not this home's."""
    path = Path(line)
    if not path.is_absolute() or path.name != name:
        return False
    folder = path.parent
    return not folder.exists() or (folder / KNOWN_LEDGERS).exists()


def _gone(ledger: Path) -> str | None:
    """How a ledger file is gone ("missing", "empty"), or None when it holds something."""
    try:
        size = ledger.stat().st_size
    except FileNotFoundError:
        return "missing"
    except OSError:
        return None  # unreadable: opening it says why
    if size == 0:
        return "empty"
    return "empty (a database without a ledger in it)" if _no_tables(ledger) else None


def _no_tables(ledger: Path) -> bool:
    """Whether ``ledger`` is a SQLite file that holds no table, with its write-ahead log
    read too when it is there: what a copy of ``ledger.db`` alone holds when the writes
    were all still in ``ledger.db-wal``. Anything else (a damaged file, one this user
    cannot read) is for opening it to say."""
    import sqlite3  # noqa: PLC0415  # (commands that open a ledger load it anyway)

    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=5)
        ) as conn:
            (tables,) = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return int(tables) == 0
    except sqlite3.Error:
        return False


def check_ledger_kept(home: Path, ledger: Path) -> None:
    """Refuse a ledger this home has used that is now missing or empty (StoreError)."""
    gone = _gone(ledger)
    if gone is not None and _used(home, ledger):
        raise StoreError(
            f"the ledger {ledger} is {gone}, but this home has used it: the history it held "
            f"(events, turns, cards) is gone; {NEW_LEDGER_HINT}"
        )


def remember_ledger(home: Path, ledger: Path) -> None:
    """List ``ledger`` among the ones this home has used (nothing when the home is not a
    folder: a ledger elsewhere with no home to remember it)."""
    known = _known_ledgers(home) or []
    key = _ledger_key(ledger, home)
    if key in known or not home.is_dir():
        return
    with contextlib.suppress(OSError):
        if _ANEW + key in known:  # started anew: now it is used
            kept = "".join(line + "\n" for line in known if line != _ANEW + key)
            (home / KNOWN_LEDGERS).write_text(kept + key + "\n", encoding="utf-8")
            return
        with open(home / KNOWN_LEDGERS, "a", encoding="utf-8") as fh:
            fh.write(key + "\n")


def start_new_ledger(home: Path, url: str) -> Path:
    """Let a missing or empty SQLite ledger start anew (``autoloop init --new-ledger``):
    the home forgets it, an empty file is removed, and the next open creates it.

    Raises StoreError when the ledger still holds something, or is not SQLite."""
    ledger = sqlite_file(url)
    if ledger is None:
        raise StoreError(
            "--new-ledger is for a SQLite ledger; AUTOLOOP_DB names another: nothing to do"
        )
    gone = _gone(ledger)
    if gone is None:
        raise StoreError(
            f"the ledger {ledger} is still there: --new-ledger only starts anew where it is "
            "missing or empty; move it away first if you mean to drop its history"
        )
    if gone.startswith("empty"):
        ledger.unlink()
    known = _known_ledgers(home)
    key = _ledger_key(ledger, home)
    keys = {_ledger_key(ledger), key}
    text = "".join(line + "\n" for line in known or [] if line not in keys)
    if home.is_dir():
        (home / KNOWN_LEDGERS).write_text(text + _ANEW + key + "\n", encoding="utf-8")
    return ledger


def open_ledger(env: Mapping[str, str], home: Path) -> Store:
    """The ledger of ``home`` (``AUTOLOOP_DB`` in ``env`` names another), opened; a SQLite
    ledger this home has used and lost is refused (StoreError), a new one is remembered."""
    url = db_url(env, home)
    ledger = sqlite_file(url)
    if ledger is not None and env.get("AUTOLOOP_DB") and not ledger.parent.is_dir():
        raise StoreError(  # a typo in AUTOLOOP_DB made the folders it named, anywhere
            f"cannot open the ledger at {ledger}: the folder {ledger.parent} does not "
            "exist; create it, or check AUTOLOOP_DB"
        )
    if ledger is not None:
        check_ledger_kept(home, ledger)
    store = open_store(url)
    if ledger is not None:
        remember_ledger(home, ledger)
    return store
