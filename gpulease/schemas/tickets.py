"""Tickets as the API sees them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpulease.domain.tickets import summary_phrase
from gpulease.schemas.text import Lines, OneLine


class TicketOpen(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instance_id: str | None = Field(default=None, max_length=32, description=(
        "the instance it is about; left out for a question about the account, billing or "
        "an order not placed yet"))
    summary: Annotated[str, OneLine] = Field(min_length=3, max_length=300)
    details: Annotated[str | None, Lines] = Field(default=None, max_length=10_000)
    gpu: int | None = Field(default=None, ge=0, le=15, description="the GPU, if one")
    severity: Literal["P1", "P2", "P3"] = Field(
        default="P2", description="P1 a node or GPU down, P2 degraded, P3 a question")


class TicketComment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    body: Annotated[str, Lines] = Field(min_length=1, max_length=10_000)
    internal: bool = Field(default=False, description="operators only: not shown to the "
                           "tenant")


class TicketAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: Annotated[str | None, Lines] = Field(default=None, max_length=10_000)


class SwapRequest(TicketAction):
    copy_data: bool = Field(default=False, description=(
        "copy the data disk from the faulty server to the spare before the faulty one is "
        "erased"))
    via: Literal["agents", "bucket"] = Field(default="agents", description=(
        "with copy_data: 'agents' copies straight from the faulty server's agent to the "
        "spare's (encrypted, each file verified); 'bucket' as a backup to the tenant's "
        "bucket and a verified restore (the snapshot is kept)"))
    path: str = Field(default="/data", max_length=1024,
                      description="what to copy: a directory on the data disk")


class TicketView(BaseModel):
    id: str
    tenant_id: str | None
    instance_id: str | None
    node: str | None
    gpu: int | None
    kind: str
    severity: str
    summary: str
    status: str
    opened_by: str
    opened_at: datetime
    acknowledged_at: datetime | None
    mitigated_at: datetime | None
    resolved_at: datetime | None
    response_due: datetime | None
    mitigation_due: datetime | None
    resolution_due: datetime | None
    breached: list[str]  # the clocks past their deadline without their milestone
    at_risk: list[str]  # the clocks past the warning share of their length

    @property
    def summary_phrase(self) -> dict[str, Any] | None:
        """The summary as a phrase (JSON) where the platform wrote it, for the console to
        say in the reader's language; derived from kind, GPU and summary when read."""
        said = summary_phrase(self.kind, self.gpu, self.summary)
        return said.to_json() if said is not None else None


class TimelineEntry(BaseModel):
    at: datetime
    kind: Literal["opened", "status", "comment", "evidence", "note"]
    actor: str
    text: str
    ref: str | None = None
    internal: bool = False
    # a line the platform wrote, as a phrase (JSON), for the console's reader's language
    phrase: str | None = Field(default=None, exclude=True)


class RepairWindowProposal(BaseModel):
    """An operator proposes when the node goes out for a card repair (its tenant accepts)."""

    start: datetime = Field(description="when the node goes out (ISO 8601, with its zone)")
    hours: float = Field(gt=0, le=168, description="how long it may take, at most")
    note: str | None = Field(default=None, max_length=10_000,
                             description="what will be done, for the tenant")


class RepairWindowAnswer(BaseModel):
    accept: bool = Field(description="true: the node may go out in the proposed window")
    note: Annotated[str | None, Lines] = Field(default=None, max_length=10_000)


class RepairWindow(BaseModel):
    start: datetime
    end: datetime
    accepted_at: datetime | None  # None: waiting for the tenant
    begun_at: datetime | None  # the node went out for repair


class TicketDetail(TicketView):
    timeline: list[TimelineEntry]
    repair_window: RepairWindow | None = None
