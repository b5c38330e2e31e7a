"""Request and answer models of the sizing advisor."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpulease.domain.billing.money import Money


class AdviseRequest(BaseModel):
    """A model and a job; the advisor answers which machines, how long, what it costs."""

    model_config = ConfigDict(extra="forbid")
    params: str | None = Field(None, max_length=20,
                               description="7B, 70B, 350M…; or give the architecture")
    layers: int | None = Field(None, ge=1, le=10_000)
    hidden: int | None = Field(None, ge=1, le=1_000_000)
    heads: int | None = Field(None, ge=1, le=100_000)
    kv_heads: int | None = Field(None, ge=1, le=100_000)
    vocab: int | None = Field(None, ge=1, le=100_000_000)
    ffn: int | None = Field(None, ge=1, le=10_000_000, description="MLP inner width")
    mlp: str = Field("swiglu", max_length=16)
    norm: str = Field("rmsnorm", max_length=16)
    experts: int = Field(1, ge=1, le=100_000)
    top_k: int = Field(1, ge=1, le=1024)
    bias: bool = Field(False, description="linear layers carry biases (GPT-2, BERT)")
    tied_embeddings: bool = Field(False, description="the output head shares the "
                                  "embedding matrix")
    learned_positions: int = Field(0, ge=0, le=100_000_000, description="rows of a learned "
                                   "position table (GPT-2: 1024); 0: rotary positions")
    post_norm: bool = Field(False, description="post-LN blocks (BERT): norms after the "
                            "residual add, no final norm")
    workload: str = Field(max_length=32,
                          description="inference, pretrain, full-finetune, lora, qlora")
    precision: str = Field("bf16", max_length=8,
                           description="fp32, bf16, fp16, fp8, int8, int4")
    seq_len: int = Field(4096, ge=1, le=100_000_000)
    batch: int = Field(1, ge=1, le=1_000_000, description="micro-batch per GPU, in sequences")
    checkpointing: bool = True
    lora_rank: int = Field(16, ge=1, le=1_000_000)
    tokens: float | None = Field(None, gt=0, le=1e18, description="tokens to process")
    hours: float | None = Field(None, gt=0, le=1e6,
                                description="planned hours (nominal speed)")
    budget: Decimal | None = Field(None, gt=0, max_digits=14, decimal_places=2)
    domestic: bool = Field(False, description="domestic hardware required (Ascend 910B)")
    gpu: str | None = Field(None, description="only this GPU (id, e.g. rtx4090-24g)")
    limit: int = Field(12, ge=1, le=100)


class AdviceOptionView(BaseModel):
    kind: str
    offer: str
    sku: str
    region: str
    gpu: str
    nodes: int
    gpus: int
    layout: str
    memory_per_gpu_gb: float
    memory_usable_gb: float
    hours: float
    nominal_hours: float
    term: str
    periods: int
    cost: Money
    stock: int
    in_stock: bool
    within_budget: bool
    tokens_per_hour: float
    notes: list[str]
    per_gpu_gb: dict[str, float] = Field(description="each memory term on one GPU")


class AdviceTermView(BaseModel):
    name: str
    gb: float
    why: str


class AdviceView(BaseModel):
    params: int
    active_params: int
    shape_inferred: bool
    quick_estimate_gb: float
    quick_estimate: str
    memory: list[AdviceTermView]
    total_gb: float
    work: str
    options: list[AdviceOptionView]
    recommendation: str
    bare_metal_reasons: list[str]
    warnings: list[str]
    assumptions: dict[str, float]
    # the sentences above as phrases (JSON), for the console's reader's language
    phrases: dict[str, Any] = Field(default_factory=dict, exclude=True)
