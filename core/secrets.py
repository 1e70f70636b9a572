"""Encryption at rest for credentials, tokens and keys (Fernet: AES-128-CBC + HMAC)."""

from __future__ import annotations

import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken


class SecretBox:
    def __init__(self, key: bytes | str) -> None:
        self._fernet = Fernet(key)

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
        return self._fernet.encrypt(json.dumps(value).encode()).decode()

    def open(self, ciphertext: str) -> dict[str, Any]:
        try:
            value: dict[str, Any] = json.loads(self._fernet.decrypt(ciphertext.encode()))
        except InvalidToken as error:
            raise RuntimeError(
                "A stored secret cannot be decrypted: SPACEDOCK_SECRET_KEY is not the key it was "
                "sealed with."
            ) from error
        return value
