"""No planted secret survives anywhere the hub stores or prints (end to end).

Secrets come from the fake-secrets corpus (``tests/fixtures/secrets``): in an event's
summary, link and details; in a variable the rules mark with ``secret_env``; and from an
agent (``tests/agents/leaky_agent.py``) that prints them on stdout and stderr, writes them
to its report and to a file in its turn folder, fails with one in its error, and puts
them in its receipt (notice, question, emitted event, comment body). Then every stored
byte is searched for every planted value: the SQLite ledger (WAL checkpointed first),
every file under AUTOLOOP_HOME/turns, and everything the processes printed.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from tests.hub_cli import ROOT, Home, wait_for

CORPUS = ROOT / "tests" / "fixtures" / "secrets"
AGENT = ROOT / "tests" / "agents" / "leaky_agent.py"
SHOP_TOKEN = "tfUQ1VQ3OZRkt4aQng5VP2pv9O5yqeZ1"  # a literal value from the corpus
MIN_VALUE_LENGTH = 8  # shorter marked values are not masked (ghapp.runtime.redact, documented)


def planted() -> set[str]:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    values = {p["value"] for items in manifest["planted"].values() for p in items}
    values |= {v for items in manifest.get("inside_base64", {}).values() for v in items}
    values |= set(manifest["extra_values"])
    return {v for v in values if len(v.strip()) >= MIN_VALUE_LENGTH}


def forms(value: str) -> set[bytes]:
    """The ways a value can sit in stored bytes: raw, JSON-escaped once and twice."""
    once = json.dumps(value)[1:-1]
    twice = json.dumps(once)[1:-1]
    out = {value, once, twice, json.dumps(value, ensure_ascii=False)[1:-1]}
    return {f.encode() for f in out}


def everything_stored(home: Path) -> dict[str, bytes]:
    db = home / "ledger.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    blobs = {str(p.relative_to(home)): p.read_bytes() for p in home.glob("ledger.db*")}
    for path in sorted((home / "turns").rglob("*")):
        if path.is_file():
            blobs[str(path.relative_to(home))] = path.read_bytes()
    return blobs


def test_no_planted_secret_survives_in_the_ledger_turn_folders_or_logs(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.base["SHOP_TOKEN"] = SHOP_TOKEN
    # The corpus's literal values look like nothing in particular: only marking them as
    # secret (secret_env) can hide them, so the owner marks them.
    literal = sorted(json.loads((CORPUS / "manifest.json").read_text())["extra_values"])
    marked = {f"LITERAL_SECRET_{i}": v for i, v in enumerate(literal)}
    home.base.update(marked)
    home.base["AUTOLOOP_LOG_LEVEL"] = "DEBUG"
    agent: dict[str, Any] = {
        "use": "command",
        "command": [sys.executable, str(AGENT), "--corpus", str(CORPUS), "{prompt}"],
        "pass_env": ["SHOP_TOKEN"],
    }
    home.rules(
        {
            "secret_env": ["SHOP_TOKEN", *marked],
            "agents": {"leaky": agent},
            "rules": [
                {
                    "name": "r",
                    "on": {"type": ["leak.report"]},
                    "agent": "leaky",
                    "emits": ["leak.found"],
                    "allow": ["github.comment"],
                    "max_retries": 1,
                    "retry_backoff_s": 1,
                }
            ],
        }
    )
    details = {
        "issue": {"body": (CORPUS / "shell_history.sh").read_text()},
        "comment": {"body": (CORPUS / "agent_output.md").read_text()},
        "headers": (CORPUS / "http_headers.txt").read_text(),
        "shop": {"token": SHOP_TOKEN},
    }
    details_file = tmp_path / "details.json"
    details_file.write_text(json.dumps(details))
    printed: list[str] = []
    urls = (CORPUS / "urls.txt").read_text().splitlines()
    out = home.run(
        "emit", "local", "leak.report", "acme/web#42", "--id", "e1",
        "--summary", f"token {SHOP_TOKEN} leaked", "--link", urls[3],
        "--details", str(details_file),
    )  # fmt: skip
    printed += [out.stdout, out.stderr]

    worker = home.worker("w")
    try:
        st = wait_for("the failed turn and its retry", lambda: _turns(home, 2))
        assert [t["outcome"] for t in st] == ["failed", "ok"]
        cards = home.status()["cards"]
        (ask,) = [c for c in cards if c["key"] == "rotate"]
        out = home.run("answer", ask["id"], "1")
        printed += [out.stdout, out.stderr]
        wait_for("the turn after the answer", lambda: _turns(home, 3))
    finally:
        worker.send_signal(signal.SIGTERM)
        log, _ = worker.communicate(timeout=30)
    printed.append(log)
    for args in (("status", "--json"), ("cards", "--all", "--json"), ("status",)):
        printed.append(home.run(*args).stdout)
    for turn in ("t1", "t2", "t3"):
        printed.append(home.run("why", turn, "--json").stdout)

    # What went through: the receipt was applied, the event and the comment were recorded.
    st = home.status()
    titles = {c["title"] for c in st["cards"]}
    assert {"Leaked key", "Rotate the keys?", "Rotated"} <= titles
    assert any(e["type"] == "leak.found" for e in st["events"])
    assert "turn t1 ended: t1 failed" in log and "turn t3 ended" in log
    why2 = home.json("why", "t2")
    (comment,) = why2["actions"]
    assert comment["do"] == "github.comment" and "[REDACTED:" in comment["params"]["body"]

    stored = everything_stored(home.home)
    assert b"[REDACTED:" in stored["ledger.db"]
    assert b"[REDACTED:" in stored["turns/t2/output.log"]
    assert b"[REDACTED:" in stored["turns/t1/scratch.txt"]
    blobs = {**stored, **{f"printed[{i}]": s.encode() for i, s in enumerate(printed)}}
    leaks = sorted(
        (name, value[:24])
        for value in planted()
        for name, blob in blobs.items()
        if any(f in blob for f in forms(value))
    )
    assert leaks == [], "\n".join(map(str, leaks))


def _turns(home: Home, n: int) -> list[dict[str, Any]] | None:
    turns: list[dict[str, Any]] = home.status()["turns"]
    done = [t for t in turns if t["state"] != "running"]
    return turns if len(done) >= n else None


ESCAPING_AGENT = r"""
import json, os
secret = os.environ["SHOP_TOKEN"]
spelled = "".join("\\u%04x" % ord(c) if c.isalpha() else c for c in secret)
print("```autoloop")
print('{"notice": [{"title": "esc %s"}], "ask": [{"key": "k", "title": "t", '
      '"options": ["%s", "b"]}]}' % (spelled, spelled))
print("```")
"""


def test_a_secret_spelled_with_json_escapes_in_a_receipt_is_masked(tmp_path: Path) -> None:
    """The kernel reads `\\u0073hop` as `shop`: a receipt that spelled a marked secret so
    put it in clear into cards and the ledger."""
    home = Home(tmp_path)
    home.base["SHOP_TOKEN"] = SHOP_TOKEN
    agent_file = tmp_path / "escaping.py"
    agent_file.write_text(ESCAPING_AGENT)
    home.rules(
        {
            "secret_env": ["SHOP_TOKEN"],
            "agents": {
                "e": {
                    "use": "command",
                    "command": [sys.executable, str(agent_file)],
                    "pass_env": ["SHOP_TOKEN"],
                }
            },
            "rules": [{"name": "r", "on": {"type": ["leak.report"]}, "agent": "e"}],
        }
    )
    home.run("emit", "local", "leak.report", "x", "--id", "e1")
    drained = home.run("drain")
    cards = home.json("cards", "--all")["cards"]
    titles = sorted(c["title"] for c in cards)
    assert titles[0].startswith("esc [REDACTED:"), titles
    (ask,) = [c for c in cards if c["key"] == "k"]
    assert ask["options"][0].startswith("[REDACTED:") and ask["options"][1] == "b"
    stored = everything_stored(home.home)
    printed = (drained.stdout + drained.stderr).encode()
    spelled = "".join(f"\\u{ord(c):04x}" if c.isalpha() else c for c in SHOP_TOKEN)
    for name, blob in {**stored, "printed": printed}.items():
        assert not any(f in blob for f in forms(SHOP_TOKEN)), name
        assert spelled.encode() not in blob, name
    assert b"[REDACTED:" in stored["turns/t1/output.log"]
