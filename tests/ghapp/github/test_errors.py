"""GitHub's errors as the Action reports them: a 403 of a token without a permission
names the permission."""

from __future__ import annotations

import pytest

from ghapp.github.errors import Forbidden, GitHubError, NotFound, permission_hint

NOT_ACCESSIBLE = "Resource not accessible by integration"


@pytest.mark.parametrize(
    ("method", "url", "hint"),
    [
        ("GET", "/repos/o/r/commits/abc/check-runs?per_page=100", "checks: read"),
        ("POST", "/repos/o/r/check-runs", "checks: write"),
        ("PUT", "/repos/o/r/pulls/3/merge", "contents: write"),
        ("PATCH", "/repos/o/r/issues/comments/9", "issues: write"),
        ("GET", "/repos/o/r/branches/main/protection", "administration: read"),
        ("GET", "/repos/o/r/pulls/3", "pull-requests: read"),
        ("GET", "/repos/o/r", "metadata: read"),
    ],
)
def test_a_403_not_accessible_names_the_permission(method: str, url: str, hint: str) -> None:
    exc = Forbidden(NOT_ACCESSIBLE, status=403, method=method, url=url)
    assert permission_hint(exc) == f"; the job's token (or the App) needs {hint}"


def test_other_errors_get_no_hint() -> None:
    assert permission_hint(NotFound("Not Found", status=404, method="GET", url="/x/pulls")) == ""
    rate = Forbidden("API rate limit exceeded", status=403, method="GET", url="/x/pulls")
    assert permission_hint(rate) == ""
    unknown = GitHubError(NOT_ACCESSIBLE, status=403, url="/x/unknown")
    assert permission_hint(unknown) == (
        "; the job's token (or the App) lacks a permission this request needs "
        "(the workflow's permissions:, or the App's permissions in its settings)"
    )


def test_the_hint_is_part_of_the_error_wherever_it_is_shown() -> None:
    exc = Forbidden(NOT_ACCESSIBLE, status=403, method="POST", url="/repos/o/r/issues/3/comments")
    assert str(exc) == (
        f"POST /repos/o/r/issues/3/comments: 403 {NOT_ACCESSIBLE}; the job's token (or the "
        "App) needs issues: write"
    )
    assert str(exc).count("needs") == 1
