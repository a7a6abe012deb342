"""Any GitHub client works against the sandbox unchanged: a plain httpx script that
follows GitHub's documented flow (App JWT -> installation token -> REST calls)."""

from __future__ import annotations

import base64
import time

import httpx
import jwt

from fakegithub.server import running_sandbox


def test_a_plain_httpx_script_reads_the_policy_and_comments() -> None:
    with running_sandbox() as gh:
        number = gh.world.open_issue("reader", "Please triage")
        base = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        now = int(time.time())
        app_token = jwt.encode(
            {"iat": now - 60, "exp": now + 540, "iss": str(gh.app_id)},
            gh.private_key_path.read_text(),
            algorithm="RS256",
        )
        with httpx.Client(base_url=gh.api_url, headers=base, timeout=10) as http:
            found = http.get(
                "/repos/sandbox/demo/installation", headers={"Authorization": f"Bearer {app_token}"}
            )
            assert found.status_code == 200 and found.json()["id"] == gh.installation_id
            minted = http.post(
                f"/app/installations/{found.json()['id']}/access_tokens",
                headers={"Authorization": f"Bearer {app_token}"},
            )
            assert minted.status_code == 201
            auth = {"Authorization": f"token {minted.json()['token']}"}
            policy = http.get(
                "/repos/sandbox/demo/contents/.github/autoloop.toml",
                params={"ref": "main"},
                headers=auth,
            )
            assert policy.status_code == 200
            assert b"[deliver]" in base64.b64decode(policy.json()["content"])
            said = http.post(
                f"/repos/sandbox/demo/issues/{number}/comments",
                json={"body": "Triaged."},
                headers=auth,
            )
            assert said.status_code == 201
            listed = http.get(f"/repos/sandbox/demo/issues/{number}/comments", headers=auth).json()
            assert [(c["user"]["login"], c["body"]) for c in listed] == [
                ("autoloop-sandbox[bot]", "Triaged.")
            ]
