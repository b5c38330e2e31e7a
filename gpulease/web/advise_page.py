"""The advisor in the console: a model and a job in, the machines that fit out (cheapest
first, with their time and cost), and each one a click from its order form, filled in
(the order is then reviewed before anything is held)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from gpulease.api.access import EVERY_USER, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.errors import DomainError
from gpulease.schemas.advisor import AdviceOptionView, AdviseRequest
from gpulease.services.catalog.advisor import advise_job
from gpulease.web.pages import Who, page, page_context, refusal

router = APIRouter(prefix="/console", include_in_schema=False,
                   dependencies=[Depends(page_context)])
WORKLOADS = ("inference", "lora", "qlora", "full-finetune", "pretrain")
PRECISIONS = ("bf16", "fp16", "fp8", "int8", "int4", "fp32")
Text = Annotated[str | None, Query(max_length=32)]


def order_link(o: AdviceOptionView) -> str:
    """The option's order form, filled in: a server or a cluster on one fabric by its
    term, or a container's GPUs."""
    if o.kind == "container":
        return "/console/order?" + urlencode({"offer": o.offer, "gpus": o.gpus})
    term = o.term if o.term in ("day", "month", "year") else "month"
    return "/console/order?" + urlencode({
        "sku": o.sku, "region": o.region, "kind": "cluster" if o.nodes > 1 else "bare_metal",
        "nodes": o.nodes, "term": term})


@router.get("/advise", response_class=HTMLResponse, openapi_extra=access(*EVERY_USER))
def advise_page(p: PlatformDep, who: Who, params: Text = None, workload: Text = None,
                precision: Text = "bf16", hours: Text = None, tokens: Text = None,
                budget: Text = None, domestic: Annotated[bool, Query()] = False
                ) -> HTMLResponse:
    form = {"params": params or "", "workload": workload or "lora",
            "precision": precision or "bf16", "hours": hours or "", "tokens": tokens or "",
            "budget": budget or "", "domestic": domestic}
    if not params:
        return page("advise.html", who=who, form=form, workloads=WORKLOADS,
                    precisions=PRECISIONS, advice=None)
    try:
        req = AdviseRequest(params=params, workload=form["workload"],
                            precision=form["precision"], hours=hours or None,
                            tokens=tokens or None, budget=budget or None, domestic=domestic)
        advice = advise_job(p, req)
    except (DomainError, ValidationError) as exc:
        status, why = refusal(exc)
        return page("advise.html", status, who=who, form=form, workloads=WORKLOADS,
                    precisions=PRECISIONS, advice=None, error=why)
    return page("advise.html", who=who, form=form, workloads=WORKLOADS,
                precisions=PRECISIONS, advice=advice,
                links=[order_link(o) for o in advice.options])
