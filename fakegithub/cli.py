"""``autoloop sandbox``: run the sandbox GitHub alone until SIGINT or SIGTERM.

Prints one JSON line on stdout once it is listening (the private key's file is removed
when it stops)::

    {"api_url": ..., "control_url": ..., "app_id": ..., "private_key": "<PEM file, mode 0600>",
     "webhook_secret": ..., "installation_id": ..., "repo": "sandbox/demo"}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from fakegithub.keys import KeyInTheMaking


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoloop sandbox",
        description="Run a local GitHub (REST API, webhooks, scripted people/CI/deploys).",
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--app-url", default=None, help="where the App's webhooks are POSTed")
    parser.add_argument(
        "--key-dir",
        default=None,
        help="folder for the App's private key (default: a new temp folder)",
    )
    return parser


def main(argv: list[str]) -> int:
    key = KeyInTheMaking()  # overlaps with importing the server
    from fakegithub.sandbox import Sandbox  # noqa: PLC0415  # imported after the key started
    from fakegithub.server import (  # noqa: PLC0415  # imported after the key started
        create_app,
        free_port,
        serve_in_thread,
        write_private_key,
    )

    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    if not 0 <= args.port <= 65535:
        print("autoloop sandbox: --port must be 0..65535", file=sys.stderr)
        return 2
    port = args.port or free_port(args.host)
    api_url = f"http://{args.host}:{port}"
    folder = Path(args.key_dir or tempfile.mkdtemp(prefix="autoloop-sandbox-"))
    folder.mkdir(parents=True, exist_ok=True)
    sandbox = Sandbox(app_url=args.app_url, base_url=api_url, key=key.get())
    key_path = write_private_key(sandbox.private_key_pem, folder)
    try:
        sandbox.start()
        try:
            server, thread = serve_in_thread(create_app(sandbox), args.host, port)
        except (RuntimeError, OSError) as exc:
            sandbox.stop()
            print(f"autoloop sandbox: {exc}; choose another --port", file=sys.stderr)
            return 1
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        line = {
            "api_url": api_url,
            "control_url": f"{api_url}/_sandbox",
            "app_id": sandbox.app.id,
            "private_key": str(key_path),
            "webhook_secret": sandbox.app.webhook_secret,
            "installation_id": sandbox.installation_id,
            "repo": sandbox.repo,
        }
        print(json.dumps(line), flush=True)
        while not stop.wait(0.5):
            if not thread.is_alive():
                break
        server.should_exit = True
        thread.join(timeout=10)
        sandbox.stop()
        return 0
    finally:
        # The key is the sandbox's and dies with it: a stopped sandbox left a private key
        # in the temporary folder after every run (and the folder, when made here).
        key_path.unlink(missing_ok=True)
        if args.key_dir is None:
            with contextlib.suppress(OSError):
                folder.rmdir()
