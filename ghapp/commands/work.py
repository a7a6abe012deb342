"""``autoloop work [--name W]``: a worker only, claiming turns from the shared ledger.

It opens the home, starts one :class:`~ghapp.runtime.worker.WorkerLoop` and runs until
SIGTERM or SIGINT. Workers on several machines share one ledger (``AUTOLOOP_DB``);
``--name`` picks the turns whose agent names this worker.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from ghapp.commands.argtypes import poll_seconds, stop_wait_seconds, turns_at_once, worker_name
from ghapp.commands.home import (
    Home,
    configure_logs,
    home_from_env,
    read_master_key,
    require_home,
    reset_logs,
)
from ghapp.commands.home_ledger import db_url
from ghapp.runtime.signals import wait_awake
from ghapp.runtime.worker import WorkerLoop, second_stop, wait_for_turns
from ghapp.store.base import StoreError
from ghapp.store.sqlite import SqliteStore, refuse_damaged
from kernel.errors import ConfigError

log = logging.getLogger("autoloop.worker")


WORK_HELP = """An agent's "worker" in rules.json picks where its turns run: "any" (the default),
on any 'autoloop serve' or 'autoloop work'; a name, only on 'autoloop work --name NAME'
(the machine with the checkout, the GPU or the agent's login).

The ledger is AUTOLOOP_DB's (PostgreSQL: one ledger shared by 'autoloop serve' and
every worker), else the home's ledger.db (AUTOLOOP_HOME). It runs until SIGTERM or
Ctrl-C."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="autoloop work",
        description="A worker only: claims turns from the shared ledger.",
        epilog=WORK_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--name",
        type=worker_name,
        default="local",
        help="this worker's name (default local): it runs the turns of agents whose "
        '"worker" is this name or "any"',
    )
    p.add_argument(
        "--parallel", type=turns_at_once, default=None, help="turns at once (max_parallel)"
    )
    p.add_argument(
        "--poll", type=poll_seconds, default=1.0, help="seconds between looks at the ledger"
    )
    p.add_argument(
        "--stop-wait",
        type=stop_wait_seconds,
        default=None,
        metavar="SECONDS",
        help="seconds a stop (SIGTERM, Ctrl-C) waits for the running turns before it "
        "stops them (their ends recorded: they run again at the next start); default: "
        "until they end. Give less than the service manager's stop timeout",
    )
    return p


def main(argv: list[str]) -> int:
    """``autoloop work [--name W]``: a worker only, claiming turns from the shared ledger."""
    args = build_parser().parse_args(argv)
    try:
        env = dict(os.environ)
        home = home_from_env(env)
        require_home(home, env)
        refuse_damaged(db_url(env, home))
        ctx = Home.open(env=env, home=home)
        rules = ctx.rules()
        configure_logs(ctx)
        hub = ctx.hub()
        said: list[str] = []
        if not isinstance(ctx.store, SqliteStore):  # replicas of a shared ledger
            from ghapp.commands.doctor import OTHER_KEY, other_rules  # noqa: PLC0415  # only then
            from ghapp.runtime.links import LINKS_KEY_INFO, key_fingerprint  # noqa: PLC0415  # (as above)
            from ghapp.runtime.settings import SettingsError  # noqa: PLC0415  # (as above)

            if rules_said := other_rules(ctx.store, rules.version):
                said.append(f"{rules_said} (after a change of rules.json, said once)")
            # the servers' key (a worker signs no link, but ids that held a secret are
            # recorded keyed with it: two keys record one such id twice); read only: the
            # servers name it. A home without a usable key has no digest key either, and
            # the worker runs as before (doctor says what is wrong with the key).
            try:
                mine = key_fingerprint(read_master_key(home))
            except SettingsError:
                mine = ""
            with ctx.store.read() as tx:
                theirs = tx.read_info(LINKS_KEY_INFO)
            if mine and theirs not in (None, mine):
                said.append(OTHER_KEY)
    except (ConfigError, StoreError) as exc:
        print(f"autoloop work: {exc}", file=sys.stderr)
        return 2
    for line in said:
        print(f"autoloop work: {line}", flush=True)
    loop = WorkerLoop(
        hub, name=args.name, max_parallel=args.parallel or rules.max_parallel, poll_s=args.poll
    )
    stop = threading.Event()

    def _term(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # (nohup: kept ignored)
        signal.signal(signal.SIGHUP, _term)  # a closed terminal: a stop, not a sudden death
    print(f"autoloop work: worker {args.name!r} started", flush=True)
    log.info("worker %r started (pid %d)", args.name, os.getpid())
    loop.start()
    code = 0
    try:
        wait_awake(stop)  # (not stop.wait(): see ghapp.runtime.signals)
        now = second_stop()  # a second signal from here on stops the turns at once
        loop.stop()
        # As serve does: say which turns it waits for, and a second signal stops them now
        # (it said "stopped" and went on for up to the rule's timeout_s, deaf to signals).
        code = wait_for_turns(loop, args.stop_wait, now=now)
        log.info("worker %r stopped", args.name)
    finally:
        reset_logs()
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the turn threads hold the interpreter's exit: not waited for
    return 0
