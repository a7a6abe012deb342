"""The fuzz targets: the three of :mod:`tests.fuzz.web` (the webhook endpoint, the
generic source, the card pages) and three called directly: the receipt parser, the rules
loader and the card-link verifier. What they must never do: :mod:`tests.fuzz.base`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from ghapp.commands.home import CHANNEL_ADAPTERS
from ghapp.runtime.links import LINK_TTL_S, CardLinks
from ghapp.runtime.rules_file import load_rules
from kernel.errors import ConfigError
from kernel.model import Receipt, ReceiptError, Rule
from kernel.receipt import parse_receipt
from plugins.agents.registry import KNOWN_AGENT_ADAPTERS
from tests.fuzz.base import DEEP, JSON, TRACEBACK, FuzzFailure, Target
from tests.fuzz.web import CardPages, Source, Webhook

__all__ = [
    "TARGETS",
    "CardPages",
    "FuzzFailure",
    "LinkVerifier",
    "ReceiptParser",
    "RulesLoader",
    "Source",
    "Target",
    "Webhook",
]


RECEIPT_RULE = Rule(
    name="triage", agent="coder", emits=("triage.done", "triage.skipped"), allow=("github.comment",)
)
RECEIPT_KEYS = st.sampled_from(
    ["ask", "notice", "later", "resolve", "events", "actions", "emit", "x"]
)
RECEIPT_FIELDS = st.sampled_from(
    [
        "key",
        "title",
        "text",
        "options",
        "in",
        "at",
        "why",
        "type",
        "do",
        "subject",
        "details",
        "params",
        "x",
    ]
)
RECEIPT_VALUES = JSON | st.sampled_from(
    [
        "5m",
        "1h",
        "triage.done",
        "github.comment",
        "2026-01-01T00:00:00Z",
        "k",
        ["a", "b"],
        ["a", "a"],
    ]
)
RECEIPT_BODY = st.dictionaries(
    RECEIPT_KEYS,
    st.lists(st.dictionaries(RECEIPT_FIELDS, RECEIPT_VALUES, max_size=5), max_size=3) | JSON,
    max_size=4,
)


class ReceiptParser(Target):
    """:func:`kernel.receipt.parse_receipt`: any agent's last message."""

    name = "receipt"

    def strategy(self) -> st.SearchStrategy[Any]:
        block = RECEIPT_BODY.map(json.dumps) | st.text(max_size=200) | DEEP.map(bytes.decode)
        fenced = st.builds(
            lambda before, fence, lang, text, close, after: (
                f"{before}{fence}{lang}\n{text}\n{fence if close else ''}{after}"
            ),
            st.text(max_size=40).map(lambda before: before + "\n"),
            st.sampled_from(["```"] * 4 + ["````", "~~~", "``` ", " ```"]),
            st.sampled_from(["autoloop"] * 4 + ["autoloop ", "AUTOLOOP", "json", ""]),
            block,
            st.booleans() | st.just(True),
            st.text(max_size=40),
        )
        soup = st.text(alphabet='`~ \nautolp{}[]":,\r-', max_size=200)
        return st.one_of(fenced, fenced, fenced, st.text(max_size=400), soup)

    def check(self, message: str) -> None:
        try:
            result = parse_receipt(message, rule=RECEIPT_RULE)
        except Exception as exc:
            raise FuzzFailure(f"parse_receipt raised {type(exc).__name__}: {exc}"[:2000]) from exc
        if not (result is None or isinstance(result, Receipt | ReceiptError)):
            raise FuzzFailure(f"parse_receipt returned {type(result).__name__}")
        self.outcomes[type(result).__name__] += 1
        if isinstance(result, ReceiptError) and TRACEBACK in result.message:
            raise FuzzFailure(f"a traceback in the receipt error: {result.message[:500]}")

    def check_bytes(self, data: bytes) -> None:
        self.check(data.decode("utf-8", "surrogateescape"))


RULE_FIELDS = st.sampled_from(
    ["name", "on", "every", "agent", "cwd", "skill", "access", "parallel", "emits", "allow",
     "approve", "notify", "timeout_s", "budget_usd", "x"]
)  # fmt: skip
RULE_VALUES = JSON | st.sampled_from(
    ["demo", "coder", "0 9 * * 1-5", "* * * * *", "61 25 * * *", "github.comment", "read",
     {"source": "github", "type": "issues.*"}, {"source": "gihub"}, "/srv", True, 1800]
)  # fmt: skip
AGENT_SPECS = st.dictionaries(
    st.sampled_from(["use", "command", "worker", "x"]),
    st.sampled_from(["demo", "claude", "command", "nope"]) | JSON,
    max_size=3,
)
SOURCE_SPECS = st.dictionaries(
    st.sampled_from(["adapter", "header", "secret_env"]), JSON | st.just("hmac"), max_size=3
)
RULE_SPECS = st.dictionaries(RULE_FIELDS, RULE_VALUES, max_size=8)
RULES_DOC = st.fixed_dictionaries(
    {},
    optional={
        "agents": st.dictionaries(st.text(max_size=8), AGENT_SPECS, max_size=3) | JSON,
        "rules": st.lists(RULE_SPECS, max_size=3) | JSON,
        "sources": st.dictionaries(st.text(max_size=8), SOURCE_SPECS, max_size=2) | JSON,
        "channels": JSON,
        "timezone": st.sampled_from(["UTC", "Asia/Shanghai", "Nowhere/City", "../../etc"]) | JSON,
        "max_hops": JSON,
        "ask_first": JSON,
        "x": JSON,
    },
)


class RulesLoader(Target):
    """:func:`ghapp.runtime.rules_file.load_rules`: rules.json or rules.toml of any bytes."""

    name = "rules"

    def __enter__(self) -> RulesLoader:
        self.home = Path(tempfile.mkdtemp(prefix="autoloop-fuzz-rules-"))
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.home, ignore_errors=True)

    def strategy(self) -> st.SearchStrategy[Any]:
        text = st.one_of(
            RULES_DOC.map(lambda d: json.dumps(d).encode()),
            st.text(max_size=300).map(str.encode),
            st.binary(max_size=300),
            DEEP,
            st.text(alphabet='[]{}=."\n abcrulesagent', max_size=200).map(str.encode),
        )
        return st.tuples(st.sampled_from(["json", "json", "toml"]), text)

    def check(self, example: tuple[str, bytes]) -> None:
        fmt, raw = example
        for old in self.home.glob("rules.*"):
            old.unlink()
        (self.home / f"rules.{fmt}").write_bytes(raw)
        try:
            load_rules(self.home, agents=KNOWN_AGENT_ADAPTERS, channels=CHANNEL_ADAPTERS)
            self.outcomes["Rules"] += 1
        except ConfigError as exc:
            self.outcomes["ConfigError"] += 1
            text = str(exc)
            if "\n" in text or TRACEBACK in text:
                raise FuzzFailure(f"a ConfigError of more than one line: {text[:500]!r}") from exc
        except Exception as exc:
            raise FuzzFailure(f"load_rules raised {type(exc).__name__}: {exc}"[:2000]) from exc

    def check_bytes(self, data: bytes) -> None:
        self.check(("toml" if data[:1] == b"t" else "json", data[1:]))


class LinkVerifier(Target):
    """:meth:`ghapp.runtime.links.CardLinks.verify`: issued tokens verify to their card,
    nothing else does (changed, expired, signed with another key, made up)."""

    name = "links"

    def __enter__(self) -> LinkVerifier:
        self.now = 1_800_000_000.0
        self.links = CardLinks(os.urandom(32), now=lambda: self.now)
        self.other = CardLinks(os.urandom(32), now=lambda: self.now)
        return self

    def strategy(self) -> st.SearchStrategy[Any]:
        card = st.text(
            alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:",
            max_size=20,
        )
        return st.tuples(
            card,
            st.sampled_from(["issued", "changed", "expired", "other key", "text"]),
            st.integers(0, 10**6),
            st.text(max_size=4),
            st.integers(-(LINK_TTL_S * 2), LINK_TTL_S * 2),
        )

    def check(self, example: tuple[str, str, int, str, int]) -> None:
        card, kind, at, text, ttl = example
        issued = self.links.token(card)
        token = {
            "issued": issued,
            "changed": issued[: at % (len(issued) + 1)]
            + text
            + issued[at % (len(issued) + 1) + 1 :],
            "expired": self.links.token(card, ttl_s=min(ttl, -1)),
            "other key": self.other.token(card, ttl_s=abs(ttl) + 1),
            "text": text + card,
        }[kind]
        try:
            got = self.links.verify(token)
        except Exception as exc:
            raise FuzzFailure(f"verify({token!r}) raised {type(exc).__name__}: {exc}") from exc
        want = card if token == issued else None
        self.outcomes["verified" if got is not None else "refused"] += 1
        if got != want:
            raise FuzzFailure(f"verify({token!r}) gave {got!r}, not {want!r} ({kind})")

    def check_bytes(self, data: bytes) -> None:
        token = data.decode("utf-8", "surrogateescape")
        try:
            got = self.links.verify(token)
        except Exception as exc:
            raise FuzzFailure(f"verify({token!r}) raised {type(exc).__name__}: {exc}") from exc
        if got is not None:
            raise FuzzFailure(f"a made-up token {token!r} verified as card {got!r}")


TARGETS: dict[str, Callable[[], Target]] = {
    "webhook": Webhook,
    "source": Source,
    "cards": CardPages,
    "receipt": ReceiptParser,
    "rules": RulesLoader,
    "links": LinkVerifier,
}
