"""Secret redaction: mask credentials before text is stored, shown or logged.

Use one :class:`Redactor` per process (or per rules version) and pass everything that
leaves the hub through it: agent output, receipts, turn-folder files, ledger rows, logs::

    redactor = Redactor([webhook_secret, master_key, *values_of_secret_env_vars])
    redactor = redactor.with_values([installation_token])   # a new one that also knows it
    redactor.redact("Authorization: Bearer abc123...")
    # -> 'Authorization: Bearer [REDACTED:authorization]'
    redactor.redact_bytes(raw)                              # bytes in, bytes out
    redactor.redact_obj({"token": "x", "body": "..."})      # JSON-like value, same shape

What is masked, each replaced by ``[REDACTED:<kind>]`` (never the length, never a prefix):

- ``value``: the literal ``extra_values``, also URL-encoded, JSON-escaped and base64-encoded
  (at any offset inside a longer base64 run). Values shorter than :data:`MIN_VALUE_LENGTH`
  (8) characters are **ignored**, so that a short value such as ``main`` or ``true`` does
  not mask ordinary words; :attr:`Redactor.skipped` counts them so the caller can warn.
  Surrounding whitespace is ignored too (a value read from a file with its newline).
- ``private-key``: ``-----BEGIN ... PRIVATE KEY-----`` through its END line, also when the
  newlines are JSON-escaped (a literal backslash-n), and up to the end of the key text when
  the END line is missing.
- ``github-token`` (``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_``, and 40-hex tokens after the
  word ``token``), ``jwt``, ``aws-access-key`` (AKIA/ASIA), ``aws-secret-key`` (40
  characters after an ``aws_secret_access_key``-like name), ``slack-token`` (``xox?-``),
  ``api-key`` (``sk-``, ``sk-ant-``), ``npm-token``, ``pypi-token``, ``google-api-key``,
  ``stripe-key``.
- ``authorization`` (the value of an ``Authorization:`` header, scheme word kept),
  ``bearer`` (``Bearer <x>`` anywhere), ``basic`` (``Basic <base64 of user:pass>``).
- ``url-password``: ``scheme://user:PASSWORD@host``.
- ``secret``: the value of an assignment whose key looks secret (``password``, ``secret``,
  ``token``, ``api_key``, ``client_secret``, ``auth``, ``credentials``, ...), in env, YAML,
  JSON (also JSON inside a JSON string), INI, query strings and headers; the key is kept.
  Keys that only describe a secret are left alone (``max_tokens``, ``token_count``,
  ``token_type``, ``secret_env``, ``password_file``...), and so are placeholder values
  (``null``, ``true``, ``${VAR}``, ``<your token>``). A high-entropy hex or base64 string is
  masked only next to such a key: a bare git commit SHA survives.
- ``base64``: a base64 run of 40+ characters whose decoded text contains any of the above.

How it runs: all patterns are one compiled regular expression, but CPython's ``re`` tries
every alternative at every position, which is slow; so the regex is tried only where a
match can start (a rule's start word such as ``token`` or ``ghp_``, a literal value, a
base64 run), found with C-speed searches, and a test checks that this gives exactly what
trying every position gives. A mask can change its neighbours' context, so changed lines
are scanned again until stable: ``redact(redact(x)) == redact(x)``. Repeats are bounded,
so hostile input (a long run of keywords) stays linear. Throughput is a few MB/s on
mixed text (``python bench/redact.py``); text without any start word costs one search.

Known limits: a secret split across lines of a wrapped base64 block; unquoted values with
spaces (``password: two words`` masks only the first word); a secret in prose without a
key or a known shape ("the password is hunter2") unless it is a literal ``extra_value``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar, cast
from urllib.parse import quote, quote_plus

__all__ = [
    "MIN_VALUE_LENGTH",
    "Redactor",
    "is_secret_key",
    "mask",
    "masked_with_escapes",
    "plain_escapes",
]

MIN_VALUE_LENGTH = 8
_MARK = "[REDACTED:"
_MAX_DEPTH = 2  # base64 runs are decoded and scanned at most this deep
_CACHE_TEXT_MAX = 256  # texts up to this length are remembered once redacted
_CACHE_ENTRIES = 8192  # (at most about 2 MB of text)
_MAX_PASSES = 4  # scans of text that keeps changing (see Redactor._redact)

J = TypeVar("J")


def mask(kind: str) -> str:
    """The text that replaces a secret of this kind."""
    return f"{_MARK}{kind}]"


# --- key names ---------------------------------------------------------------------------
# A secret-looking key holds one of these words (case-insensitive). A word followed by a
# lower-case letter is another word ("tokens", "tokenizer", "author"); one followed by a
# descriptive suffix names something about a secret, not the secret itself.
_KEYWORD = (
    r"(?i:passw(?:or)?d|passphrase|(?<=_)pwd|secret|token|auth|credentials?|cookie"
    r"|api[_-]?key|apikey|(?:access|private|signing|master|encryption|client|license"
    r"|account|subscription)[_-]?key|session[_-]?(?:id|key)|signature)"
    r"(?![a-z])(?!S(?![A-Za-z]))"
    r"(?![_.-]?(?i:count|type|url|uri|endpoint|path|file|filename|name|id|len|length|limit"
    r"|usage|used|budget|expires|expiry|expiration|ttl|lifetime|env|ref|hint|prefix|header"
    r"|field|kind|label|format|policy|rotation|required|enabled|version|alg|algorithm"
    r"|method|stdin|scanning)(?![A-Za-z]))"
)
# the lower-case text every keyword starts with: the scan tries matches only where one is
_KEYWORD_STARTS = (
    "pass", "pwd", "secret", "token", "auth", "credential", "cookie", "api", "access",
    "private", "signing", "master", "encryption", "client", "license", "account",
    "subscription", "session", "signature",
)  # fmt: skip
# the match starts at the keyword: a key's prefix ("client_", "aws_") is left as it is;
# the rest of the key is bounded so that a long word full of keywords stays linear
_KEY = _KEYWORD + r"[\w.-]{0,80}"
_KEY_NAME = re.compile(r"[\w.-]*?(?:" + _KEYWORD + r"|(?i:authorization))[\w.-]*", re.ASCII)
# closing quote of the key (plain or JSON-escaped), the separator, an opening quote
_SEP = r"(?:\\?[\"'])?[ \t]*(?:=>|:=|[:=])[ \t]*"
_VALUE = (
    r"(?:\\\"(?P<v1>(?:[^\"\\\n]|\\[^\"\n])*)\\\""
    r"|\"(?P<v2>(?:[^\"\\\n]|\\.)*)\""
    r"|'(?P<v3>[^'\n]*)'"
    r"|(?P<v4>(?:(?i:bearer|token|basic)[ \t]+)?[^\s\"'&<>,;{}\[\]\\]+))"
)
_PLACEHOLDER = re.compile(
    r"(?i:|null|none|nil|true|false|undefined|\*+|x{3,}|<[^>]*>|\$\{.*|\$\(.*|\$[A-Z_][A-Z0-9_]*"
    r"|\{\{.*|\[REDACTED:.*)",
    re.ASCII,
)


def is_secret_key(name: str) -> bool:
    """Whether a key or variable name looks like it holds a secret (``GITHUB_TOKEN``: yes,
    ``max_tokens``: no). :meth:`Redactor.redact_obj` masks whole values under such keys."""
    return _KEY_NAME.fullmatch(name) is not None


# --- patterns ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: str
    # names of the groups holding the value to mask (alternatives); none: the whole match
    values: tuple[str, ...] = ()
    # a second look at the value: False keeps it (its inside is still scanned)
    check: Callable[[str], bool] | None = None
    # lower-case text that every match of this rule starts with
    starts: tuple[str, ...] = ()


def _has_digit_or_long(value: str) -> bool:
    return len(value) >= 16 or any(c.isdigit() for c in value)


def _looks_random(value: str) -> bool:
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )


def _is_basic_credential(value: str) -> bool:
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in raw


def _not_placeholder(value: str) -> bool:
    if value.startswith("-----BEGIN ") and "PRIVATE" not in value[:40]:
        return False  # a PGP/SSH signature, a certificate or a public key is not secret
    return len(value) >= 3 and _PLACEHOLDER.fullmatch(value) is None


_PEM_BODY = r"(?:[A-Za-z0-9+/=\s:,.-]|\\[nr])*"
_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private-key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?s:.{0,16384}?)-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|" + _PEM_BODY + ")",
        starts=("-----begin",),
    ),
    _Rule(
        "authorization",
        r"(?<![A-Za-z0-9_])(?i:authorization)" + _SEP + r"(?:\\?[\"'])?"
        r"(?:(?i:bearer|token|basic|digest|negotiate|ntlm|apikey|key|aws4-hmac-sha256)[ \t]+"
        r"(?P<v1>[^\r\n\"'\\]+)|(?P<v2>[A-Za-z0-9._~+/=-]{8,}))",
        ("v1", "v2"),
        starts=("auth",),
    ),
    _Rule(
        "bearer",
        r"(?<![\w-])(?i:bearer)[ \t]+(?P<v1>[A-Za-z0-9._~+/-]{8,}=*)",
        ("v1",),
        _has_digit_or_long,
        starts=("bearer",),
    ),
    _Rule(
        "basic",
        r"(?<![\w-])Basic[ \t]+(?P<v1>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])",
        ("v1",),
        _is_basic_credential,
        starts=("basic",),
    ),
    _Rule(
        "url-password",
        r"(?<=[A-Za-z0-9])://[^\s:/@\"'<>]*:(?P<v1>[^\s@/?#\"'<>]+)@",
        ("v1",),
        starts=("://",),
    ),
    _Rule(
        "aws-secret-key",
        r"(?i:secret[_.-]?access[_.-]?key)"
        + _SEP
        + r"(?:\\?[\"'])?(?P<v1>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
        ("v1",),
        starts=("secret",),
    ),
    _Rule(
        "secret",
        _KEY + _SEP + _VALUE,
        ("v1", "v2", "v3", "v4"),
        _not_placeholder,
        starts=_KEYWORD_STARTS,
    ),
    # "refresh token renewed: <random>": a short phrase with a secret word, then a value
    # that looks random (upper and lower case letters and digits, so a hex SHA never does)
    _Rule(
        "secret",
        r"(?<![\w-])(?i:passw(?:or)?d|secret|token|api[ _-]?key|credentials?)(?![a-z])"
        r"[\w .-]{0,30}?[:=][ \t]*(?P<v1>[A-Za-z0-9+/_=.~-]{16,})",
        ("v1",),
        _looks_random,
        starts=("pass", "secret", "token", "api", "credential"),
    ),
    _Rule(
        "github-token",
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{22,255})"
        r"(?![A-Za-z0-9])",
        starts=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _Rule(
        "github-token",
        r"(?<![\w-])(?i:token)[ \t]+(?P<v1>[0-9a-fA-F]{40})(?![0-9A-Za-z])",
        ("v1",),
        starts=("token",),
    ),
    _Rule(
        "jwt",
        r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
        starts=("eyj",),
    ),
    _Rule(
        "aws-access-key",
        r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])",
        starts=("akia", "asia"),
    ),
    _Rule(
        "slack-token",
        r"(?<![A-Za-z0-9])(?:xox[abposr]-[A-Za-z0-9-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{10,})",
        starts=("xox", "xapp-"),
    ),
    _Rule(
        "stripe-key",
        r"(?<![A-Za-z0-9])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
        starts=("sk_", "rk_"),
    ),
    _Rule(
        "api-key",
        r"(?<![A-Za-z0-9_-])sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",
        starts=("sk-",),
    ),
    _Rule(
        "npm-token",
        r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])",
        starts=("npm_",),
    ),
    _Rule("pypi-token", r"(?<![A-Za-z0-9])pypi-[A-Za-z0-9_-]{50,}", starts=("pypi-",)),
    _Rule(
        "google-api-key",
        r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])",
        starts=("aiza",),
    ),
)
# Where a match can start: the rules' start words (found case-insensitively), the literal
# values' forms, and the start of every run of 40+ base64 characters.
_STARTS = tuple(sorted({s for rule in _RULES for s in rule.starts}))
_STARTS_REGEX = re.compile(
    "|".join(
        re.escape(first)
        + "(?:"
        + "|".join(re.escape(w[1:]) for w in _STARTS if w[:1] == first)
        + ")"
        for first in sorted({w[:1] for w in _STARTS})
    )
)  # grouped by first byte: about twice as fast as one flat alternation in CPython's re
_BASE64_RUN = r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/=])"
_BASE64_MIN = 40
# bytes.translate table: base64 characters become "A", everything else a space
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BASE64_TABLE = bytes(ord("A") if b in _BASE64_ALPHABET else ord(" ") for b in range(256))


_ESCAPE = re.compile(r"\\(?:(\\)|u([0-9a-fA-F]{4})|(/))")


def plain_escapes(text: str) -> str:
    """``text`` with JSON's ``\\uXXXX`` and ``\\/`` escapes written out, where the
    character needs none in a JSON string: a receipt that spells a secret
    ``shop\\u002dkey`` is read as ``shop-key`` by the kernel, so that is how it must be
    seen to be masked (it reached cards and the ledger in clear). Escaped backslashes,
    quotes, control characters and surrogate halves stay escaped: the JSON reads the same."""

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(0)  # an escaped backslash: what follows is no escape
        if m.group(3):
            return "/"
        ch = chr(int(m.group(2), 16))
        if ch in '"\\' or ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF or ord(ch) == 0x7F:
            return m.group(0)
        return ch

    return _ESCAPE.sub(one, text) if "\\" in text else text


def masked_with_escapes(redact: Callable[[str], str], text: str) -> str:
    """``text`` masked by ``redact``; when a secret shows only once JSON's escapes are
    written out (a receipt's ``shop\\u002dkey``, which the kernel reads as
    ``shop-key``), that written-out text, masked. Text that hides nothing is kept as it
    was (an agent's regex or path with ``\\/`` in it stays); a secret that holds a
    backslash itself is masked before anything is written out."""
    once = redact(text)
    plain = plain_escapes(once)
    if plain == once:
        return once
    again = redact(plain)
    return again if again != plain else once


def _literal_forms(value: str) -> set[str]:
    """The ways a literal secret shows up in stored text."""
    forms = {value, quote(value, safe=""), quote(value), quote_plus(value)}
    forms.add(json.dumps(value)[1:-1])
    forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
    raw = value.encode()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        full = encode(raw).decode()
        forms.update((full, full.rstrip("=")))
        # Inside a longer base64 run the value starts at byte offset 0, 1 or 2 of a
        # 3-byte group; keep the characters that depend on the value's bytes only.
        for offset in range(3):
            text = encode(b"\0" * offset + raw).decode()
            start = -(-offset * 8 // 6)
            end = (offset + len(raw)) * 8 // 6
            forms.add(text[start:end])
    return {f for f in forms if len(f) >= MIN_VALUE_LENGTH}


class Redactor:
    """Masks secrets in text, bytes and JSON-like values; see the module docstring."""

    def __init__(self, extra_values: Iterable[str] = ()) -> None:
        values: set[str] = set()
        skipped = 0
        for value in extra_values:
            if not isinstance(value, str):
                raise TypeError(
                    f"Redactor extra_values must be strings, got {type(value).__name__}; "
                    "decode bytes first"
                )
            stripped = value.strip()
            if len(stripped) < MIN_VALUE_LENGTH or _inside_a_mask(stripped):
                skipped += bool(stripped)
                continue
            values.update({value, stripped})
        self._values = frozenset(values)
        self._cache: dict[str, str] = {}
        #: how many given values are not masked: shorter than MIN_VALUE_LENGTH, or part
        #: of the mask text itself (a value such as "ED:value" would be masked forever)
        self.skipped = skipped
        forms = sorted(
            {f for v in values for f in _literal_forms(v) if not _inside_a_mask(f)},
            key=lambda f: (-len(f), f),
        )
        self._forms = tuple(forms)
        #: run the regex at every position (tests compare this with the fast scan)
        self._exhaustive = False
        literal = "|".join(re.escape(f) for f in forms)
        self._literal = re.compile(literal) if literal else None

        parts: list[str] = []
        self._rules: dict[str, _Rule] = {}
        if literal:
            parts.append(f"(?P<r0>{literal})")
            self._rules["r0"] = _Rule("value", literal)
        for index, rule in enumerate(_RULES, start=1):
            name = f"r{index}"
            pattern = rule.pattern
            values_named = tuple(f"{name}_{v}" for v in rule.values)
            for old, new in zip(rule.values, values_named, strict=True):
                pattern = pattern.replace(f"(?P<{old}>", f"(?P<{new}>")
            parts.append(f"(?P<{name}>{pattern})")
            self._rules[name] = _Rule(rule.kind, pattern, values_named, rule.check)
        name = f"r{len(_RULES) + 1}"
        parts.append(f"(?P<{name}>{_BASE64_RUN})")
        self._rules[name] = _Rule("base64", _BASE64_RUN)
        self._base64_name = name
        self._regex = re.compile("|".join(parts), re.ASCII)

    def with_values(self, extra_values: Iterable[str]) -> Redactor:
        """A new Redactor that also masks these literal values (e.g. a freshly minted token)."""
        return Redactor([*self._values, *extra_values])

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED:<kind>]``.

        Short texts are remembered: webhook details repeat the same names, logins, labels
        and links delivery after delivery, and redaction depends on nothing but the text.
        """
        if len(text) > _CACHE_TEXT_MAX:
            return self._redact(text, 0)
        cache = self._cache
        done = cache.get(text)
        if done is None:
            done = self._redact(text, 0)
            if len(cache) >= _CACHE_ENTRIES:
                cache.clear()  # bounded: at most _CACHE_ENTRIES short texts
            cache[text] = done
        return done

    def redact_bytes(self, data: bytes) -> bytes:
        """Like :meth:`redact` for UTF-8 bytes; bytes that are not UTF-8 pass through as-is."""
        text = data.decode("utf-8", "surrogateescape")
        return self._redact(text, 0).encode("utf-8", "surrogateescape")

    def redact_obj(self, obj: J) -> J:
        """A copy of a JSON-like value (dicts, lists, tuples, str, bytes, scalars) with every
        string redacted and every value under a secret-looking key masked whole."""
        return cast(J, self._walk(obj))

    def _walk(self, obj: object) -> object:
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, bytes):
            return self.redact_bytes(obj)
        if isinstance(obj, Mapping):
            out: dict[object, object] = {}
            for key, value in obj.items():
                if isinstance(key, str) and is_secret_key(key) and is_maskable(value):
                    out[self.redact(key)] = mask("secret")
                else:
                    out[self.redact(key) if isinstance(key, str) else key] = self._walk(value)
            return out
        if isinstance(obj, list):
            return [self._walk(item) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self._walk(item) for item in obj)
        return obj

    def _redact(self, text: str, depth: int) -> str:
        # A mask can change what its neighbours look like (a key that followed a masked
        # token now follows "]"), so the lines that changed are scanned again, until they
        # are stable: redact(redact(x)) == redact(x). Text without secrets takes one pass.
        # Every pattern but the private-key block stays within a line, and a key block's
        # header does not survive its first pass, so unchanged lines need no second look.
        if self._exhaustive:
            return self._redact_exhaustive(text, depth)
        text, spans = self._scan(text, depth)
        for _ in range(_MAX_PASSES - 1):
            if not spans:
                break
            pieces: list[str] = []
            new_spans: list[tuple[int, int]] = []
            last = shift = 0
            for start, end in _line_windows(text, spans):
                piece, inner = self._scan(text[start:end], depth)
                pieces.append(text[last:start])
                new_spans.extend((start + shift + a, start + shift + b) for a, b in inner)
                pieces.append(piece)
                shift += len(piece) - (end - start)
                last = end
            pieces.append(text[last:])
            text, spans = "".join(pieces), new_spans
        return text

    def _redact_exhaustive(self, text: str, depth: int) -> str:
        """The reference: the regex tried at every position of the whole text each pass."""
        for _ in range(_MAX_PASSES):
            out = self._regex.sub(lambda m: self._replace(m, depth), text)
            if self._literal is not None and self._literal.search(out):
                out = self._literal.sub(mask("value"), out)
            if out == text:
                break
            text = out
        return text

    def _scan(self, text: str, depth: int) -> tuple[str, list[tuple[int, int]]]:
        """One pass of ``self._regex.sub`` with the callback, trying the regex only where a
        match can start (C-speed ``find`` calls do the skipping; a test checks it agrees
        with the exhaustive pass). Returns the text and where it changed."""
        if not text:
            return text, []
        candidates, literal_at = self._candidates(text)
        out: list[str] = []
        spans: list[tuple[int, int]] = []
        last = size = 0
        for pos in candidates:
            if pos < last:
                continue
            match = self._regex.match(text, pos)
            if match is None or match.end() == pos:
                continue
            if match.lastgroup == "r0":
                literal_at.discard(pos)
            replacement = self._replace(match, depth)
            out.append(text[last:pos])
            size += pos - last
            if replacement != match.group():
                spans.append((size, size + len(replacement)))
            out.append(replacement)
            size += len(replacement)
            last = match.end()
        if not out:
            result = text
        else:
            out.append(text[last:])
            result = "".join(out)
        # A literal value can lose its first characters to a neighbour's match that was
        # then kept; a literal pass makes sure no whole value survives.
        if literal_at and self._literal is not None and self._literal.search(result):
            result = self._literal.sub(mask("value"), result)
            spans = [(0, len(result))]
        return result, spans

    def _candidates(self, text: str) -> tuple[list[int], set[int]]:
        """Where a match can start, and where a literal value's form starts."""
        # ASCII only, one character for one, so that positions stay the same
        if text.isascii():
            lower = text.lower()
        else:
            lower = text.encode("ascii", "replace").decode("ascii").lower()
        found = {m.start() for m in _STARTS_REGEX.finditer(lower)}
        literal_at: set[int] = set()
        if len(text) >= MIN_VALUE_LENGTH:
            for form in self._forms:
                at = text.find(form)
                while at >= 0:
                    literal_at.add(at)
                    at = text.find(form, at + 1)
            found |= literal_at
        if len(text) >= _BASE64_MIN:
            runs = lower.encode("ascii").translate(_BASE64_TABLE)
            at = runs.find(b"A" * _BASE64_MIN)
            while at >= 0:
                found.add(at)
                end = runs.find(b" ", at)
                if end < 0:
                    break
                at = runs.find(b"A" * _BASE64_MIN, end)
        return sorted(found), literal_at

    def _replace(self, match: re.Match[str], depth: int) -> str:
        name = match.lastgroup or ""  # every alternative is one named group
        rule = self._rules[name]
        whole = match.group(name)
        if name == self._base64_name:
            return self._replace_base64(whole, depth)
        for group in rule.values:
            start, end = match.span(group)
            if start >= 0:
                break
        else:
            return mask(rule.kind)
        value = match.string[start:end]
        # the kept key (or URL user) may itself hold a secret: scan it on its own
        head = self._redact(match.string[match.start() : start], depth)
        tail = match.string[end : match.end()]
        if value.startswith(_MARK):
            return head + value + tail
        if rule.check is not None and not rule.check(value):
            return head + self._redact(value, depth) + tail
        return head + mask(rule.kind) + tail

    def _replace_base64(self, run: str, depth: int) -> str:
        if depth >= _MAX_DEPTH:
            return run
        bare = run.rstrip("=")
        try:
            raw = base64.b64decode(bare + "=" * (-len(bare) % 4), validate=True)
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            return run
        if sum(c.isprintable() or c.isspace() for c in decoded) < 0.9 * len(decoded):
            return run
        if self._redact(decoded, depth + 1) != decoded:
            return mask("base64")
        return run


def _line_windows(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The whole lines around each span, merged where they touch."""
    windows: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        if windows and line_start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], line_end))
        else:
            windows.append((line_start, line_end))
    return windows


def _inside_a_mask(text: str) -> bool:
    return any(text in mask(rule.kind) for rule in _RULES) or text in mask("value") + mask("base64")


def is_maskable(value: object) -> bool:
    """Whether a value under a secret-looking key is masked (not null, a flag or a
    placeholder such as ``${VAR}``)."""
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, str):
        return _not_placeholder(value)
    return True
