"""Which rules an event wakes, and which matter it joins."""

from __future__ import annotations

import hashlib

from kernel.model import Event, Rule, Rules, Trigger


def _match_one(patterns: tuple[str, ...], value: str) -> bool:
    if not patterns:
        return True
    for p in patterns:
        if p.endswith("*"):
            if value.startswith(p[:-1]):
                return True
        elif p == value:
            return True
    return False


def trigger_matches(on: Trigger, event: Event) -> bool:
    return (
        _match_one(on.source, event.source)
        and _match_one(on.type, event.type)
        and _match_one(on.subject, event.subject)
    )


def matches(rule: Rule, event: Event) -> bool:
    """Whether ``rule``'s ``on`` takes ``event`` (a rule with only ``every`` takes none).

    Each of source, type and subject is a list of exact values or prefixes ending in
    ``*``; a missing one matches anything.
    """
    return rule.on is not None and trigger_matches(rule.on, event)


def matter_of(rule: Rule, subject: str) -> str:
    """The matter id: the rule itself, or rule/subject when the rule is ``parallel``."""
    return f"{rule.name}/{subject}" if rule.parallel else rule.name


def session_of(matter: str) -> str:
    """AUTOLOOP_SESSION: stable per matter, derived from its id."""
    return "s-" + hashlib.sha256(matter.encode()).hexdigest()[:16]


def route(rules: Rules, event: Event) -> list[tuple[Rule, str]]:
    """(rule, matter) pairs for an event that is not aimed at a matter directly."""
    out: list[tuple[Rule, str]] = []
    for rule in rules.rules:  # matches(rule, event), inline: every event comes here
        if rule.on is not None and trigger_matches(rule.on, event):
            out.append((rule, matter_of(rule, event.subject)))
    return out
