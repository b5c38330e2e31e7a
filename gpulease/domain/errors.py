"""Domain errors. Each carries a sentence that tells the caller what to do."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal


class DomainError(Exception):
    status = 400
    title = "Bad request"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidInput(DomainError):
    status = 422
    title = "Invalid input"

    def __init__(self, field: str, detail: str, accepted: Sequence[str] | None = None) -> None:
        if accepted is not None:
            detail = f"{detail} Accepted values: {', '.join(accepted)}."
        super().__init__(detail)
        self.field = field
        self.accepted = list(accepted) if accepted is not None else None


class NotFound(DomainError):
    status = 404
    title = "Not found"


class Forbidden(DomainError):
    status = 403
    title = "Forbidden"


class Unauthorized(DomainError):
    status = 401
    title = "Unauthorized"


class Conflict(DomainError):
    status = 409
    title = "Conflict"


class OutOfStock(Conflict):
    title = "Out of stock"


class BadGateway(DomainError):
    """A device the platform talks to (a BMC) failed or could not be reached."""

    status = 502
    title = "Bad gateway"


class TooManyRequests(DomainError):
    status = 429
    title = "Too many requests"

    def __init__(self, detail: str, retry_after_s: int = 60) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class Gone(DomainError):
    status = 410
    title = "Gone"


class PaymentRequired(DomainError):
    """The balance (with any credit limit) does not cover what the request holds."""

    status = 402
    title = "Payment required"

    def __init__(self, detail: str, missing: Decimal) -> None:
        super().__init__(detail)
        self.missing = missing
