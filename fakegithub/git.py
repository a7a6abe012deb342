"""A tiny commit graph: commits are whole-tree snapshots, merges are three-way per file."""

from __future__ import annotations

import hashlib
from collections import deque
from datetime import datetime

from fakegithub.model import Commit, Repo


def make_commit(
    repo: Repo,
    *,
    parents: tuple[str, ...],
    files: dict[str, bytes],
    message: str,
    author: str,
    time: datetime,
) -> Commit:
    """Adds a commit to ``repo`` and returns it; its sha is a hash of everything in it."""
    digest = hashlib.sha1(usedforsecurity=False)
    for part in (*parents, message, author, time.isoformat(), str(len(repo.commits))):
        digest.update(part.encode() + b"\0")
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    commit = Commit(digest.hexdigest(), parents, dict(files), message, author, time)
    repo.commits[commit.sha] = commit
    return commit


def ancestors(repo: Repo, sha: str) -> set[str]:
    """``sha`` and every commit reachable from it."""
    seen: set[str] = set()
    todo = deque([sha])
    while todo:
        current = todo.popleft()
        if current in seen or current not in repo.commits:
            continue
        seen.add(current)
        todo.extend(repo.commits[current].parents)
    return seen


def is_ancestor(repo: Repo, older: str, newer: str) -> bool:
    return older in ancestors(repo, newer)


def merge_base(repo: Repo, a: str, b: str) -> str | None:
    """The nearest common ancestor (breadth first from ``b``)."""
    mine = ancestors(repo, a)
    seen: set[str] = set()
    todo = deque([b])
    while todo:
        current = todo.popleft()
        if current in mine:
            return current
        if current in seen or current not in repo.commits:
            continue
        seen.add(current)
        todo.extend(repo.commits[current].parents)
    return None


def three_way(
    base: dict[str, bytes], ours: dict[str, bytes], theirs: dict[str, bytes]
) -> dict[str, bytes] | None:
    """The merged tree, or None when both sides changed one file differently."""
    merged: dict[str, bytes] = {}
    for path in set(base) | set(ours) | set(theirs):
        b, o, t = base.get(path), ours.get(path), theirs.get(path)
        if o == t:
            result = o
        elif o == b:
            result = t
        elif t == b:
            result = o
        else:
            return None
        if result is not None:
            merged[path] = result
    return merged


def merged_tree(repo: Repo, ours: str, theirs: str) -> dict[str, bytes] | None:
    """The tree of merging ``theirs`` into ``ours``, None on a conflict."""
    base_sha = merge_base(repo, ours, theirs)
    base = repo.commits[base_sha].files if base_sha else {}
    return three_way(base, repo.commits[ours].files, repo.commits[theirs].files)


def compare(repo: Repo, base: str, head: str) -> tuple[str, int, int]:
    """(status, ahead_by, behind_by) as GitHub's compare reports them."""
    base_set, head_set = ancestors(repo, base), ancestors(repo, head)
    ahead = len(head_set - base_set)
    behind = len(base_set - head_set)
    if ahead == 0 and behind == 0:
        return "identical", 0, 0
    if behind == 0:
        return "ahead", ahead, 0
    if ahead == 0:
        return "behind", 0, behind
    return "diverged", ahead, behind
