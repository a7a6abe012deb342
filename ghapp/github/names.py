"""How a repository is named: ``owner/name``, each part of letters, digits, ``_ . -``.

One pattern for every place that reads one (an event's subject, an action's ``repo``,
the runner's ``GITHUB_REPOSITORY``): a part that is only dots (``../..``, ``a/..``) is no
name, and in a request's path it named another endpoint of GitHub's API.
"""

from __future__ import annotations

import re

__all__ = ["REPO", "REPO_NAME"]

_PART = r"[A-Za-z0-9_.-]+"
#: ``owner/name`` as a regular expression to build others from (no anchors, no groups).
REPO_NAME = rf"(?!\.+/){_PART}/(?!\.+(?![A-Za-z0-9_.-])){_PART}"
#: A whole text that is ``owner/name``.
REPO = re.compile(rf"^{REPO_NAME}$")
