"""App JWTs and installation tokens: right claims, cached, renewed before they expire."""

from __future__ import annotations

import functools
import threading
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ghapp.github.auth import (
    AppJWT,
    InstallationToken,
    InstallationTokens,
    RepoInstallations,
    app_jwt,
    parse_installation_token,
)

NOW = 1_700_000_000.0


@functools.cache
def keypair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_app_jwt_has_githubs_claims_and_verifies_with_the_public_key() -> None:
    private, public = keypair()
    token = app_jwt(4242, private, now=NOW)
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    claims = jwt.decode(token, public, algorithms=["RS256"], options={"verify_exp": False})
    assert claims == {"iss": "4242", "iat": int(NOW) - 60, "exp": int(NOW) + 540}


def test_app_jwt_signed_by_another_key_does_not_verify() -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(app_jwt(1, pem, now=NOW), keypair()[1], algorithms=["RS256"])


def test_app_jwt_is_reused_until_a_minute_before_it_expires() -> None:
    clock = Clock()
    maker = AppJWT(7, keypair()[0], now=clock)
    first = maker.token()
    clock.t += 7 * 60  # two of its nine minutes left
    assert maker.token() == first
    clock.t += 60 + 1  # less than a minute left
    second = maker.token()
    assert second != first
    claims = jwt.decode(second, keypair()[1], algorithms=["RS256"], options={"verify_exp": False})
    assert claims["iat"] == int(clock.t) - 60


def test_access_token_answer_is_parsed() -> None:
    tok = parse_installation_token(
        {
            "token": "ghs_abc",
            "expires_at": "2023-11-14T23:13:20Z",
            "permissions": {"issues": "write"},
        }
    )
    assert tok == InstallationToken(
        token="ghs_abc", expires_at=1_700_003_600.0, permissions={"issues": "write"}
    )


@pytest.mark.parametrize(
    "data",
    [{}, {"token": "t"}, {"token": "", "expires_at": "2023-11-14T23:13:20Z"},
     {"token": "t", "expires_at": "2023-11-14T23:13:20"}],
)  # fmt: skip
def test_a_bad_access_token_answer_is_refused(data: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"expires_at|time zone"):
        parse_installation_token(data)


class Exchange:
    def __init__(self, clock: Clock, life_s: float = 3600.0) -> None:
        self.clock = clock
        self.life_s = life_s
        self.calls: list[int] = []

    def __call__(self, installation_id: int) -> InstallationToken:
        self.calls.append(installation_id)
        n = len(self.calls)
        return InstallationToken(
            token=f"tok-{installation_id}-{n}", expires_at=self.clock.t + self.life_s
        )


def test_installation_token_is_cached_until_five_minutes_before_expiry() -> None:
    clock = Clock()
    exchange = Exchange(clock)
    tokens = InstallationTokens(exchange, now=clock)
    assert tokens.get(9) == "tok-9-1"
    clock.t += 3600 - 301
    assert tokens.get(9) == "tok-9-1"
    assert exchange.calls == [9]
    clock.t += 2  # now inside the last five minutes
    assert tokens.get(9) == "tok-9-2"
    assert exchange.calls == [9, 9]


def test_each_installation_has_its_own_token() -> None:
    clock = Clock()
    exchange = Exchange(clock)
    tokens = InstallationTokens(exchange, now=clock)
    assert (tokens.get(1), tokens.get(2), tokens.get(1)) == ("tok-1-1", "tok-2-2", "tok-1-1")


def test_an_invalidated_token_is_fetched_again() -> None:
    clock = Clock()
    exchange = Exchange(clock)
    tokens = InstallationTokens(exchange, now=clock)
    tokens.get(3)
    tokens.invalidate(3)
    assert tokens.get(3) == "tok-3-2"


def test_threads_needing_the_same_token_make_one_exchange() -> None:
    clock = Clock()
    gate = threading.Event()
    calls: list[int] = []

    def slow_exchange(installation_id: int) -> InstallationToken:
        calls.append(installation_id)
        gate.wait(timeout=5)
        return InstallationToken(token="shared", expires_at=clock.t + 3600)

    tokens = InstallationTokens(slow_exchange, now=clock)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(tokens.get(5))) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.001)
    gate.set()
    for t in threads:
        t.join(timeout=5)
    assert results == ["shared"] * 8
    assert calls == [5]


def test_a_failed_exchange_is_not_cached() -> None:
    clock = Clock()
    attempts: list[int] = []

    def flaky(installation_id: int) -> InstallationToken:
        attempts.append(installation_id)
        if len(attempts) == 1:
            raise RuntimeError("network down")
        return InstallationToken(token="ok", expires_at=clock.t + 3600)

    tokens = InstallationTokens(flaky, now=clock)
    with pytest.raises(RuntimeError):
        tokens.get(1)
    assert tokens.get(1) == "ok"


def test_repo_installation_is_looked_up_once_per_repo_ignoring_case() -> None:
    seen: list[str] = []

    def lookup(repo: str) -> int:
        seen.append(repo)
        return 100 + len(seen)

    installs = RepoInstallations(lookup)
    assert installs.get("acme/web") == 101
    assert installs.get("ACME/Web") == 101
    assert installs.get("acme/api") == 102
    installs.invalidate("acme/web")
    assert installs.get("acme/web") == 103
    assert seen == ["acme/web", "acme/api", "acme/web"]


def test_app_jwt_is_minted_again_when_the_clock_is_set_back() -> None:
    # Found by the whole-system simulation: a clock that ran hours ahead and was set right
    # kept sending the JWT minted while it was ahead, which GitHub refuses as issued in the
    # future, for as many hours as the clock had been ahead.
    clock = Clock()
    maker = AppJWT(7, keypair()[0], now=clock)
    clock.t += 4 * 3600  # the host's clock jumps ahead
    ahead = maker.token()
    clock.t -= 4 * 3600  # and is set right again
    now = maker.token()
    assert now != ahead
    claims = jwt.decode(now, keypair()[1], algorithms=["RS256"], options={"verify_exp": False})
    assert claims["iat"] == int(NOW) - 60


def test_an_invalidated_app_jwt_is_minted_again() -> None:
    clock = Clock()
    maker = AppJWT(7, keypair()[0], now=clock)
    first = maker.token()
    clock.t += 1
    assert maker.token() == first
    maker.invalidate()
    assert maker.token() != first
