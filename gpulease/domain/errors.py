"""Domain errors. Each carries a sentence that tells the caller what to do."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from gpulease.domain.phrases import Gettext, Phrase, phrase


class DomainError(Exception):
    status = 400
    title = "Bad request"

    def __init__(self, detail: str | Phrase, /, **params: Any) -> None:
        self.phrase = detail if isinstance(detail, Phrase) else Phrase(detail, params)
        self.detail = self.phrase.said()
        super().__init__(self.detail)

    def said(self, gettext: Gettext) -> str:
        """The sentence in gettext's language (`detail` is the English one)."""
        return self.phrase.said(gettext)


class InvalidInput(DomainError):
    status = 422
    title = "Invalid input"

    def __init__(self, field: str, detail: str | Phrase, accepted: Sequence[str] | None = None,
                 /, **params: Any) -> None:
        said = detail if isinstance(detail, Phrase) else Phrase(detail, params)
        if accepted is not None:
            said = phrase("{what} Accepted values: {values}.", what=said,
                          values=", ".join(accepted))
        super().__init__(said)
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


class QuotaExceeded(Conflict):
    title = "Quota exceeded"


class BudgetExceeded(Conflict):
    title = "Budget exceeded"


class BadGateway(DomainError):
    """A device the platform talks to (a BMC) failed or could not be reached."""

    status = 502
    title = "Bad gateway"


class TooManyRequests(DomainError):
    status = 429
    title = "Too many requests"

    def __init__(self, detail: str | Phrase, /, retry_after_s: int = 60, **params: Any
                 ) -> None:
        super().__init__(detail, **params)
        self.retry_after_s = retry_after_s


class Unavailable(DomainError):
    """The platform cannot take this up now (no worker serves the site); retry later."""

    status = 503
    title = "Service unavailable"

    def __init__(self, detail: str | Phrase, /, retry_after_s: int = 60, **params: Any
                 ) -> None:
        super().__init__(detail, **params)
        self.retry_after_s = retry_after_s


class Gone(DomainError):
    status = 410
    title = "Gone"


class PaymentRequired(DomainError):
    """The balance (with any credit limit) does not cover what the request holds."""

    status = 402
    title = "Payment required"

    def __init__(self, detail: str | Phrase, missing: Decimal, /, **params: Any) -> None:
        super().__init__(detail, **params)
        self.missing = missing
