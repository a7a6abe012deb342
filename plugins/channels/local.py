"""Local card channels: console, desktop notification, generic webhook.

A channel shows a card to people; ``send`` returns the channel's handle for the card
so that later versions update it in place where the channel can.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from kernel.model import ChannelSpec
from kernel.records import Card, Matter
from kernel.text import for_terminal


def render(card: Card) -> str:
    lines = [f"[{card.id}] {card.title}"]
    if card.text:  # every line of it indented: none looks like the hub's own
        lines.append("    " + "\n    ".join(card.text.split("\n")))
    if card.kind_ == "ask" and card.state == "open":
        opts = "  ".join(f"{i}) {o}" for i, o in enumerate(card.options, 1))
        lines.append(f"    {opts}")
        lines.append(f"    answer with: autoloop answer {card.id} N")
    elif card.choice:
        lines.append(f"    answered: {card.options[card.choice - 1]} (by {card.answered_by})")
    return "\n".join(lines)


class ConsoleChannel:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr

    def send(self, card: Card, matter: Matter | None, *, previous_ref: str) -> str:
        print(for_terminal(render(card)), file=self.out, flush=True)
        return f"console:{card.id}"


class DesktopChannel:
    """A desktop notification when ``notify-send`` exists; otherwise the console."""

    def __init__(self) -> None:
        self.binary = shutil.which("notify-send")
        self.fallback = ConsoleChannel()

    def send(self, card: Card, matter: Matter | None, *, previous_ref: str) -> str:
        if self.binary is None:
            return self.fallback.send(card, matter, previous_ref=previous_ref)
        subprocess.run(  # argv only, never a shell
            [self.binary, "--app-name=autoloop", card.title, render(card)],
            check=False,
            timeout=10,
            capture_output=True,
        )
        return f"desktop:{card.id}"


class WebhookChannel:
    """POSTs the card as JSON to the URL named by the channel's ``url_env`` variable."""

    def __init__(
        self,
        spec: ChannelSpec,
        env: Mapping[str, str],
        *,
        link: Callable[[Card], str] | None = None,
    ) -> None:
        var = str(spec.options.get("url_env", ""))
        self.url_env = var
        self.url = env.get(var, "") if var else str(spec.options.get("url", ""))
        self.format = str(spec.options.get("format", "json"))
        #: the signed link to a card's page, for a channel with ``"links": true`` where
        #: the server that answers them runs (``autoloop serve``)
        self.link = link

    def send(self, card: Card, matter: Matter | None, *, previous_ref: str) -> str:
        if not self.url:
            where = f"set {self.url_env} (its url_env)" if self.url_env else "give it a url"
            raise RuntimeError(f"webhook channel has no URL: {where}")
        body: dict[str, Any]
        link = self.link(card) if self.link is not None and card.state == "open" else None
        if self.format == "json":
            body = {
                "card": card.id,
                "kind": card.kind_,
                "state": card.state,
                "title": card.title,
                "text": card.text,
                "options": list(card.options),
                "version": card.version,
            }
            if link is not None:
                body["link"] = link
        else:
            text = render(card)
            if link is not None:
                text += f"\n    or in a browser: {link}"
            body = {"text": text}
        import httpx  # noqa: PLC0415  # loaded when a card is sent this way: a server without it stays small

        resp = httpx.post(self.url, content=json.dumps(body), timeout=10.0)
        resp.raise_for_status()
        return f"webhook:{card.id}"


def channel_makers(env: Mapping[str, str], *, console: TextIO | None = None) -> dict[str, Any]:
    """Makers of the local channels by ``use``: each takes a channel's spec from the rules.

    ``console`` is where console channels print (default: stderr)."""
    return {
        "console": lambda spec: ConsoleChannel(console),
        "desktop": lambda spec: DesktopChannel(),
        "webhook": lambda spec: WebhookChannel(spec, env),
        # github-comment is added by the GitHub App when it is configured.
    }
