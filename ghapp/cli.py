"""The ``autoloop`` command line.

Exit codes: 0 success, 1 failure of what was asked, 2 bad usage or configuration;
every failure prints one line on stderr that says what to do.

Subcommands that live in their own modules are dispatched lazily, so that
``autoloop status`` never imports the HTTP server.
"""

from __future__ import annotations

import importlib
import sys

# name -> "module:function"; each function takes the remaining argv and returns an exit code.
EXTERNAL: dict[str, str] = {
    "sandbox": "ghapp.sandbox.cli:main",
}

USAGE = "usage: autoloop {" + ",".join(sorted(EXTERNAL)) + "} ..."


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(USAGE)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    target = EXTERNAL.get(name)
    if target is None:
        print(f"autoloop: unknown command {name!r}; run 'autoloop --help'", file=sys.stderr)
        return 2
    module, func = target.split(":")
    entry = getattr(importlib.import_module(module), func)
    code: int = entry(rest)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
