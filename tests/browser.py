"""A browser, as far as GitHub's App manifest flow needs one: open a page, send its
form (as the page's script does), follow redirects one at a time."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

import httpx

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Form:
    action: str = ""
    method: str = "get"
    fields: dict[str, str] = field(default_factory=dict)


class _FormReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(Form(found.get("action", ""), found.get("method", "get").lower()))
        elif tag == "input" and self.forms and found.get("name"):
            self.forms[-1].fields[found["name"]] = found.get("value", "")


def first_form(page: str, base: str) -> Form:
    reader = _FormReader()
    reader.feed(page)
    assert reader.forms, f"no form on the page: {page[:300]}"
    form = reader.forms[0]
    form.action = urljoin(base, form.action)
    return form


def register_app(local_url: str) -> tuple[httpx.Response, httpx.Response]:
    """Open ``autoloop app create``'s page and do what its script does: post the form to
    GitHub's page; then follow GitHub's redirect back. Answers (GitHub's answer, the
    callback's answer)."""
    with httpx.Client(timeout=30) as browser:
        page = browser.get(local_url)
        assert page.status_code == 200, page.text
        form = first_form(page.text, local_url)
        assert form.method == "post"
        sent = browser.post(form.action, data=form.fields)
        assert sent.status_code == 302, sent.text
        back = browser.get(sent.headers["location"])
        return sent, back


def start_app_create(
    args: list[str], env: dict[str, str]
) -> tuple[subprocess.Popen[str], str | None]:
    """``autoloop app create ARGS`` as a process, and the page it asks to open (None when
    it stopped before asking; with ``--json`` it asks on stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ghapp.commands.cli", "app", "create", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stream = proc.stderr if "--json" in args else proc.stdout
    assert stream is not None
    line = stream.readline()
    found = re.search(r"open (http://\S+/) in a browser", line)
    return proc, found.group(1) if found else None
