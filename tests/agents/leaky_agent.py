#!/usr/bin/env python3
"""An agent that spills secrets everywhere it can, for the redaction end-to-end test.

It reads the fake-secrets corpus (``--corpus DIR``) and the value of ``SHOP_TOKEN``:

- first run: writes secrets to its report file and to a scratch file in its turn
  folder, prints files on stdout and stderr, and fails with a token in its last line;
- the retry: prints every corpus file, then a receipt whose notice, question, emitted
  event and comment body all carry secrets;
- after the answer: a notice whose text carries the literal secret value.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

PROSE_FILES = (
    "app.env",
    "config.json",
    "config.yaml",
    "settings.ini",
    "shell_history.sh",
    "urls.txt",
    "http_headers.txt",
    "cli_output.txt",
    "private_keys.pem",
    "escaped_pem.json",
    "base64_wrapped.txt",
    "literal_values.txt",
)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--corpus", required=True)
    p.add_argument("prompt", nargs="?", default="")
    args = p.parse_args()
    corpus = Path(args.corpus)
    files = {name: (corpus / name).read_text() for name in PROSE_FILES}
    token = os.environ.get("SHOP_TOKEN", "")
    turn_dir = Path(os.environ["AUTOLOOP_TURN_DIR"])
    ctx = json.loads(Path(os.environ["AUTOLOOP_CONTEXT"]).read_text())
    kinds = [e["type"] for e in ctx.get("events", [])]
    report = Path(os.environ["AUTOLOOP_REPORT"])
    if ctx.get("turn") == "t1":
        report.write_text(json.dumps({"session": "leaky-1", "note": files["cli_output.txt"]}))
        (turn_dir / "scratch.txt").write_text(files["private_keys.pem"] + token)
        print(files["http_headers.txt"])
        print(files["app.env"], file=sys.stderr)
        print(f"fatal: the shop refused SHOP_TOKEN={token}", file=sys.stderr)
        return 1
    report.write_text(json.dumps({"session": "leaky-1", "tokens": 10}))
    if "card.answered" in kinds:
        block = {"notice": [{"title": "Rotated", "text": f"new token is {token}"}]}
        print("rotated\n```autoloop\n" + json.dumps(block) + "\n```")
        return 0
    for name, text in files.items():
        print(f"## {name}\n{text}")
    block = {
        "notice": [{"title": "Leaked key", "text": files["app.env"]}],
        "ask": [
            {
                "key": "rotate",
                "title": "Rotate the keys?",
                "text": files["settings.ini"] + "\n" + token,
                "options": ["yes", "no"],
            }
        ],
        "events": [
            {
                "type": "leak.found",
                "summary": f"SHOP_TOKEN={token}",
                "details": {"config": files["config.yaml"], "token": token},
            }
        ],
        "actions": [
            {"do": "github.comment", "repo": "acme/web", "number": 42, "body": files["urls.txt"]}
        ],
    }
    print("```autoloop\n" + json.dumps(block) + "\n```")
    return 0


sys.exit(main())
