"""The ``autoloop`` command line."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("autoloop: nothing here yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
