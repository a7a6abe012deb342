"""Webhook signatures, webhook headers and rate-limit headers, without I/O."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ghapp.github.sansio import (
    WEBHOOK_HEADERS,
    RateLimit,
    parse_rate_limit,
    parse_webhook_headers,
    sign,
    verify_signature,
)
from tests import paths

VECTOR = json.loads((paths.FIXTURES / "github" / "signature_test_vector.json").read_text())
SECRET = VECTOR["secret"].encode()
BODY = VECTOR["payload"].encode()
GOOD = VECTOR["expected_x_hub_signature_256"]


def test_sign_matches_githubs_documented_vector() -> None:
    assert sign(SECRET, BODY) == GOOD


def test_documented_signature_verifies() -> None:
    assert verify_signature(SECRET, BODY, GOOD)


def test_signature_with_upper_case_hex_or_spaces_still_verifies() -> None:
    assert verify_signature(SECRET, BODY, "  " + GOOD.upper().replace("SHA256=", "sha256=") + " ")


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "sha256=",
        GOOD.removeprefix("sha256="),  # no prefix
        "sha1=" + GOOD.removeprefix("sha256="),
        VECTOR["computed_x_hub_signature_sha1_not_documented"],
        GOOD[:-1],  # one hex digit short
        GOOD + "0",  # one too many
        GOOD[:-1] + ("0" if GOOD[-1] != "0" else "1"),  # last digit changed
        GOOD[:-2] + "zz",  # not hex
        "sha256=" + "é" * 64,
        GOOD[:-2] + " " + GOOD[-1],  # a space inside, length kept
        GOOD[:9] + " " + GOOD[10:],  # the same nearer the start
    ],
)
def test_missing_or_malformed_signature_is_rejected(header: str | None) -> None:
    assert verify_signature(SECRET, BODY, header) is False


def test_signature_of_another_body_is_rejected() -> None:
    assert not verify_signature(SECRET, BODY + b"\n", GOOD)


def test_signature_under_another_secret_is_rejected() -> None:
    assert not verify_signature(b"It's a secret to nobody", BODY, GOOD)


def test_empty_secret_never_verifies() -> None:
    assert not verify_signature(b"", BODY, sign(b"", BODY))


@given(st.binary(), st.binary(min_size=1), st.one_of(st.none(), st.text()))
def test_verify_never_raises_and_accepts_only_its_own_signature(
    body: bytes, secret: bytes, header: str | None
) -> None:
    assert verify_signature(secret, body, sign(secret, body))
    assert verify_signature(secret, body, header) == (
        header is not None and _same(secret, body, header)
    )


def _same(secret: bytes, body: bytes, header: str) -> bool:
    return header.strip().lower() == sign(secret, body)


def test_webhook_headers_are_read_case_insensitively() -> None:
    headers = {
        "x-github-event": "issues",
        "X-GITHUB-DELIVERY": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-Hub-Signature-256": GOOD,
        "X-GitHub-Hook-Installation-Target-Type": "integration",
    }
    parsed = parse_webhook_headers(headers)
    assert parsed.event == "issues"
    assert parsed.delivery == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert parsed.signature == GOOD
    assert parsed.target_type == "integration"
    assert parsed.hook_id is None
    assert "X-GitHub-Event" in WEBHOOK_HEADERS


def test_absent_and_empty_webhook_headers_read_as_none() -> None:
    parsed = parse_webhook_headers({"X-GitHub-Event": ""})
    assert (parsed.event, parsed.delivery, parsed.signature) == (None, None, None)


def test_rate_limit_headers_are_parsed() -> None:
    limit = parse_rate_limit(
        {
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-reset": "1700000100",
            "x-ratelimit-resource": "core",
        }
    )
    assert limit == RateLimit(limit=5000, remaining=0, reset=1700000100, resource="core")
    assert limit.exhausted
    assert limit.wait_s(now=1700000040.0) == 60.0
    assert limit.wait_s(now=1700000200.0) == 0.0  # the window already reset


def test_retry_after_wins_over_the_reset_time() -> None:
    limit = parse_rate_limit(
        {"Retry-After": "30", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "1700009999"}
    )
    assert limit.retry_after == 30.0
    assert limit.wait_s(now=1700000000.0) == 30.0


def test_malformed_rate_limit_headers_count_as_absent() -> None:
    limit = parse_rate_limit(
        {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT", "x-ratelimit-remaining": "lots"}
    )
    assert limit == RateLimit()
    assert limit.wait_s(now=0.0) is None
    assert parse_rate_limit({"retry-after": "-5"}).retry_after is None


def test_remaining_requests_mean_no_wait() -> None:
    limit = parse_rate_limit({"x-ratelimit-remaining": "12", "x-ratelimit-reset": "1700000100"})
    assert not limit.exhausted
    assert limit.wait_s(now=1700000000.0) is None
