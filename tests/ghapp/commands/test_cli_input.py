"""Damaged files and hostile input, as the real ``autoloop`` program meets them.

Each case runs ``autoloop`` in a subprocess against a real home and SQLite ledger. A
mistake of the user's or a damaged file is refused with exit 2 and one line on stderr
that says what to do; never a traceback, and nothing recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hub_cli import ROOT, Home

RULES = {"agents": {"demo": {"use": "demo"}}, "rules": []}


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path)
    h.rules(RULES)
    return h


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one line of a refusal (exit 2), checked to hold ``words``."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def events(home: Home) -> list[dict[str, object]]:
    found: list[dict[str, object]] = home.status()["events"]
    return found


# ------------------------------------------------------------------- emit --details


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("depth", "why"), [(65, "nested deeper than 64 levels"), (5000, "nested deeper than 64")]
)
def test_deeply_nested_details_are_refused_with_one_line(
    home: Home, tmp_path: Path, depth: int, why: str
) -> None:
    path = tmp_path / "deep.json"
    path.write_text(nested(depth))
    proc = home.run("emit", "local", "x", "s", "--id", "1", "--details", str(path), ok=False)
    refused(proc, "--details", why)
    assert events(home) == []


def test_details_nested_64_levels_are_kept(home: Home, tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text(nested(63))
    home.run("emit", "local", "x", "s", "--id", "1", "--details", str(path))
    assert len(events(home)) == 1


@pytest.mark.parametrize(
    ("name", "why"), [("missing.json", "No such file or directory"), (".", "Is a directory")]
)
def test_a_details_file_that_cannot_be_read_is_named_with_why(
    home: Home, tmp_path: Path, name: str, why: str
) -> None:
    path = tmp_path / name
    proc = home.run("emit", "local", "x", "s", "--id", "1", "--details", str(path), ok=False)
    line = refused(proc, f"--details {path}: {why}; give a file holding one JSON object")
    assert "Errno" not in line
    assert events(home) == []


def test_a_value_under_a_secret_key_of_the_details_is_stored_masked(
    home: Home, tmp_path: Path
) -> None:
    """The redactor looks at one string at a time: ``{"password": "p@ssw0rd-long-123"}``
    was kept in the ledger as it came (a turn's copy of the event was masked)."""
    path = tmp_path / "d.json"
    secret = "p@ssw0rd-long-123"
    path.write_text(json.dumps({"password": secret, "auth": {"user": "x"}, "note": "kept"}))
    home.run("emit", "local", "x", "s", "--id", "1", "--details", str(path))
    assert len(events(home)) == 1
    with contextlib.closing(sqlite3.connect(home.home / "ledger.db")) as db:
        stored = "\n".join(db.iterdump())  # every table, as SQL text
    assert '"password":"[REDACTED:secret]"' in stored.replace(" ", "")
    assert '"auth":"[REDACTED:secret]"' in stored.replace(" ", "")
    assert '"note":"kept"' in stored.replace(" ", "")
    assert secret not in stored and "[REDACTED:secret]" in stored


def test_details_from_dev_zero_are_refused_after_a_mebibyte(home: Home) -> None:
    proc = home.run("emit", "local", "x", "s", "--id", "1", "--details", "/dev/zero", ok=False)
    refused(proc, "--details", "more than 1048576 bytes")
    assert events(home) == []


def test_details_on_stdin_are_bounded_too(home: Home) -> None:
    proc = subprocess.run(
        [
            "bash",
            "-c",
            "head -c 3000000 /dev/zero | python -m ghapp.commands.cli emit "
            "local x s --id 1 --details -",
        ],
        cwd=ROOT,
        env=home.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    refused(proc, "--details", "more than 1048576 bytes")


@pytest.mark.parametrize(
    "text",
    [
        '{"n": 123456789012345678901234567890}',
        '{"n": -9223372036854775809}',
        '{"list": [1, 2, 18446744073709551616]}',
        '{"n": NaN}',
        '{"n": 1e400}',  # read as infinity, and stored as null
        '{"n": [-1e999]}',
    ],
)
def test_numbers_the_ledger_cannot_store_are_refused(home: Home, tmp_path: Path, text: str) -> None:
    path = tmp_path / "num.json"
    path.write_text(text)
    proc = home.run("emit", "local", "x", "s", "--id", "1", "--details", str(path), ok=False)
    refused(proc, "--details")
    assert events(home) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("local", "x", "s", "--id", "i" * 201), "emit: id has 201 characters; at most 200"),
        (("local", "x", "s" * 301, "--id", "1"), "emit: subject has 301 characters; at most 300"),
        (("local", "x", "one\ntwo", "--id", "1"), "emit: subject holds a control character"),
        (("local", "x\ty", "s", "--id", "1"), "emit: type holds a control character"),
    ],
)
def test_an_events_names_are_bounded_and_on_one_line(
    home: Home, args: tuple[str, ...], says: str
) -> None:
    line = refused(home.run("emit", *args, ok=False), says)
    assert line.startswith(f"autoloop: {says}")
    assert events(home) == []


@pytest.mark.parametrize(
    ("args", "name"),
    [(("", "x", "s", "--id", "1"), "source"), (("local", " ", "s", "--id", "1"), "type"),
     (("local", "x", "s", "--id", ""), "id")],
)  # fmt: skip
def test_an_empty_source_type_or_id_is_refused(
    home: Home, args: tuple[str, ...], name: str
) -> None:
    refused(home.run("emit", *args, ok=False), f"emit: {name} must not be empty")
    assert events(home) == []


def test_the_widest_64_bit_integers_are_kept(home: Home, tmp_path: Path) -> None:
    path = tmp_path / "wide.json"
    path.write_text(json.dumps({"lo": -(1 << 63), "hi": (1 << 64) - 1}))
    home.run("emit", "local", "x", "s", "--id", "1", "--details", str(path))
    assert len(events(home)) == 1


def test_a_lone_surrogate_in_the_details_is_refused_with_one_line(
    home: Home, tmp_path: Path
) -> None:
    for text in ('{"s": "\\ud800x"}', '{"\\udc00": 1}', '{"a": ["\\udfff"]}'):
        path = tmp_path / "d.json"
        path.write_text(text)
        proc = home.run("emit", "local", "x", "s", "--id", "1", "--details", str(path), ok=False)
        refused(proc, "--details: a string holds a lone surrogate")
    assert events(home) == []


@pytest.mark.parametrize(
    "args",
    [
        ("emit", "local", "x", "s", "--id", "\udcff"),
        ("emit", "local", "x", "s", "--id", "1", "--summary", "caf\udce9"),
        ("answer", "c\udcff", "1"),
        ("answer", "c1", "1", "--by", "\udcff"),
        ("cards", "dismiss", "\udcff"),
        ("why", "t\udcff"),
        ("serve", "--base-url", "http://\udcff"),
    ],
)
def test_an_argument_that_is_not_utf8_is_one_line(home: Home, args: tuple[str, ...]) -> None:
    """The shell passes bytes; Python keeps the ones that are not UTF-8 as lone
    surrogates, which every command stored or printed with a traceback."""
    line = refused(home.run(*args, ok=False), "an argument is not valid UTF-8: ")
    assert "\\xff" in line or "\\xe9" in line
    assert events(home) == []


def test_a_home_that_is_a_file_is_one_line_for_init_status_and_try(tmp_path: Path) -> None:
    """'status' said to run 'init', and 'init' then failed with a traceback."""
    home = Home(tmp_path)
    home.home.write_text("a file\n")
    for args in (
        ("status",),
        ("init",),
        ("try", "--answer", "1"),
        ("emit", "local", "x", "s", "--id", "1"),
    ):
        line = refused(home.run(*args, ok=False), "AUTOLOOP_HOME is not a folder")
        assert "autoloop init' to make one" not in line
    assert home.home.read_text() == "a file\n"


# ------------------------------------------------------------------- damaged files


def random_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def test_random_bytes_in_rules_json_are_one_line_not_a_traceback(home: Home) -> None:
    (home.home / "rules.json").write_bytes(b"\xca" + random_bytes(400, 1))
    for command in (("emit", "local", "x", "s", "--id", "1"), ("drain",)):
        line = refused(home.run(*command, ok=False), "rules.json", "not UTF-8")
        assert "restore it" in line
    status = home.run("status", ok=False)
    assert "Traceback" not in status.stderr, status.stderr[-3000:]
    assert status.returncode == 0  # status still shows the ledger with a broken rules file
    assert "turns: 0" in status.stdout
    (line,) = status.stderr.strip().splitlines()
    assert "not UTF-8" in line and "UTC" in line


def test_a_rules_toml_beside_rules_json_is_refused_not_ignored(home: Home) -> None:
    """'autoloop init' writes rules.json; a rules.toml written after it, as the docs
    allow, was ignored in silence: its rules never ran, and only doctor said so."""
    (home.home / "rules.toml").write_text('[agents.other]\nuse = "demo"\n')
    for command in (("emit", "local", "x", "s", "--id", "1"), ("drain",)):
        line = refused(home.run(*command, ok=False), "rules.json", "rules.toml is here too")
        assert "keep one" in line
    (home.home / "rules.json").unlink()
    home.run("emit", "local", "x", "s", "--id", "1")  # the TOML file is read now


def test_random_bytes_in_master_key_are_one_line_or_work(home: Home) -> None:
    (home.home / "master.key").write_bytes(random_bytes(64, 2))
    home.run("emit", "local", "x", "s", "--id", "1")
    home.run("drain")
    home.run("status")
    (home.home / "master.key").write_bytes(b"\xff\xfe" + random_bytes(14, 3))
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", "0"],
        cwd=ROOT,
        env=home.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    refused(proc, "master.key is refused")


def test_a_folder_that_cannot_be_made_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A home or key folder under a file: init, try and sandbox gave Python's
    traceback (NotADirectoryError), demo its ConfigError's."""
    afile = tmp_path / "afile"
    afile.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "ledger.db").write_text("")
    cases = [
        ({"AUTOLOOP_HOME": str(afile / "home")}, ["init"], f"{afile}/home: Not a directory"),
        ({"AUTOLOOP_HOME": str(afile / "home")}, ["try"], f"{afile}/home/try: Not a directory"),
        ({}, ["sandbox", "--key-dir", str(afile / "keys")], f"{afile}/keys: Not a directory"),
        ({}, ["demo", "--home", str(afile)], "is not a folder"),
        ({}, ["demo", "--home", str(busy)], f"{busy} holds files already"),
    ]
    for extra, args, words in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "ghapp.commands.cli", *args],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        refused(proc, words)
    assert sorted(p.name for p in busy.iterdir()) == ["ledger.db"]  # the demo left it alone


def test_serve_on_a_damaged_ledger_is_one_line(home: Home) -> None:
    home.emit("x", "s", "1")
    for name in ("ledger.db-wal", "ledger.db-shm"):
        (home.home / name).unlink(missing_ok=True)
    (home.home / "ledger.db").write_bytes(random_bytes(8192, 4))
    proc = home.run("serve", "--port", "0", ok=False)
    refused(proc, "autoloop serve:", "is damaged", "not a database", "restore ledger.db")


@pytest.mark.parametrize(
    "data",
    [
        "garbage{",
        '{"type": "NoSuchFact", "v": 1, "data": {}}',
        '{"type": "EventRecorded", "v": 1, "data": {"seq": 2}}',
        '{"type": "EventRecorded", "v": 1}',
    ],
)
def test_rebuild_on_corrupt_facts_is_one_line(home: Home, data: str) -> None:
    home.emit("x", "s", "1")
    with contextlib.closing(sqlite3.connect(home.home / "ledger.db")) as db, db:
        db.execute(
            "INSERT INTO facts (at, type, v, fkey, data) VALUES ('', 'EventRecorded', 1, NULL, ?)",
            (data,),
        )
    for args in (("rebuild", "--check"), ("rebuild",)):
        refused(home.run(*args, ok=False), "fact 2 of the ledger cannot be read", "backup")


def test_a_damaged_ledger_is_one_line_and_doctor_finds_it(home: Home) -> None:
    """A ledger whose pages were damaged: rebuild gave SQLite's traceback, doctor said
    "no problems found" (it looked only at the file's size)."""
    for n in range(30):
        home.emit("x", f"s{n}", str(n))
    with contextlib.closing(sqlite3.connect(home.home / "ledger.db")) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ledger = home.home / "ledger.db"
    data = bytearray(ledger.read_bytes())
    for i in range(4096, len(data), 1500):
        data[i] ^= 0xFF
    ledger.write_bytes(bytes(data))
    # rebuild writes (refused before it opens the file); its --check reads (as far as
    # it can: SQLite's own error, in one line)
    refused(home.run("rebuild", ok=False), f"the ledger at {ledger} is damaged", "restore")
    refused(home.run("rebuild", "--check", ok=False), "the ledger is damaged", "restore")
    proc = home.run("doctor", "--json", ok=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (row,) = [c for c in json.loads(proc.stdout)["checks"] if c["check"] == "ledger"]
    assert row["status"] == "FAIL"
    assert "is damaged" in row["detail"] and "restore it from a backup" in row["detail"]


def test_serve_and_work_refuse_a_ledger_damaged_where_a_write_does_not_reach(
    home: Home, tmp_path: Path
) -> None:
    """Damage in pages no write touches: emit and serve went on writing into the file
    without a word (doctor found it). Every command that records refuses it, before it
    opens the file; status still reads it."""
    details = tmp_path / "d.json"
    details.write_text(json.dumps({"text": "x" * 3000}))
    for n in range(30):
        home.run("emit", "local", "x", f"s{n}", "--id", str(n), "--details", str(details))
    with contextlib.closing(sqlite3.connect(home.home / "ledger.db")) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ledger = home.home / "ledger.db"
    data = bytearray(ledger.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle + 100 : middle + 4000] = bytes(3900)
    ledger.write_bytes(bytes(data))
    for command in (["serve", "--port", "0"], ["work"]):
        proc = home.run(*command, ok=False)
        line = refused(proc, f"autoloop {command[0]}:", f"the ledger at {ledger} is damaged")
        assert "restore ledger.db from a backup" in line
        assert ledger.read_bytes() == bytes(data)  # refused before it was opened to write
    for command in (
        ["emit", "local", "x", "s99", "--id", "99"],
        ["drain"],
        ["answer", "c1", "1"],
        ["cards", "dismiss", "c1"],
        ["rebuild"],
    ):
        proc = home.run(*command, ok=False)
        line = refused(proc, "autoloop:", f"the ledger at {ledger} is damaged")
        assert ledger.read_bytes() == bytes(data), command


def test_a_lost_ledger_is_a_fail_row_of_doctor_as_every_command_refuses_it(home: Home) -> None:
    home.emit("x", "s", "1")
    drop_ledger(home)
    proc = home.run("doctor", "--json", ok=False)
    assert proc.returncode == 1
    (row,) = [c for c in json.loads(proc.stdout)["checks"] if c["check"] == "ledger"]
    assert row["status"] == "FAIL" and "but this home has used it" in row["detail"]


@pytest.mark.parametrize(
    "message",
    ["attempt to write a readonly database", "database disk image is malformed", "disk I/O"],
)
def test_an_error_of_the_sqlite_ledger_is_one_line(message: str) -> None:
    """A home made read-only (as root, as the tests run, no file is): the line that a
    command gives for SQLite's error."""
    from ghapp.commands.cli import ledger_failure

    line = ledger_failure(sqlite3.OperationalError(message))
    assert line is not None and message in line
    if "readonly" in message:
        assert line.startswith("the ledger cannot be written") and "write access" in line
    elif "malformed" in message:
        assert line.startswith("the ledger is damaged") and "backup" in line
    else:
        assert line.startswith("the ledger failed: OperationalError")
    assert ledger_failure(ValueError(message)) is None


# ------------------------------------------------------------------- a lost ledger


def drop_ledger(home: Home, *, keep_empty: bool = False) -> None:
    for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
        (home.home / name).unlink(missing_ok=True)
    if keep_empty:
        (home.home / "ledger.db").write_bytes(b"")


@pytest.mark.parametrize("keep_empty", [False, True], ids=["deleted", "emptied"])
def test_a_lost_ledger_is_refused_not_replaced_by_an_empty_one(
    home: Home, keep_empty: bool
) -> None:
    home.emit("x", "s", "1")
    drop_ledger(home, keep_empty=keep_empty)
    for command in (("status",), ("emit", "local", "x", "s", "--id", "2"), ("drain",)):
        line = refused(home.run(*command, ok=False), "ledger.db", "history", "backup")
        assert ("is empty" if keep_empty else "is missing") in line
        assert "autoloop init --new-ledger" in line
    ledger = home.home / "ledger.db"
    assert ledger.exists() == keep_empty and (not keep_empty or ledger.stat().st_size == 0)
    # the owner chooses to start anew
    assert "started a new, empty ledger" in home.run("init", "--new-ledger").stdout
    home.emit("x", "s", "3")
    assert [e["id"] for e in events(home)] == ["3"]


def test_a_home_moved_elsewhere_still_refuses_its_lost_ledger(home: Home, tmp_path: Path) -> None:
    """The list held whole paths: a home copied, restored or mounted at another path took
    its missing ledger for a new one, and ran turn t1 again in the old t1's folder."""
    home.rules({**RULES, "rules": [{"name": "r", "on": {"type": "x"}, "agent": "demo"}]})
    home.emit("x", "s", "1")
    home.run("drain")  # turn t1, in turns/t1
    moved = Home(tmp_path / "elsewhere")
    shutil.copytree(home.home, moved.home)
    drop_ledger(moved)
    line = refused(moved.run("status", ok=False), "ledger.db", "history", "backup")
    assert "is missing" in line
    # a list from an older autoloop (whole paths only) is read as well
    (moved.home / "known-ledgers").write_text(f"{home.home.resolve() / 'ledger.db'}\n")
    refused(moved.run("status", ok=False), "ledger.db", "history", "backup")
    assert "started a new, empty ledger" in moved.run("init", "--new-ledger").stdout
    moved.emit("x", "s", "2")
    assert [e["id"] for e in events(moved)] == ["2"]
    drop_ledger(moved)  # the new ledger, lost in turn: refused again
    refused(moved.run("status", ok=False), "ledger.db", "history", "backup")


def test_a_ledger_once_named_by_autoloop_db_is_not_taken_for_the_homes_own(
    home: Home, tmp_path: Path
) -> None:
    """A home that ran with AUTOLOOP_DB=sqlite:///elsewhere/ledger.db, then without it:
    its own ledger.db, never used, is no lost ledger."""
    outside = tmp_path / "data"
    outside.mkdir()
    home.rules({**RULES, "rules": [{"name": "r", "on": {"type": "x"}, "agent": "demo"}]})
    drop_ledger(home)
    (home.home / "known-ledgers").write_text("")
    db = f"sqlite:///{outside / 'ledger.db'}"
    home.run("emit", "local", "x", "s", "--id", "1", AUTOLOOP_DB=db)
    home.run("drain", AUTOLOOP_DB=db)  # turns/t1 in the home
    assert (home.home / "turns" / "t1").is_dir()
    assert home.run("status").returncode == 0  # its own ledger: new, not lost


def test_a_command_leaves_its_writes_in_ledger_db_so_a_plain_copy_holds_them(
    home: Home, tmp_path: Path
) -> None:
    """Every command left its writes in ledger.db-wal: a copy of ledger.db alone (the
    plain backup a new user makes) held no table, and the home took it without a word."""
    home.emit("x", "s", "1")
    wal = home.home / "ledger.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    copy = tmp_path / "copy.db"
    shutil.copyfile(home.home / "ledger.db", copy)
    with contextlib.closing(sqlite3.connect(copy)) as conn:
        assert conn.execute("SELECT count(*) FROM facts").fetchone()[0] >= 1


def test_a_ledger_db_that_holds_no_ledger_is_refused_as_empty(home: Home) -> None:
    """A SQLite file with no table in it (a copy made while the writes were all in the
    write-ahead log) was opened as a new ledger: the history silently started over."""
    home.emit("x", "s", "1")
    drop_ledger(home)
    with contextlib.closing(sqlite3.connect(home.home / "ledger.db")) as conn:
        conn.execute("PRAGMA journal_mode=wal")  # a header page and nothing else
    for command in (("status",), ("emit", "local", "x", "s", "--id", "2")):
        line = refused(home.run(*command, ok=False), "ledger.db", "history", "backup")
        assert "is empty (a database without a ledger in it)" in line
    doctor = home.run("doctor", ok=False)
    assert "FAIL" in doctor.stdout and "without a ledger in it" in doctor.stdout
    assert "started a new, empty ledger" in home.run("init", "--new-ledger").stdout
    home.emit("x", "s", "3")
    assert [e["id"] for e in events(home)] == ["3"]


def test_serve_refuses_a_lost_ledger_with_one_line(home: Home) -> None:
    home.emit("x", "s", "1")
    drop_ledger(home)
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", "0"],
        cwd=ROOT,
        env=home.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    refused(proc, "autoloop serve:", "is missing", "--new-ledger")


def test_a_new_ledger_is_not_made_over_one_that_holds_history(home: Home) -> None:
    home.emit("x", "s", "1")
    refused(home.run("init", "--new-ledger", ok=False), "still there", "move it away")
    assert len(events(home)) == 1


def test_a_brand_new_home_starts_its_ledger(tmp_path: Path) -> None:
    fresh = Home(tmp_path)
    fresh.rules(RULES)
    assert not (fresh.home / "ledger.db").exists()
    fresh.emit("x", "s", "1")
    assert len(events(fresh)) == 1


def test_a_home_from_before_the_list_with_turns_is_guarded_too(home: Home) -> None:
    home.emit("x", "s", "1")
    (home.home / "known-ledgers").unlink()
    (home.home / "turns" / "t1").mkdir(parents=True)
    drop_ledger(home)
    refused(home.run("status", ok=False), "is missing")


# ------------------------------------------------------------------- the ledger's URL

# A port nothing listens on, and a password that must never be printed.
UNREACHABLE_PG = "postgresql://autoloop:hunter2-not-shown@127.0.0.1:1/ledger"


@pytest.mark.parametrize("command", ["status", "serve", "work"])
def test_an_unreachable_postgresql_ledger_is_one_line_without_its_password(
    home: Home, command: str
) -> None:
    """libpq's message spans two lines (the failure, then a hint on the next, indented);
    the refusal is one, and says what to check."""
    proc = home.run(command, ok=False, AUTOLOOP_DB=UNREACHABLE_PG)
    line = refused(proc, "cannot open the PostgreSQL ledger", "Connection refused", "AUTOLOOP_DB")
    assert "hunter2" not in proc.stdout + proc.stderr, line


@pytest.mark.parametrize("command", ["status", "serve"])
def test_a_ledger_url_the_driver_cannot_parse_is_refused_without_its_password(
    home: Home, command: str
) -> None:
    """libpq quotes a URI it cannot parse, password and all; the refusal does not."""
    url = "postgresql://autoloop:hunter2-not-shown@[::1/ledger"
    proc = home.run(command, ok=False, AUTOLOOP_DB=url)
    line = refused(proc, "cannot open the PostgreSQL ledger", "postgresql://autoloop:***@[::1")
    assert "hunter2" not in proc.stdout + proc.stderr, line


def test_a_misspelt_ledger_url_is_one_line_without_its_password(home: Home) -> None:
    proc = home.run("status", ok=False, AUTOLOOP_DB="postgresq://autoloop:hunter2@db/ledger")
    line = refused(proc, "unsupported ledger URL", "postgresql://USER@HOST/DB")
    assert "hunter2" not in line and "postgresq://autoloop:***@db/ledger" in line


@pytest.mark.parametrize("command", ["serve", "work"])
def test_an_unknown_log_level_is_one_line_that_names_the_levels_once(
    home: Home, command: str
) -> None:
    args = ["--port", "0"] if command == "serve" else []
    line = refused(home.run(command, *args, ok=False, AUTOLOOP_LOG_LEVEL="verbose"))
    assert line == (
        f"autoloop {command}: AUTOLOOP_LOG_LEVEL: unknown log level 'verbose'; "
        "use one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    )


def test_text_from_others_drives_no_terminal(tmp_path: Path) -> None:
    """An event's subject (an issue title, a source's field) with terminal sequences in
    it: clear the screen, retitle the window, overwrite the line. Every command that shows
    it shows them escaped; --json escapes them as JSON does."""
    h = Home(tmp_path)
    h.rules(
        {
            "agents": {"demo": {"use": "demo"}},
            "rules": [{"name": "hello", "on": {"type": "hello.world"}, "agent": "demo"}],
        }
    )
    evil = "Crash\x1b[2J\x1b]0;pwned\x07\r on start\u202e"
    # (a subject is a key, refused with control characters: the summary carries them)
    subject = "Crash on start\u202e"
    outputs = [h.run("emit", "local", "hello.world", subject, "--id", "e1", "--summary", evil)]
    outputs += [h.run(*argv) for argv in (["drain"], ["status"], ["cards"], ["why", "t1"])]
    for proc in outputs:
        both = proc.stdout + proc.stderr
        assert not any(c in both for c in "\x1b\x07\r\u202e"), (proc.args, both)
    why = outputs[-1].stdout
    assert "Crash on start\\u202e" in why, why
    (event,) = h.json("status")["events"]
    assert event["subject"] == subject  # the ledger keeps the text as it came


@pytest.mark.parametrize(
    "args", [("answer", "c99", "1"), ("why", "t999"), ("cards", "dismiss", "c99")]
)
def test_with_json_a_refusal_is_json_on_stdout_too(home: Home, args: tuple[str, ...]) -> None:
    """A script reading --json output got nothing on stdout when the command refused."""
    proc = home.run(*args, "--json", ok=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    answer = json.loads(proc.stdout)
    assert answer == {"error": line.removeprefix("autoloop: "), "exit": proc.returncode}
