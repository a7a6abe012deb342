"""The live-version probe of a delivery: what the deployed service says it runs.

:func:`probe_version` carries out the pipeline's ``ProbeVersion``: one GET of the
policy's ``version_url`` with a short timeout, one field of its JSON answer, and whether
the commit it names is the merge commit or a descendant (GitHub's compare of
``merge...reported`` is ``identical`` or ``ahead``). Every failure is an answer, not an
exception: an observation without a sha, saying why, which the pipeline neither counts
nor lets break a streak.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from ghapp.github.client import GitHubClient
from ghapp.github.errors import GitHubError
from ghapp.github.readcache import CONTAINS, DEFAULT_CACHE, ReadCache
from kernel.durations import iso
from pipeline.snapshot import VersionObservation

__all__ = ["MAX_BODY", "PROBE_TIMEOUT_S", "compare_with", "probe_version", "read_field"]

PROBE_TIMEOUT_S = 5.0
MAX_BODY = 1 << 20  # a version answer larger than 1 MiB is not one

Compare = Callable[[str, str], str]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def compare_with(client: GitHubClient, repo: str, cache: ReadCache | None = None) -> Compare:
    """``compare(base, head)``: GitHub's compare status of two commits of ``repo``
    (identical, ahead, behind, diverged; "" for a commit GitHub does not know)."""
    found = cache or DEFAULT_CACHE
    return lambda base, head: found.compare_status(client, repo, base, head)


def read_field(data: object, field: str) -> object:
    """``data[field]``, or for a dotted ``field`` the nested value (``build.sha``)."""
    if isinstance(data, Mapping) and field in data:
        return data[field]
    value: object = data
    for part in field.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def probe_version(
    http: httpx.Client,
    url: str,
    field: str,
    merge_sha: str,
    attempt: int,
    *,
    compare: Compare,
    now: Callable[[], datetime] = _utc_now,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> VersionObservation:
    """GET ``url`` and report what its ``field`` says, as the answer to probe ``attempt``."""

    def failed(why: str) -> VersionObservation:
        return VersionObservation(
            attempt=attempt, at=iso(now()), sha=None, matches=False, error=why
        )

    try:
        data = _get_json(http, url, timeout_s)
    except _NoAnswer as exc:
        return failed(str(exc))
    value = read_field(data, field)
    if not isinstance(value, str) or not value.strip():
        return failed(f"the answer has no text field {field!r}")
    reported = value.strip()
    try:
        status = compare(merge_sha, reported)
    except GitHubError as exc:
        return failed(f"could not compare {reported} with {merge_sha}: {exc}")
    return VersionObservation(
        attempt=attempt, at=iso(now()), sha=reported, matches=status in CONTAINS
    )


class _NoAnswer(Exception):
    """Internal: why the GET gave no JSON answer."""


def _get_json(http: httpx.Client, url: str, timeout_s: float) -> Any:
    try:
        with http.stream(
            "GET", url, timeout=timeout_s, headers={"Accept": "application/json"}
        ) as response:
            if response.status_code >= 400:
                raise _NoAnswer(f"HTTP {response.status_code} from {url}")
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BODY:
                    raise _NoAnswer(f"the answer from {url} is larger than {MAX_BODY} bytes")
    except httpx.TimeoutException as exc:
        raise _NoAnswer(f"no answer from {url} within {timeout_s:g}s") from exc
    except httpx.HTTPError as exc:
        raise _NoAnswer(f"no answer from {url} ({type(exc).__name__}: {exc})") from exc
    try:
        return json.loads(body)
    except ValueError as exc:
        raise _NoAnswer(f"the answer from {url} is not JSON") from exc
