"""Authentication as GitHub does it: App JWTs, installation tokens, personal tokens.

* An App JWT is RS256-signed with the App's private key; ``iss`` is the App id, ``iat`` may
  not lie in the future (beyond a small clock skew) and ``exp`` must lie in the future and
  no more than 10 minutes after ``iat`` (GitHub's documented limits). Refusals are 401
  with GitHub's messages.
* ``POST /app/installations/{id}/access_tokens`` exchanges a JWT for an installation token
  (``ghs_...``) that expires after ``token_lifetime`` (1 hour, as on GitHub) and may be
  narrowed to some repositories and permissions.
* Personal tokens (``ghp_...``) are minted by the control API for a named user, so that
  scripted people act as themselves.
* A workflow's ``GITHUB_TOKEN`` is an installation token of the GitHub Actions app for
  one repository, with the permissions the workflow asked for (``mint_actions_token``);
  it acts as ``github-actions[bot]``.
* An unknown or expired token gets 401 "Bad credentials".
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from fakegithub.errors import ApiError
from fakegithub.model import App, Installation, Repo, level_at_least
from fakegithub.state import Actor, State

JWT_UNDECODABLE = "A JSON web token could not be decoded"
JWT_EXPIRED = (
    "'Expiration time' claim ('exp') must be a numeric value representing the future time "
    "at which the assertion expires"
)
JWT_TOO_LONG = "'Expiration time' claim ('exp') is too far in the future"
JWT_IAT = (
    "'Issued at' claim ('iat') must be an Integer representing the time that the assertion "
    "was issued"
)
JWT_ISSUER = "'Issuer' claim ('iss') must be an Integer"
BAD_CREDENTIALS = "Bad credentials"
NOT_FOR_INTEGRATION = "Resource not accessible by integration"
MAX_JWT_LIFETIME = 600
CLOCK_SKEW = 60


@dataclass(slots=True)
class Token:
    value: str
    kind: str  # "installation" or "user"
    login: str
    expires_at: datetime | None
    app_id: int | None = None
    installation_id: int | None = None
    permissions: dict[str, str] = field(default_factory=dict)
    repo_ids: list[int] = field(default_factory=list)
    repository_selection: str = "all"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is from: ``kind`` is "app" (JWT), "installation" or "user"."""

    kind: str
    login: str
    app_id: int | None = None
    installation_id: int | None = None
    permissions: dict[str, str] = field(default_factory=dict)
    repo_ids: tuple[int, ...] = ()

    @property
    def actor(self) -> Actor:
        return Actor(self.login, self.app_id, self.installation_id)


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, message)


class Auth:
    def __init__(self, state: State, *, token_lifetime: timedelta = timedelta(hours=1)) -> None:
        self.state = state
        self.token_lifetime = token_lifetime
        self.tokens: dict[str, Token] = {}

    # -- minting -------------------------------------------------------------------------

    def mint_installation_token(
        self,
        app: App,
        installation: Installation,
        *,
        permissions: dict[str, str] | None = None,
        repositories: list[str] | None = None,
        repository_ids: list[int] | None = None,
    ) -> Token:
        granted = dict(installation.permissions)
        if permissions is not None:
            for name, level in permissions.items():
                have = granted.get(name)
                if (
                    have is None
                    or (level == "write" and have != "write")
                    or level
                    not in {
                        "read",
                        "write",
                        "admin",
                    }
                ):
                    raise ApiError(
                        422, "The permissions requested are not granted to this installation."
                    )
            granted = dict(permissions)
        repo_ids = list(installation.repo_ids)
        selection = "all"
        if repositories is not None or repository_ids is not None:
            chosen: list[int] = list(repository_ids or [])
            for name in repositories or []:
                found = next(
                    (
                        self.state.repo_by_id(rid)
                        for rid in installation.repo_ids
                        if self.state.repo_by_id(rid).name == name
                    ),
                    None,
                )
                if found is None:
                    raise ApiError(
                        422,
                        f"There is at least one repository that does not exist or is "
                        f"not accessible to the parent installation: {name}",
                    )
                chosen.append(found.id)
            for rid in chosen:
                if rid not in installation.repo_ids:
                    raise ApiError(
                        422,
                        "There is at least one repository that does not exist or is not "
                        "accessible to the parent installation.",
                    )
            repo_ids, selection = chosen, "selected"
        token = Token(
            value="ghs_" + secrets.token_urlsafe(27)[:36],
            kind="installation",
            login=app.bot.login,
            expires_at=self.state.now() + self.token_lifetime,
            app_id=app.id,
            installation_id=installation.id,
            permissions=granted,
            repo_ids=repo_ids,
            repository_selection=selection,
        )
        self.tokens[token.value] = token
        return token

    def mint_actions_token(
        self, app: App, repo: Repo, *, permissions: dict[str, str], lifetime: timedelta
    ) -> Token:
        """A workflow run's token: the Actions app's, for ``repo`` alone."""
        for name, level in permissions.items():
            if level not in {"read", "write"}:
                raise ApiError(422, f"Invalid permission level {level!r} for {name!r}")
        token = Token(
            value="ghs_" + secrets.token_urlsafe(27)[:36],
            kind="installation",
            login=app.bot.login,
            expires_at=self.state.now() + lifetime,
            app_id=app.id,
            permissions=dict(permissions),
            repo_ids=[repo.id],
            repository_selection="selected",
        )
        self.tokens[token.value] = token
        return token

    def mint_user_token(self, login: str, *, lifetime: timedelta | None = None) -> Token:
        self.state.user(login)
        expires = self.state.now() + lifetime if lifetime is not None else None
        token = Token("ghp_" + secrets.token_urlsafe(27)[:36], "user", login, expires)
        self.tokens[token.value] = token
        return token

    # -- checking ------------------------------------------------------------------------

    def authenticate(self, header: str | None) -> Principal | None:
        """The principal behind an ``Authorization`` header; None when there is none."""
        if not header:
            return None
        scheme, _, credential = header.strip().partition(" ")
        credential = credential.strip()
        if scheme.lower() not in {"bearer", "token"} or not credential:
            raise _unauthorized(BAD_CREDENTIALS)
        if credential.count(".") == 2 and not credential.startswith(("ghs_", "ghp_")):
            found_app = self.verify_jwt(credential)
            return Principal("app", found_app.bot.login, app_id=found_app.id)
        token = self.tokens.get(credential)
        if token is None or (token.expires_at is not None and token.expires_at <= self.state.now()):
            raise _unauthorized(BAD_CREDENTIALS)
        return Principal(
            token.kind,
            token.login,
            app_id=token.app_id,
            installation_id=token.installation_id,
            permissions=dict(token.permissions),
            repo_ids=tuple(token.repo_ids),
        )

    def verify_jwt(self, raw: str) -> App:
        try:
            claims: dict[str, Any] = jwt.decode(raw, options={"verify_signature": False})
            header = jwt.get_unverified_header(raw)
        except jwt.PyJWTError as exc:
            raise _unauthorized(JWT_UNDECODABLE) from exc
        if header.get("alg") != "RS256":
            raise _unauthorized(JWT_UNDECODABLE)
        try:
            app_id = int(claims.get("iss"))  # type: ignore[arg-type]  # checked by the except
        except (TypeError, ValueError) as exc:
            raise _unauthorized(JWT_ISSUER) from exc
        found = self.state.apps.get(app_id)
        if found is None:
            raise _unauthorized(JWT_UNDECODABLE)
        key = load_pem_public_key(found.public_key_pem)
        assert isinstance(key, RSAPublicKey)  # noqa: S101  # the sandbox only makes RSA keys
        try:
            jwt.decode(
                raw,
                key,
                algorithms=["RS256"],
                options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
            )
        except jwt.PyJWTError as exc:
            raise _unauthorized(JWT_UNDECODABLE) from exc
        now = self.state.now().timestamp()
        iat, exp = claims.get("iat"), claims.get("exp")
        if not isinstance(iat, int | float) or iat > now + CLOCK_SKEW:
            raise _unauthorized(JWT_IAT)
        if not isinstance(exp, int | float) or exp <= now:
            raise _unauthorized(JWT_EXPIRED)
        if exp - iat > MAX_JWT_LIFETIME or exp > now + MAX_JWT_LIFETIME + CLOCK_SKEW:
            raise _unauthorized(JWT_TOO_LONG)
        return found


def authorize_repo(
    principal: Principal | None,
    repo: Repo,
    *,
    perms: tuple[str, ...],
    level: str,
    user_level: str,
) -> None:
    """Refuses as GitHub does when ``principal`` may not do this on ``repo``."""
    if principal is None:
        if repo.private:
            raise ApiError(404, "Not Found")
        if level != "read":
            raise ApiError(401, "Requires authentication")
        return
    if principal.kind == "app":
        raise ApiError(403, NOT_FOR_INTEGRATION)
    if principal.kind == "installation":
        if repo.id not in principal.repo_ids:
            raise ApiError(404, "Not Found")
        if perms and not any(
            principal.permissions.get(p)
            in ({"read", "write", "admin"} if level == "read" else {"write", "admin"})
            for p in perms
        ):
            raise ApiError(403, NOT_FOR_INTEGRATION)
        return
    have = repo.collaborators.get(principal.login, "none")
    if have == "none" and repo.private:
        raise ApiError(404, "Not Found")
    if not level_at_least(have, user_level):
        raise ApiError(403, "Must have push access to this repository.")
