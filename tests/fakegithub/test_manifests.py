"""The sandbox's App manifest flow: the page that creates an App, the code's conversion,
and the install page, as a browser and a client meet them on GitHub."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest

from fakegithub.server import SandboxHandle, running_sandbox

HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


class Clock:
    def __init__(self) -> None:
        self.shift = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.shift


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def gh(clock: Clock) -> Iterator[SandboxHandle]:
    with running_sandbox(clock=clock) as handle:
        yield handle


def a_manifest(name: str = "autoloop-acme", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "url": "https://autoloop.example.com",
        "hook_attributes": {"url": "https://autoloop.example.com/github/webhook"},
        "redirect_url": "http://127.0.0.1:9/callback?from=test",
        "default_permissions": {"issues": "write", "contents": "read"},
        "default_events": ["issues", "push"],
        **extra,
    }


def post_manifest(
    gh: SandboxHandle, manifest: object, *, org: str | None = "acme", state: str = "s1"
) -> httpx.Response:
    where = f"/organizations/{org}" if org else ""
    return httpx.post(
        f"{gh.api_url}{where}/settings/apps/new?state={state}",
        data={"manifest": json.dumps(manifest)},
        timeout=30,
    )


def code_of(answer: httpx.Response) -> str:
    assert answer.status_code == 302, answer.text
    query = parse_qs(urlsplit(answer.headers["location"]).query)
    return query["code"][0]


def convert(gh: SandboxHandle, code: str) -> httpx.Response:
    return httpx.post(f"{gh.api_url}/app-manifests/{code}/conversions", headers=HEADERS)


def app_call(gh: SandboxHandle, path: str, app_id: int, pem: str) -> httpx.Response:
    now = int(time.time())
    token = jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(app_id)}, pem, "RS256")
    return httpx.get(
        gh.api_url + path, headers={**HEADERS, "Authorization": f"Bearer {token}"}, timeout=10
    )


def test_the_page_creates_the_app_and_redirects_back_with_a_code_and_the_state(
    gh: SandboxHandle,
) -> None:
    answer = post_manifest(gh, a_manifest(), state="xyz")
    assert answer.status_code == 302
    back = urlsplit(answer.headers["location"])
    assert (back.scheme, back.netloc, back.path) == ("http", "127.0.0.1:9", "/callback")
    query = parse_qs(back.query)
    assert query["state"] == ["xyz"]
    assert query["from"] == ["test"]  # the redirect URL's own query is kept
    assert len(query["code"][0]) == 20


def test_the_code_is_exchanged_once_for_the_apps_credentials(gh: SandboxHandle) -> None:
    code = code_of(post_manifest(gh, a_manifest()))
    answer = convert(gh, code)
    assert answer.status_code == 201
    data = answer.json()
    assert data["slug"] == "autoloop-acme"
    assert data["owner"]["login"] == "acme"
    assert data["owner"]["type"] == "Organization"
    assert data["permissions"] == {"metadata": "read", "issues": "write", "contents": "read"}
    assert data["events"] == ["issues", "push"]
    assert data["client_id"].startswith("Iv1.")
    assert data["client_secret"] and data["webhook_secret"]
    assert data["pem"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    # the key and id authenticate as the new App
    me = app_call(gh, "/app", data["id"], data["pem"])
    assert me.status_code == 200
    assert me.json()["slug"] == "autoloop-acme"
    assert gh.sandbox.state.apps[data["id"]].webhook_url == (
        "https://autoloop.example.com/github/webhook"
    )
    # once only
    again = convert(gh, code)
    assert again.status_code == 404
    assert again.json()["message"] == "Not Found"


def test_a_code_older_than_an_hour_is_refused(gh: SandboxHandle, clock: Clock) -> None:
    code = code_of(post_manifest(gh, a_manifest()))
    clock.shift = timedelta(minutes=61)
    assert convert(gh, code).status_code == 404


def test_an_unknown_code_is_refused(gh: SandboxHandle) -> None:
    assert convert(gh, "0123456789abcdef0123").status_code == 404


def test_a_users_app_belongs_to_the_signed_in_person(gh: SandboxHandle) -> None:
    data = convert(gh, code_of(post_manifest(gh, a_manifest("autoloop-me"), org=None))).json()
    assert data["owner"]["login"] == "maintainer"


@pytest.mark.parametrize(
    ("manifest", "says"),
    [
        ("not an object", "must be a JSON object"),
        ({**a_manifest(), "name": ""}, "Name can't be blank"),
        ({**a_manifest(), "name": "x" * 35}, "too long"),
        ({**a_manifest(), "url": "ftp://example.com"}, "Homepage URL must be an http(s) URL"),
        ({**a_manifest(), "hook_attributes": {"active": True}}, "Webhook URL can't be blank"),
        ({**a_manifest(), "default_permissions": {"issues": "owner"}}, "read or write"),
        ({**a_manifest(), "colour": "blue"}, "unknown manifest keys: colour"),
    ],
)
def test_a_manifest_github_would_refuse_gets_a_page_saying_why(
    gh: SandboxHandle, manifest: object, says: str
) -> None:
    answer = post_manifest(gh, manifest)
    assert answer.status_code == 422
    assert says in answer.text.replace("&#x27;", "'")
    assert not gh.sandbox.state.manifest_codes


def test_a_name_in_use_is_refused(gh: SandboxHandle) -> None:
    code_of(post_manifest(gh, a_manifest()))
    again = post_manifest(gh, a_manifest())
    assert again.status_code == 422
    assert "already in use" in again.text


def test_a_form_that_is_not_json_is_refused(gh: SandboxHandle) -> None:
    answer = httpx.post(
        f"{gh.api_url}/organizations/acme/settings/apps/new", data={"manifest": "{"}
    )
    assert answer.status_code == 422


def test_the_install_page_installs_the_app_with_what_it_asks_for(gh: SandboxHandle) -> None:
    data = convert(gh, code_of(post_manifest(gh, a_manifest()))).json()
    assert app_call(gh, "/app/installations", data["id"], data["pem"]).json() == []
    page = httpx.post(
        f"{gh.api_url}/apps/autoloop-acme/installations/new", data={"account": "acme"}
    )
    assert page.status_code == 200
    found = app_call(gh, "/app/installations", data["id"], data["pem"]).json()
    assert [i["account"]["login"] for i in found] == ["acme"]
    assert found[0]["permissions"] == data["permissions"]
    # installing again answers the same installation
    httpx.post(f"{gh.api_url}/apps/autoloop-acme/installations/new", data={"account": "acme"})
    assert len(app_call(gh, "/app/installations", data["id"], data["pem"]).json()) == 1


def test_installing_on_an_unknown_account_is_refused(gh: SandboxHandle) -> None:
    code_of(post_manifest(gh, a_manifest()))
    page = httpx.post(
        f"{gh.api_url}/apps/autoloop-acme/installations/new", data={"account": "nobody"}
    )
    assert page.status_code == 422
    assert httpx.get(f"{gh.api_url}/apps/nothing/installations/new").status_code == 404


def test_another_apps_delivery_list_is_its_own(gh: SandboxHandle) -> None:
    data = convert(gh, code_of(post_manifest(gh, a_manifest()))).json()
    gh.world.set_app_url("http://127.0.0.1:9/github/webhook")  # the sandbox's own App
    gh.world.open_issue("reader", "one")
    assert gh.world.settle()
    assert gh.world.deliveries  # the sandbox App tried to deliver
    mine = app_call(gh, "/app/hook/deliveries", data["id"], data["pem"])
    assert mine.status_code == 200
    assert mine.json() == []
    first = gh.world.deliveries[0].id
    assert app_call(gh, f"/app/hook/deliveries/{first}", data["id"], data["pem"]).status_code == 404


def test_install_app_is_a_control_operation(gh: SandboxHandle) -> None:
    code_of(post_manifest(gh, a_manifest()))
    answer = httpx.post(
        f"{gh.control_url}/install_app", json={"app": "autoloop-acme", "account": "acme"}
    )
    assert answer.status_code == 200
    assert isinstance(answer.json()["result"], int)
    wrong = httpx.post(f"{gh.control_url}/install_app", json={"app": "nope"})
    assert wrong.status_code == 400
    assert "no App 'nope'" in wrong.json()["message"]
