"""The sizing advisor: from a model and a job to ranked machines with time and cost."""

from __future__ import annotations

from fastapi import APIRouter

from gpulease.api.access import EVERY_USER, access
from gpulease.api.deps import PlatformDep, PrincipalDep
from gpulease.schemas.advisor import AdviceView, AdviseRequest
from gpulease.services.catalog.advisor import advise_job

router = APIRouter(tags=["advisor"])


@router.post("/advise", response_model=AdviceView, openapi_extra=access(*EVERY_USER))
def advise(body: AdviseRequest, p: PlatformDep, actor: PrincipalDep) -> AdviceView:
    """Memory term by term (with the seeds' quick estimate beside it), the offers and GPU
    counts that fit ranked by the job's total cost, time estimates, bare metal or
    container with the reasons, warnings. Reads today's prices and live stock."""
    return advise_job(p, body)
