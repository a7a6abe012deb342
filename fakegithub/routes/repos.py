"""REST routes about the repository itself: metadata, contents, commits, compare,
branch deletion, branch protection, rulesets and collaborators."""

from __future__ import annotations

from starlette.routing import Route

from fakegithub import git
from fakegithub.api import Ctx, Result, endpoint
from fakegithub.errors import ApiError, not_found
from fakegithub.merging import requirements
from fakegithub.model import level_at_least
from fakegithub.ops.git import contents, delete_branch, put_contents, resolve
from fakegithub.render.checks import commit
from fakegithub.render.core import repository, user

REPO = "/repos/{owner}/{repo}"


@endpoint(perms=("metadata",))
def get_repo(ctx: Ctx) -> Result:
    level = None
    if ctx.principal is not None and ctx.principal.kind == "user":
        level = ctx.repo.collaborators.get(ctx.principal.login, "none")
    return 200, repository(ctx.sandbox.state, ctx.repo, viewer_level=level)


@endpoint(perms=("contents",))
def get_contents(ctx: Ctx) -> Result:
    ref = ctx.request.query_params.get("ref")
    try:
        return 200, contents(ctx.sandbox.state, ctx.repo, ctx.param("path"), ref)
    except ApiError as exc:
        if exc.status == 422:
            raise ApiError(404, f"No commit found for the ref {ref}") from exc
        raise


@endpoint(perms=("contents",), level="write", user_level="write")
def put_file(ctx: Ctx) -> Result:
    body = ctx.object_body()
    if not isinstance(body.get("message"), str) or not isinstance(body.get("content"), str):
        raise ApiError(
            422,
            'Invalid request.\n\n"message" and "content" are required.',
            errors=[{"resource": "Contents", "code": "missing_field", "field": "content"}],
        )
    path = ctx.param("path")
    existed = (
        path.strip("/")
        in ctx.repo.commits[
            ctx.repo.branches.get(body.get("branch") or ctx.repo.default_branch, "")
        ].files
        if (body.get("branch") or ctx.repo.default_branch) in ctx.repo.branches
        else False
    )
    data = put_contents(
        ctx.sandbox.state,
        ctx.repo,
        ctx.actor,
        path,
        content_b64=body["content"],
        message=body["message"],
        branch=body.get("branch"),
        sha=body.get("sha"),
    )
    return (200 if existed else 201), data


@endpoint(perms=("contents",))
def get_commit(ctx: Ctx) -> Result:
    try:
        sha = resolve(ctx.repo, ctx.param("ref"))
    except ApiError as exc:
        raise ApiError(422, f"No commit found for SHA: {ctx.param('ref')}") from exc
    return 200, commit(ctx.sandbox.state, ctx.repo, ctx.repo.commits[sha])


@endpoint(perms=("contents",))
def compare(ctx: Ctx) -> Result:
    spec = ctx.param("basehead")
    if "..." not in spec:
        raise not_found()
    base_ref, head_ref = spec.split("...", 1)
    try:
        base, head = resolve(ctx.repo, base_ref), resolve(ctx.repo, head_ref)
    except ApiError as exc:
        raise not_found() from exc
    status, ahead, behind = git.compare(ctx.repo, base, head)
    state = ctx.sandbox.state
    fork = git.merge_base(ctx.repo, base, head)
    new = git.ancestors(ctx.repo, head) - git.ancestors(ctx.repo, base)
    commits = sorted((ctx.repo.commits[s] for s in new), key=lambda c: (c.time, c.sha))
    api = f"{state.base_url}/repos/{ctx.repo.full_name}"
    return 200, {
        "url": f"{api}/compare/{spec}",
        "html_url": f"{state.base_url}/{ctx.repo.full_name}/compare/{spec}",
        "permalink_url": f"{state.base_url}/{ctx.repo.full_name}/compare/{base}...{head}",
        "diff_url": f"{state.base_url}/{ctx.repo.full_name}/compare/{spec}.diff",
        "patch_url": f"{state.base_url}/{ctx.repo.full_name}/compare/{spec}.patch",
        "base_commit": commit(state, ctx.repo, ctx.repo.commits[base]),
        "merge_base_commit": commit(state, ctx.repo, ctx.repo.commits[fork or base]),
        "status": status,
        "ahead_by": ahead,
        "behind_by": behind,
        "total_commits": len(commits),
        "commits": [commit(state, ctx.repo, c) for c in commits],
        "files": [],
    }


@endpoint(perms=("administration",), user_level="write")
def required_status_checks(ctx: Ctx) -> Result:
    branch = ctx.param("branch")
    protection = ctx.repo.protections.get(branch)
    if protection is None:
        raise ApiError(404, "Branch not protected")
    api = f"{ctx.sandbox.state.base_url}/repos/{ctx.repo.full_name}/branches/{branch}"
    url = f"{api}/protection/required_status_checks"
    return 200, {
        "url": url,
        "strict": protection.strict,
        "contexts": list(protection.contexts),
        "checks": [{"context": c, "app_id": protection.apps.get(c)} for c in protection.contexts],
        "contexts_url": f"{url}/contexts",
    }


@endpoint(perms=("metadata",))
def branch_rules(ctx: Ctx) -> Result:
    branch = ctx.param("branch")
    rules = []
    import fnmatch  # noqa: PLC0415  # only this route matches patterns

    for ruleset in ctx.repo.rulesets:
        if any(fnmatch.fnmatchcase(branch, p) for p in ruleset.branches):
            for rule in ruleset.rules:
                rules.append(
                    {
                        **rule,
                        "ruleset_source_type": "Repository",
                        "ruleset_source": ctx.repo.full_name,
                        "ruleset_id": ruleset.id,
                    }
                )
    requirements(ctx.repo, branch)
    return 200, rules


@endpoint(perms=("metadata",))
def collaborator_permission(ctx: Ctx) -> Result:
    login = ctx.param("username")
    state = ctx.sandbox.state
    if login not in state.users:
        raise ApiError(404, f"{login} is not a user")
    level = ctx.repo.collaborators.get(login, "none")
    legacy = (
        "admin"
        if level == "admin"
        else "write"
        if level_at_least(level, "write")
        else "read"
        if level_at_least(level, "read")
        else "none"
    )
    found_user = user(state, login)
    found_user["role_name"] = level if level != "none" else "none"
    found_user["permissions"] = {
        "admin": level == "admin",
        "maintain": level_at_least(level, "maintain"),
        "push": level_at_least(level, "write"),
        "triage": level_at_least(level, "triage"),
        "pull": level_at_least(level, "read"),
    }
    return 200, {"permission": legacy, "role_name": level, "user": found_user}


@endpoint(perms=("contents",))
def get_branch(ctx: Ctx) -> Result:
    name = ctx.param("branch")
    sha = ctx.repo.branches.get(name)
    if sha is None:
        raise ApiError(404, "Branch not found")
    state = ctx.sandbox.state
    data = {
        "name": name,
        "commit": commit(state, ctx.repo, ctx.repo.commits[sha]),
        "protected": name in ctx.repo.protections,
        "_links": {
            "self": f"{state.base_url}/repos/{ctx.repo.full_name}/branches/{name}",
            "html": f"{state.base_url}/{ctx.repo.full_name}/tree/{name}",
        },
    }
    return 200, data


@endpoint(perms=("contents",), level="write", user_level="write")
def delete_ref(ctx: Ctx) -> Result:
    """``DELETE .../git/refs/{ref}``: only branches (``heads/<name>``) are kept here."""
    ref = ctx.param("ref")
    if not ref.startswith("heads/"):
        raise ApiError(422, "Reference does not exist")
    delete_branch(ctx.sandbox.state, ctx.repo, ctx.actor, ref.removeprefix("heads/"))
    return 204, None


ROUTES = [
    Route(REPO, get_repo, methods=["GET"]),
    Route(f"{REPO}/contents/{{path:path}}", get_contents, methods=["GET"]),
    Route(f"{REPO}/contents/{{path:path}}", put_file, methods=["PUT"]),
    Route(f"{REPO}/commits/{{ref}}", get_commit, methods=["GET"]),
    Route(f"{REPO}/compare/{{basehead:path}}", compare, methods=["GET"]),
    Route(f"{REPO}/git/refs/{{ref:path}}", delete_ref, methods=["DELETE"]),
    Route(
        f"{REPO}/branches/{{branch}}/protection/required_status_checks",
        required_status_checks,
        methods=["GET"],
    ),
    Route(f"{REPO}/rules/branches/{{branch:path}}", branch_rules, methods=["GET"]),
    # After the protection route: a branch name may hold slashes (``feature/x``).
    Route(f"{REPO}/branches/{{branch:path}}", get_branch, methods=["GET"]),
    Route(
        f"{REPO}/collaborators/{{username}}/permission", collaborator_permission, methods=["GET"]
    ),
]
