"""SSH public key checks: a malformed key is refused at order time, not at delivery. A key
is one line (a newline in its comment would be a second line of authorized_keys: another
key, or options, of the sender's choosing), of a known type, and it parses."""

from __future__ import annotations

import base64
import binascii
import struct

from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from gpulease.domain.errors import InvalidInput

MAX_COMMENT = 200
PARSED = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
          "ecdsa-sha2-nistp521")  # read in full by cryptography; the sk- kinds by shape

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
    line = line.strip()
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in line):
        raise InvalidInput(field, "An SSH public key is one line without control characters "
                           "(a line break in its comment would add a line to "
                           "authorized_keys); paste each key as its own list item.")
    parts = line.split(None, 2)
    if len(parts) < 2:
        raise InvalidInput(
            field, "An SSH public key is 'TYPE BASE64 [COMMENT]' (the .pub file's one line).",
        )
    key_type, blob = parts[0], parts[1]
    if key_type not in KEY_TYPES:
        raise InvalidInput(field, "SSH key type {key_type!r} is not supported.", KEY_TYPES,
                           key_type=key_type)
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
            field, "The SSH key says {key_type!r} but its body is {embedded!r}.",
            key_type=key_type, embedded=embedded)
    if len(raw) < 4 + length + 16:
        raise InvalidInput(field, "The SSH key's body is truncated; paste the whole .pub line.")
    if key_type in PARSED:
        try:
            load_ssh_public_key(f"{key_type} {blob}".encode())
        except (ValueError, TypeError):
            raise InvalidInput(field, "The SSH key does not parse as a public key of its "
                               "type; paste the .pub file as it is.") from None
    if len(parts) == 3 and len(parts[2]) > MAX_COMMENT:
        raise InvalidInput(field, "An SSH key's comment has at most {max_comment} "
                           "characters.", max_comment=MAX_COMMENT)
    return " ".join(parts)


def ssh_address(ip_address: str | None, endpoint: str | None) -> tuple[str | None, int]:
    """Where a tenant's `ssh` goes for a server: its SSH endpoint behind NAT or a port
    forward (HOST:PORT, set at enrollment) when it has one, else the address its agent
    reported, port 22."""
    if not endpoint:
        return ip_address, 22
    host, _sep, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)
