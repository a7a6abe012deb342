"""Output for people: tables and progress with ``rich`` on a terminal, plain lines otherwise.

::

    out = Out()                       # stdout; rich only when it is a terminal
    out.table("turns", ["id", "state"], [["t1", "done"]])
    with out.progress("running turns") as say:
        say("turn t2 (1 done)")      # a spinner on a terminal; nothing in a pipe
    out.line("done")

Plain output (a pipe, a file, ``TERM=dumb``) is stable text for scripts and ``grep``:
a table is its title, then its column names and one line per row, the cells two spaces
apart, padded to the column. ``rich`` is imported only for a terminal, so ``autoloop status | head``
starts as fast as before.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from kernel.text import for_terminal

__all__ = ["Out", "terminal"]


def terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that can take rich output."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM") != "dumb"


class Out:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.tty = terminal(self.stream)
        self._console: Any = None
        if self.tty:
            from rich.console import Console  # noqa: PLC0415  # imported late: only a terminal needs it, and start-up stays fast

            self._console = Console(file=self.stream, highlight=False)

    def line(self, text: str = "") -> None:
        text = for_terminal(text)  # text from others drives no terminal (kernel.text)
        if self._console is not None:
            self._console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.stream, flush=True)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        cells = [["" if c is None else for_terminal(str(c)) for c in row] for row in rows]
        if self._console is not None:
            from rich.table import Table  # noqa: PLC0415  # imported late: only a terminal needs it, and start-up stays fast
            from rich.text import Text  # noqa: PLC0415  # imported late: only a terminal needs it, and start-up stays fast

            table = Table(title=title, title_justify="left", title_style="bold")
            for name in columns:
                table.add_column(name, overflow="fold")
            for row in cells:
                # Text, not a str: a cell is shown as it is, never read as rich markup
                # ("[bot]" vanished, and "[/x]" raised MarkupError)
                table.add_row(*(Text(cell) for cell in row))
            self._console.print(table)
            return
        self.line(f"{title}:")
        widths = [max([len(name), *(len(r[i]) for r in cells)]) for i, name in enumerate(columns)]
        for row in [list(columns), *cells]:
            padded = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
            self.line(("  " + "  ".join(padded)).rstrip())

    @contextlib.contextmanager
    def progress(self, label: str) -> Iterator[Callable[[str], None]]:
        """A spinner saying ``label`` (then what ``say`` tells it) while the block runs;
        nothing when not on a terminal (the block's own lines are the progress there)."""
        if self._console is None:
            yield lambda text: None
            return
        with self._console.status(label) as status:
            yield lambda text: status.update(f"{label}: {text}")
