"""Finding the receipt block in an agent's last message: the last fenced block whose info
string is ``autoloop`` or ``agent-autoloop``.

Fences are three or more backticks or tildes, closed by a fence of the same character
at least as long, CommonMark style; CRLF is tolerated. What the block says is read by
:mod:`kernel.receipt`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["INFO_STRINGS", "Block", "find_block", "find_receipt"]

INFO_STRINGS = frozenset({"autoloop", "agent-autoloop"})

_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """A located receipt block: its text (lines joined with ``\\n``), the 1-based line of
    its opening fence in the message, the fence itself, and whether it was closed."""

    text: str
    line: int
    fence: str
    closed: bool


def find_block(message: str) -> Block | None:
    """The last ``autoloop`` / ``agent-autoloop`` fenced block of ``message``, or None.

    Fences inside other fenced blocks are content, as a Markdown reader would show them.
    A block left open runs to the end of the message and comes back with ``closed=False``.
    """
    lines = _NEWLINE.split(message)
    last: Block | None = None
    opened: tuple[str, bool, int] | None = None  # fence, is a receipt, index of opening line
    for index, line in enumerate(lines):
        if opened is None:
            match = _OPEN.fullmatch(line)
            if match is None:
                continue
            fence, info = match.group(1), match.group(2).strip()
            if fence[0] == "`" and "`" in info:
                continue  # not a fence in CommonMark: a backtick fence's info has no backtick
            word = info.split()[0].lower() if info else ""
            opened = (fence, word in INFO_STRINGS, index)
            continue
        fence, is_receipt, start = opened
        close = _CLOSE.fullmatch(line)
        if close is None:
            continue
        closing = close.group(1)
        if closing[0] != fence[0] or len(closing) < len(fence):
            continue
        if is_receipt:
            text = "\n".join(lines[start + 1 : index])
            last = Block(text=text, line=start + 1, fence=fence, closed=True)
        opened = None
    if opened is not None and opened[1]:
        fence, _, start = opened
        text = "\n".join(lines[start + 1 :])
        last = Block(text=text, line=start + 1, fence=fence, closed=False)
    return last


def find_receipt(message: str) -> str | None:
    """The text of the last receipt block, or None when the message has none.

    A block that is never closed gives the rest of the message; use :func:`find_block`
    to tell (``closed``), or :func:`kernel.receipt.parse_receipt`, which reports it as
    malformed.
    """
    block = find_block(message)
    return None if block is None else block.text
