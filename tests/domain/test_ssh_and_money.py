from __future__ import annotations

import base64
from decimal import Decimal

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gpulease.domain.billing.money import to_fen
from gpulease.domain.errors import InvalidInput
from gpulease.domain.ssh import check_ssh_key
from gpulease.testing.callers import ssh_key


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
], ids=lambda v: v[:24])  # stable ids: the generated keys differ per process
def test_malformed_keys_say_what_is_wrong(line: str, says: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        check_ssh_key(line)
    assert exc.value.field == "ssh_keys"
    assert says in exc.value.detail


def test_rounding_is_half_up_to_the_fen() -> None:
    assert to_fen(Decimal("0.005")) == Decimal("0.01")
    assert to_fen(Decimal("2253.3333")) == Decimal("2253.33")
    assert to_fen(Decimal("-0.005")) == Decimal("-0.01")


def test_a_quotes_vat_is_summed_per_line_as_on_the_invoice() -> None:
    """One H100 month, 7 Mbit/s of public bandwidth and 1 GB of egress, prices including
    VAT: rounding the total once would make the VAT ¥4,791.82; per line, as the invoice
    and a fapiao do it, it is ¥4,791.83, in both VAT modes the quote's lines add up."""
    from gpulease.domain.billing.invoicing import totals, vat_split
    from gpulease.domain.billing.pricing import Quantity, quote
    from gpulease.domain.catalog import load_catalog

    catalog = load_catalog(None)
    addons = {"egress": Decimal(1), "public-bandwidth": Decimal(7)}
    q = quote(catalog, "h100-80g-x8", "ningxia-1", "month", Quantity(1, 1, addons))
    assert (q.net, q.vat, q.total) == (Decimal("79863.67"), Decimal("4791.83"),
                                       Decimal("84655.50"))
    for included in (True, False):
        rules = catalog.pricing.model_copy(update={"prices_include_vat": included})
        c = catalog.model_copy(update={"pricing": rules})
        q = quote(c, "h100-80g-x8", "ningxia-1", "month", Quantity(1, 1, addons))
        lines = totals(vat_split(line.amount, q.vat_rate, included) for line in q.lines)
        assert (q.net, q.vat, q.total) == (lines.net, lines.vat, lines.gross)
        assert q.net + q.vat == q.total
