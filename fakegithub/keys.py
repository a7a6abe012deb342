"""RSA keys for the sandbox's Apps, made in a background thread when asked early.

Key generation releases the GIL, so the command line starts it before importing the
server and the two overlap (a measurable part of the start time)."""

from __future__ import annotations

import threading

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

KeyPair = tuple[str, bytes]  # (private PEM text, public PEM bytes)


def make_key() -> KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


class KeyInTheMaking:
    """A key being generated in a thread; :meth:`get` waits for it."""

    def __init__(self) -> None:
        self._result: list[KeyPair] = []
        self._thread = threading.Thread(target=lambda: self._result.append(make_key()))
        self._thread.start()

    def get(self) -> KeyPair:
        self._thread.join()
        return self._result[0] if self._result else make_key()
