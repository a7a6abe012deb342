"""The policy file: defaults, every key, and one problem naming the key."""

from __future__ import annotations

import pytest

from pipeline.policy import Deploy, Labels, Policy, PolicyProblem, ReviewRule, parse_policy

FULL = """\
[deliver]
merge_method = "rebase"
review = "agent:reviewer"
required_checks = ["build", "e2e", "build"]
checks_timeout = "90m"
update_branch = false
delete_branch = true

[deliver.deploy]
environment = "staging"
timeout = "1h30m"
version_url = "https://web.acme.example/version.json"
version_field = "commit"
matches = 3

[deliver.labels]
deliver = "ship-it"
review = "review-please"
"""


def problem(text: str, agents: tuple[str, ...] | None = None) -> PolicyProblem:
    parsed = parse_policy(text, agents=agents)
    assert isinstance(parsed, PolicyProblem), parsed
    return parsed


def test_a_missing_file_means_the_defaults() -> None:
    assert parse_policy(None) == Policy()
    assert Policy().deploy is None
    assert Policy().checks_timeout_s == 7200
    assert Policy().labels == Labels(deliver="deliver", review="deliver-review")


def test_an_empty_file_or_an_empty_deliver_table_means_the_defaults() -> None:
    assert parse_policy("") == Policy()
    assert parse_policy("[deliver]\n") == Policy()


def test_every_key_is_read() -> None:
    assert parse_policy(FULL, agents={"reviewer", "coder"}) == Policy(
        merge_method="rebase",
        review=ReviewRule(kind="agent", agent="reviewer"),
        required_checks=("build", "e2e"),
        checks_timeout_s=5400,
        update_branch=False,
        delete_branch=True,
        deploy=Deploy(
            environment="staging",
            timeout_s=5400,
            version_url="https://web.acme.example/version.json",
            version_field="commit",
            matches=3,
        ),
        labels=Labels(deliver="ship-it", review="review-please"),
    )


def test_an_empty_deploy_table_turns_deployment_checks_on_with_defaults() -> None:
    parsed = parse_policy("[deliver.deploy]\n")
    assert isinstance(parsed, Policy)
    assert parsed.deploy == Deploy()


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ('review = "none"', ReviewRule()),
        ('review = "approvals:1"', ReviewRule(kind="approvals", approvals=1)),
        ('review = "approvals:12"', ReviewRule(kind="approvals", approvals=12)),
        ('review = "agent:sec-review_2"', ReviewRule(kind="agent", agent="sec-review_2")),
    ],
)
def test_review_forms(text: str, rule: ReviewRule) -> None:
    parsed = parse_policy(f"[deliver]\n{text}\n")
    assert isinstance(parsed, Policy)
    assert parsed.review == rule
    assert str(parsed.review) == text.split('"')[1]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[deliver]\nmerge_method = "fast-forward"\n', "deliver.merge_method"),
        ("[deliver]\nmerge_method = 1\n", "deliver.merge_method"),
        ('[deliver]\nreview = "approvals:0"\n', "deliver.review"),
        ('[deliver]\nreview = "approvals:-1"\n', "deliver.review"),
        ('[deliver]\nreview = "approvals:two"\n', "deliver.review"),
        ('[deliver]\nreview = "agent:"\n', "deliver.review"),
        ('[deliver]\nreview = "agent:../../bin/sh"\n', "deliver.review"),
        ('[deliver]\nreview = "agent:a b"\n', "deliver.review"),
        ('[deliver]\nreview = "approve"\n', "deliver.review"),
        ('[deliver]\nrequired_checks = "build"\n', "deliver.required_checks"),
        ('[deliver]\nrequired_checks = ["build", ""]\n', "deliver.required_checks"),
        ('[deliver]\nrequired_checks = ["autoloop/deliver"]\n', "deliver.required_checks"),
        ('[deliver]\nchecks_timeout = "2 hours"\n', "deliver.checks_timeout"),
        ('[deliver]\nchecks_timeout = "0s"\n', "deliver.checks_timeout"),
        ("[deliver]\nchecks_timeout = 7200\n", "deliver.checks_timeout"),
        ('[deliver]\nupdate_branch = "yes"\n', "deliver.update_branch"),
        ("[deliver]\ndelete_branch = 1\n", "deliver.delete_branch"),
        ("[deliver]\nmerge = true\n", "deliver.merge"),
        ("[delivery]\n", "delivery"),
        ('[deliver]\ndeploy = "production"\n', "deliver.deploy"),
        ('[deliver.deploy]\nenvironment = ""\n', "deliver.deploy.environment"),
        ('[deliver.deploy]\ntimeout = "soon"\n', "deliver.deploy.timeout"),
        ('[deliver.deploy]\nversion_url = "ftp://acme.example/v"\n', "deliver.deploy.version_url"),
        ('[deliver.deploy]\nversion_url = "acme.example/v"\n', "deliver.deploy.version_url"),
        ('[deliver.deploy]\nversion_url = "https://"\n', "deliver.deploy.version_url"),
        ('[deliver.deploy]\nversion_field = "a b"\n', "deliver.deploy.version_field"),
        ("[deliver.deploy]\nmatches = 0\n", "deliver.deploy.matches"),
        ("[deliver.deploy]\nmatches = true\n", "deliver.deploy.matches"),
        ("[deliver.deploy]\nmatches = 2.0\n", "deliver.deploy.matches"),
        ("[deliver.deploy]\nmatches = 101\n", "deliver.deploy.matches"),
        ('[deliver.deploy]\nregion = "eu"\n', "deliver.deploy.region"),
        ('[deliver.labels]\ndeliver = ""\n', "deliver.labels.deliver"),
        ('[deliver.labels]\nreview = "   "\n', "deliver.labels.review"),
        ('[deliver.labels]\nreview = "Deliver"\n', "deliver.labels.review"),
        (f'[deliver.labels]\ndeliver = "{"x" * 51}"\n', "deliver.labels.deliver"),
        ('[deliver.labels]\nship = "ship"\n', "deliver.labels.ship"),
    ],
)
def test_a_bad_value_is_one_problem_naming_the_key(text: str, key: str) -> None:
    found = problem(text)
    assert found.key == key
    assert found.line is None
    assert "\n" not in found.message
    assert key in str(found)
    assert str(found).startswith(".github/autoloop.toml: ")


def test_the_problem_says_what_was_expected() -> None:
    found = problem('[deliver]\nreview = "approvals:0"\n')
    assert found.message == (
        'expected "none", "approvals:N" (N from 1 to 999) or "agent:NAME", got \'approvals:0\''
    )
    assert problem('[deliver]\nchecks_timeout = "2 hours"\n').message.startswith(
        "expected a duration like 90s, 30m, 2h, 1d or 1h30m"
    )
    assert (
        "known here: environment, timeout" in problem('[deliver.deploy]\nregion = "eu"\n').message
    )


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ('["squash"]', "a list"),
        ("{ a = 1 }", "a table"),
        ("2026-03-02", "date"),
        ("1.5", "a number (1.5)"),
        ("true", "a boolean (True)"),
    ],
)
def test_a_wrong_type_is_named(value: str, kind: str) -> None:
    assert (
        problem(f"[deliver]\nmerge_method = {value}\n").message == f"expected a string, got {kind}"
    )


def test_an_agent_review_must_name_an_agent_of_the_rules_when_they_are_known() -> None:
    found = problem('[deliver]\nreview = "agent:reviewr"\n', agents=("reviewer", "coder"))
    assert found.key == "deliver.review"
    assert found.message == "no agent 'reviewr' in rules.json (known: coder, reviewer)"
    assert isinstance(parse_policy('[deliver]\nreview = "agent:reviewr"\n'), Policy)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[deliver]\nreview = \n", 2),
        ("[deliver]\nmerge_method = 'squash'\n\n[deliver.deploy\nmatches = 2\n", 4),
        ('[deliver]\nreview = "none\n', 2),
        ("[deliver]\nupdate_branch = true\nupdate_branch = false\n", 3),
        ("[deliver]\n\nreview = ", 3),  # tomllib says "at end of document"
    ],
)
def test_a_toml_syntax_error_names_its_line(text: str, line: int) -> None:
    found = problem(text)
    assert found.key == ""
    assert found.line == line
    assert found.message.startswith("not valid TOML: ")
    assert str(found).startswith(f".github/autoloop.toml line {line}: not valid TOML")
