"""Encryption at rest for credentials, tokens and keys (Fernet: AES-128-CBC + HMAC).

A box holds one or more keys: the first seals, every one opens (cryptography's
MultiFernet), so a key is rotated without downtime: put the new key first and keep the
old one after it, re-seal what is stored under the new one (`spacedock secrets reseal`),
then drop the old key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

UNREADABLE = (
    "A stored secret cannot be decrypted: SPACEDOCK_SECRET_KEY does not hold the key it was "
    "sealed with."
)


class SecretBox:
    def __init__(self, keys: bytes | str | Sequence[bytes | str]) -> None:
        listed = [keys] if isinstance(keys, bytes | str) else list(keys)
        if not listed:
            raise ValueError("a SecretBox needs at least one key")
        fernets = [Fernet(key) for key in listed]
        self._sealing = fernets[0]
        self._opening = MultiFernet(fernets)
        self.key_count = len(fernets)

    @staticmethod
    def generate_key() -> str:
        return Fernet.generate_key().decode()

    @staticmethod
    def is_valid_key(key: str) -> bool:
        try:
            Fernet(key)
        except (ValueError, TypeError):
            return False
        return True

    def seal(self, value: dict[str, Any]) -> str:
        return self._sealing.encrypt(json.dumps(value).encode()).decode()

    def open(self, ciphertext: str) -> dict[str, Any]:
        try:
            value: dict[str, Any] = json.loads(self._opening.decrypt(ciphertext.encode()))
        except InvalidToken as error:
            raise RuntimeError(UNREADABLE) from error
        return value

    def sealed_with_first(self, ciphertext: str) -> bool:
        """Whether the first key sealed it (nothing to re-seal)."""
        try:
            self._sealing.decrypt(ciphertext.encode())
        except InvalidToken:
            return False
        return True

    def resealed(self, ciphertext: str) -> str:
        """The same secret sealed under the first key; RuntimeError when no key opens it."""
        try:
            return self._opening.rotate(ciphertext.encode()).decode()
        except InvalidToken as error:
            raise RuntimeError(UNREADABLE) from error
