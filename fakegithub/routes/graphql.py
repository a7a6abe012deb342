"""``POST /graphql``: just enough of GitHub's GraphQL API for what REST cannot do.

One operation is answered: the mutation ``markPullRequestReadyForReview(input:
{pullRequestId: ...})``, the id given as a variable (``$id``) or an inline string, which
turns a draft pull request ready for review (and sends ``pull_request.ready_for_review``).
It answers ``{clientMutationId, pullRequest {id, isDraft, number, url}}`` whatever the
selection asks for: the sandbox does not parse selections.

Authentication is the REST API's: installation tokens and personal tokens (an App JWT
is refused, as on GitHub). No token, or a bad one, is a 401 with REST's error body; every
other refusal is GraphQL's: a 200 whose ``errors`` list says why (``NOT_FOUND``,
``FORBIDDEN``), as GitHub answers. An applied mutation is recorded in the audit log as
``POST /graphql``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fakegithub.api import error_body, json_response
from fakegithub.auth import NOT_FOR_INTEGRATION, Principal, authorize_repo
from fakegithub.errors import ApiError
from fakegithub.model import Pull, Repo
from fakegithub.ops import pulls as ops
from fakegithub.sandbox import Sandbox

MARK_READY = "markPullRequestReadyForReview"
_ID = re.compile(r"pullRequestId\s*:\s*(?:\$(\w+)|\"([^\"]*)\")")
_NODE = re.compile(r"^PR_kwSB(\d+)$")


def _error(kind: str, message: str, path: list[str] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"type": kind, "message": message}
    if path:
        found["path"] = path
    return found


def _pull_of(sandbox: Sandbox, node: str) -> tuple[Repo, Pull] | None:
    match = _NODE.match(node)
    if match is None:
        return None
    ident = int(match.group(1))
    for repo in sandbox.state.repos.values():
        for pull in repo.pulls.values():
            if pull.id == ident:
                return repo, pull
    return None


def _refused(kind: str, message: str) -> dict[str, Any]:
    return {"data": {MARK_READY: None}, "errors": [_error(kind, message, [MARK_READY])]}


def _mark_ready(
    sandbox: Sandbox, principal: Principal, query: str, variables: dict[str, Any]
) -> tuple[dict[str, Any], tuple[Repo, int] | None]:
    """The GraphQL answer, and what changed (for the audit log)."""
    found = _ID.search(query)
    node = ""
    if found is not None:
        node = str(variables.get(found.group(1), "")) if found.group(1) else found.group(2)
    unknown = f"Could not resolve to a node with the global id of '{node}'"
    target = _pull_of(sandbox, node)
    if target is None:
        return _refused("NOT_FOUND", unknown), None
    repo, pull = target
    try:
        authorize_repo(principal, repo, perms=("pull_requests",), level="write", user_level="write")
    except ApiError as err:
        if err.status == 404:
            return _refused("NOT_FOUND", unknown), None
        return _refused("FORBIDDEN", err.message), None
    ops.ready_for_review(sandbox.state, repo, principal.actor, pull.number)
    url = f"{sandbox.state.base_url}/{repo.full_name}/pull/{pull.number}"
    data = {"id": node, "isDraft": pull.draft, "number": pull.number, "url": url}
    answer = {"data": {MARK_READY: {"clientMutationId": None, "pullRequest": data}}}
    return answer, (repo, pull.number)


async def graphql(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else None
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        return json_response(sandbox, 400, {"message": "Problems parsing JSON"}, {})
    query: str = body["query"]
    variables = body.get("variables") if isinstance(body.get("variables"), dict) else {}
    with sandbox.state.lock:
        try:
            principal = sandbox.auth.authenticate(request.headers.get("authorization"))
        except ApiError as err:
            return json_response(sandbox, err.status, error_body(sandbox, err), {})
        if principal is None:
            anonymous = ApiError(401, "This endpoint requires you to be authenticated.")
            return json_response(sandbox, 401, error_body(sandbox, anonymous), {})
        if principal.kind == "app":
            answer = {"errors": [_error("FORBIDDEN", NOT_FOR_INTEGRATION)]}
            return json_response(sandbox, 200, answer, {})
        if MARK_READY not in query:
            message = f"the sandbox GitHub answers only the {MARK_READY} mutation"
            return json_response(sandbox, 200, {"errors": [{"message": message}]}, {})
        answer, changed = _mark_ready(sandbox, principal, query, variables or {})
    if changed is not None:
        repo, number = changed
        sandbox.audit.record(
            method="POST",
            path="/graphql",
            actor=principal.login,
            resource=f"{repo.full_name}#{number}",
            status=200,
            body=body,
        )
    return json_response(sandbox, 200, answer, {})


ROUTES = [Route("/graphql", graphql, methods=["POST"])]
