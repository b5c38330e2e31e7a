"""SSH public key checks: a malformed key is refused at order time, not at delivery."""

from __future__ import annotations

import base64
import binascii
import struct

from gpulease.domain.errors import InvalidInput

KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)


def check_ssh_key(line: str, field: str = "ssh_keys") -> str:
    """Return the key normalised to 'type base64 [comment]' or raise InvalidInput."""
    parts = line.strip().split(None, 2)
    if len(parts) < 2:
        raise InvalidInput(
            field, "An SSH public key is 'TYPE BASE64 [COMMENT]' (the .pub file's one line).",
        )
    key_type, blob = parts[0], parts[1]
    if key_type not in KEY_TYPES:
        raise InvalidInput(field, f"SSH key type {key_type!r} is not supported.", KEY_TYPES)
    try:
        raw = base64.b64decode(blob, validate=True)
        (length,) = struct.unpack(">I", raw[:4])
        embedded = raw[4 : 4 + length].decode("ascii")
    except (binascii.Error, struct.error, UnicodeDecodeError, ValueError):
        raise InvalidInput(
            field, "The SSH key's base64 body is damaged; paste the .pub file."
        ) from None
    if embedded != key_type:
        raise InvalidInput(
            field, f"The SSH key says {key_type!r} but its body is {embedded!r}."
        )
    if len(raw) < 4 + length + 16:
        raise InvalidInput(field, "The SSH key's body is truncated; paste the whole .pub line.")
    return " ".join(parts)
