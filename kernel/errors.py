"""The kernel's exceptions.

In the core, domain outcomes are values (a malformed receipt is a
:class:`kernel.model.ReceiptError`, a refused action is a status); exceptions mean either
a bad configuration handed to us, or a bug::

    KernelError                 root of everything the kernel raises on purpose
    └── ConfigError             a configuration file is wrong: names file, rule and field

The shell turns a :class:`ConfigError` into exit code 2 with ``str(error)`` on stderr.
"""

from __future__ import annotations

__all__ = ["ConfigError", "KernelError"]


class KernelError(Exception):
    """Root of the exceptions the kernel raises on purpose."""


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
        self.message = _one_line(message)
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


def _one_line(text: str) -> str:
    return " ".join(text.split())
