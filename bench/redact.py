"""Redaction throughput: ``python bench/redact.py [MB]``.

Builds ~10 MB of mixed text (log lines, JSON, URLs, commit SHAs, prose; about one line in
forty holds a fake secret), then prints MB/s for one ``Redactor.redact`` call over the
whole text, for redacting it line by line (as the log filter does), and for a plain
``str.replace`` pass over the same text as the same-run baseline, with the ratios.
"""

from __future__ import annotations

import random
import string
import sys
import time
from collections.abc import Callable

from ghapp.runtime.redact import Redactor

rng = random.Random(7)
ALNUM = string.ascii_letters + string.digits


def pick(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def sha() -> str:
    return pick("0123456789abcdef", 40)


PLAIN = [
    lambda: (
        f"2026-11-30T15:00:{rng.randrange(60):02d}Z INFO worker: turn t-{rng.randrange(999)} "
        f"claimed {rng.randrange(5)} events for matter acme/web#{rng.randrange(500)}"
    ),
    lambda: f"Merged commit {sha()} into main after checks passed",
    lambda: (
        f'{{"sha": "{sha()}", "state": "success", "tokens_used": {rng.randrange(9999)}, '
        '"cost_usd": 0.12}'
    ),
    lambda: "GET https://api.github.com/repos/acme/web/pulls?state=open&per_page=100 200",
    lambda: "The agent read the issue body and wrote a reply about the password reset page.",
    lambda: " ".join(pick(string.ascii_lowercase, rng.randrange(2, 10)) for _ in range(12)),
    lambda: f"    at ghapp/worker.py:{rng.randrange(400)} in run_turn ({pick(ALNUM, 8)})",
]
SECRET = [
    lambda: f"export GITHUB_TOKEN=ghp_{pick(ALNUM, 36)}",
    lambda: f"Authorization: Bearer {pick(ALNUM, 40)}",
    lambda: f'{{"password": "{pick(ALNUM, 20)}", "user": "app"}}',
    lambda: f"postgresql://app:{pick(ALNUM, 20)}@db.internal/app",
    lambda: f"AKIA{pick(string.ascii_uppercase, 16)} in the history",
    lambda: f"the shop key is {SHOP_KEY} today",
]
SHOP_KEY = pick(ALNUM, 32)


def build(megabytes: float) -> str:
    lines, size = [], 0
    while size < megabytes * 1_000_000:
        make = rng.choice(SECRET) if rng.random() < 0.025 else rng.choice(PLAIN)
        line = make()
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def rate(label: str, megabytes: float, run: Callable[[], object], repeat: int = 3) -> float:
    best = min(_timed(run) for _ in range(repeat))
    speed = megabytes / best
    print(f"{label:<44} {speed:10.1f} MB/s  ({best * 1000:.0f} ms)")
    return speed


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    text = build(megabytes)
    size = len(text.encode()) / 1_000_000
    lines = text.splitlines(keepends=True)
    redactor = Redactor([SHOP_KEY, pick(ALNUM, 40), pick(ALNUM, 24)])
    out = redactor.redact(text)
    assert SHOP_KEY not in out and "ghp_" not in out
    print(f"text: {size:.1f} MB, {len(lines)} lines, {out.count('[REDACTED:')} secrets masked")
    whole = rate("Redactor.redact, whole text", size, lambda: redactor.redact(text))
    per_line = rate(
        "Redactor.redact, line by line", size, lambda: [redactor.redact(x) for x in lines]
    )
    base = rate("baseline: str.replace of one literal", size, lambda: text.replace(SHOP_KEY, "x"))
    print(f"ratio str.replace / redact (whole text): {base / whole:.0f}x")
    print(f"ratio str.replace / redact (line by line): {base / per_line:.0f}x")


if __name__ == "__main__":
    main()
