"""The ports between the shell and its adapters: small Protocols with value types.

- ``Agent`` runs one turn (``AgentRequest`` in, ``AgentResult`` out);
- ``Channel`` shows a card to people and returns its handle there;
- ``Executor`` performs one write-back (a receipt action) and returns its result, or
  raises ``ActionFailed`` when trying again cannot help.

Agents run one turn each. They receive only the rule's instructions and validated
identifiers (in ``prompt``); everything written by other people is in data files
under ``turn_dir``. They get no hub credentials and no GitHub write token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kernel.model import Access  # one Access for rules and adapters
from kernel.records import Action, Card, Matter


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRequest:
    turn: str
    prompt: str
    cwd: Path
    turn_dir: Path  # holds context.json and data/
    env: Mapping[str, str]  # the AUTOLOOP_* variables of DESIGN.md section 4, nothing secret
    resume: str | None  # the agent's own session id to continue, or None for a fresh one
    access: Access
    timeout_s: float
    budget_usd: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # the agent's entry in rules.json
    command: tuple[str, ...] = ()  # for the command adapter


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentResult:
    started: bool  # the agent got far enough to have a session (retry in the same one)
    ok: bool  # the process ended normally and produced a final message
    final_message: str = ""  # the receipt carrier
    session: str | None = None  # the agent's own session id, for the next turn to resume
    cost_usd: float | None = None
    tokens: int | None = None
    error: str | None = None  # one line for people: what went wrong
    exit_code: int | None = None
    timed_out: bool = False
    output: str = ""  # raw output for the turn log; redacted before it is stored
    pid: int | None = None
    retry: bool = True  # False: running it again cannot help (the program is missing)
    # False: the retry itself mends it (a session that is gone: the retry starts a fresh
    # one), so it need not wait out the rule's retry_backoff_s
    backoff: bool = True


class Agent(Protocol):
    """Runs one turn of one CLI agent. Must not raise for agent failures: report them."""

    name: str

    def build_argv(self, req: AgentRequest) -> list[str]: ...

    def run(self, req: AgentRequest) -> AgentResult: ...


class Channel(Protocol):
    """Shows a card to people; returns the channel's handle for it, so that a later
    version of the card can update it in place (``previous_ref``) where the channel can."""

    def send(self, card: Card, matter: Matter | None, *, previous_ref: str) -> str: ...


class Executor(Protocol):
    """Performs one write-back for an agent (the ``actions`` of a receipt)."""

    def perform(self, action: Action) -> Mapping[str, Any]: ...


class ActionFailed(Exception):
    """Raised by an executor when trying again cannot help (bad parameters, a refusal):
    the action is recorded failed with this message. Any other exception leaves it
    'allowed' for the next sweep; ``action.attempts > 0`` then tells the executor that an
    earlier attempt may have been applied, so it reads back before writing."""
