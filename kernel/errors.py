"""The kernel's exceptions.

In the core, domain outcomes are values (a malformed receipt is a
:class:`kernel.model.ReceiptError`, a refused action is a status); exceptions mean either
a bad configuration handed to us, or a bug::

    KernelError                 root of everything the kernel raises on purpose
    ├── ConfigError             a configuration file is wrong: names file, rule and field
    └── KernelBug               a rule of the core was broken: never a domain outcome
        ├── IllegalMove         a fact moves a record along a row its lifecycle lacks
        ├── MissingRecord       a fact names a record the shell did not load
        ├── NoFold              a fact type the fold has no function for
        └── OffTable            a decision went beyond its input's row of the step table

The shell turns a :class:`ConfigError` into exit code 2 with ``str(error)`` on stderr.
A :class:`KernelBug` is reported like any crash: a test can show each one.
"""

from __future__ import annotations

from kernel.text import one_line

__all__ = [
    "ConfigError",
    "IllegalMove",
    "KernelBug",
    "KernelError",
    "MissingRecord",
    "NoFold",
    "OffTable",
]


class KernelError(Exception):
    """Root of the exceptions the kernel raises on purpose."""


class KernelBug(KernelError):
    """A rule of the core was broken, by the kernel or by what the shell handed it."""


class IllegalMove(KernelBug):
    """A fact would move a record along a move its table in :mod:`kernel.lifecycle` lacks.

    ``table`` names the lifecycle (``turn``, ``ask card``...), ``record`` the record's id,
    ``state`` where it was and ``fact`` the fact's label (``TurnFinished:ok``).
    """

    def __init__(self, *, table: str, record: str, state: str, fact: str) -> None:
        self.table = table
        self.record = record
        self.state = state
        self.fact = fact
        super().__init__(f"{table} {record!r}: no move from {state!r} on {fact}")


class MissingRecord(KernelBug):
    """A fact names a record that is not in the (partial) state: the shell did not load
    what :func:`kernel.step.needs` asked for, or a fact refers to nothing."""

    def __init__(self, kind: str, rid: str) -> None:
        self.kind = kind
        self.rid = rid
        super().__init__(f"{kind} {rid!r} is not loaded")


class OffTable(KernelBug):
    """A decision recorded a fact, asked for an effect or answered with a reply code that
    the row of its input in :data:`kernel.step.STEP` does not list."""

    def __init__(self, input_type: str, what: str) -> None:
        self.input_type = input_type
        self.what = what
        super().__init__(f"{input_type}: {what} is not in its row of the step table")


class NoFold(KernelBug):
    """A fact of a type that :mod:`kernel.state` has no fold function for."""

    def __init__(self, fact_type: str) -> None:
        self.fact_type = fact_type
        super().__init__(f"no fold for the fact type {fact_type}")


class ConfigError(KernelError):
    """A configuration file is wrong.

    ``file`` is the path as the user knows it, ``rule`` the rule's name (or its index in
    the ``rules`` list when it has no usable name, or None outside rules), ``field`` the
    dotted path of the offending field (None for the whole file), ``message`` what is
    wrong and what to do. ``str()`` is one line, e.g.::

        rules.json: rule "triage": field "agent": unknown agent "coderx" (known: coder, script)
    """

    def __init__(
        self,
        message: str,
        *,
        file: str = "rules.json",
        rule: str | int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = one_line(message)
        self.file = file
        self.rule = rule
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [self.file]
        if isinstance(self.rule, int):
            parts.append(f"rule #{self.rule + 1}")
        elif self.rule is not None:
            parts.append(f'rule "{self.rule}"')
        if self.field:
            parts.append(f'field "{self.field}"')
        parts.append(self.message)
        # One line, whatever a file's keys hold: control characters are shown escaped.
        return "".join(
            c if c.isprintable() else c.encode("unicode_escape").decode() for c in ": ".join(parts)
        )

    def __str__(self) -> str:
        return self._render()
