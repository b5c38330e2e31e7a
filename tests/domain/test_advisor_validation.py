"""The advisor's memory model against real measurement: six PyTorch models of different
shapes (MoE, grouped KV, a wide vocabulary, deep and narrow, post-LN, tied embeddings; each
with nn.RMSNorm or LayerNorm as its family has it), built on the CPU; parameter, gradient
and optimizer-state bytes measured exactly, activations as autograd saved them for one
forward and backward pass, in fp32 and bf16. The estimates must be within ±10 % of each
(docs/advisor.md has the table)."""

from __future__ import annotations

import pytest
import torch  # the test extra installs it; the advisor itself needs none

from gpulease.domain.sizing import Job, Precision, Workload, memory_terms
from tests.domain.advisor_models import (
    BERT_LIKE,
    DEEP_NARROW,
    GPT2_LIKE,
    LLAMA_LIKE,
    MOE,
    WIDE_VOCAB,
    Config,
    measure,
)

MODELS = {"gpt2-like": GPT2_LIKE, "llama-like": LLAMA_LIKE, "bert-like": BERT_LIKE,
          "moe": MOE, "wide-vocab": WIDE_VOCAB, "deep-narrow": DEEP_NARROW}
TOLERANCE = 0.10


def estimate(cfg: Config, precision: Precision, batch: int, seq_len: int) -> dict[str, float]:
    job = Job(cfg.architecture(), Workload.PRETRAIN, precision, seq_len=seq_len, batch=batch,
              checkpointing=False)
    return {t.name: t.bytes for t in memory_terms(job)}


@pytest.mark.parametrize("name", MODELS)
def test_parameters_gradients_and_adam_state_match_exactly(name: str) -> None:
    cfg = MODELS[name]
    real = measure(cfg, batch=2, seq_len=128)
    est = estimate(cfg, Precision.FP32, 2, 128)
    assert cfg.architecture().params == real.params
    assert est["weights"] == real.weight_bytes
    assert est["gradients"] == real.gradient_bytes
    assert est["optimizer"] == real.optimizer_bytes  # Adam: two fp32 moments


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", MODELS)
def test_activations_within_10_percent(name: str, dtype: str) -> None:
    cfg = MODELS[name]
    precision = Precision.FP32 if dtype == "float32" else Precision.BF16
    for batch, seq_len in ((2, 256), (1, 512)):
        real = measure(cfg, batch, seq_len, getattr(torch, dtype),
                       activations_only=True).activation_bytes
        est = estimate(cfg, precision, batch, seq_len)["activations"]
        assert abs(est - real) / real <= TOLERANCE, (name, dtype, batch, seq_len, est, real)
