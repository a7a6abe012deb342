"""rules.json: what a valid file gives, and a one-line error naming file, rule and field
for every kind of mistake."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import ConfigError, KernelError
from kernel.model import AgentSpec, ChannelSpec, Event, Rule, SourceSpec, Trigger
from kernel.routing import matches, matter_of
from kernel.rules import parse_rules, rules_version, starter_rules_text
from plugins.sources import github as github_source

AGENT_ADAPTERS = frozenset({"claude", "command", "demo"})
CHANNEL_ADAPTERS = frozenset({"desktop", "github-comment", "webhook", "console"})

# The example of the design document (section 3), as a user would write it.
EXAMPLE: dict[str, Any] = {
    "timezone": "Asia/Shanghai",
    "max_hops": 8,
    "ask_first": ["delete data", "restart a service", "spend money", "message outsiders"],
    "sources": {
        "github": {"adapter": "github"},
        "shop": {"adapter": "hmac", "header": "x-shop-signature"},
    },
    "agents": {
        "coder": {"use": "claude", "worker": "any"},
        "script": {"use": "command", "command": ["python3", "agent.py", "{prompt}"]},
    },
    "channels": {
        "desk": {"use": "desktop"},
        "gh": {"use": "github-comment"},
        "chat": {"use": "webhook", "format": "slack", "url_env": "SLACK_URL", "links": True},
    },
    "rules": [
        {
            "name": "triage",
            "on": {"source": "github", "type": ["issues.opened", "issues.reopened"]},
            "agent": "coder",
            "cwd": "/srv/web",
            "skill": "triage",
            "access": "read",
            "parallel": True,
            "emits": ["triage.done"],
            "allow": ["github.comment", "github.label"],
            "approve": ["github.close"],
            "notify": ["gh", "desk"],
            "timeout_s": 1800,
            "budget_usd": 2,
        },
        {
            "name": "morning",
            "every": "0 9 * * 1-5",
            "agent": "coder",
            "cwd": "/srv/notes",
            "access": "read",
        },
    ],
}


def load(data: object, **kwargs: Any) -> Any:
    # As the shell loads them: with the github plugin's source and executor verbs.
    return parse_rules(
        json.dumps(data),
        known_agent_adapters=AGENT_ADAPTERS,
        known_channel_adapters=CHANNEL_ADAPTERS,
        known_actions={github_source.SOURCE: github_source.ACTIONS},
        sources=(github_source.SOURCE,),
        **kwargs,
    )


# --------------------------------------------------------------------------- valid files


def test_the_design_example_loads_with_every_field() -> None:
    rules = load(EXAMPLE)
    assert rules.timezone == "Asia/Shanghai"
    assert rules.max_hops == 8
    assert rules.ask_first == tuple(EXAMPLE["ask_first"])
    assert rules.sources["shop"] == SourceSpec(
        name="shop", adapter="hmac", options={"header": "x-shop-signature"}
    )
    assert rules.agents["script"] == AgentSpec(
        name="script", use="command", command=("python3", "agent.py", "{prompt}")
    )
    assert rules.channels["chat"] == ChannelSpec(
        name="chat", use="webhook", links=True, options={"format": "slack", "url_env": "SLACK_URL"}
    )
    assert rules.rules[0] == Rule(
        name="triage",
        agent="coder",
        on=Trigger(source=("github",), type=("issues.opened", "issues.reopened")),
        cwd="/srv/web",
        skill="triage",
        access="read",
        parallel=True,
        emits=("triage.done",),
        allow=("github.comment", "github.label"),
        approve=("github.close",),
        notify=("gh", "desk"),
        timeout_s=1800.0,
        budget_usd=2.0,
    )
    assert rules.rules[1] == Rule(
        name="morning", agent="coder", every="0 9 * * 1-5", cwd="/srv/notes", access="read"
    )
    assert rules.rule("morning") is rules.rules[1]
    assert rules.path == "rules.json"
    assert len(rules.version) == 16
    assert int(rules.version, 16) >= 0


def test_our_additional_fields_are_read() -> None:
    data = copy.deepcopy(EXAMPLE)
    data.update(
        owner_notify=["desk"],
        max_parallel=4,
        max_usd_per_day=10.5,
        max_tokens_per_day=2_000_000,
        secret_env=["SHOP_TOKEN", "_X"],
        mentions=["Mona", "my-org/Reviewers", "*"],
    )
    data["agents"]["coder"]["model"] = "large"
    data["rules"][1].update(instructions="Summarise yesterday's notes.", max_retries=0)
    rules = load(data)
    assert rules.owner_notify == ("desk",)
    assert (rules.max_parallel, rules.max_usd_per_day, rules.max_tokens_per_day) == (
        4,
        10.5,
        2_000_000,
    )
    assert rules.secret_env == ("SHOP_TOKEN", "_X")
    assert rules.mentions == ("mona", "my-org/reviewers", "*")  # logins: any case
    assert rules.agents["coder"].options == {"model": "large"}
    assert rules.rules[1].instructions == "Summarise yesterday's notes."
    assert rules.rules[1].max_retries == 0


def test_defaults_fill_a_minimal_file() -> None:
    rules = load(
        {"agents": {"a": {"use": "demo"}}, "rules": [{"name": "r", "agent": "a", "on": {}}]}
    )
    assert (rules.timezone, rules.max_hops, rules.max_parallel) == ("UTC", 8, 2)
    assert rules.mentions == ()  # no @mention from an agent notifies anyone
    assert rules.rules[0] == Rule(name="r", agent="a", on=Trigger())


def test_an_empty_object_is_a_file_with_no_rules() -> None:
    assert load({}).rules == ()


def test_on_fields_take_a_string_or_a_list() -> None:
    data = copy.deepcopy(EXAMPLE)
    data["rules"][0]["on"] = {"source": ["github", "shop"], "type": "issues.*", "subject": "a/*"}
    assert load(data).rules[0].on == Trigger(
        source=("github", "shop"), type=("issues.*",), subject=("a/*",)
    )


def test_adapters_are_not_checked_when_the_shell_does_not_say_which_exist() -> None:
    data = copy.deepcopy(EXAMPLE)
    data["agents"]["coder"]["use"] = "something-new"
    data["channels"]["desk"]["use"] = "pager"
    rules = parse_rules(json.dumps(data))
    assert rules.agents["coder"].use == "something-new"


def test_toml_gives_the_same_rules_and_version_as_json() -> None:
    toml = """
timezone = "Asia/Shanghai"
max_hops = 8
ask_first = ["delete data", "restart a service", "spend money", "message outsiders"]

[sources.github]
adapter = "github"
[sources.shop]
adapter = "hmac"
header = "x-shop-signature"

[agents.coder]
use = "claude"
worker = "any"
[agents.script]
use = "command"
command = ["python3", "agent.py", "{prompt}"]

[channels.desk]
use = "desktop"
[channels.gh]
use = "github-comment"
[channels.chat]
use = "webhook"
format = "slack"
url_env = "SLACK_URL"
links = true

[[rules]]
name = "triage"
on = { source = "github", type = ["issues.opened", "issues.reopened"] }
agent = "coder"
cwd = "/srv/web"
skill = "triage"
access = "read"
parallel = true
emits = ["triage.done"]
allow = ["github.comment", "github.label"]
approve = ["github.close"]
notify = ["gh", "desk"]
timeout_s = 1800
budget_usd = 2

[[rules]]
name = "morning"
every = "0 9 * * 1-5"
agent = "coder"
cwd = "/srv/notes"
access = "read"
"""
    from_toml = parse_rules(toml, path="rules.toml", fmt="toml")
    from_json = load(EXAMPLE)
    assert from_toml.path == "rules.toml"
    assert from_toml.rules == from_json.rules
    assert from_toml.version == from_json.version


def test_the_version_ignores_layout_key_order_and_spelled_out_defaults() -> None:
    base = load(EXAMPLE).version
    assert load(json.loads(json.dumps(EXAMPLE, indent=4, sort_keys=True))).version == base
    spelled = copy.deepcopy(EXAMPLE)
    spelled["rules"][1].update(parallel=False, max_retries=2, timeout_s=1800.0)
    assert load(spelled).version == base
    assert load(EXAMPLE, path="elsewhere/rules.json").version == base


def test_the_version_changes_with_the_content() -> None:
    changed = copy.deepcopy(EXAMPLE)
    changed["rules"][1]["every"] = "0 10 * * 1-5"
    assert load(changed).version != load(EXAMPLE).version
    assert rules_version(load(changed)) == load(changed).version


def test_the_starter_file_parses_with_the_adapters_it_names() -> None:
    text = starter_rules_text()
    rules = parse_rules(
        text,
        known_agent_adapters=frozenset({"demo", "command"}),
        known_channel_adapters=frozenset({"console"}),
    )
    hello = rules.rule("hello")
    assert hello is not None
    assert hello.on == Trigger(source=("local",), type=("hello.*",))
    assert (hello.agent, hello.notify) == ("demo", ("console",))
    assert rules.agents["demo"].use == "demo"
    assert rules.agents["script"].command[-1] == "{prompt}"
    assert rules.channels["console"].use == "console"
    assert json.loads(text)["channels"] == {"console": {"use": "console"}}


# --------------------------------------------------------------------------- errors

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    """A mutation setting ``a.b.0.c`` (list indexes as numbers) to ``value``."""

    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]

    return mutate


TRIAGE = 'rules.json: rule "triage": '
MORNING = 'rules.json: rule "morning": '

ERRORS: list[tuple[str, Mutation, str]] = [
    # the file
    (
        "unknown top-level field",
        _set("timezon", "UTC"),
        'rules.json: field "timezon": unknown field "timezon" (did you mean "timezone"? known: '
        "timezone, max_hops, max_chain_events, ask_first, owner_notify, max_parallel, "
        "max_usd_per_day, max_tokens_per_day, secret_env, mentions, sources, agents, channels, "
        "rules)",
    ),
    (
        "a mention written with its @",
        _set("mentions", ["@octocat"]),
        'rules.json: field "mentions[0]": "@octocat" is not a login or org/team name '
        '(write it without the @; "*" allows any)',
    ),
    (
        "mentions not a list",
        _set("mentions", "octocat"),
        'rules.json: field "mentions": must be a list of strings, got a string',
    ),
    (
        "timezone with a space",
        _set("timezone", "Asia Shanghai"),
        'rules.json: field "timezone": "Asia Shanghai" is not a time zone name like "UTC" or '
        '"Asia/Shanghai"',
    ),
    (
        "timezone path",
        _set("timezone", "../etc/passwd"),
        'rules.json: field "timezone": "../etc/passwd" is not a time zone name',
    ),
    (
        "timezone not a string",
        _set("timezone", 8),
        'rules.json: field "timezone": must be a string, got the number 8',
    ),
    (
        "max_hops zero",
        _set("max_hops", 0),
        'rules.json: field "max_hops": must be a positive whole number, got 0',
    ),
    (
        "max_hops text",
        _set("max_hops", "8"),
        'rules.json: field "max_hops": must be a whole number, got a string',
    ),
    (
        "max_hops float",
        _set("max_hops", 2.5),
        'rules.json: field "max_hops": must be a whole number, got the number 2.5',
    ),
    (
        "max_hops bool",
        _set("max_hops", True),
        'rules.json: field "max_hops": must be a whole number, got true',
    ),
    (
        "ask_first not a list",
        _set("ask_first", "delete data"),
        'rules.json: field "ask_first": must be a list of strings, got a string',
    ),
    (
        "ask_first empty entry",
        _set("ask_first", ["x", ""]),
        'rules.json: field "ask_first[1]": must not be empty',
    ),
    (
        "owner_notify unknown channel",
        _set("owner_notify", ["pager"]),
        'rules.json: field "owner_notify[0]": unknown channel "pager" (known: desk, gh, chat)',
    ),
    (
        "max_parallel negative",
        _set("max_parallel", -1),
        'rules.json: field "max_parallel": must be a positive whole number, got -1',
    ),
    (
        "max_usd_per_day zero",
        _set("max_usd_per_day", 0),
        'rules.json: field "max_usd_per_day": must be a number above 0, got 0',
    ),
    (
        "max_tokens_per_day float",
        _set("max_tokens_per_day", 1.5),
        'rules.json: field "max_tokens_per_day": must be a whole number, got the number 1.5',
    ),
    (
        "secret_env bad name",
        _set("secret_env", ["OK", "NOT-OK"]),
        'rules.json: field "secret_env[1]": "NOT-OK" is not an environment variable name',
    ),
    (
        "rules not a list",
        _set("rules", {"triage": {}}),
        'rules.json: field "rules": must be a list of rules, got an object',
    ),
    # sources, agents, channels
    (
        "sources not an object",
        _set("sources", []),
        'rules.json: field "sources": must be an object, got a list',
    ),
    (
        "source without adapter",
        _set("sources.shop", {"header": "x"}),
        'rules.json: field "sources.shop": needs "adapter": the source adapter, e.g. "hmac"',
    ),
    (
        "source adapter not a string",
        _set("sources.shop.adapter", 1),
        'rules.json: field "sources.shop.adapter": must be a string, got the number 1',
    ),
    (
        "source with a bad option name",
        _set("sources.shop.bad key", 1),
        'rules.json: field "sources.shop.bad key": "bad key" is not a usable option name',
    ),
    (
        "agent not an object",
        _set("agents.coder", "claude"),
        'rules.json: field "agents.coder": must be an object, got a string',
    ),
    (
        "agent without use",
        _drop("agents.coder.use"),
        'rules.json: field "agents.coder": needs "use": the agent adapter, e.g. "command"',
    ),
    (
        "agent with unknown adapter",
        _set("agents.coder.use", "claud"),
        'rules.json: field "agents.coder.use": unknown agent adapter "claud" '
        "(known: claude, command, demo)",
    ),
    (
        "agent name with a slash",
        _set("agents.co/der", {"use": "demo"}),
        'rules.json: field "agents.co/der": "co/der" is not a usable agent name',
    ),
    (
        "agent worker not a string",
        _set("agents.coder.worker", 3),
        'rules.json: field "agents.coder.worker": must be a string, got the number 3',
    ),
    (  # it was ignored without a word: the agent ran its own program
        "command on an agent that is not a command agent",
        _set("agents.coder.command", ["python3", "agent.py"]),
        'rules.json: field "agents.coder.command": "command" is read only by agents with '
        '"use": "command"; a "claude" agent runs its own program (name it with "binary")',
    ),
    (
        "command agent without command",
        _drop("agents.script.command"),
        'rules.json: field "agents.script.command": a "command" agent needs "command": a '
        'non-empty list of strings, e.g. ["python3", "agent.py", "{prompt}"]',
    ),
    (
        "command agent with empty command",
        _set("agents.script.command", []),
        'rules.json: field "agents.script.command": a "command" agent needs "command"',
    ),
    (
        "command agent with a shell line",
        _set("agents.script.command", "python3 agent.py"),
        'rules.json: field "agents.script.command": must be a list of strings, got a string',
    ),
    (
        "command agent with a number in argv",
        _set("agents.script.command", ["sleep", 5]),
        'rules.json: field "agents.script.command[1]": must be a string, got the number 5',
    ),
    (
        "channel without use",
        _set("channels.desk", {}),
        'rules.json: field "channels.desk": needs "use": the channel adapter, e.g. "console"',
    ),
    (
        "channel with unknown adapter",
        _set("channels.desk.use", "pager"),
        'rules.json: field "channels.desk.use": unknown channel adapter "pager" '
        "(known: console, desktop, github-comment, webhook)",
    ),
    (
        "channel links not a bool",
        _set("channels.chat.links", "yes"),
        'rules.json: field "channels.chat.links": must be true or false, got a string',
    ),
    # rules
    (
        "rule not an object",
        _set("rules.1", "morning"),
        "rules.json: rule #2: must be an object, got a string",
    ),
    (
        "rule without a name",
        _drop("rules.1.name"),
        'rules.json: rule #2: field "name": every rule needs a "name"',
    ),
    (
        "rule name with a slash",
        _set("rules.1.name", "a/b"),
        'rules.json: rule #2: field "name": "a/b" is not a usable rule name',
    ),
    (
        "duplicate rule name",
        _set("rules.1.name", "triage"),
        TRIAGE + 'field "name": rule #1 has the same name: rule names must be unique',
    ),
    (
        "unknown rule field",
        _set("rules.0.agnet", "coder"),
        TRIAGE + 'field "agnet": unknown field "agnet" (did you mean "agent"? known: name, on,',
    ),
    (
        "neither on nor every",
        _drop("rules.1.every"),
        MORNING + 'field "on": needs "on" (which events) or "every" (a cron line like '
        '"0 9 * * 1-5")',
    ),
    (
        "rule without agent",
        _drop("rules.1.agent"),
        MORNING + 'field "agent": needs "agent": one of the agents defined under "agents"',
    ),
    (
        "rule with unknown agent",
        _set("rules.0.agent", "coderx"),
        TRIAGE + 'field "agent": unknown agent "coderx" (known: coder, script)',
    ),
    (
        "bad cron field",
        _set("rules.1.every", "0 9 * * 1-8"),
        MORNING + "field \"every\": bad cron line '0 9 * * 1-8': day-of-week '1-8': 8 is out "
        "of range 0-7",
    ),
    (
        "cron with too few fields",
        _set("rules.1.every", "9 * *"),
        MORNING + "field \"every\": bad cron line '9 * *': expected 5 fields",
    ),
    (
        "cron not a string",
        _set("rules.1.every", 9),
        MORNING + 'field "every": must be a string, got the number 9',
    ),
    (
        "on not an object",
        _set("rules.0.on", "issues.opened"),
        TRIAGE + 'field "on": must be an object, got a string',
    ),
    (
        "unknown on field",
        _set("rules.0.on.types", ["x"]),
        TRIAGE + 'field "on.types": unknown field "types" (did you mean "type"? known: source, '
        "type, subject)",
    ),
    (
        "bad on type",
        _set("rules.0.on.type", ["issues.opened", "issues opened"]),
        TRIAGE + 'field "on.type[1]": "issues opened" is not an event type like "issues.opened"',
    ),
    (
        "bad single on type",
        _set("rules.0.on.type", "*.opened"),
        TRIAGE + 'field "on.type": "*.opened" is not an event type',
    ),
    (
        "empty on list",
        _set("rules.0.on.type", []),
        TRIAGE + 'field "on.type": is an empty list: leave on.type out to match any type',
    ),
    (
        "on source with a space",
        _set("rules.0.on.source", "git hub"),
        TRIAGE + 'field "on.source": "git hub" is not a source name',
    ),
    (
        "on subject a number",
        _set("rules.0.on.subject", 42),
        TRIAGE + 'field "on.subject": must be a string or a list of strings, got the number 42',
    ),
    (
        "access unknown",
        _set("rules.0.access", "write"),
        TRIAGE + 'field "access": must be read, edit or full, got "write"',
    ),
    (
        "parallel as text",
        _set("rules.0.parallel", "yes"),
        TRIAGE + 'field "parallel": must be true or false, got a string',
    ),
    ("cwd empty", _set("rules.0.cwd", ""), TRIAGE + 'field "cwd": must not be empty'),
    (
        "skill a list",
        _set("rules.0.skill", ["triage"]),
        TRIAGE + 'field "skill": must be a string, got a list',
    ),
    (
        "instructions a number",
        _set("rules.0.instructions", 1),
        TRIAGE + 'field "instructions": must be a string, got the number 1',
    ),
    (
        "emits a bad type",
        _set("rules.0.emits", ["triage.done", "triage done"]),
        TRIAGE + 'field "emits[1]": "triage done" is not an event type: dot-separated words',
    ),
    (
        "emits a pattern",
        _set("rules.0.emits", ["triage.*"]),
        TRIAGE + 'field "emits[0]": "triage.*" is not an event type',
    ),
    (
        "allow without namespace",
        _set("rules.0.allow", ["comment"]),
        TRIAGE + 'field "allow[0]": "comment" is not an action of the form <namespace>.<verb>',
    ),
    (
        "approve with three parts",
        _set("rules.0.approve", ["a.b.c"]),
        TRIAGE + 'field "approve[0]": "a.b.c" is not an action of the form',
    ),
    (
        "action both allowed and approved",
        _set("rules.0.approve", ["github.label"]),
        TRIAGE + 'field "approve[0]": "github.label" is also in "allow": keep it in one of the two',
    ),
    (
        "notify unknown channel",
        _set("rules.0.notify", ["gh", "pager"]),
        TRIAGE + 'field "notify[1]": unknown channel "pager" (known: desk, gh, chat)',
    ),
    (
        "timeout zero",
        _set("rules.0.timeout_s", 0),
        TRIAGE + 'field "timeout_s": must be a number above 0, got 0',
    ),
    (
        "timeout negative",
        _set("rules.0.timeout_s", -5),
        TRIAGE + 'field "timeout_s": must be a number above 0, got -5',
    ),
    (
        "timeout text",
        _set("rules.0.timeout_s", "30m"),
        TRIAGE + 'field "timeout_s": must be a number, got a string',
    ),
    (
        "budget zero",
        _set("rules.0.budget_usd", 0),
        TRIAGE + 'field "budget_usd": must be a number above 0, got 0',
    ),
    (
        "max_retries negative",
        _set("rules.0.max_retries", -1),
        TRIAGE + 'field "max_retries": must be at least 0, got -1',
    ),
    (
        "github action misspelled",
        _set("rules.0.allow", ["github.coment"]),
        TRIAGE + 'field "allow[0]": unknown action "github.coment" (did you mean '
        '"github.comment"? known: github.comment, github.label,',
    ),
    (
        "github action to approve misspelled",
        _set("rules.0.approve", ["github.clsoe"]),
        TRIAGE + 'field "approve[0]": unknown action "github.clsoe" (did you mean "github.close"?',
    ),
    (
        "source misspelled",
        _set("rules.0.on.source", "gihub"),
        TRIAGE + 'field "on.source": unknown source "gihub" (did you mean "github"? known: '
        "local, agent, timer, schedule, card, github, shop;",
    ),
    (
        "declared source misspelled",
        _set("rules.0.on.source", ["github", "shpo"]),
        TRIAGE + 'field "on.source[1]": unknown source "shpo" (did you mean "shop"?',
    ),
]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [pytest.param(m, e, id=name) for name, m, e in ERRORS],
)
def test_each_mistake_is_one_line_naming_file_rule_and_field(
    mutate: Mutation, expected: str
) -> None:
    data = copy.deepcopy(EXAMPLE)
    mutate(data)
    with pytest.raises(ConfigError) as caught:
        load(data)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(expected), text


def test_a_source_far_from_any_known_one_is_a_source_of_its_own() -> None:
    # autoloop emit records events of any source: only near misses are typos
    rules = load(
        {
            "agents": {"a": {"use": "demo"}},
            "rules": [{"name": "r", "agent": "a", "on": {"source": "billing"}}],
        }
    )
    assert rules.rules[0].on is not None and rules.rules[0].on.source == ("billing",)


def test_an_unknown_agent_when_none_are_defined_says_to_add_one() -> None:
    with pytest.raises(ConfigError) as caught:
        load({"rules": [{"name": "r", "agent": "a", "on": {}}]})
    assert str(caught.value) == (
        'rules.json: rule "r": field "agent": unknown agent "a" (known: none: add one under '
        '"agents")'
    )


def test_the_error_carries_its_parts_as_data() -> None:
    data = copy.deepcopy(EXAMPLE)
    data["rules"][0]["agent"] = "coderx"
    with pytest.raises(ConfigError) as caught:
        load(data, path="/home/me/.autoloop/rules.json")
    error = caught.value
    assert isinstance(error, KernelError)
    assert (error.file, error.rule, error.field) == (
        "/home/me/.autoloop/rules.json",
        "triage",
        "agent",
    )
    assert error.message == 'unknown agent "coderx" (known: coder, script)'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"max_hops": 8,}', "rules.json: not valid JSON at line 1, column 16: Expecting property"),
        (
            '{\n  "rules": [\n    {"name": "a"\n  ]\n}',
            "rules.json: not valid JSON at line 4, column 3",
        ),
        ("", "rules.json: not valid JSON at line 1, column 1: Expecting value"),
        ('{"max_hops": 8, "max_hops": 9}', 'rules.json: the key "max_hops" appears twice'),
        ('{"max_usd_per_day": NaN}', "rules.json: not valid JSON: NaN is not a JSON number"),
        ("[]", "rules.json: must hold one object with the rules, got a list"),
        ("[" * 100_000, "rules.json: not valid JSON"),
    ],
)
def test_bad_json_names_line_and_column(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules(text)
    assert str(caught.value).startswith(expected), str(caught.value)


def test_bad_toml_is_a_config_error_with_its_position() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules("max_hops = \n[agents", path="rules.toml", fmt="toml")
    assert str(caught.value).startswith("rules.toml: not valid TOML: ")
    assert "line 1" in str(caught.value)


def test_an_unknown_format_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="fmt must be 'json' or 'toml'"):
        parse_rules("{}", fmt="yaml")


def test_deeply_nested_toml_is_a_config_error_not_a_recursion_error() -> None:
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_rules("a = " + "[" * 5000, path="rules.toml", fmt="toml")


def test_a_toml_date_is_refused_where_a_string_is_expected() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules("timezone = 2026-01-01", path="rules.toml", fmt="toml")
    assert str(caught.value) == 'rules.toml: field "timezone": must be a string, got date'


# --------------------------------------------------------------------------- matching

TRIAGE_RULE = Rule(
    name="triage",
    agent="coder",
    parallel=True,
    on=Trigger(source=("forge",), type=("issues.opened", "pull_request.*"), subject=("acme/*",)),
)


def event(type_: str, subject: str = "acme/web#1", source: str = "forge") -> Event:
    return Event(source=source, id="1", type=type_, subject=subject)


@pytest.mark.parametrize(
    ("ev", "expected"),
    [
        (event("issues.opened"), True),
        (event("issues.opened.extra"), False),
        (event("issues.closed"), False),
        (event("pull_request.labeled"), True),
        (event("pull_request"), False),
        (event("issues.opened", subject="other/web#1"), False),
        (event("issues.opened", source="local"), False),
    ],
)
def test_types_and_subjects_match_exactly_or_by_prefix(ev: Event, expected: bool) -> None:
    assert matches(TRIAGE_RULE, ev) is expected


def test_an_empty_trigger_matches_everything_and_a_schedule_only_rule_nothing() -> None:
    assert matches(Rule(name="all", agent="a", on=Trigger()), event("anything"))
    assert not matches(Rule(name="cron", agent="a", every="@daily"), event("anything"))


def test_the_matter_is_the_rule_or_rule_and_subject_when_parallel() -> None:
    assert matter_of(TRIAGE_RULE, "acme/web#1") == "triage/acme/web#1"
    assert matter_of(Rule(name="morning", agent="a"), "acme/web#1") == "morning"


# --------------------------------------------------------------------------- properties


@settings(max_examples=200)
@given(st.text(max_size=300))
def test_any_text_either_parses_or_raises_a_config_error(text: str) -> None:
    try:
        parse_rules(text)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        assert str(exc).startswith("rules.json: ")


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3000) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300)
@given(
    st.sampled_from(
        [
            "timezone",
            "max_hops",
            "agents.coder",
            "agents.script.command",
            "channels.chat",
            "rules.0.on",
            "rules.0.on.type",
            "rules.0.emits",
            "rules.0.timeout_s",
            "rules.1.every",
            "rules.1.agent",
            "rules.0.notify",
            "rules.0.allow",
            "sources.shop",
        ]
    ),
    _values,
)
def test_any_value_in_any_field_parses_or_gives_a_located_one_line_error(
    path: str, value: Any
) -> None:
    data = copy.deepcopy(EXAMPLE)
    _set(path, value)(data)
    try:
        load(data)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        assert exc.field is not None or exc.rule is not None
