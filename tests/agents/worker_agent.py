#!/usr/bin/env python3
"""An agent for the worker tests: logs each run, can hang once, ends with a notice.

Each run appends one JSON line to --log: the turn, its pid, the resume id, and whether
any process of an earlier hung run was still alive when this run started.
With --hang-once FILE, the first run (FILE does not exist yet) writes its pid and its
child's pid to FILE, then sleeps (with the child) far past any test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--log", required=True)
    p.add_argument("--hang-once")
    p.add_argument("prompt", nargs="?", default="")
    args = p.parse_args()
    turn = os.environ.get("AUTOLOOP_TURN", "?")
    earlier: list[int] = []
    if args.hang_once and Path(args.hang_once).exists():
        earlier = [int(x) for x in Path(args.hang_once).read_text().split()]
    line = {
        "turn": turn,
        "pid": os.getpid(),
        "resume": os.environ.get("AUTOLOOP_RESUME", ""),
        "earlier_alive": [pid for pid in earlier if alive(pid)],
        "at": time.time(),
    }
    with open(args.log, "a") as fh:
        fh.write(json.dumps(line) + "\n")
    if args.hang_once and not earlier:
        child = subprocess.Popen(["sleep", "300"])
        Path(args.hang_once).write_text(f"{os.getpid()} {child.pid}")
        time.sleep(300)
    Path(os.environ["AUTOLOOP_REPORT"]).write_text(json.dumps({"session": f"s-{turn}"}))
    notice = {"notice": [{"title": f"done by {turn}"}]}
    print("finished\n```autoloop\n" + json.dumps(notice) + "\n```")
    return 0


sys.exit(main())
