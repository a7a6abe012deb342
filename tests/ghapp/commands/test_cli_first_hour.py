"""The command line as a new user meets it: help, mistakes, pipes, a home that is not there.

Every test runs the real ``autoloop`` program in a subprocess (a pseudo-terminal where
the terminal's output is the point) against a real SQLite ledger.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import pty
import pwd
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ghapp.commands import action as action_command
from ghapp.commands import action_env, serve, work
from ghapp.commands import cli as cli_module
from ghapp.runtime.settings import KEYS, MIN_SECRET_CHARS
from tests.ghapp.commands.test_cli import ROOT, Cli, one_rule


def starter(tmp_path: Path) -> Cli:
    """A home made by ``autoloop init`` (the demo rule), one card asked and waiting."""
    c = Cli(tmp_path / "home")
    c.run("init")
    c.run("emit", "local", "hello.world", "demo", "--id", "1")
    return c


def read_to_the_end(leader: int) -> bytes:
    """What a program wrote to its pseudo-terminal until it ended and closed it."""
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the program ended and closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_drain_prints_each_card_once(tmp_path: Path) -> None:
    c = starter(tmp_path)
    out = c.run("drain")
    both = out.stdout + out.stderr
    assert both.count("[c1] Pick a colour") == 1, both
    assert "answer with: autoloop answer c1 N" in out.stdout


def test_status_lists_recent_turns_matters_open_cards_and_timers(tmp_path: Path) -> None:
    c = starter(tmp_path)
    c.run("drain")
    text = c.run("status").stdout
    assert "recent turns (last 1; 'autoloop why TURN' tells one):" in text
    header, row = text.split("tells one):\n")[1].splitlines()[:2]
    assert header.split() == [
        "turn",
        "kind",
        "rule",
        "matter",
        "state",
        "outcome",
        "started",
        "ended",
    ]
    assert row.split()[:6] == ["t1", "normal", "hello", "hello", "done", "ok"]
    assert "matters:" in text and "open cards (" in text
    assert "c1    ask   Pick a colour" in text
    assert "\x1b[" not in text and "┃" not in text  # plain when not a terminal


def test_status_on_a_terminal_draws_tables(tmp_path: Path) -> None:
    c = starter(tmp_path)
    c.run("drain")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ghapp.commands.cli", "status"],
        cwd=ROOT,
        env={**c.env(), "TERM": "xterm", "COLUMNS": "160"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    text = read_to_the_end(leader).decode()
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    assert "recent turns" in text and "Pick a colour" in text
    assert "━" in text or "─" in text, text  # a rich table's rules


def test_status_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    c = starter(tmp_path)
    for i in range(30):  # enough output that a write meets the closed pipe
        c.run("emit", "local", "hello.world", f"s{i}", "--id", f"e{i}")
    c.run("drain")
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` that has already gone
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "status"],
        cwd=ROOT,
        env=c.env(),
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        check=False,
    )
    os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.stderr == ""
    assert proc.returncode == 0


@pytest.mark.parametrize("how", ["unset", "mistyped"])
@pytest.mark.parametrize("command", ["status", "cards", "drain"])
def test_no_home_is_exit_2_with_a_hint_and_nothing_is_made(
    tmp_path: Path, how: str, command: str
) -> None:
    user = tmp_path / "user"
    user.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["HOME"] = str(user)
    if how == "mistyped":
        env["AUTOLOOP_HOME"] = str(tmp_path / "hoem")
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "no Autoloop home here" in line and "run 'autoloop init'" in line
    where = tmp_path / "hoem" if how == "mistyped" else user / ".autoloop"
    assert line.startswith(f"autoloop: {where}:")
    assert list(user.iterdir()) == [] and not (tmp_path / "hoem").exists()


def test_a_bad_flag_prints_the_usage_of_its_subcommand(tmp_path: Path) -> None:
    c = starter(tmp_path)
    for command, *rest in (["status"], ["cards"], ["answer", "c1", "2"], ["drain"]):
        proc = c.run(command, *rest, "--bogus", ok=None)
        assert proc.returncode == 2
        assert proc.stderr.startswith(f"usage: autoloop {command} "), proc.stderr
        assert f"autoloop {command}: error: unrecognized arguments: --bogus" in proc.stderr


def _options(parser: argparse.ArgumentParser, where: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if child.add_help:  # the commands living elsewhere have their own parser
                    found += _options(child, f"{where} {name}")
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            found.append((where, action))
    return found


def test_every_option_and_argument_has_help() -> None:
    parsers = {
        "autoloop": cli_module.build_parser(),
        "autoloop serve": serve.build_parser(),
        "autoloop work": work.build_parser(),
    }
    missing = [
        f"{where} {action.dest}"
        for name, parser in parsers.items()
        for where, action in _options(parser, name)
        if not (action.help or "").strip()
    ]
    assert missing == []


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["emit", "local", "hello.world", "demo", "--id", "1", "--summary", "s"],
        ["drain", "--worker", "w"],
        ["why", "acme/web#1", "--json"],
        ["cards", "--all"],
        ["cards", "dismiss", "c1", "--json"],
        ["answer", "c1", "2", "--by", "ana"],
        ["rebuild", "--check"],
        ["try", "--answer", "1", "--json"],
        ["init", "--new-ledger"],
    ],
)
def test_a_command_parser_built_alone_reads_and_helps_as_the_whole_parser(
    argv: list[str],
) -> None:
    """``autoloop COMMAND ...`` builds that command's parser alone (start-up): the same
    arguments, the same help and usage as in the parser of every command."""
    whole, alone = cli_module.build_parser(), cli_module.build_parser(argv[0])
    assert alone.parse_args(argv) == whole.parse_args(argv)

    def child(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        found: argparse.ArgumentParser = subparsers.choices[argv[0]]
        return found

    assert child(alone).format_help() == child(whole).format_help()
    assert child(alone).format_usage() == child(whole).format_usage()
    assert list(cli_module.COMMANDS) + sorted(cli_module.EXTERNAL) == list(
        next(a for a in whole._actions if isinstance(a, argparse._SubParsersAction)).choices
    )


def test_init_answer_rebuild_and_dismiss_speak_json(tmp_path: Path) -> None:
    c = Cli(tmp_path / "home")
    made = c.json("init")
    assert made["home"] == str(c.home)
    assert sorted(Path(p).name for p in made["created"]) == ["master.key", "rules.json"]
    c.run("emit", "local", "hello.world", "demo", "--id", "1")
    c.run("drain")
    answered = c.json("answer", "c1", "2")
    assert answered == {"card": "c1", "choice": 2, "message": "card c1: green"}
    c.run("drain")
    notice = next(x for x in c.json("cards")["cards"] if x["kind"] == "notice")
    assert c.json("cards", "dismiss", notice["id"]) == {
        "card": notice["id"],
        "state": "closed",
        "message": f"card {notice['id']} dismissed by {getpass.getuser()}",
    }
    assert all(x["id"] != notice["id"] for x in c.json("cards")["cards"])
    assert c.json("rebuild") == {"rows": c.json("rebuild")["rows"]}
    assert c.json("rebuild", "--check") == {"equal": True, "differences": []}


def test_an_answer_without_user_is_by_the_account_and_why_says_it_once(tmp_path: Path) -> None:
    """A container often has no $USER: the answer was "by cli", and the trail "by cli via
    cli"."""
    c = starter(tmp_path)
    c.run("drain")
    c.run("answer", "c1", "2", USER="", LOGNAME="", LNAME="", USERNAME="")
    account = pwd.getpwuid(os.getuid()).pw_name
    (card,) = c.json("cards", "--all")["cards"]
    assert card["answered_by"] == account, card
    again = c.run("answer", "c1", "1", ok=False)
    assert f"('green' by {account})" in again.stderr, again.stderr


def test_dismissing_a_question_or_twice_is_refused_in_one_line(tmp_path: Path) -> None:
    c = starter(tmp_path)
    c.run("drain")
    ask = c.run("cards", "dismiss", "c1", ok=None)
    assert ask.returncode == 1
    assert ask.stderr == "autoloop: card c1 is a question: answer it with 'autoloop answer c1 N'\n"
    unknown = c.run("cards", "dismiss", "c42", ok=None)
    assert unknown.returncode == 1 and "no card 'c42'" in unknown.stderr


def test_a_missing_agent_program_is_one_turn_and_a_card_saying_so(tmp_path: Path) -> None:
    c = Cli(tmp_path / "home")
    c.home.mkdir(parents=True)
    doc = {
        "agents": {"gone": {"use": "command", "command": ["no-such-agent-program", "{prompt}"]}},
        "rules": [one_rule("gone")],
    }
    (c.home / "rules.json").write_text(json.dumps(doc))
    c.run("init")
    c.run("emit", "local", "ping", "x", "--id", "e1")
    c.run("drain")
    status = c.json("status")
    assert [(t["kind"], t["state"]) for t in status["turns"]] == [("normal", "failed")]
    (card,) = status["cards"]
    assert card["title"] == "Agent 'gone' could not start"
    assert "no-such-agent-program" in card["text"]


def test_a_github_comment_channel_without_the_app_is_said_once(tmp_path: Path) -> None:
    c = Cli(tmp_path / "home")
    c.run("init")
    doc = json.loads((c.home / "rules.json").read_text())
    doc["channels"]["gh"] = {"use": "github-comment"}
    doc["rules"][0]["notify"] = ["console", "gh"]
    (c.home / "rules.json").write_text(json.dumps(doc))
    for i in range(2):
        c.run("emit", "local", "hello.world", f"s{i}", "--id", f"e{i}")
    out = c.run("drain")
    told = [line for line in out.stderr.splitlines() if 'channel "gh"' in line]
    assert len(told) == 1, out.stderr
    assert "no GitHub App is connected here" in told[0] and "autoloop serve" in told[0]


def test_help_says_in_a_line_what_every_command_does(tmp_path: Path) -> None:
    """``autoloop --help`` gives each command a line of its own words, the commands it
    does not import to start fast (serve, work, app...) too."""
    out = Cli(tmp_path / "home").run("--help").stdout
    assert "see 'autoloop" not in out
    listed = " ".join(out.split())  # argparse wraps a long line: compare the words
    for name, (_, summary) in cli_module.EXTERNAL.items():
        assert f"{name} {summary}" in listed, (name, out)
    for name in cli_module.COMMANDS:
        assert f"\n    {name} " in out, (name, out)


@pytest.mark.parametrize("name", sorted(cli_module.EXTERNAL))
def test_each_command_that_starts_alone_helps_in_plain_words(name: str, tmp_path: Path) -> None:
    """``autoloop NAME --help`` of each command outside the main parser: its usage line
    first, and none of the source's markup or of files a user does not have."""
    out = Cli(tmp_path / "home").run(name, "--help").stdout
    assert out.startswith(f"usage: autoloop {name}"), out
    for markup in (":mod:", ":func:", ":class:", ":data:", "``", "DESIGN.md"):
        assert markup not in out, (markup, out)


def test_action_help_lists_every_variable_the_run_reads(tmp_path: Path) -> None:
    out = Cli(tmp_path / "home").run("action", "--help").stdout
    names = {n.strip() for names, _ in action_env.VARIABLES for n in names.split(",")}
    assert {"GITHUB_EVENT_PATH", "GITHUB_TOKEN", "AUTOLOOP_MODE", "AUTOLOOP_DB"} <= names
    for n in names:
        assert f"  {n}" in out or f", {n}" in out, (n, out)
    # every variable the two modules name is listed (a new one is documented with it)
    named: set[str] = set()
    for module in (action_env, action_command):
        text = Path(str(module.__file__)).read_text()
        named |= set(re.findall(r'"((?:GITHUB|AUTOLOOP|RUNNER)_[A-Z_]+)"', text))
    assert "GITHUB_WORKSPACE" in named
    assert named <= names, named - names


def test_serve_help_names_every_setting_it_reads(tmp_path: Path) -> None:
    """A first ``autoloop serve --help`` tells where the webhook secret and the App's
    id and key go: every setting of ``ghapp.runtime.settings.KEYS``, by its variable."""
    out = Cli(tmp_path / "home").run("serve", "--help").stdout
    for key in KEYS:
        assert f"AUTOLOOP_{key.upper()}" in out, (key, out)
    assert "autoloop app create" in out and "autoloop doctor" in out
    # what 'serve' refuses, said before it is met (settings.MIN_SECRET_CHARS)
    assert f"at least {MIN_SECRET_CHARS} characters, random" in out
    assert "AUTOLOOP_SOURCE_NAME_SECRET" in out


def test_work_help_says_which_turns_a_worker_runs_and_from_which_ledger(tmp_path: Path) -> None:
    out = " ".join(Cli(tmp_path / "home").run("work", "--help").stdout.split())
    assert '"worker" is this name or "any"' in out
    assert "AUTOLOOP_DB" in out and "AUTOLOOP_HOME" in out


@pytest.mark.parametrize("answer", ["9", "0"])
def test_try_with_an_answer_that_is_no_option_is_refused_before_it_runs(
    tmp_path: Path, answer: str
) -> None:
    """The demo agent always asks the same question: a number that is no option of it is
    refused before anything runs (the trial ran, then refused it)."""
    c = Cli(tmp_path / "home")
    out = c.run("try", "--answer", answer, ok=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line == (
        f"autoloop: --answer {answer} is not an option: the demo agent asks for 1-3 "
        "(1) red, 2) green, 3) blue)"
    )
    assert out.stdout == "" and not (tmp_path / "home" / "try").exists()


def test_try_on_a_terminal_asks_again_after_a_wrong_answer(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ghapp.commands.cli", "try"],
        cwd=ROOT,
        env={**Cli(tmp_path / "home").env(), "TERM": "dumb"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = b""
    for answer in (b"purple\n", b"7\n", b"2\n"):
        while not seen.endswith(b"[1-3]: "):
            chunk = os.read(leader, 65536)
            assert chunk, seen.decode()
            seen += chunk
        os.write(leader, answer)
        seen += b"\n"
    text = (seen + read_to_the_end(leader)).decode()
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    assert text.count("give the number of an option, from 1 to 3") == 2, text
    assert "4. the agent finished" in text, text


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["work", "--parallel", "0"], "argument --parallel: 0: give 1 or more turns at once"),
        (["work", "--parallel", "two"], "argument --parallel: 'two' is not a whole number"),
        (["work", "--poll", "nan"], "argument --poll: nan: give seconds from 0.01 to 3600"),
        (["work", "--poll", "-1"], "argument --poll: -1: give seconds from 0.01 to 3600"),
        (["work", "--name", ""], "argument --name: '': give the name an agent's \"worker\""),
        (["work", "--name", "any"], "argument --name: 'any' is what an agent's \"worker\" says"),
        (["serve", "--workers", "-1"], "argument --workers: -1: give 1 or more turns at once"),
        (["serve", "--name", "a\tb"], "argument --name: 'a\\tb': give the name"),
        (
            ["serve", "--base-url", "autoloop.example.com"],
            "argument --base-url: 'autoloop.example.com': give the public http(s) address",
        ),
        (
            ["serve", "--base-url", "https://x.example.com/?a=1"],
            "argument --base-url: 'https://x.example.com/?a=1': give the public http(s)",
        ),
    ],
)
def test_serve_and_work_refuse_a_bad_option_before_they_start(
    tmp_path: Path, argv: list[str], words: str
) -> None:
    """Before this check, 'work --poll nan' logged a ValueError every step, '--parallel 0'
    ran no turn at all, and '--base-url foo' made card links that lead nowhere."""
    c = starter(tmp_path)
    out = c.run(*argv, "--port", "0", ok=False) if argv[0] == "serve" else c.run(*argv, ok=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"autoloop {argv[0]}: error: {words}" in out.stderr, out.stderr
    assert "started" not in out.stdout and "listening" not in out.stdout


def test_an_id_reused_for_another_event_is_a_warning(tmp_path: Path) -> None:
    """`emit ... --id 1` for a second, different event said only "duplicate", and the
    event was gone; the same command run twice still says nothing more."""
    c = starter(tmp_path)
    again = c.run("emit", "local", "hello.world", "demo", "--id", "1")
    assert again.stdout.startswith("duplicate:") and again.stderr == ""
    other = c.run("emit", "local", "other.thing", "elsewhere", "--id", "1")
    assert other.returncode == 0 and other.stdout.startswith("duplicate:")
    assert other.stderr == (
        "autoloop: warning: (local, 1) was hello.world about demo (event 1); this "
        "other.thing about elsewhere was not recorded: give it another --id\n"
    )


def test_why_says_where_each_emitted_event_went(tmp_path: Path) -> None:
    """An emitted event that no rule routes was in no trail: only status counted one
    event "not dispatched"."""
    c = Cli(tmp_path / "home")
    emitter = [
        sys.executable,
        "-c",
        'print("```autoloop\\n{\\"events\\": [{\\"type\\": \\"x.done\\"}]}\\n```")',
    ]
    c.home.mkdir(parents=True)
    doc = {
        "agents": {"e": {"use": "command", "command": emitter}},
        "rules": [
            {
                "name": "r",
                "on": {"source": "local", "type": "go"},
                "agent": "e",
                "emits": ["x.done"],
            }
        ],
    }
    (c.home / "rules.json").write_text(json.dumps(doc))
    c.run("init")
    c.run("emit", "local", "go", "s", "--id", "1")
    c.run("drain")
    trail = c.json("why", "t1")
    (emitted,) = trail["emitted"]
    assert (emitted["type"], emitted["subject"], emitted["routes"]) == ("x.done", "s", [])
    assert emitted["reason"]
    lines = c.run("why", "t1").stdout.splitlines()
    assert (
        f"  emitted event {emitted['seq']}: x.done s, not dispatched: {emitted['reason']}" in lines
    )


def test_init_suggests_the_starter_event_only_with_the_starter_rules(tmp_path: Path) -> None:
    """Over a rules file of the user's, init named the starter rules' event, which no
    rule of theirs takes."""
    fresh = Cli(tmp_path / "fresh").run("init").stdout
    assert "'autoloop emit local hello.world demo --id 1'" in fresh
    c = Cli(tmp_path / "own")
    c.rules([one_rule("silent")])
    kept = c.run("init").stdout
    assert "hello.world" not in kept
    assert "'autoloop doctor' checks" in kept and "an event your rules take" in kept
