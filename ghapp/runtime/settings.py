"""Settings from the environment or a TOML file (DESIGN.md section 3).

| variable | file key | meaning | default |
|---|---|---|---|
| ``AUTOLOOP_HOME`` | ``home`` | state folder | ``~/.autoloop`` |
| ``AUTOLOOP_DB`` | ``db`` | ledger URL | ``sqlite:///<home>/ledger.db`` |
| ``AUTOLOOP_GITHUB_APP_ID`` | ``github_app_id`` | the App's numeric id | |
| ``AUTOLOOP_GITHUB_PRIVATE_KEY`` | ``github_private_key`` | PEM file path or PEM text | |
| ``AUTOLOOP_GITHUB_WEBHOOK_SECRET`` | ``github_webhook_secret`` | webhook secret | |
| ``AUTOLOOP_GITHUB_URL`` | ``github_url`` | REST API base URL | ``https://api.github.com`` |

A value set in the environment wins over the same key in the file (the file holds
the defaults of a deployment, the environment overrides them for one process); an
empty environment value counts as unset. Without an explicit file, ``settings.toml`` in
the home folder (``AUTOLOOP_HOME``, else ``$HOME/.autoloop``) is read when it exists:
``autoloop app create`` writes the App's settings there. A relative key path in a file
is taken from the file's folder, so a home folder can move (a backup restored elsewhere,
a container's volume).
Nothing is checked until it is needed: :meth:`Settings.require_github` checks the
GitHub part and raises :class:`SettingsError`, whose text is one line that names
the setting and says what to do.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_GITHUB_URL",
    "MIN_SECRET_CHARS",
    "SETTINGS_FILE",
    "GitHubSettings",
    "Settings",
    "SettingsError",
    "hmac_source",
    "home_settings_file",
    "source_secret_var",
    "weak_secret",
    "write_settings_file",
]

DEFAULT_GITHUB_URL = "https://api.github.com"
PREFIX = "AUTOLOOP_"
KEYS = ("home", "db", "github_app_id", "github_private_key", "github_webhook_secret", "github_url")
PEM_BEGIN = "-----BEGIN"
SETTINGS_FILE = "settings.toml"


# A webhook or source secret signs what may start an agent: one short or made of a few
# characters can be found from a single signed request by trying them all, and then
# anyone can send "a maintainer commented" with a valid signature. GitHub's manifest
# flow makes 40 hexadecimal characters; ``secrets.token_hex(32)``, 64.
MIN_SECRET_CHARS = 16
MIN_SECRET_DISTINCT = 6
RANDOM_HEX_COMMAND = """python3 -c 'import secrets; print(secrets.token_hex(32))'"""


def _looks_like_path(value: str) -> bool:
    """A file path as people write one: one short line naming a folder or a .pem file."""
    one_line = "\n" not in value and "\\n" not in value and len(value) <= 300
    return one_line and ("/" in value or value.lower().endswith((".pem", ".key")))


class SettingsError(Exception):
    """A setting is missing or malformed; ``str()`` is one line saying what to do."""


def source_secret_var(name: str) -> str:
    """The variable a signed source's secret is read from by default: its name upper-cased,
    each character a shell cannot put in a variable's name (``-``, ``.``) as ``_``
    (source ``my-shop``: ``AUTOLOOP_SOURCE_MY_SHOP_SECRET``)."""
    return "AUTOLOOP_SOURCE_" + re.sub(r"[^A-Z0-9_]", "_", name.upper()) + "_SECRET"


def hmac_source(
    name: str, options: Mapping[str, object], env: Mapping[str, str]
) -> tuple[str, bytes]:
    """The signature header and the secret of the signed source ``name`` (its options in
    rules.json; the secret from the variable ``secret_env`` names, by default
    :func:`source_secret_var`), checked: set, and not weak (:func:`weak_secret`)."""
    var = str(options.get("secret_env", source_secret_var(name)))
    secret = env.get(var)
    if not secret and "secret_env" not in options:
        # the earlier default, still read: with "-" or "." in it, set outside a shell
        secret = env.get(f"AUTOLOOP_SOURCE_{name.upper()}_SECRET")
    if not secret:
        raise SettingsError(f"source {name!r}: set {var} to its HMAC secret")
    why = weak_secret(secret)
    if why is not None:
        raise SettingsError(
            f"source {name!r}: {var} is too weak ({why}); whoever sees one signed request "
            f"could find it and forge others. Make one with {RANDOM_HEX_COMMAND} and give it "
            "to the sender too"
        )
    return str(options.get("header", "x-signature-256")), secret.encode()


def weak_secret(value: str) -> str | None:
    """Why ``value`` is too weak to verify signed requests with; None when it is not."""
    text = value.strip()
    if len(text) < MIN_SECRET_CHARS:
        return f"{len(text)} characters: at least {MIN_SECRET_CHARS} are needed"
    distinct = len(set(text))
    if distinct < MIN_SECRET_DISTINCT:
        kinds = "character" if distinct == 1 else "characters"
        return f"only {distinct} different {kinds}: a random one is needed"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class GitHubSettings:
    """The GitHub App's settings, checked."""

    app_id: int
    private_key: str  # PEM text of an RSA private key
    webhook_secret: bytes
    api_url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    home: Path
    db: str
    github_app_id: str | None = None
    github_private_key: str | None = None
    github_webhook_secret: str | None = None
    github_url: str = DEFAULT_GITHUB_URL
    file: Path | None = None  # where file values came from, for messages

    @classmethod
    def from_env(cls, env: Mapping[str, str], file: Path | None = None) -> Settings:
        """Read ``AUTOLOOP_*`` from ``env`` over the keys of the TOML ``file``; without
        one, over ``settings.toml`` of the home folder when it exists."""
        if file is None:
            found = home_settings_file(env)
            file = found if found is not None and found.is_file() else None
        values = _read_file(file) if file is not None else {}
        key_in_file = values.get("github_private_key", "").strip()
        if file is not None and key_in_file and not key_in_file.startswith(PEM_BEGIN):
            # a key file named relative to the settings file: beside it, wherever it moved
            values["github_private_key"] = str(file.parent / Path(key_in_file).expanduser())
        for key in KEYS:
            raw = env.get(PREFIX + key.upper())
            if raw is not None and raw.strip() != "":
                values[key] = raw
        if "home" in values:
            home = Path(values["home"]).expanduser()
        else:
            user_home = env.get("HOME")
            home = (Path(user_home) if user_home else Path.home()) / ".autoloop"
        db = values.get("db") or f"sqlite:///{home / 'ledger.db'}"
        return cls(
            home=home,
            db=db,
            github_app_id=values.get("github_app_id"),
            github_private_key=values.get("github_private_key"),
            github_webhook_secret=values.get("github_webhook_secret"),
            github_url=(values.get("github_url") or DEFAULT_GITHUB_URL).rstrip("/"),
            file=file,
        )

    def _where(self, key: str) -> str:
        name = PREFIX + key.upper()
        return f"{name} (or {key} in {self.file})" if self.file is not None else name

    def require_github(self) -> GitHubSettings:
        """The checked GitHub App settings, or a :class:`SettingsError` naming the first
        missing or malformed one."""
        return GitHubSettings(
            app_id=self._app_id(),
            private_key=self._private_key(),
            webhook_secret=self._webhook_secret(),
            api_url=self._api_url(),
        )

    def require_app_key(self) -> tuple[int, str]:
        """The App's checked id and private key (PEM text), without a webhook secret: for
        a process that only calls GitHub (the Action), never receives its webhooks."""
        return self._app_id(), self._private_key()

    def _app_id(self) -> int:
        raw = (self.github_app_id or "").strip()
        where = self._where("github_app_id")
        if not raw:
            raise SettingsError(
                f"{where} is not set: set it to the GitHub App's numeric App ID "
                "(shown on the App's settings page)"
            )
        if not raw.isdigit() or int(raw) <= 0:
            raise SettingsError(
                f"{where} must be the App's numeric App ID (a positive integer), not {raw!r}"
            )
        return int(raw)

    def _private_key(self) -> str:
        raw = (self.github_private_key or "").strip()
        where = self._where("github_private_key")
        what_to_do = "set it to the path of the App's private key file (.pem) or to its PEM text"
        if not raw:
            raise SettingsError(f"{where} is not set: {what_to_do}")
        if raw.startswith(PEM_BEGIN):
            # one-line env values often carry the newlines as the two characters \n
            text = raw.replace("\\n", "\n")
            origin = "the PEM text"
        else:
            path = Path(raw).expanduser()
            try:
                text = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "unreadable"
                # a value that does not look like a path may be the key itself, pasted
                # without its BEGIN line: it is not repeated (logs and CI output keep it)
                shown = str(path) if _looks_like_path(raw) else f"a value of {len(raw)} characters"
                raise SettingsError(
                    f"{where} is neither PEM text nor a readable file ({shown}: {reason}): "
                    f"{what_to_do}"
                ) from None
            origin = f"the file {path}"
        # loaded only when a key is given: a server without a GitHub App stays small
        from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415
        from cryptography.hazmat.primitives.serialization import load_pem_private_key  # noqa: PLC0415

        try:
            key = load_pem_private_key(text.encode("utf-8") + b"\n", password=None)
        except (ValueError, TypeError):
            raise SettingsError(
                f"{where}: {origin} is not an unencrypted PEM private key: {what_to_do} "
                "(download a new key from the App's settings page if needed)"
            ) from None
        if not isinstance(key, rsa.RSAPrivateKey):
            raise SettingsError(
                f"{where}: {origin} is not an RSA key; GitHub Apps sign with RSA keys: {what_to_do}"
            )
        return text + "\n"

    def webhook_secret(self) -> bytes:
        """The webhook secret, checked (set, and not weak), without the App's id and key:
        a server that only verifies and records webhooks."""
        return self._webhook_secret()

    def _webhook_secret(self) -> bytes:
        raw = self.github_webhook_secret or ""
        if not raw.strip():
            raise SettingsError(
                f"{self._where('github_webhook_secret')} is not set: set it to the webhook "
                "secret entered in the App's settings"
            )
        why = weak_secret(raw)
        if why is not None:
            raise SettingsError(
                f"{self._where('github_webhook_secret')} is too weak ({why}); whoever sees one "
                "signed delivery could find it and forge webhooks. Make one with "
                f"{RANDOM_HEX_COMMAND} and enter it here and in the App's settings"
            )
        return raw.encode("utf-8")

    def _api_url(self) -> str:
        url = self.github_url
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise SettingsError(
                f"{self._where('github_url')} must be an http(s) URL of the REST API "
                f"(default {DEFAULT_GITHUB_URL}), not {url!r}"
            )
        return url


def home_settings_file(env: Mapping[str, str]) -> Path | None:
    """``settings.toml`` in the home folder ``env`` names (``AUTOLOOP_HOME``, else
    ``$HOME/.autoloop``); None when ``env`` names neither."""
    home = (env.get("AUTOLOOP_HOME") or "").strip()
    if home:
        return Path(home).expanduser() / SETTINGS_FILE
    user_home = (env.get("HOME") or "").strip()
    return Path(user_home) / ".autoloop" / SETTINGS_FILE if user_home else None


def _read_file(file: Path) -> dict[str, str]:
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(
            f"cannot read the settings file {file}: {exc.strerror or exc}; check the --config path"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{file} is not valid TOML ({exc}); fix the file") from None
    out: dict[str, str] = {}
    for key, value in data.items():
        if key not in KEYS:
            raise SettingsError(
                f"{file}: unknown setting {key!r}; known settings are {', '.join(KEYS)}"
            )
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise SettingsError(f"{file}: {key} must be a string, not {type(value).__name__}")
        out[key] = str(value)
    return out


def _toml_value(value: str | int) -> str:
    # A JSON string is a TOML basic string (the same escapes), and an int is an int.
    return str(value) if isinstance(value, int) else json.dumps(value)


def write_settings_file(file: Path, updates: Mapping[str, str | int]) -> None:
    """Set ``updates`` in the TOML settings ``file`` (created when missing), keeping its
    other keys; the file is replaced in one step and readable by its owner only (mode
    0600: it holds the webhook secret). Comments of an existing file are not kept."""
    for key in updates:
        if key not in KEYS:
            raise ValueError(f"unknown setting {key!r}")
    values: dict[str, str | int] = dict(_read_file(file)) if file.exists() else {}
    values.update(updates)
    text = "# Autoloop settings (see docs/github-app.md); AUTOLOOP_* variables override them.\n"
    text += "".join(f"{key} = {_toml_value(values[key])}\n" for key in KEYS if key in values)
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, file)
