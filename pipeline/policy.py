"""The delivery policy: ``.github/autoloop.toml`` from the default branch, read into a value.

:func:`parse_policy` never raises for a bad file: it returns a :class:`PolicyProblem`
naming the first key it could not accept (or the line of a TOML syntax error), which
the pipeline shows once in its sticky comment before doing nothing else. A missing file
(``None``) and a file without a ``[deliver]`` table mean the defaults.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel.durations import parse_duration

__all__ = [
    "OWN_CHECK",
    "POLICY_PATH",
    "Deploy",
    "Labels",
    "MergeMethod",
    "Policy",
    "PolicyProblem",
    "ReviewRule",
    "labels_of",
    "parse_policy",
]

POLICY_PATH = ".github/autoloop.toml"
OWN_CHECK = "autoloop/deliver"  # the pipeline's own check run: never a required check

MergeMethod = Literal["merge", "squash", "rebase"]
MERGE_METHODS: tuple[MergeMethod, ...] = ("merge", "squash", "rebase")

_APPROVALS = re.compile(r"approvals:([1-9][0-9]{0,2})")
_AGENT = re.compile(r"agent:([A-Za-z0-9][A-Za-z0-9_.-]{0,63})")
_URL = re.compile(r"https?://[^\s/?#@]+(?:[/?#]\S*)?")
_FIELD = re.compile(r"[A-Za-z0-9_$][A-Za-z0-9_$.-]{0,99}")
_LINE = re.compile(r"\(at line (\d+), column \d+\)")
_LABEL_MAX = 50  # GitHub's limit on a label's name
_MATCHES_MAX = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewRule:
    """``review``: ``none``, ``approvals:N`` (N approving writers) or ``agent:NAME``."""

    kind: Literal["none", "approvals", "agent"] = "none"
    approvals: int = 0
    agent: str = ""

    def __str__(self) -> str:
        if self.kind == "approvals":
            return f"approvals:{self.approvals}"
        if self.kind == "agent":
            return f"agent:{self.agent}"
        return "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class Deploy:
    """``[deliver.deploy]``: which deployment proves the merge went live."""

    environment: str = "production"
    timeout_s: int = 3600
    version_url: str = ""
    version_field: str = "sha"
    matches: int = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Labels:
    deliver: str = "deliver"
    review: str = "deliver-review"


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    merge_method: MergeMethod = "squash"
    review: ReviewRule = field(default_factory=ReviewRule)
    required_checks: tuple[str, ...] = ()
    checks_timeout_s: int = 7200
    update_branch: bool = True
    delete_branch: bool = False
    deploy: Deploy | None = None  # None: the pipeline ends once the PR is merged
    labels: Labels = field(default_factory=Labels)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyProblem:
    """Why the policy file was not accepted: ``key`` is dotted (``deliver.review``), or
    empty for the whole file; ``line`` is set for TOML syntax errors."""

    key: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        line = f" line {self.line}" if self.line is not None else ""
        return f"{POLICY_PATH}{line}: {self._what()}"

    def detail(self) -> str:
        """The problem without the file's path (for text that names the file already)."""
        line = f"line {self.line}: " if self.line is not None else ""
        return f"{line}{self._what()}"

    def _what(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message


class _Bad(Exception):
    """Internal: carries one problem out of the nested readers."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.problem = PolicyProblem(key=key, message=" ".join(message.split()))


_DELIVER_KEYS = (
    "merge_method",
    "review",
    "required_checks",
    "checks_timeout",
    "update_branch",
    "delete_branch",
    "deploy",
    "labels",
)
_DEPLOY_KEYS = ("environment", "timeout", "version_url", "version_field", "matches")
_LABEL_KEYS = ("deliver", "review")


def labels_of(policy: Policy | PolicyProblem) -> Labels:
    """The delivery labels a policy names; the defaults while it has a problem."""
    return policy.labels if isinstance(policy, Policy) else Labels()


def parse_policy(
    text: str | None, *, agents: Collection[str] | None = None
) -> Policy | PolicyProblem:
    """The policy in ``text`` (None: no file, the defaults).

    ``agents`` are the agent names of rules.json; when given, ``agent:NAME`` must name
    one of them.
    """
    if text is None:
        return Policy()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return _syntax_problem(str(error), text)
    try:
        return _read(doc, agents)
    except _Bad as bad:
        return bad.problem


def _syntax_problem(message: str, text: str) -> PolicyProblem:
    found = _LINE.search(message)
    if found:
        line = int(found.group(1))
        message = message[: found.start()].rstrip()
    else:  # tomllib says "(at end of document)": that is the last line
        line = max(1, len(text.splitlines()))
        message = message.replace("(at end of document)", "").rstrip()
    return PolicyProblem(key="", message=f"not valid TOML: {message}", line=line)


def _read(doc: Mapping[str, Any], agents: Collection[str] | None) -> Policy:
    _known(doc, ("deliver",), "")
    deliver = _table(doc, "deliver", "deliver")
    if deliver is None:
        return Policy()
    _known(deliver, _DELIVER_KEYS, "deliver")
    defaults = Policy()
    return Policy(
        merge_method=_method(_string(deliver, "merge_method", "deliver", defaults.merge_method)),
        review=_review(_string(deliver, "review", "deliver", "none"), agents),
        required_checks=_checks(deliver),
        checks_timeout_s=_duration(deliver, "checks_timeout", "deliver", defaults.checks_timeout_s),
        update_branch=_bool(deliver, "update_branch", "deliver", defaults.update_branch),
        delete_branch=_bool(deliver, "delete_branch", "deliver", defaults.delete_branch),
        deploy=_deploy(deliver),
        labels=_labels(deliver),
    )


def _method(text: str) -> MergeMethod:
    for method in MERGE_METHODS:
        if method == text:
            return method
    raise _Bad("deliver.merge_method", f'expected "merge", "squash" or "rebase", got {text!r}')


def _review(text: str, agents: Collection[str] | None) -> ReviewRule:
    if text == "none":
        return ReviewRule()
    approvals = _APPROVALS.fullmatch(text)
    if approvals:
        return ReviewRule(kind="approvals", approvals=int(approvals.group(1)))
    agent = _AGENT.fullmatch(text)
    if agent:
        name = agent.group(1)
        if agents is not None and name not in agents:
            known = ", ".join(sorted(agents)) or "none"
            raise _Bad("deliver.review", f"no agent {name!r} in rules.json (known: {known})")
        return ReviewRule(kind="agent", agent=name)
    raise _Bad(
        "deliver.review",
        f'expected "none", "approvals:N" (N from 1 to 999) or "agent:NAME", got {text!r}',
    )


def _checks(deliver: Mapping[str, Any]) -> tuple[str, ...]:
    raw = deliver.get("required_checks", [])
    key = "deliver.required_checks"
    if not isinstance(raw, list):
        raise _Bad(key, f"expected a list of check names, got {_kind(raw)}")
    names: list[str] = []
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            raise _Bad(key, f"expected check names (non-empty strings), got {item!r}")
        if item == OWN_CHECK:
            raise _Bad(key, f"{OWN_CHECK!r} is this pipeline's own check and cannot be required")
        if item not in names:
            names.append(item)
    return tuple(names)


def _deploy(deliver: Mapping[str, Any]) -> Deploy | None:
    table = _table(deliver, "deploy", "deliver.deploy")
    if table is None:
        return None
    _known(table, _DEPLOY_KEYS, "deliver.deploy")
    where = "deliver.deploy"
    defaults = Deploy()
    environment = _string(table, "environment", where, defaults.environment)
    if not environment.strip():
        raise _Bad(f"{where}.environment", "expected an environment name, got an empty string")
    url = _string(table, "version_url", where, "")
    if url and not _URL.fullmatch(url):
        raise _Bad(f"{where}.version_url", f"expected an http:// or https:// URL, got {url!r}")
    version_field = _string(table, "version_field", where, defaults.version_field)
    if not _FIELD.fullmatch(version_field):
        raise _Bad(
            f"{where}.version_field",
            f"expected a JSON field name (letters, digits, _ . -), got {version_field!r}",
        )
    matches = table.get("matches", defaults.matches)
    if isinstance(matches, bool) or not isinstance(matches, int):
        raise _Bad(f"{where}.matches", f"expected a whole number, got {_kind(matches)}")
    if not 1 <= matches <= _MATCHES_MAX:
        raise _Bad(f"{where}.matches", f"expected 1 to {_MATCHES_MAX}, got {matches}")
    return Deploy(
        environment=environment,
        timeout_s=_duration(table, "timeout", where, defaults.timeout_s),
        version_url=url,
        version_field=version_field,
        matches=matches,
    )


def _labels(deliver: Mapping[str, Any]) -> Labels:
    table = _table(deliver, "labels", "deliver.labels")
    if table is None:
        return Labels()
    _known(table, _LABEL_KEYS, "deliver.labels")
    defaults = Labels()
    found: dict[str, str] = {}
    for key, default in (("deliver", defaults.deliver), ("review", defaults.review)):
        name = _string(table, key, "deliver.labels", default)
        if not name.strip():
            raise _Bad(f"deliver.labels.{key}", "expected a label name, got an empty string")
        if len(name) > _LABEL_MAX:
            raise _Bad(f"deliver.labels.{key}", f"a label name has at most {_LABEL_MAX} characters")
        found[key] = name
    if found["deliver"].casefold() == found["review"].casefold():
        raise _Bad(
            "deliver.labels.review",
            f"must differ from deliver.labels.deliver ({found['deliver']!r})",
        )
    return Labels(deliver=found["deliver"], review=found["review"])


# ------------------------------------------------------------------------------ readers


def _known(table: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in keys:
            dotted = f"{where}.{key}" if where else key
            raise _Bad(dotted, f"unknown key (known here: {', '.join(keys)})")


def _table(parent: Mapping[str, Any], key: str, dotted: str) -> Mapping[str, Any] | None:
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Bad(dotted, f"expected a table [{dotted}], got {_kind(value)}")
    return value


def _string(table: Mapping[str, Any], key: str, where: str, default: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise _Bad(f"{where}.{key}", f"expected a string, got {_kind(value)}")
    return value


def _bool(table: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise _Bad(f"{where}.{key}", f"expected true or false, got {_kind(value)}")
    return value


def _duration(table: Mapping[str, Any], key: str, where: str, default_s: int) -> int:
    if key not in table:
        return default_s
    value = table[key]
    if not isinstance(value, str):
        raise _Bad(f"{where}.{key}", f'expected a duration string like "2h", got {_kind(value)}')
    try:
        return parse_duration(value)
    except ValueError as error:
        raise _Bad(f"{where}.{key}", str(error)) from None


def _kind(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    for cls, name in names.items():
        if type(value) is cls:
            return f"{name} ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__
