"""Money is a Decimal amount of CNY, rounded half-up to the fen once per line."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Annotated

from pydantic import PlainSerializer

FEN = Decimal("0.01")

# Serialized as a string so no float ever touches an amount.
Money = Annotated[Decimal, PlainSerializer(lambda v: f"{v:.2f}", return_type=str)]


def to_fen(amount: Decimal) -> Decimal:
    """Round a computed line amount to the fen, half-up (the one rounding per line)."""
    return amount.quantize(FEN, rounding=ROUND_HALF_UP)
