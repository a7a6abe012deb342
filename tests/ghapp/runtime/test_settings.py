"""Settings come from the environment or a TOML file; bad ones say what to do in one line."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ghapp.runtime.settings import (
    DEFAULT_GITHUB_URL,
    Settings,
    SettingsError,
    hmac_source,
    home_settings_file,
    source_secret_var,
    weak_secret,
    write_settings_file,
)


@functools.cache
def rsa_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


def github_env(**over: str) -> dict[str, str]:
    env = {
        "HOME": "/home/someone",
        "AUTOLOOP_GITHUB_APP_ID": "12345",
        "AUTOLOOP_GITHUB_PRIVATE_KEY": rsa_pem(),
        "AUTOLOOP_GITHUB_WEBHOOK_SECRET": "s3cret-for-the-settings-tests",
    }
    env.update(over)
    return env


def error_of(settings: Settings) -> str:
    with pytest.raises(SettingsError) as info:
        settings.require_github()
    text = str(info.value)
    assert "\n" not in text
    return text


def test_defaults_follow_the_design() -> None:
    s = Settings.from_env({"HOME": "/home/someone"})
    assert s.home == Path("/home/someone/.autoloop")
    assert s.db == "sqlite:////home/someone/.autoloop/ledger.db"
    assert s.github_url == DEFAULT_GITHUB_URL == "https://api.github.com"


def test_home_and_db_come_from_the_environment() -> None:
    s = Settings.from_env({"AUTOLOOP_HOME": "/srv/al", "AUTOLOOP_DB": "postgresql://db/al"})
    assert s.home == Path("/srv/al")
    assert s.db == "postgresql://db/al"
    assert Settings.from_env({"AUTOLOOP_HOME": "/srv/al"}).db == "sqlite:////srv/al/ledger.db"


def test_github_settings_from_the_environment() -> None:
    env = github_env(AUTOLOOP_GITHUB_URL="http://127.0.0.1:9000/api/")
    gh = Settings.from_env(env).require_github()
    assert gh.app_id == 12345
    assert gh.private_key.startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert gh.webhook_secret == b"s3cret-for-the-settings-tests"
    assert gh.api_url == "http://127.0.0.1:9000/api"


def test_private_key_may_be_a_file_path(tmp_path: Path) -> None:
    pem = tmp_path / "app.pem"
    pem.write_text(rsa_pem())
    gh = Settings.from_env(github_env(AUTOLOOP_GITHUB_PRIVATE_KEY=str(pem))).require_github()
    assert gh.private_key == rsa_pem()


def test_private_key_text_with_escaped_newlines_is_accepted() -> None:
    one_line = rsa_pem().strip().replace("\n", "\\n")
    gh = Settings.from_env(github_env(AUTOLOOP_GITHUB_PRIVATE_KEY=one_line)).require_github()
    assert gh.private_key == rsa_pem()


def test_settings_file_uses_lower_case_keys_and_env_wins(tmp_path: Path) -> None:
    pem = tmp_path / "app.pem"
    pem.write_text(rsa_pem())
    conf = tmp_path / "settings.toml"
    conf.write_text(
        f'home = "{tmp_path}"\ngithub_app_id = 777\ngithub_private_key = "{pem}"\n'
        'github_webhook_secret = "from-file"\ngithub_url = "http://127.0.0.1:1/"\n'
    )
    s = Settings.from_env({"AUTOLOOP_GITHUB_WEBHOOK_SECRET": "from-env-webhook-secret"}, conf)
    gh = s.require_github()
    assert s.home == tmp_path
    assert (gh.app_id, gh.webhook_secret, gh.api_url) == (
        777,
        b"from-env-webhook-secret",
        "http://127.0.0.1:1",
    )


def test_missing_app_id_says_which_setting_and_what_to_do() -> None:
    env = github_env()
    del env["AUTOLOOP_GITHUB_APP_ID"]
    text = error_of(Settings.from_env(env))
    assert text.startswith("AUTOLOOP_GITHUB_APP_ID is not set")
    assert "App ID" in text


def test_app_id_that_is_not_an_integer_is_refused() -> None:
    text = error_of(Settings.from_env(github_env(AUTOLOOP_GITHUB_APP_ID="my-app")))
    assert "AUTOLOOP_GITHUB_APP_ID must be the App's numeric App ID" in text
    assert "'my-app'" in text


def test_missing_setting_names_the_file_key_too(tmp_path: Path) -> None:
    conf = tmp_path / "settings.toml"
    conf.write_text('github_app_id = "1"\n')
    text = error_of(Settings.from_env({}, conf))
    assert text.startswith(f"AUTOLOOP_GITHUB_PRIVATE_KEY (or github_private_key in {conf})")


def test_private_key_neither_file_nor_pem_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    text = error_of(Settings.from_env(github_env(AUTOLOOP_GITHUB_PRIVATE_KEY=str(missing))))
    assert "neither PEM text nor a readable file" in text
    assert str(missing) in text
    assert "path of the App's private key file" in text


@pytest.mark.parametrize(
    "value",
    [
        "\n".join(rsa_pem().strip().splitlines()[1:-1]),  # pasted without its BEGIN/END lines
        "\\n".join(rsa_pem().strip().splitlines()[1:-1]),  # the same on one line
        "supersecretgarbagekeyvalue123",
    ],
)
def test_a_private_key_value_that_is_no_path_is_not_repeated(value: str) -> None:
    """It may be the key itself: the error line goes to logs and CI output."""
    text = error_of(Settings.from_env(github_env(AUTOLOOP_GITHUB_PRIVATE_KEY=value)))
    shown = f"neither PEM text nor a readable file (a value of {len(value.strip())} characters"
    assert shown in text
    for line in value.replace("\\n", "\n").splitlines():
        assert line[:20] not in text


def test_private_key_file_without_a_key_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("hello\n")
    text = error_of(Settings.from_env(github_env(AUTOLOOP_GITHUB_PRIVATE_KEY=str(bad))))
    assert f"the file {bad} is not an unencrypted PEM private key" in text


def test_garbled_pem_text_is_refused() -> None:
    garbled = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"
    text = error_of(Settings.from_env(github_env(AUTOLOOP_GITHUB_PRIVATE_KEY=garbled)))
    assert "the PEM text is not an unencrypted PEM private key" in text


def test_a_non_rsa_key_is_refused() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    text = error_of(Settings.from_env(github_env(AUTOLOOP_GITHUB_PRIVATE_KEY=pem)))
    assert "is not an RSA key" in text


def test_missing_webhook_secret_is_refused() -> None:
    env = github_env()
    del env["AUTOLOOP_GITHUB_WEBHOOK_SECRET"]
    assert error_of(Settings.from_env(env)).startswith("AUTOLOOP_GITHUB_WEBHOOK_SECRET is not set")


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        ("s3cret", "6 characters: at least 16 are needed"),
        ("   short-one    ", "9 characters: at least 16 are needed"),
        ("a" * 40, "only 1 different character: a random one is needed"),
        ("abababababababababab", "only 2 different characters: a random one is needed"),
    ],
)
def test_a_weak_webhook_secret_is_refused_with_how_to_make_one(secret: str, why: str) -> None:
    settings = Settings.from_env(github_env(AUTOLOOP_GITHUB_WEBHOOK_SECRET=secret))
    text = error_of(settings)
    assert text.startswith(f"AUTOLOOP_GITHUB_WEBHOOK_SECRET is too weak ({why}); "), text
    assert "secrets.token_hex(32)" in text and "in the App's settings" in text
    with pytest.raises(SettingsError, match="too weak"):
        settings.webhook_secret()  # a server that only records webhooks refuses it too


@pytest.mark.parametrize("secret", ["0123456789abcdef", "It's a Secret to Everybody"])
def test_a_secret_of_16_characters_or_more_of_six_kinds_is_taken(secret: str) -> None:
    assert weak_secret(secret) is None
    assert Settings.from_env(github_env(AUTOLOOP_GITHUB_WEBHOOK_SECRET=secret)).webhook_secret()


def test_api_url_must_be_http() -> None:
    text = error_of(Settings.from_env(github_env(AUTOLOOP_GITHUB_URL="api.example")))
    assert "AUTOLOOP_GITHUB_URL must be an http(s) URL" in text


def test_unknown_key_in_the_file_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "settings.toml"
    conf.write_text('github_appid = "1"\n')
    with pytest.raises(SettingsError, match="unknown setting 'github_appid'"):
        Settings.from_env({}, conf)


def test_bad_toml_and_missing_file_are_clear_errors(tmp_path: Path) -> None:
    conf = tmp_path / "settings.toml"
    conf.write_text("github_app_id = \n")
    with pytest.raises(SettingsError, match="is not valid TOML"):
        Settings.from_env({}, conf)
    with pytest.raises(SettingsError, match="cannot read the settings file"):
        Settings.from_env({}, tmp_path / "absent.toml")


def test_a_table_where_a_value_belongs_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "settings.toml"
    conf.write_text("[github_url]\nx = 1\n")
    with pytest.raises(SettingsError, match="github_url must be a string, not dict"):
        Settings.from_env({}, conf)


def test_settings_toml_of_the_home_folder_is_read_without_config(tmp_path: Path) -> None:
    (tmp_path / "settings.toml").write_text('github_app_id = 42\ngithub_webhook_secret = "f"\n')
    s = Settings.from_env({"AUTOLOOP_HOME": str(tmp_path), "AUTOLOOP_GITHUB_WEBHOOK_SECRET": "e"})
    assert s.file == tmp_path / "settings.toml"
    assert (s.github_app_id, s.github_webhook_secret) == ("42", "e")
    user = tmp_path / "user"
    (user / ".autoloop").mkdir(parents=True)
    (user / ".autoloop" / "settings.toml").write_text("github_app_id = 7\n")
    assert Settings.from_env({"HOME": str(user)}).github_app_id == "7"
    assert Settings.from_env({"HOME": str(tmp_path / "nobody")}).file is None


def test_without_home_or_autoloop_home_no_file_is_looked_for() -> None:
    assert home_settings_file({}) is None
    assert home_settings_file({"AUTOLOOP_HOME": "/srv/al"}) == Path("/srv/al/settings.toml")


def test_a_relative_key_path_in_a_file_is_taken_from_the_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "moved-home"
    home.mkdir()
    (home / "app.pem").write_text(rsa_pem())
    (home / "settings.toml").write_text(
        'github_app_id = 5\ngithub_private_key = "app.pem"\n'
        'github_webhook_secret = "x-moved-home-secret"\n'
    )
    monkeypatch.chdir(tmp_path)  # not the home folder
    s = Settings.from_env({"AUTOLOOP_HOME": str(home)})
    assert s.github_private_key == str(home / "app.pem")
    assert s.require_github().app_id == 5
    # in the environment, a relative path stays relative to the working folder
    env = {"AUTOLOOP_HOME": str(home), "AUTOLOOP_GITHUB_PRIVATE_KEY": "app.pem"}
    assert Settings.from_env(env).github_private_key == "app.pem"


def test_writing_settings_keeps_other_keys_and_is_private(tmp_path: Path) -> None:
    conf = tmp_path / "settings.toml"
    conf.write_text('db = "sqlite:////srv/al.db"\ngithub_app_id = 1\n')
    write_settings_file(conf, {"github_app_id": 99, "github_webhook_secret": 'a"b\\c'})
    assert oct(conf.stat().st_mode & 0o777) == "0o600"
    s = Settings.from_env({}, conf)
    assert (s.db, s.github_app_id, s.github_webhook_secret) == (
        "sqlite:////srv/al.db",
        "99",
        'a"b\\c',
    )
    with pytest.raises(ValueError, match="unknown setting"):
        write_settings_file(conf, {"github_appid": 1})


@pytest.mark.parametrize(
    ("name", "var"),
    [
        ("shop", "AUTOLOOP_SOURCE_SHOP_SECRET"),
        ("my-shop", "AUTOLOOP_SOURCE_MY_SHOP_SECRET"),
        ("shop.v2", "AUTOLOOP_SOURCE_SHOP_V2_SECRET"),
    ],
)
def test_a_source_secret_is_read_from_a_variable_a_shell_can_set(name: str, var: str) -> None:
    """A source may be named with '-' or '.'; a shell cannot export a variable named so."""
    assert source_secret_var(name) == var
    secret = "a-long-enough-source-secret"
    assert hmac_source(name, {}, {var: secret}) == ("x-signature-256", secret.encode())
    with pytest.raises(SettingsError, match=f"source '{name}': set {var} to its HMAC secret"):
        hmac_source(name, {}, {})


def test_the_earlier_variable_name_of_a_source_secret_is_still_read() -> None:
    env = {"AUTOLOOP_SOURCE_MY-SHOP_SECRET": "set-through-a-service-file"}
    assert hmac_source("my-shop", {"header": "x-sig"}, env) == (
        "x-sig",
        b"set-through-a-service-file",
    )
    # a source that names its variable reads that one only
    with pytest.raises(SettingsError, match="set SHOP_HMAC"):
        hmac_source("my-shop", {"secret_env": "SHOP_HMAC"}, env)
