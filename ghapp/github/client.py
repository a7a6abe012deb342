"""The GitHub REST client: thin typed methods over one HTTP stack, lenient answers.

One stack: githubkit's generic ``GitHub.request`` (base URL, headers, httpx
transport), configured with ``auto_retry=False`` (its default retries any 5xx,
merges included), no HTTP cache (a re-read before a write must see GitHub's
present state) and a timeout on every call. All retrying happens in
:mod:`ghapp.github.retry`; errors are the :class:`~ghapp.github.errors.GitHubError`
tree. Answers are returned as plain dicts and lists, read leniently by callers.

Authentication: repository calls use an installation token (looked up per
repository, cached, renewed before expiry, see :mod:`ghapp.github.auth`); App calls
(deliveries, the App itself) use the App's JWT. A plain ``token`` (for example an
Action's ``GITHUB_TOKEN``) may be given instead of an App: every call then uses it, and
:meth:`GitHubClient.token_login` says who it acts as. A token GitHub refuses (401) is
dropped and the call is made once more with a new one: a 401 means nothing was
done, so this is safe for writes too.

The API is synchronous (the worker is threaded); the client is thread-safe.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote

import httpx
from githubkit import GitHub
from githubkit.exception import RequestError, RequestFailed

from ghapp.github import retry
from ghapp.github.auth import (
    AppJWT,
    InstallationToken,
    InstallationTokens,
    RepoInstallations,
    parse_installation_token,
)
from ghapp.github.errors import (
    AmbiguousWrite,
    Conflict,
    Forbidden,
    GitHubError,
    GraphQLError,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    Unprocessable,
    Unreachable,
)
from ghapp.github.names import REPO
from ghapp.github.retry import DEFAULT_POLICY, Policy
from ghapp.runtime.settings import DEFAULT_GITHUB_URL, GitHubSettings

__all__ = [
    "ACTIONS_BOT",
    "AmbiguousWrite",
    "Conflict",
    "Forbidden",
    "GitHubClient",
    "GitHubError",
    "GraphQLError",
    "NotFound",
    "RateLimited",
    "ServerError",
    "Unauthorized",
    "Unprocessable",
    "Unreachable",
]

API_VERSION = "2022-11-28"
#: Who a workflow's ``GITHUB_TOKEN`` acts as (an installation token of GitHub Actions).
ACTIONS_BOT = "github-actions[bot]"
PER_PAGE = 100
MAX_PAGES = 50
REVIEW_EVENTS = frozenset({"APPROVE", "REQUEST_CHANGES", "COMMENT"})
_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}
#: The permissions (as get_collaborator_permission reports them) that may answer cards and
#: start deliveries: "maintain" is reported as "write".
WRITERS = frozenset({"admin", "write"})
_REPO = REPO
MARK_READY = """
mutation MarkReady($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) {
    pullRequest { id isDraft number }
  }
}
"""

JSON = dict[str, Any]


def _repo_path(repo: str) -> str:
    if not isinstance(repo, str) or not _REPO.match(repo):
        raise ValueError(f"repository must be 'owner/name', not {repo!r}")
    return f"/repos/{repo}"


def _seg(value: str | int, *, slashes: bool = False) -> str:
    """One path segment, escaped (``slashes``: keep ``/`` for refs and branch names)."""
    return quote(str(value), safe="/" if slashes else "")


def _as_dict(response: httpx.Response) -> JSON:
    if not response.content:
        return {}
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _epoch(text: str) -> float:
    """Epoch seconds of an ISO 8601 time as GitHub writes them (``...Z``)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"no time zone in {text!r}")
    return moment.timestamp()


def _items(data: object, key: str | None) -> list[JSON]:
    if key is not None:
        data = data.get(key) if isinstance(data, dict) else None
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


_INNER = threading.local()  # set while the pool's own client sends a request


class _OuterLineOnly(logging.Filter):
    """Drops httpx's "HTTP Request: ..." line of the pool's inner client.

    Each call goes through two httpx clients (githubkit's, then the pool's), and httpx
    logs every request it sends: without this filter each request was logged twice.
    The outer client's line stays, one per request.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_INNER, "sending", False)


_HTTPX_FILTER = _OuterLineOnly()


class _Pooled(httpx.BaseTransport):
    """A transport that sends through one long-lived httpx client (thread-safe).

    The short-lived clients githubkit creates close their transport when done; that
    close is ignored here, :meth:`shutdown` closes the pool for real.
    """

    def __init__(self, transport: httpx.BaseTransport | None, timeout: httpx.Timeout) -> None:
        self._client = httpx.Client(transport=transport, timeout=timeout, follow_redirects=False)
        httpx_log = logging.getLogger("httpx")
        if _HTTPX_FILTER not in httpx_log.filters:
            httpx_log.addFilter(_HTTPX_FILTER)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        _INNER.sending = True
        try:
            return self._client.send(request, stream=True)
        finally:
            _INNER.sending = False

    def close(self) -> None:
        pass  # the per-request client is done; the pool stays open

    def shutdown(self) -> None:
        self._client.close()


class GitHubClient:
    """Calls to one GitHub (or a sandbox, or an Enterprise server)."""

    def __init__(
        self,
        *,
        app_id: int | None = None,
        private_key: str | None = None,
        token: str | None = None,
        installation_id: int | None = None,
        base_url: str = DEFAULT_GITHUB_URL,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        policy: Policy = DEFAULT_POLICY,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        user_agent: str = "autoloop",
    ) -> None:
        if token is None and (app_id is None or private_key is None):
            raise TypeError("GitHubClient needs app_id and private_key, or a token")
        self.base_url = base_url.rstrip("/")
        self.timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        # githubkit opens a new httpx client per request; they all send through this
        # one long-lived client, so connections are pooled and TLS is set up once.
        self._pool = _Pooled(transport, self.timeout)
        self._gh = GitHub(
            base_url=self.base_url + "/",
            user_agent=user_agent,
            timeout=self.timeout,
            transport=self._pool,
            trust_env=False,  # proxies from the environment are applied by the pool
            auto_retry=False,  # retries live in ghapp.github.retry, reads only
            http_cache=False,  # re-reads must see the present state
            follow_redirects=True,
        )
        self._policy = policy
        self._now = now
        self._sleep = sleep
        self._token = token
        self._fixed_installation = installation_id
        self._jwt = AppJWT(app_id, private_key, now=now) if app_id and private_key else None
        self._tokens = InstallationTokens(self._exchange, now=now)
        self._installs = RepoInstallations(self._lookup_installation)
        self._base_origin = httpx.URL(self.base_url + "/")

    @classmethod
    def from_settings(cls, settings: GitHubSettings, **kw: Any) -> GitHubClient:
        return cls(
            app_id=settings.app_id,
            private_key=settings.private_key,
            base_url=settings.api_url,
            **kw,
        )

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.shutdown()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------- plumbing

    def _send_once(
        self,
        method: str,
        url: str,
        authorization: str,
        params: Mapping[str, Any] | None,
        body: Any,
    ) -> httpx.Response:
        headers = {
            "Authorization": authorization,
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
        }
        try:
            return self._gh.request(
                method,
                url,
                params=dict(params) if params else None,
                json=body,
                headers=headers,
            ).raw_response
        except RequestFailed as exc:  # an answer with an error status: retry.py decides
            return exc.response.raw_response
        except RequestError as exc:  # no answer: hand the transport error to retry.py
            if isinstance(exc.exc, httpx.TransportError):
                raise exc.exc from exc
            raise

    def _call(
        self,
        method: str,
        url: str,
        authorization: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotent: bool | None = None,
        policy: Policy | None = None,
    ) -> httpx.Response:
        # The credential is resolved once, before the retries: a token exchange has its
        # own retries, and its failure means this request was never sent.
        try:
            return retry.call(
                method,
                url,
                lambda: self._send_once(method, url, authorization, params, body),
                policy=policy or self._policy,
                idempotent=idempotent,
                now=self._now,
                sleep=self._sleep,
            )
        except Unauthorized:
            if self._jwt is not None and authorization.startswith("Bearer "):
                self._jwt.invalidate()  # GitHub refused our JWT: the next call mints one
            raise

    def _app_auth(self) -> str:
        if self._jwt is None:
            raise TypeError("this call needs the GitHub App's id and private key")
        return f"Bearer {self._jwt.token()}"

    def _token_auth(self) -> str:
        if self._token is None:
            raise TypeError("this call needs a plain token (GitHubClient(token=...))")
        return f"token {self._token}"

    def _installation_for(self, repo: str) -> int:
        if self._fixed_installation is not None:
            return self._fixed_installation
        return self._installs.get(repo)

    def _lookup_installation(self, repo: str) -> int:
        url = f"{_repo_path(repo)}/installation"
        try:
            data = _as_dict(self._call("GET", url, self._app_auth()))
        except NotFound as exc:
            raise NotFound(
                f"the GitHub App is not installed on {repo} (or there is no such repository): "
                "install the App on it",
                status=404,
                documentation_url=exc.documentation_url,
                method="GET",
                url=url,
            ) from exc
        installation_id = data.get("id")
        if not isinstance(installation_id, int):
            raise GitHubError(
                "the installation answer has no id", method="GET", url=f"{repo}/installation"
            )
        return installation_id

    def _exchange(self, installation_id: int) -> InstallationToken:
        url = f"/app/installations/{installation_id}/access_tokens"
        # Creating a token twice is harmless, so a lost answer may be retried.
        response = self._call("POST", url, self._app_auth(), idempotent=True)
        try:
            return parse_installation_token(_as_dict(response))
        except ValueError as exc:
            raise GitHubError(
                str(exc), status=response.status_code, method="POST", url=url
            ) from exc

    def installation_token(self, repo: str) -> str:
        """The installation token for ``repo`` (cached; for git over HTTPS, say)."""
        if self._token is not None:
            return self._token
        return self._tokens.get(self._installation_for(repo))

    def _repo(
        self,
        method: str,
        repo: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        url: str | None = None,
    ) -> httpx.Response:
        target = url or f"{_repo_path(repo)}{path}"
        return self._call_repo(method, repo, target, params=params, body=body)

    def _call_repo(
        self,
        method: str,
        repo: str,
        target: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotent: bool | None = None,
    ) -> httpx.Response:
        """One call with ``repo``'s installation token (renewed once on a 401)."""
        _repo_path(repo)
        try:
            return self._call(
                method,
                target,
                f"token {self.installation_token(repo)}",
                params=params,
                body=body,
                idempotent=idempotent,
            )
        except Unauthorized:
            if self._token is not None:
                raise
            # A revoked or stale token: GitHub did nothing, so ask again with a new one.
            self._tokens.invalidate(self._installation_for(repo))
            self._installs.invalidate(repo)
            return self._call(
                method,
                target,
                f"token {self.installation_token(repo)}",
                params=params,
                body=body,
                idempotent=idempotent,
            )

    def _next_url(self, response: httpx.Response) -> str | None:
        link = response.links.get("next", {}).get("url")
        if not link:
            return None
        nxt = httpx.URL(link)
        if (nxt.scheme, nxt.host, nxt.port) != (
            self._base_origin.scheme,
            self._base_origin.host,
            self._base_origin.port,
        ):
            raise GitHubError(f"refusing to follow a next-page link to another host: {link}")
        return str(nxt)

    def _pages(
        self,
        fetch: Callable[[str | None], httpx.Response],
        key: str | None,
        keep: Callable[[JSON], bool] | None = None,
        limit: int | None = None,
    ) -> list[JSON]:
        """Every item of a paginated list (following ``Link: rel="next"``), or the first
        ``limit`` of them."""
        out: list[JSON] = []
        url: str | None = None
        for _ in range(MAX_PAGES):
            response = fetch(url)
            try:
                data = response.json()
            except ValueError:
                data = None
            items = _items(data, key)
            for item in items:
                if keep is not None and not keep(item):
                    return out
                out.append(item)
                if limit is not None and len(out) >= limit:
                    return out
            url = self._next_url(response)
            if url is None or not items:
                break
        return out

    def _repo_pages(
        self,
        repo: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
        limit: int | None = None,
        *,
        keep: Callable[[JSON], bool] | None = None,
    ) -> list[JSON]:
        per_page = PER_PAGE if limit is None else max(1, min(limit, PER_PAGE))
        first = {**(params or {}), "per_page": per_page}

        def fetch(url: str | None) -> httpx.Response:
            if url is None:
                return self._repo("GET", repo, path, params=first)
            return self._repo("GET", repo, path, url=url)

        return self._pages(fetch, key, keep=keep, limit=limit)

    # ----------------------------------------------------------------------- repository

    def get_repo(self, repo: str) -> JSON:
        """The repository (``default_branch``, ``full_name``, ...)."""
        return _as_dict(self._repo("GET", repo, ""))

    # ----------------------------------------------------------------------- issues

    def get_issue(self, repo: str, number: int) -> JSON:
        return _as_dict(self._repo("GET", repo, f"/issues/{int(number)}"))

    def list_issue_comments(
        self, repo: str, number: int, *, since: str | None = None
    ) -> list[JSON]:
        params = {"since": since} if since else None
        return self._repo_pages(repo, f"/issues/{int(number)}/comments", params)

    def labeller(self, repo: str, number: int, label: str) -> str:
        """Who added ``label`` to issue or pull request ``number`` last (its events, read
        to the end); "" when no such event is listed."""
        return self.label_added(repo, number, label)[0]

    def label_added(self, repo: str, number: int, label: str) -> tuple[str, str]:
        """(who, when: GitHub's ISO time) of the last ``labeled`` event of ``label`` on
        issue or pull request ``number``; ("", "") when none is listed."""
        wanted = label.casefold()
        found = ("", "")
        for item in self._repo_pages(repo, f"/issues/{int(number)}/events"):
            label_of, actor = item.get("label"), item.get("actor")
            name = label_of.get("name") if isinstance(label_of, dict) else None
            if item.get("event") != "labeled" or not isinstance(name, str):
                continue
            if name.casefold() == wanted:
                login = actor.get("login") if isinstance(actor, dict) else None
                at = item.get("created_at")
                found = (
                    login if isinstance(login, str) else "",
                    at if isinstance(at, str) else "",
                )
        return found

    def create_comment(self, repo: str, number: int, body: str) -> JSON:
        return _as_dict(
            self._repo("POST", repo, f"/issues/{int(number)}/comments", body={"body": body})
        )

    def update_comment(self, repo: str, comment_id: int, body: str) -> JSON:
        return _as_dict(
            self._repo("PATCH", repo, f"/issues/comments/{int(comment_id)}", body={"body": body})
        )

    def add_labels(self, repo: str, number: int, labels: Iterable[str]) -> list[JSON]:
        response = self._repo(
            "POST", repo, f"/issues/{int(number)}/labels", body={"labels": list(labels)}
        )
        return _items(response.json() if response.content else [], None)

    def remove_label(self, repo: str, number: int, label: str) -> bool:
        """Remove one label; False if the issue did not carry it (already done)."""
        try:
            self._repo("DELETE", repo, f"/issues/{int(number)}/labels/{_seg(label)}")
        except NotFound as exc:
            if "label" in exc.message.lower():
                return False
            raise
        return True

    def set_issue_state(
        self,
        repo: str,
        number: int,
        state: Literal["open", "closed"],
        *,
        state_reason: str | None = None,
    ) -> JSON:
        if state not in ("open", "closed"):
            raise ValueError(f"state must be 'open' or 'closed', not {state!r}")
        body: JSON = {"state": state}
        if state_reason:
            body["state_reason"] = state_reason
        return _as_dict(self._repo("PATCH", repo, f"/issues/{int(number)}", body=body))

    def add_assignees(self, repo: str, number: int, assignees: Iterable[str]) -> JSON:
        return _as_dict(
            self._repo(
                "POST",
                repo,
                f"/issues/{int(number)}/assignees",
                body={"assignees": list(assignees)},
            )
        )

    # ----------------------------------------------------------------------- pull requests

    def get_pull(self, repo: str, number: int) -> JSON:
        return _as_dict(self._repo("GET", repo, f"/pulls/{int(number)}"))

    def list_pulls(
        self,
        repo: str,
        *,
        state: str = "open",
        head: str | None = None,
        base: str | None = None,
        sort: str | None = None,
        direction: str | None = None,
        keep: Callable[[JSON], bool] | None = None,
    ) -> list[JSON]:
        """Pull requests (GitHub's order: newest created first; ``sort="updated"``: most
        recently updated first). ``keep``: stop at the first one it refuses."""
        params: JSON = {"state": state}
        if head:
            params["head"] = head
        if base:
            params["base"] = base
        if sort:
            params["sort"] = sort
        if direction:
            params["direction"] = direction
        return self._repo_pages(repo, "/pulls", params, keep=keep)

    def list_pull_files(self, repo: str, number: int) -> list[JSON]:
        """The PR's changed files (``filename``, ``status``, ``additions``, ``deletions``,
        ``patch``...), every page."""
        return self._repo_pages(repo, f"/pulls/{int(number)}/files")

    def list_reviews(self, repo: str, number: int) -> list[JSON]:
        return self._repo_pages(repo, f"/pulls/{int(number)}/reviews")

    def create_review(
        self,
        repo: str,
        number: int,
        *,
        event: str,
        body: str = "",
        commit_id: str | None = None,
    ) -> JSON:
        if event not in REVIEW_EVENTS:
            raise ValueError(f"review event must be one of {sorted(REVIEW_EVENTS)}, not {event!r}")
        payload: JSON = {"event": event, "body": body}
        if commit_id:
            payload["commit_id"] = commit_id
        return _as_dict(self._repo("POST", repo, f"/pulls/{int(number)}/reviews", body=payload))

    def merge_pull(
        self,
        repo: str,
        number: int,
        *,
        sha: str,
        merge_method: str = "merge",
        commit_title: str | None = None,
        commit_message: str | None = None,
    ) -> JSON:
        """Merge only if the head is still ``sha``. A lost answer raises AmbiguousWrite:
        read the pull request back (``merged``) instead of merging again."""
        if not sha:
            raise ValueError("merge_pull needs the head sha the decision was made on")
        payload: JSON = {"sha": sha, "merge_method": merge_method}
        if commit_title is not None:
            payload["commit_title"] = commit_title
        if commit_message is not None:
            payload["commit_message"] = commit_message
        return _as_dict(self._repo("PUT", repo, f"/pulls/{int(number)}/merge", body=payload))

    def update_branch(self, repo: str, number: int, *, expected_head_sha: str) -> JSON:
        return _as_dict(
            self._repo(
                "PUT",
                repo,
                f"/pulls/{int(number)}/update-branch",
                body={"expected_head_sha": expected_head_sha},
            )
        )

    def compare(self, repo: str, base: str, head: str) -> JSON:
        path = f"/compare/{_seg(base, slashes=True)}...{_seg(head, slashes=True)}"
        return _as_dict(self._repo("GET", repo, path, params={"per_page": 1}))

    def get_commit(self, repo: str, ref: str) -> JSON:
        """One commit (``sha``, ``parents``, ...)."""
        return _as_dict(self._repo("GET", repo, f"/commits/{_seg(ref, slashes=True)}"))

    def get_branch(self, repo: str, branch: str) -> JSON | None:
        """The branch (its ``commit``), or None when there is no such branch."""
        try:
            return _as_dict(self._repo("GET", repo, f"/branches/{_seg(branch, slashes=True)}"))
        except NotFound:
            return None

    def delete_branch(self, repo: str, branch: str) -> bool:
        """Delete ``refs/heads/<branch>``; False if there was no such branch."""
        try:
            self._repo("DELETE", repo, f"/git/refs/heads/{_seg(branch, slashes=True)}")
        except (NotFound, Unprocessable) as exc:
            # GitHub answers 422 "Reference does not exist" for a missing ref.
            if exc.status == 404 or "does not exist" in exc.message.lower():
                return False
            raise
        return True

    # ----------------------------------------------------------------------- GraphQL

    def graphql_url(self) -> str:
        """GitHub's GraphQL endpoint beside the REST base (``/api/v3`` -> ``/api/graphql``
        on GitHub Enterprise Server)."""
        if self.base_url.endswith("/api/v3"):
            return self.base_url.removesuffix("/v3") + "/graphql"
        return self.base_url + "/graphql"

    def graphql(
        self,
        repo: str,
        query: str,
        variables: Mapping[str, Any] | None = None,
        *,
        idempotent: bool = False,
    ) -> JSON:
        """Run one GraphQL document with ``repo``'s installation token; ``data`` back.

        A mutation is a write (a lost answer raises AmbiguousWrite); a query may be
        marked ``idempotent`` to be retried like a read. GraphQL reports refusals in an
        ``errors`` list beside a 200: they raise :class:`GraphQLError`.
        """
        body = {"query": query, "variables": dict(variables or {})}
        url = self.graphql_url()
        response = self._call_repo("POST", repo, url, body=body, idempotent=idempotent)
        data = _as_dict(response)
        errors = _items(data, "errors")
        if errors:
            first = errors[0]
            message = "; ".join(str(e.get("message") or e.get("type") or e) for e in errors)
            kind = first.get("type")
            raise GraphQLError(
                message,
                errors=errors,
                type=kind if isinstance(kind, str) else "",
                status=response.status_code,
                method="POST",
                url=url,
            )
        found = data.get("data")
        return found if isinstance(found, dict) else {}

    def mark_ready_for_review(self, repo: str, node_id: str) -> JSON:
        """Turn a draft pull request (by its GraphQL ``node_id``) ready for review; REST
        has no endpoint for it. Answers the pull request's ``id`` and ``isDraft``."""
        data = self.graphql(repo, MARK_READY, {"id": node_id})
        found = data.get("markPullRequestReadyForReview")
        pull = found.get("pullRequest") if isinstance(found, dict) else None
        return pull if isinstance(pull, dict) else {}

    # ----------------------------------------------------------------------- checks

    def list_check_runs_for_ref(
        self,
        repo: str,
        ref: str,
        *,
        check_name: str | None = None,
        latest: bool = True,
    ) -> list[JSON]:
        """Check runs on ``ref``: only the newest run per name and app (GitHub's default,
        ``filter=latest``), or with ``latest=False`` every run, re-runs included."""
        params = {"check_name": check_name, "filter": None if latest else "all"}
        params = {k: v for k, v in params.items() if v}
        return self._repo_pages(
            repo, f"/commits/{_seg(ref, slashes=True)}/check-runs", params, key="check_runs"
        )

    def get_combined_status(self, repo: str, ref: str) -> JSON:
        path = f"/commits/{_seg(ref, slashes=True)}/status"
        return _as_dict(self._repo("GET", repo, path, params={"per_page": PER_PAGE}))

    def create_check_run(self, repo: str, *, name: str, head_sha: str, **fields: Any) -> JSON:
        body = {"name": name, "head_sha": head_sha, **fields}
        return _as_dict(self._repo("POST", repo, "/check-runs", body=body))

    def update_check_run(self, repo: str, check_run_id: int, **fields: Any) -> JSON:
        return _as_dict(
            self._repo("PATCH", repo, f"/check-runs/{int(check_run_id)}", body=dict(fields))
        )

    def get_required_status_checks(self, repo: str, branch: str) -> JSON | None:
        """The branch protection's required checks, or None when none are configured."""
        path = f"/branches/{_seg(branch, slashes=True)}/protection/required_status_checks"
        try:
            return _as_dict(self._repo("GET", repo, path))
        except NotFound:
            return None

    def get_branch_rules(self, repo: str, branch: str) -> list[JSON]:
        return self._repo_pages(repo, f"/rules/branches/{_seg(branch, slashes=True)}")

    # ----------------------------------------------------------------------- deployments

    def list_deployments(
        self,
        repo: str,
        *,
        sha: str | None = None,
        ref: str | None = None,
        environment: str | None = None,
        limit: int | None = None,
    ) -> list[JSON]:
        """Deployments, newest first (``limit``: only the newest that many)."""
        params = {
            k: v for k, v in {"sha": sha, "ref": ref, "environment": environment}.items() if v
        }
        return self._repo_pages(repo, "/deployments", params, limit=limit)

    def list_deployment_statuses(
        self, repo: str, deployment_id: int, *, limit: int | None = None
    ) -> list[JSON]:
        """A deployment's statuses, newest first (``limit``: only the newest that many)."""
        return self._repo_pages(repo, f"/deployments/{int(deployment_id)}/statuses", limit=limit)

    def get_latest_release(self, repo: str) -> JSON | None:
        try:
            return _as_dict(self._repo("GET", repo, "/releases/latest"))
        except NotFound:
            return None

    # ----------------------------------------------------------------------- repository

    def get_collaborator_permission(self, repo: str, username: str) -> str:
        """``admin``, ``write`` (``maintain`` counts as write), ``read`` or ``none``."""
        try:
            data = _as_dict(self._repo("GET", repo, f"/collaborators/{_seg(username)}/permission"))
        except NotFound:
            return "none"
        role, legacy = data.get("role_name"), data.get("permission")
        for value in (role, legacy):
            if isinstance(value, str) and value in _PERMISSION:
                return _PERMISSION[value]
        return "none"

    def get_file_contents(self, repo: str, path: str, ref: str) -> str | None:
        """The text of a file at ``ref``, or None if it does not exist there."""
        try:
            response = self._repo(
                "GET",
                repo,
                f"/contents/{_seg(path.lstrip('/'), slashes=True)}",
                params={"ref": ref},
            )
        except NotFound:
            return None
        data = _as_dict(response)
        if data.get("type") != "file":
            raise GitHubError(f"{path} at {ref} is not a file", method="GET", url=f"{repo}:{path}")
        content, encoding = data.get("content"), data.get("encoding")
        if encoding != "base64" or not isinstance(content, str):
            raise GitHubError(
                f"{path} at {ref} came without its content (larger than 1 MB?)",
                method="GET",
                url=f"{repo}:{path}",
            )
        return base64.b64decode(content).decode("utf-8", errors="replace")

    # ----------------------------------------------------------------------- the token

    def get_authenticated_user(self) -> JSON:
        """``GET /user`` with the plain token: the user a personal token acts as.
        GitHub refuses installation tokens here (403, raised as Forbidden)."""
        return _as_dict(self._call("GET", "/user", self._token_auth()))

    def token_login(self) -> str:
        """The login the plain token writes as: its user's, or, for an installation token
        (which ``GET /user`` refuses: a workflow's ``GITHUB_TOKEN``), ``github-actions[bot]``.
        An App's own installation token is not told apart from GITHUB_TOKEN here: give the
        App's id and key instead, and :meth:`get_app` names its bot."""
        try:
            found = self.get_authenticated_user().get("login")
        except Forbidden:
            return ACTIONS_BOT
        if not isinstance(found, str) or not found:
            raise GitHubError("GET /user answered without a login", method="GET", url="/user")
        return found

    # ----------------------------------------------------------------------- the App

    def get_app(self, *, once: bool = False) -> JSON:
        """The App itself (id, slug). ``once``: a single attempt, no retries (the caller
        has a retry loop of its own, e.g. the server's start in a GitHub outage)."""
        policy = replace(self._policy, attempts=1) if once else None
        return _as_dict(self._call("GET", "/app", self._app_auth(), policy=policy))

    def list_installations(self) -> list[JSON]:
        """The App's installations (``account``, ``permissions``, ``events``...)."""

        def fetch(url: str | None) -> httpx.Response:
            if url is None:
                return self._call(
                    "GET", "/app/installations", self._app_auth(), params={"per_page": PER_PAGE}
                )
            return self._call("GET", url, self._app_auth())

        return self._pages(fetch, None)

    def list_webhook_deliveries(self, *, since: float | None = None) -> list[JSON]:
        """The App's recent deliveries, newest first; with ``since`` (epoch seconds), only
        those delivered at or after it."""

        def recent(item: JSON) -> bool:
            if since is None:
                return True
            at = item.get("delivered_at")
            if not isinstance(at, str):
                return True
            try:
                moment = _epoch(at)
            except ValueError:
                return True
            return moment >= since

        def fetch(url: str | None) -> httpx.Response:
            if url is None:
                return self._call(
                    "GET", "/app/hook/deliveries", self._app_auth(), params={"per_page": PER_PAGE}
                )
            return self._call("GET", url, self._app_auth())

        return self._pages(fetch, None, keep=recent)

    def redeliver(self, delivery_id: int) -> None:
        self._call("POST", f"/app/hook/deliveries/{int(delivery_id)}/attempts", self._app_auth())
