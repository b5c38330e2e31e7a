from __future__ import annotations

import base64
from decimal import Decimal

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gpulease.domain.errors import InvalidInput
from gpulease.domain.money import to_fen
from gpulease.domain.ssh import check_ssh_key
from tests.conftest import ssh_key


def test_real_keys_pass() -> None:
    ed = ssh_key("alice@laptop")
    assert check_ssh_key("  " + ed + "\n") == ed
    pub = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    line = pub.public_bytes(serialization.Encoding.OpenSSH,
                            serialization.PublicFormat.OpenSSH).decode()
    assert check_ssh_key(line) == line


@pytest.mark.parametrize(("line", "says"), [
    ("", "TYPE BASE64"),
    ("ssh-ed25519", "TYPE BASE64"),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "not supported"),
    ("ssh-ed25519 not*base64", "damaged"),
    ("ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00\x07ssh-rsa" + b"x" * 40).decode(),
     "body is 'ssh-rsa'"),
    ("ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519").decode(), "truncated"),
    # a second line of authorized_keys, smuggled in the comment
    (ssh_key("laptop\ncommand=\"curl evil\" " + ssh_key()), "one line"),
    (ssh_key("laptop\rno-pty"), "one line"),
    (ssh_key("x" * 201), "at most 200"),
    # the right shape, but not a key: an ed25519 body of 32 bytes that is one byte short
    ("ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x1f"
                                       + b"k" * 31).decode(), "does not parse"),
])
def test_malformed_keys_say_what_is_wrong(line: str, says: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        check_ssh_key(line)
    assert exc.value.field == "ssh_keys"
    assert says in exc.value.detail


def test_rounding_is_half_up_to_the_fen() -> None:
    assert to_fen(Decimal("0.005")) == Decimal("0.01")
    assert to_fen(Decimal("2253.3333")) == Decimal("2253.33")
    assert to_fen(Decimal("-0.005")) == Decimal("-0.01")
