"""``GET /user``: who a token acts as.

A personal token answers its user (with the fields GitHub adds for the authenticated
user); an installation token, a workflow's ``GITHUB_TOKEN`` among them, and an App's JWT
get 403 "Resource not accessible by integration", as on GitHub.
"""

from __future__ import annotations

from starlette.routing import Route

from fakegithub.api import Ctx, Result, endpoint
from fakegithub.auth import NOT_FOR_INTEGRATION
from fakegithub.errors import ApiError
from fakegithub.render.core import user
from fakegithub.state import iso


@endpoint(repo=False)
def authenticated_user(ctx: Ctx) -> Result:
    principal = ctx.principal
    assert principal is not None  # noqa: S101  # endpoint(repo=False) refused anonymous calls
    if principal.kind != "user":
        raise ApiError(403, NOT_FOR_INTEGRATION)
    state = ctx.sandbox.state
    found = state.user(principal.login)
    data = user(state, found)
    data.update(
        {
            "name": found.name,
            "company": None,
            "blog": "",
            "location": None,
            "email": None,
            "hireable": None,
            "bio": None,
            "twitter_username": None,
            "public_repos": 0,
            "public_gists": 0,
            "followers": 0,
            "following": 0,
            "created_at": iso(state.now()),
            "updated_at": iso(state.now()),
        }
    )
    return 200, data


ROUTES = [Route("/user", authenticated_user, methods=["GET"])]
