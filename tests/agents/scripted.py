#!/usr/bin/env python3
"""A scripted agent for the CLI tests: behaves as --mode says, logs what it was given.

Every run appends one JSON line to --log: argv, the AUTOLOOP_* environment, the context
and the names of all other environment variables it could see.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def block(obj: object) -> str:
    return "```autoloop\n" + json.dumps(obj) + "\n```"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--gate", help="wait until this file exists (at most 60 s)")
    p.add_argument("prompt", nargs="?", default="")
    args = p.parse_args()
    ctx_path = os.environ.get("AUTOLOOP_CONTEXT", "")
    ctx = json.loads(Path(ctx_path).read_text()) if ctx_path else {}
    resume = os.environ.get("AUTOLOOP_RESUME", "")
    session = resume or "sess-" + os.environ.get("AUTOLOOP_TURN", "x")
    with open(args.log, "a") as fh:
        fh.write(
            json.dumps(
                {
                    "argv": sys.argv,
                    "env": {k: v for k, v in os.environ.items() if k.startswith("AUTOLOOP_")},
                    "env_names": sorted(os.environ),
                    "context": ctx,
                    "cwd": os.getcwd(),
                    "pid": os.getpid(),
                }
            )
            + "\n"
        )
    report = os.environ.get("AUTOLOOP_REPORT")
    if report:
        Path(report).write_text(json.dumps({"session": session, "tokens": 10}))
    if args.sleep:
        time.sleep(args.sleep)
    if args.gate and not ctx.get("events", [{}])[0].get("seq", 0) > 1:
        deadline = time.monotonic() + 60
        while not Path(args.gate).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    types = [e["type"] for e in ctx.get("events", [])]
    mode = args.mode
    if mode == "ask":
        if "card.answered" in types:
            print("resumed with the answer\n" + block({"notice": [{"title": "finished"}]}))
        else:
            print(
                "need a decision\n"
                + block({"ask": [{"key": "pick", "title": "Pick one", "options": ["a", "b", "c"]}]})
            )
    elif mode == "loop":
        print(block({"events": [{"type": "loop"}]}))
    elif mode == "fan":  # three events, each a subject of its own (a parallel rule's matter)
        turn = os.environ.get("AUTOLOOP_TURN", "x")
        print(block({"events": [{"type": "loop", "subject": f"{turn}.{i}"} for i in range(3)]}))
    elif mode == "malformed":
        if ctx.get("repair"):
            print(block({"notice": [{"title": "repaired"}]}))
        else:
            print(block({"ask": [{"key": "k", "title": "only one option", "options": ["x"]}]}))
    elif mode == "silent":
        print("no receipt at all")
    elif mode == "later":
        if "timer.fired" in types:
            print(block({"notice": [{"title": "re-checked"}]}))
        else:
            print(block({"later": [{"in": "30m", "why": "re-check"}]}))
    else:
        print("ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
