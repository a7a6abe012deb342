"""A repository's name: ``owner/name``, never a part made only of dots."""

from __future__ import annotations

import pytest

from ghapp.github.client import GitHubClient
from ghapp.github.names import REPO
from ghapp.github.writes import subject_target, target_of
from plugins.protocols import ActionFailed


@pytest.mark.parametrize("repo", ["acme/web", "a.b/c.d", "acme/.github", "a_b/web-2", "o/..x"])
def test_names_github_gives_are_names(repo: str) -> None:
    assert REPO.match(repo)
    assert target_of({"repo": repo, "number": 1}).repo == repo
    assert subject_target(f"{repo}#3") is not None


@pytest.mark.parametrize("repo", ["../..", "a/..", "./.", "../x", "a/...", "a/b/c", "a", "a/"])
def test_dots_alone_are_no_name_and_never_reach_a_request(repo: str) -> None:
    """An agent's write-back with "repo": "../.." was allowed: its path named another
    endpoint of GitHub's API (/repos/../../issues/1/labels)."""
    assert not REPO.match(repo)
    with pytest.raises(ActionFailed, match="'repo' must be 'owner/name'"):
        target_of({"repo": repo, "number": 1})
    assert subject_target(f"{repo}#3") is None
    client = GitHubClient(token="t", base_url="http://127.0.0.1:9")
    try:
        with pytest.raises(ValueError, match="repository must be 'owner/name'"):
            client.get_issue(repo, 1)
    finally:
        client.close()
