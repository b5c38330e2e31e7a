"""A tenant's billing profile: what a Chinese VAT invoice (发票) prints about the buyer.
A 普票 (ordinary invoice) needs the title (抬头) and, for a company, its taxpayer id
(纳税人识别号); a 专票 (special VAT invoice, which lets the buyer deduct input VAT) needs
the title, the taxpayer id, the registered address and phone, and the bank and account.
Pure checks; the services store and print it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

# The unified social credit code (统一社会信用代码, GB 32100-2015): 18 characters of this
# set, the last a check character computed from the first 17.
_CODE_CHARS = "0123456789ABCDEFGHJKLMNPQRTUWXY"
_WEIGHTS = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)
_LEGACY = re.compile(r"[0-9A-Z]{15}|[0-9A-Z]{17}|[0-9A-Z]{20}")  # tax registration numbers
_ACCOUNT = re.compile(r"[0-9][0-9 -]{5,38}[0-9]")


class InvoiceType(StrEnum):
    NORMAL = "normal"  # 增值税普通发票
    SPECIAL = "special"  # 增值税专用发票


def credit_code_check(first17: str) -> str:
    """The check character of a unified social credit code's first 17 characters."""
    total = sum(_CODE_CHARS.index(c) * w for c, w in zip(first17, _WEIGHTS, strict=True))
    return _CODE_CHARS[(31 - total % 31) % 31]


def tax_id_problem(tax_id: str) -> str | None:
    """Why `tax_id` is not a taxpayer id, or None: an 18-character unified social credit
    code with a right check character, or a 15/17/20-character registration number from
    before the unified code."""
    if len(tax_id) == 18:
        if any(c not in _CODE_CHARS for c in tax_id):
            return ("a unified social credit code uses digits and capital letters other "
                    "than I, O, S, V and Z")
        if credit_code_check(tax_id[:17]) != tax_id[17]:
            return "its check character does not match: a character is mistyped"
        return None
    if _LEGACY.fullmatch(tax_id):
        return None
    return (f"a taxpayer id is the 18-character unified social credit code (or a 15-, 17- "
            f"or 20-character number from before it), not {len(tax_id)} characters")


@dataclass(frozen=True)
class Profile:
    title: str
    tax_id: str
    address: str
    phone: str
    bank: str
    bank_account: str
    invoice_type: InvoiceType
    email: str


def profile_problems(p: Profile) -> list[tuple[str, str]]:
    """(field, what to do) for each thing the profile lacks for its invoice type."""
    out: list[tuple[str, str]] = []
    if not p.title.strip():
        out.append(("title", "The invoice title (发票抬头: the company's or person's name) "
                             "is required."))
    if p.tax_id:
        why = tax_id_problem(p.tax_id)
        if why:
            out.append(("tax_id", f"Taxpayer id {p.tax_id!r}: {why}."))
    if p.bank_account and not _ACCOUNT.fullmatch(p.bank_account):
        out.append(("bank_account", "A bank account number is 7 to 40 digits (spaces and "
                                    "dashes allowed between them)."))
    if p.invoice_type == InvoiceType.SPECIAL:
        for field, name in (("tax_id", "taxpayer id (纳税人识别号)"),
                            ("address", "registered address (地址)"),
                            ("phone", "phone (电话)"), ("bank", "bank (开户行)"),
                            ("bank_account", "bank account (账号)")):
            if not getattr(p, field).strip():
                out.append((field, f"A special VAT invoice (专票) needs the buyer's {name}."))
    return out
