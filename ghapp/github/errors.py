"""The errors of calls to GitHub: one tree, with data on each exception.

They mean "the outside world misbehaved"; misuse of :mod:`ghapp.github.retry` is a
``TypeError``. :func:`ghapp.github.retry.error_for` turns an error answer into one of
them, and :mod:`ghapp.github.retry` and :mod:`ghapp.github.client` re-export them::

    GitHubError (status, message, documentation_url, method, url)
    ├── Unauthorized    401
    ├── Forbidden       403 that is not a rate limit
    ├── NotFound        404
    ├── Conflict        409
    ├── Unprocessable   422
    ├── RateLimited     429, or 403 with rate-limit headers (retry_after_s)
    ├── ServerError     5xx on a read, after the retries
    ├── Unreachable     no answer to a read, after the retries (cause)
    ├── AmbiguousWrite  a write with no answer or a 5xx answer (cause)
    └── GraphQLError    a GraphQL answer carrying ``errors`` (errors, type)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "REFUSED_PERMISSION",
    "AmbiguousWrite",
    "Conflict",
    "Forbidden",
    "GitHubError",
    "GraphQLError",
    "NotFound",
    "RateLimited",
    "ServerError",
    "Unauthorized",
    "Unprocessable",
    "Unreachable",
]


class GitHubError(Exception):
    """GitHub answered with an error, or did not answer."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        documentation_url: str | None = None,
        method: str = "",
        url: str = "",
    ) -> None:
        self.message = message
        self.status = status
        self.documentation_url = documentation_url
        self.method = method
        self.url = url
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.method} {self.url}".strip()
        status = f"{self.status} " if self.status is not None else ""
        said = f"{where}: {status}{self.message}" if where else f"{status}{self.message}"
        return said + permission_hint(self)  # wherever it is shown or stored


class Unauthorized(GitHubError):
    pass


class Forbidden(GitHubError):
    pass


class NotFound(GitHubError):
    pass


class Conflict(GitHubError):
    pass


class Unprocessable(GitHubError):
    pass


class ServerError(GitHubError):
    pass


class RateLimited(GitHubError):
    def __init__(self, message: str, *, retry_after_s: float, **kw: Any) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, **kw)


class Unreachable(GitHubError):
    def __init__(self, message: str, *, cause: BaseException | None = None, **kw: Any) -> None:
        self.cause = cause
        super().__init__(message, **kw)


class AmbiguousWrite(GitHubError):
    """A write may or may not have been applied: read GitHub back before anything else."""

    def __init__(self, message: str, *, cause: BaseException | None = None, **kw: Any) -> None:
        self.cause = cause
        super().__init__(message, **kw)


class GraphQLError(GitHubError):
    """GraphQL refused (its answer is a 200 with an ``errors`` list): ``type`` is the first
    error's (``NOT_FOUND``, ``FORBIDDEN``, ...), ``errors`` all of them as GitHub sent them."""

    def __init__(
        self, message: str, *, errors: list[dict[str, Any]], type: str = "", **kw: Any
    ) -> None:
        self.errors = errors
        self.type = type
        super().__init__(message, **kw)


# The permission a REST path needs, by its first matching part (a job's token or the App).
_PERMISSIONS = (
    ("/check-runs", "checks"),
    ("/check-suites", "checks"),
    ("/protection", "administration"),
    ("/rulesets", "administration"),
    ("/rules/", "administration"),
    ("/merge", "contents"),
    ("/deployments", "deployments"),
    ("/statuses", "statuses"),
    ("/status", "statuses"),
    ("/pulls", "pull-requests"),
    ("/labels", "issues"),
    ("/comments", "issues"),
    ("/issues", "issues"),
    ("/contents", "contents"),
    ("/git/", "contents"),
    ("/branches", "contents"),
    ("/commits", "contents"),
)


#: How every error text names a permission GitHub refused the token (see
#: :func:`permission_hint`): the Action finds such refusals in what the ledger recorded.
REFUSED_PERMISSION = "; the job's token (or the App) "


def permission_hint(exc: GitHubError) -> str:
    """For GitHub's 403 "Resource not accessible by integration": which permission the
    request needs (``; the job's token (or the App) needs checks: write``), else ""."""
    if exc.status != 403 or "not accessible" not in exc.message.lower():
        return ""
    path = exc.url.split("?", 1)[0]
    level = "read" if exc.method.upper() == "GET" else "write"
    for part, name in _PERMISSIONS:
        if part in path:
            return f"{REFUSED_PERMISSION}needs {name}: {level}"
    if path.rstrip("/").count("/") == 3 and "/repos/" in path:  # the repository itself
        return f"{REFUSED_PERMISSION}needs metadata: read"
    return (
        f"{REFUSED_PERMISSION}lacks a permission this request needs (the workflow's "
        "permissions:, or the App's permissions in its settings)"
    )
