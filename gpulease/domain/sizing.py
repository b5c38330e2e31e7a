"""How much GPU memory a model needs, term by term, and how it splits over GPUs.

Pure arithmetic; no PyTorch. Every term carries the sentence that explains it, so the
advisor can show its working. Activation terms count what autograd keeps for the backward
pass of a standard decoder/encoder block with fused (flash) attention, per token and per
layer (validated against real PyTorch models in tests/advisor).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gpulease.domain.phrases import Phrase

GB = 1e9


class Workload(StrEnum):
    INFERENCE = "inference"
    PRETRAIN = "pretrain"
    FULL_FINETUNE = "full-finetune"
    LORA = "lora"
    QLORA = "qlora"

    @property
    def trains(self) -> bool:
        return self is not Workload.INFERENCE

    @property
    def full(self) -> bool:
        return self in (Workload.PRETRAIN, Workload.FULL_FINETUNE)


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bytes(self) -> float:
        return {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
                "int4": 0.5}[self.value]


class SizingError(ValueError):
    """Bad advisor input; `field` names what to fix, `accepted` lists valid values."""

    def __init__(self, field_name: str, message: str, accepted: list[str] | None = None,
                 /, **params: Any) -> None:
        self.phrase = Phrase(message, params)
        super().__init__(self.phrase.said())
        self.field, self.accepted = field_name, accepted


@dataclass(frozen=True)
class Architecture:
    """A transformer's shape. `ffn` is the MLP's inner width; `mlp` 'gelu' (two matrices)
    or 'swiglu' (three); `norm` 'layernorm' or 'rmsnorm'; `experts` > 1 for MoE (each
    token through `top_k` of them)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    ffn: int
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    bias: bool = False
    tied_embeddings: bool = False
    learned_positions: int = 0  # rows of a learned position table (GPT-2, BERT); 0: RoPE
    pre_norm: bool = True  # False: post-LN (BERT), no final norm
    experts: int = 1
    top_k: int = 1
    inferred: bool = False  # shape guessed from a parameter count
    nominal_params: float | None = None  # the count the shape was guessed from (70B)

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "vocab", "ffn", "experts",
                     "top_k"):
            if getattr(self, name) < 1:
                raise SizingError(name, "{name} must be a positive integer, not "
                                        "{value_given}.",
                                  name=name, value_given=getattr(self, name))
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise SizingError("heads", "hidden must divide by heads, and heads by kv_heads "
                                       "(got {hidden}, {heads}, {kv_heads}).",
                              hidden=self.hidden, heads=self.heads,
                              kv_heads=self.kv_heads)
        if self.mlp not in ("gelu", "swiglu"):
            raise SizingError("mlp", "Unknown MLP {self_mlp!r}.", ["gelu", "swiglu"],
                              self_mlp=self.mlp)
        if self.norm not in ("layernorm", "rmsnorm"):
            raise SizingError("norm", "Unknown norm {self_norm!r}.", ["layernorm", "rmsnorm"],
                              self_norm=self.norm)
        if self.top_k > self.experts:
            raise SizingError("top_k", "top_k cannot exceed the number of experts.")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    # -- parameters ------------------------------------------------------------------------
    def _norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def attention_params(self) -> int:
        h, kv = self.hidden, self.kv_width
        weights = 2 * h * h + 2 * h * kv
        return weights + ((2 * h + 2 * kv) if self.bias else 0)

    def mlp_params(self) -> int:
        h, f = self.hidden, self.ffn
        if self.mlp == "swiglu":
            return 3 * h * f + ((2 * f + h) if self.bias else 0)
        return 2 * h * f + ((f + h) if self.bias else 0)

    def layer_params(self) -> int:
        router = self.hidden * self.experts if self.experts > 1 else 0
        return (self.attention_params() + self.mlp_params() * self.experts + router
                + 2 * self._norm_params())

    def embedding_params(self) -> int:
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        final = self._norm_params() if self.pre_norm else 0
        return (self.vocab * self.hidden + self.learned_positions * self.hidden + head
                + final)

    @property
    def params(self) -> int:
        return self.layers * self.layer_params() + self.embedding_params()

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (MoE: top_k of the experts)."""
        idle = (self.experts - self.top_k) * self.mlp_params() * self.layers
        return self.params - idle

    def linear_params(self) -> int:
        """Weights of the blocks' linear layers (what LoRA adapts, QLoRA quantizes)."""
        return self.layers * (self.attention_params() + self.mlp_params() * self.experts)

    # -- activations ------------------------------------------------------------------------
    def norm_activation_elems(self, low_precision: bool) -> tuple[float, float]:
        """(compute-dtype, fp32) elements one norm keeps per token, its output aside (the
        next linear layer's input). LayerNorm: its input, mean and rstd. torch's
        nn.RMSNorm in fp32: its input, the normalized values and rstd; in 16-bit training
        it computes in fp32 and keeps the fp32 copy of its input, the fp32 normalized
        values and rstd instead: four bytes where a hand-written norm keeps two."""
        h = self.hidden
        if self.norm == "layernorm":
            return h, 2
        if low_precision:
            return 0, 2 * h + 1
        return 2 * h, 1

    def layer_activation_elems(self, low_precision: bool = True) -> tuple[float, float]:
        """(elements in the compute dtype, fp32 elements) one layer keeps for backward,
        per token: its two norms (norm_activation_elems), the linear layers' inputs, Q and
        K/V as attention sees them (grouped K/V expanded to all heads), with RoPE also Q
        and K before rotation and the angles, the attention output, flash attention's
        log-sum-exp (fp32), the MLP's intermediates (GELU: 2 × ffn; SwiGLU: gate,
        activation, up, product = 4 × ffn). MoE: the router's fp32 probabilities over all
        experts and its normalized top-k weights; each of the top-k experts' gathered
        input and weighted output, beside its intermediates."""
        h, f, k = self.hidden, self.ffn, self.top_k
        norm, norm_fp32 = self.norm_activation_elems(low_precision)
        attention = h + 3 * h + h  # input to Q/K/V, Q and expanded K, V, output
        if not self.learned_positions:  # RoPE: Q and K kept before rotation, cos and sin
            attention += h + self.kv_width + self.head_dim
        inner = (2 * f if self.mlp == "gelu" else 4 * f) * k
        if self.experts > 1:
            mlp = h + inner + 2 * k * h + k  # gathered inputs, weighted outputs, weights
            router_fp32 = self.experts + 2 * k  # probabilities, top-k and their sum
        else:
            mlp, router_fp32 = h + inner, 0
        compute = 2 * norm + attention + mlp
        return compute, 2 * norm_fp32 + self.heads + router_fp32


@dataclass(frozen=True)
class Term:
    """One line of the memory breakdown."""

    name: str
    bytes: float
    why: str
    shardable: str  # how it splits: "zero1", "zero2", "zero3", "tp", "none"
    # The share that tensor parallelism splits without sequence parallelism (activations:
    # the norms and the blocks' inputs are replicated on every rank then).
    tp_split: float = 1.0


@dataclass(frozen=True)
class Job:
    arch: Architecture
    workload: Workload
    precision: Precision
    seq_len: int = 4096
    batch: int = 1  # micro-batch per GPU (sequences)
    checkpointing: bool = True
    lora_rank: int = 16

    def __post_init__(self) -> None:
        if self.seq_len < 1:
            raise SizingError("seq_len", "Sequence length is a positive integer, not "
                                         "{seq_len}.", seq_len=self.seq_len)
        if self.batch < 1:
            raise SizingError("batch", "Batch size is a positive integer, not {batch}.",
                              batch=self.batch)
        if self.workload.full and self.precision in (Precision.INT8, Precision.INT4):
            raise SizingError("precision", "Full training in {precision} is not a "
                                           "thing; train in bf16 or fp8, or use qlora.",
                              ["fp32", "bf16", "fp16", "fp8"],
                              precision=self.precision.value)
        if self.workload is Workload.QLORA and self.precision is not Precision.INT4:
            object.__setattr__(self, "precision", Precision.INT4)
        if self.lora_rank < 1:
            raise SizingError("lora_rank", "LoRA rank is a positive integer.")

    @property
    def compute_bytes(self) -> float:
        """Activations' bytes per element: fp32 for fp32 jobs, else 16-bit."""
        return 4.0 if self.precision is Precision.FP32 else 2.0

    def lora_params(self) -> int:
        """Adapters on every linear layer of every block: r × (in + out) each."""
        a, r = self.arch, self.lora_rank
        h, kv, f = a.hidden, a.kv_width, a.ffn
        attn = r * ((h + h) * 2 + (h + kv) * 2)
        mlp = r * ((h + f) * (3 if a.mlp == "swiglu" else 2)) * a.experts
        return a.layers * (attn + mlp)


def quick_estimate_gb(params: float, precision: Precision) -> float:
    """The seeds' rule of thumb: parameters × bytes × 1.2."""
    return params * precision.bytes * 1.2 / GB


def memory_terms(job: Job) -> list[Term]:
    """The whole job's memory, before splitting over GPUs."""
    a, p = job.arch, job.arch.params
    terms: list[Term] = []
    if job.workload.full:
        if job.precision is Precision.FP32:
            terms += [Term("weights", 4 * p, f"{p:,} parameters × 4 bytes (fp32)", "zero3"),
                      Term("gradients", 4 * p, "one fp32 gradient per parameter", "zero2"),
                      Term("optimizer", 8 * p, "Adam's two fp32 moments per parameter",
                           "zero1")]
        else:
            wb = job.precision.bytes
            terms += [
                Term("weights", wb * p, f"{p:,} parameters × {wb:g} bytes "
                     f"({job.precision.value} working copy)", "zero3"),
                Term("gradients", 2 * p, "one 16-bit gradient per parameter", "zero2"),
                Term("optimizer", 12 * p, "mixed precision: fp32 master weights and Adam's "
                     "two fp32 moments, 12 bytes per parameter", "zero1")]
    else:
        linear = a.linear_params()
        other = p - linear
        if job.workload is Workload.QLORA:
            terms.append(Term("weights", linear * (0.5 + 0.127 / 8) + other * 2,
                              f"{linear:,} block weights in 4-bit NF4 (0.5 byte + 0.127 bit "
                              "of double-quantized scales each); embeddings, norms and head "
                              "in 16-bit", "tp"))
        else:
            wb = job.precision.bytes
            terms.append(Term("weights", p * wb, f"{p:,} parameters × {wb:g} bytes "
                              f"({job.precision.value}); frozen" if job.workload.trains
                              else f"{p:,} parameters × {wb:g} bytes ({job.precision.value})",
                              "tp"))
        if job.workload in (Workload.LORA, Workload.QLORA):
            lp = job.lora_params()
            terms.append(Term("adapters", 16 * lp, f"LoRA rank {job.lora_rank} on every "
                              f"linear layer: {lp:,} trainable parameters × 16 bytes "
                              "(16-bit weight and gradient, fp32 master and Adam moments)",
                              "zero1"))
    tokens = job.seq_len * job.batch
    cb = job.compute_bytes
    if job.workload.trains:
        low = job.precision is not Precision.FP32
        comp, fp32 = a.layer_activation_elems(low)
        per_layer = tokens * (comp * cb + fp32 * 4)
        norm, norm_fp32 = a.norm_activation_elems(low)
        # replicated on every tensor-parallel rank unless sequence parallel: the norms and
        # the inputs of the attention's and the MLP's first linear layers
        replicated = tokens * ((2 * norm + 2 * a.hidden) * cb + 2 * norm_fp32 * 4)
        final, final_fp32 = (norm, norm_fp32) if a.pre_norm else (0, 0)
        head_kept = tokens * ((a.hidden + final) * cb + final_fp32 * 4)
        head = head_kept + tokens * a.vocab * 4  # logits split by vocabulary
        if job.checkpointing:
            inputs = a.layers * tokens * a.hidden * cb
            total_act = inputs + per_layer + head
            terms.append(Term("activations", total_act, f"checkpointing: each of "
                              f"{a.layers} layers keeps its input ({a.hidden} values per "
                              f"token), one layer is recomputed at a time "
                              f"({per_layer / GB:.2f} GB); {tokens:,} tokens per micro-batch",
                              "tp", 1 - (inputs + replicated + head_kept) / total_act))
        else:
            total_act = a.layers * per_layer + head
            terms.append(Term("activations", total_act,
                              f"{a.layers} layers × {comp:,.0f} values per token "
                              f"({cb:g} bytes) + {fp32:,.0f} fp32 (norm statistics, "
                              f"attention log-sum-exp) × {tokens:,} tokens", "tp",
                              1 - (a.layers * replicated + head_kept) / total_act))
        terms[-1] = replace(terms[-1], why=terms[-1].why + f"; the loss keeps {a.vocab:,} "
                            "fp32 log-probabilities per token")
    else:
        kv_bytes = 1.0 if job.precision is Precision.FP8 else 2.0
        kv = 2 * a.layers * tokens * a.kv_width * kv_bytes
        terms.append(Term("kv_cache", kv, f"keys and values: 2 × {a.layers} layers × "
                          f"{a.kv_width} ({a.kv_heads} KV heads × {a.head_dim}) × {tokens:,} "
                          f"tokens × {kv_bytes:g} bytes", "tp"))
        work = tokens * (2 * a.hidden + a.ffn * a.top_k) * 2 + job.batch * a.vocab * 4
        terms.append(Term("activations", work, "one layer's working buffers for the "
                          "prompt, and the last token's logits", "tp"))
    return terms


@dataclass(frozen=True)
class Layout:
    """How a job is split: tensor parallel inside a node, pipeline across nodes, data
    parallel over the rest with a ZeRO stage (0: none)."""

    gpus: int
    tp: int = 1
    pp: int = 1
    zero: int = 0
    sp: bool = False  # sequence parallel: the activations TP leaves whole split too

    @property
    def dp(self) -> int:
        return max(1, self.gpus // (self.tp * self.pp))

    def describe(self) -> str:
        parts = [f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}"]
        if self.tp > 1:
            parts.append(f"tensor parallel {self.tp}"
                         + (" with sequence parallel" if self.sp else ""))
        if self.pp > 1:
            parts.append(f"pipeline {self.pp}")
        if self.dp > 1:
            parts.append(f"data parallel {self.dp}" + (f", ZeRO-{self.zero}"
                                                       if self.zero else ""))
        return ", ".join(parts)


def per_gpu(terms: list[Term], layout: Layout) -> dict[str, float]:
    """Each term's bytes on one GPU under `layout`."""
    model_split = layout.tp * layout.pp
    out: dict[str, float] = {}
    for t in terms:
        b = t.bytes
        if t.name == "activations" or t.name == "kv_cache":
            # tensor parallel splits what it computes per rank; sequence parallel the rest
            # too; the first pipeline stage keeps as many micro-batches as there are
            # stages, so pipelining saves nothing here
            share = 1.0 if layout.sp else t.tp_split
            b = b * share / layout.tp + b * (1 - share)
        else:
            b /= model_split
            sharded = {"zero1": layout.zero >= 1, "zero2": layout.zero >= 2,
                       "zero3": layout.zero >= 3}.get(t.shardable, False)
            if sharded:
                b /= layout.dp
        out[t.name] = b
    return out


def layouts(gpus: int, gpus_per_node: int, trains: bool) -> list[Layout]:
    """Candidate layouts in order of preference (least communication first)."""
    nodes = max(1, gpus // gpus_per_node)
    tps = [t for t in (1, 2, 4, 8) if t <= gpus_per_node and gpus % t == 0]
    zeros = (0, 1, 2, 3) if trains and gpus > 1 else (0,)
    pps = [1] + ([nodes] if nodes > 1 else [])
    order: list[Layout] = []
    for pp in pps:
        for tp in tps:
            for sp in ((False, True) if tp > 1 and trains else (False,)):
                for z in zeros:
                    if gpus % (tp * pp) == 0:
                        order.append(Layout(gpus, tp, pp, z, sp))
    # ZeRO (DP traffic) before TP (per-layer traffic), TP before pipeline bubbles; within
    # a TP degree, sequence parallelism only when the job needs it to fit (said so).
    order.sort(key=lambda lay: (lay.pp > 1, lay.tp, lay.sp, lay.zero))
    return order


def fit(terms: list[Term], gpus: int, gpus_per_node: int, usable_bytes: float,
        trains: bool) -> tuple[Layout, dict[str, float]] | None:
    """The first layout whose per-GPU memory fits, or None."""
    for layout in layouts(gpus, gpus_per_node, trains):
        share = per_gpu(terms, layout)
        if sum(share.values()) <= usable_bytes:
            return layout, share
    return None


# --- model sizes from a parameter count -----------------------------------------------------

_KNOWN: dict[float, Architecture] = {
    # Llama-family shapes (public configurations) for the common sizes.
    7e9: Architecture(32, 4096, 32, 32, 32000, 11008),
    8e9: Architecture(32, 4096, 32, 8, 128256, 14336),
    13e9: Architecture(40, 5120, 40, 40, 32000, 13824),
    34e9: Architecture(48, 8192, 64, 8, 32000, 22016),
    70e9: Architecture(80, 8192, 64, 8, 32000, 28672),
    405e9: Architecture(126, 16384, 128, 8, 128256, 53248),
}


def parse_params(text: str) -> float:
    """'70B', '7b', '1.5B', '350M', '7e9' → a parameter count."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbt]?)\s*", text.lower())
    if not m:
        raise SizingError("params", "Give the size as 7B, 70B, 350M or 7e9, not {text!r}.",
                          text=text)
    value = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2)]
    if value <= 0:
        raise SizingError("params", "A model has more than zero parameters.")
    return value


def shape_for(params: float) -> Architecture:
    """A Llama-like shape with about `params` parameters: a known configuration when the
    size is a common one (within 10 %), else hidden = (params × 128 / 12)^(1/3) rounded
    to 128 and layers = hidden / 128 (the usual aspect ratio)."""
    for size, arch in _KNOWN.items():
        if abs(params - size) / size <= 0.1:
            return replace(arch, inferred=True, nominal_params=params)
    hidden = max(128, round((params * 128 / 12) ** (1 / 3) / 128) * 128)
    layers = max(1, round(params / (12 * hidden * hidden)))
    ffn = int(math.ceil(hidden * 8 / 3 / 128) * 128)
    heads = max(1, hidden // 128)
    return Architecture(layers, hidden, heads, heads, 32000, ffn, inferred=True,
                        nominal_params=params)


__all__ = ["Architecture", "Job", "Layout", "Precision", "SizingError", "Term", "Workload",
           "fit", "layouts", "memory_terms", "parse_params", "per_gpu", "quick_estimate_gb",
           "shape_for"]
