"""Secrets: API tokens (random, prefixed, stored hashed), passwords (argon2id) and
encryption at rest for BMC and root passwords (Fernet, key from settings)."""

from __future__ import annotations

import hashlib
import secrets
import string
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerifyMismatchError
from cryptography.fernet import Fernet, InvalidToken

TOKEN_PREFIX = "glp_"
_hasher = PasswordHasher()  # argon2id with the library's current parameters


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


def new_api_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is enough (no dictionary to guess from).
    return hashlib.sha256(token.encode()).hexdigest()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerifyMismatchError, InvalidHashError):
        return False


def new_root_password(length: int = 20) -> str:
    alphabet = string.ascii_letters + string.digits + "-_.!"
    return "".join(secrets.choice(alphabet) for _ in range(length))


class SecretBox:
    """Encrypts secrets before they reach the database."""

    def __init__(self, key: str) -> None:
        self._key = key.encode()
        try:
            self._fernet = Fernet(key.encode())
        except (ValueError, TypeError):
            raise ValueError(
                "GPULEASE_SECRET_KEY is not a valid Fernet key; "
                "generate one with: python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'"
            ) from None

    def derive(self, purpose: str) -> bytes:
        """A key for one purpose (the audit trail's MAC), derived from the secret key."""
        return hashlib.sha256(b"gpulease/" + purpose.encode() + b"/" + self._key).digest()

    def fingerprint(self) -> str:
        """Names the key without revealing it (kept in the database: a process with another
        key refuses to start)."""
        return hashlib.sha256(b"gpulease/fingerprint/" + self._key).hexdigest()[:16]

    def seal(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            raise ValueError("secret cannot be decrypted with the configured key") from None


def load_or_create_key(key: str, data_dir: Path) -> str:
    if key:
        return key
    path = data_dir / "secret.key"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    new = Fernet.generate_key().decode()
    path.write_text(new)
    path.chmod(0o600)
    return new
