"""The advisor as a service: the request checked (errors name the field and the accepted
values), the catalog at today's prices and live stock, the advice as a view."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.tables import AcceptanceReport, Node
from gpulease.domain.advisor import Advice, Ask, Market, advise
from gpulease.domain.catalog import Catalog
from gpulease.domain.errors import InvalidInput
from gpulease.domain.phrases import stored
from gpulease.domain.sizing import (
    Architecture,
    Job,
    Precision,
    SizingError,
    Workload,
    parse_params,
    shape_for,
)
from gpulease.ports.records import Priced
from gpulease.schemas.advisor import AdviceOptionView, AdviceTermView, AdviceView, AdviseRequest
from gpulease.services.catalog.offers import bare_metal_stock, container_stock

SHAPE = ("layers", "hidden", "heads", "kv_heads", "vocab", "ffn")


def _enum(value: str, kind: type[Workload] | type[Precision], name: str
          ) -> Workload | Precision:
    try:
        return kind(value.lower())
    except ValueError:
        raise InvalidInput(name, "Unknown {name} {value!r}.", [k.value for k in kind],
                           name=name, value=value) from None


def job_of(req: AdviseRequest) -> Job:
    workload = _enum(req.workload, Workload, "workload")
    precision = _enum(req.precision, Precision, "precision")
    assert isinstance(workload, Workload) and isinstance(precision, Precision)
    try:
        given = [getattr(req, f) for f in SHAPE]
        if all(v is not None for v in given):
            arch = Architecture(layers=req.layers or 0, hidden=req.hidden or 0,
                                heads=req.heads or 0, kv_heads=req.kv_heads or 0,
                                vocab=req.vocab or 0, ffn=req.ffn or 0, mlp=req.mlp,
                                norm=req.norm, experts=req.experts, top_k=req.top_k,
                                bias=req.bias, tied_embeddings=req.tied_embeddings,
                                learned_positions=req.learned_positions,
                                pre_norm=not req.post_norm)
        elif req.params is not None:
            if any(v is not None for v in given):
                missing = [f for f, v in zip(SHAPE, given, strict=True) if v is None]
                raise SizingError(missing[0], "Give the whole architecture ({shape}), or "
                                  "only params; missing: {missing}.",
                                  shape=", ".join(SHAPE), missing=", ".join(missing))
            arch = shape_for(parse_params(req.params))
        else:
            raise SizingError("params", "Give the model's size (params, e.g. 70B) or its "
                                        "architecture ({shape}).", shape=", ".join(SHAPE))
        return Job(arch, workload, precision, seq_len=req.seq_len, batch=req.batch,
                   checkpointing=req.checkpointing, lora_rank=req.lora_rank)
    except SizingError as exc:
        raise InvalidInput(exc.field, exc.phrase, exc.accepted) from None


def view(advice: Advice) -> AdviceView:
    return AdviceView(
        params=advice.params, active_params=advice.active_params,
        shape_inferred=advice.shape_inferred, quick_estimate_gb=round(advice.quick_estimate_gb, 1),
        quick_estimate=str(advice.quick_estimate_text),
        memory=[AdviceTermView(name=n, gb=round(gb, 2), why=why) for n, gb, why in advice.terms],
        total_gb=round(advice.total_gb, 2), work=advice.work,
        options=[AdviceOptionView(**{**asdict(o), "notes": list(o.notes),
                                     "per_gpu_gb": {k: round(v, 2) for k, v in o.per_gpu_gb},
                                     "hours": round(o.hours, 1),
                                     "nominal_hours": round(o.nominal_hours, 1),
                                     "memory_per_gpu_gb": round(o.memory_per_gpu_gb, 1),
                                     "memory_usable_gb": round(o.memory_usable_gb, 1),
                                     "tokens_per_hour": round(o.tokens_per_hour)})
                 for o in advice.options],
        recommendation=str(advice.recommendation),
        bare_metal_reasons=[str(r) for r in advice.bare_metal_reasons],
        warnings=[str(w) for w in advice.warnings],
        phrases={"recommendation": stored(advice.recommendation)[1],
                 "quick_estimate": stored(advice.quick_estimate_text)[1],
                 "warnings": [stored(w)[1] for w in advice.warnings]},
        assumptions={k: round(float(v), 4) for k, v in asdict(advice.assumptions).items()})


def measured_matmul(s: Session, catalog: Catalog, recent: int = 200) -> dict[str, float]:
    """The median bf16 matmul TFLOP/s per GPU model from this platform's recent acceptance
    runs on real hardware (simulated reports do not count)."""
    rows = s.execute(select(Node.sku, AcceptanceReport.report_json)
                     .join(Node, Node.id == AcceptanceReport.node_id)
                     .where(AcceptanceReport.simulated.is_(False))
                     .order_by(AcceptanceReport.created_at.desc()).limit(recent)).all()
    by_gpu: dict[str, list[float]] = {}
    for sku, report in rows:
        if sku not in catalog.sku_by_id:
            continue
        gpu = catalog.sku_by_id[sku].gpu
        for check in json.loads(report).get("checks", []):
            if check.get("name") == "matmul_bf16" and check.get("value"):
                by_gpu.setdefault(gpu, []).append(float(check["value"]))
    return {gpu: statistics.median(values) for gpu, values in by_gpu.items()}


def advise_job(p: Priced, req: AdviseRequest) -> AdviceView:
    job = job_of(req)
    book = p.price_book()
    with p.db.read() as s:
        stock = {f"{sku}@{region}": n for (sku, region), n in bare_metal_stock(s).items()}
        hosts = container_stock(s)
        measured = measured_matmul(s, book)
    cstock = {co.id: hosts.get((co.host_sku, co.region), 0) for co in book.container_offers}
    if req.gpu and req.gpu not in {g.id for g in book.gpus}:
        raise InvalidInput("gpu", "Unknown GPU {req_gpu!r}.", [g.id for g in book.gpus],
                           req_gpu=req.gpu)
    ask = Ask(req.tokens, req.hours, req.budget, req.domestic, req.gpu, req.limit)
    return view(advise(book, job, ask, Market(stock, cstock, measured)))
