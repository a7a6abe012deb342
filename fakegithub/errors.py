"""Errors of the sandbox GitHub.

```
SandboxError                 you misused the sandbox (bad control call, bad setup)
ApiError                     a GitHub-shaped refusal: status, message, extra headers;
                             routes turn it into {"message", "documentation_url", "status"}
```
"""

from __future__ import annotations

from typing import Any


class SandboxError(Exception):
    """A control call or a setup the sandbox cannot honour; the message says what to do."""


class ApiError(Exception):
    """An answer GitHub would give instead of doing what was asked."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[Any] | None = None,
        headers: dict[str, str] | None = None,
        doc: str = "rest",
    ) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message
        self.errors = errors
        self.headers = headers or {}
        self.doc = doc


def not_found() -> ApiError:
    return ApiError(404, "Not Found")


def validation_failed(message: str = "Validation Failed", **error: Any) -> ApiError:
    return ApiError(422, message, errors=[error] if error else None)
