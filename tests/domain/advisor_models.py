"""Six real PyTorch transformers built on the CPU from configurations (no downloaded
weights) to check the advisor's memory model against: GPT-2-like (pre-LN, LayerNorm,
learned positions, GELU, biases, tied head), Llama-like (torch's nn.RMSNorm, RoPE, grouped
KV heads, SwiGLU, untied head, no biases), BERT-like (post-LN, bidirectional attention,
GELU, tied head), MoE (8 experts, top-2, router probabilities in fp32, tokens gathered per
expert), a wide vocabulary (64k, tied, two layers) and a deep, narrow one (16 layers of 128,
one KV head). Attention is PyTorch's fused scaled_dot_product_attention, as in current
training code; the loss is computed on fp32 logits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gpulease.domain.sizing import Architecture


@dataclass(frozen=True)
class Config:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    norm: str  # layernorm | rmsnorm
    mlp: str  # gelu | swiglu
    bias: bool
    causal: bool
    rope: bool
    tied: bool
    post_norm: bool
    max_positions: int = 512
    experts: int = 1
    top_k: int = 1

    def architecture(self) -> Architecture:
        return Architecture(
            layers=self.layers, hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads,
            vocab=self.vocab, ffn=self.ffn, mlp=self.mlp, norm=self.norm, bias=self.bias,
            tied_embeddings=self.tied, pre_norm=not self.post_norm,
            learned_positions=0 if self.rope else self.max_positions,
            experts=self.experts, top_k=self.top_k)


GPT2_LIKE = Config(4, 256, 8, 8, 1024, 8192, "layernorm", "gelu", bias=True, causal=True,
                   rope=False, tied=True, post_norm=False)
LLAMA_LIKE = Config(4, 256, 8, 2, 688, 8192, "rmsnorm", "swiglu", bias=False, causal=True,
                    rope=True, tied=False, post_norm=False)
BERT_LIKE = Config(4, 256, 4, 4, 1024, 8192, "layernorm", "gelu", bias=True, causal=False,
                   rope=False, tied=True, post_norm=True)
MOE = Config(4, 256, 8, 2, 512, 8192, "rmsnorm", "swiglu", bias=False, causal=True,
             rope=True, tied=False, post_norm=False, experts=8, top_k=2)
WIDE_VOCAB = Config(2, 256, 8, 8, 688, 65536, "rmsnorm", "swiglu", bias=False, causal=True,
                    rope=True, tied=True, post_norm=False)
DEEP_NARROW = Config(16, 128, 4, 1, 344, 4096, "rmsnorm", "swiglu", bias=False, causal=True,
                     rope=True, tied=False, post_norm=False)


def _norm(cfg: Config) -> nn.Module:
    return nn.RMSNorm(cfg.hidden) if cfg.norm == "rmsnorm" else nn.LayerNorm(cfg.hidden)


def rope(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    pos = torch.arange(x.shape[-2], dtype=torch.float32)
    angle = pos[:, None] / (10000 ** (torch.arange(half, dtype=torch.float32) / half))[None]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg, d = cfg, cfg.hidden // cfg.heads
        self.q = nn.Linear(cfg.hidden, cfg.hidden, bias=cfg.bias)
        self.k = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=cfg.bias)
        self.v = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=cfg.bias)
        self.o = nn.Linear(cfg.hidden, cfg.hidden, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, (b, t, h) = self.cfg, x.shape
        d = h // c.heads
        q = self.q(x).view(b, t, c.heads, d).transpose(1, 2)
        k = self.k(x).view(b, t, c.kv_heads, d).transpose(1, 2)
        v = self.v(x).view(b, t, c.kv_heads, d).transpose(1, 2)
        if c.rope:
            q, k = rope(q), rope(k)
        if c.kv_heads != c.heads:
            k = k.repeat_interleave(c.heads // c.kv_heads, 1)
            v = v.repeat_interleave(c.heads // c.kv_heads, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=c.causal)
        return self.o(y.transpose(1, 2).reshape(b, t, h))


class Mlp(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.swiglu = cfg.mlp == "swiglu"
        self.up = nn.Linear(cfg.hidden, cfg.ffn, bias=cfg.bias)
        self.gate = nn.Linear(cfg.hidden, cfg.ffn, bias=cfg.bias) if self.swiglu else None
        self.down = nn.Linear(cfg.ffn, cfg.hidden, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    """Top-k routed experts as MoE training code writes them: the router's probabilities
    in fp32, each expert's tokens gathered, run, weighted and added back."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.top_k = cfg.top_k
        self.router = nn.Linear(cfg.hidden, cfg.experts, bias=False)
        self.experts = nn.ModuleList(Mlp(cfg) for _ in range(cfg.experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        flat = x.reshape(-1, h)
        probs = F.softmax(self.router(flat).float(), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel():
                out = out.index_add(0, token, expert(flat[token]) * weights[token, slot, None])
        return out.view(b, t, h)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.post = cfg.post_norm
        self.norm1, self.norm2 = _norm(cfg), _norm(cfg)
        self.attention = Attention(cfg)
        self.mlp: nn.Module = MoE(cfg) if cfg.experts > 1 else Mlp(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.post:
            x = self.norm1(x + self.attention(x))
            return self.norm2(x + self.mlp(x))
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class LanguageModel(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.positions = None if cfg.rope else nn.Embedding(cfg.max_positions, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.final_norm = None if cfg.post_norm else _norm(cfg)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied:
            self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        logits = self.head(x).float()  # the loss in fp32, as training code does
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


@dataclass(frozen=True)
class Measured:
    params: int
    weight_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_bytes: int


def measure(cfg: Config, batch: int, seq_len: int, dtype: torch.dtype = torch.float32,
            activations_only: bool = False) -> Measured:
    """Build, run one forward and backward pass and one Adam step, and measure: weights,
    gradients and Adam's state exactly; activations as the distinct storages autograd
    saved for the backward pass (read at the end of the forward pass, where they peak),
    parameters excluded. `activations_only`: the forward pass alone (the backward of a
    bfloat16 embedding takes minutes on a CPU without bfloat16 instructions), gradients and
    Adam's state reported as 0."""
    torch.manual_seed(0)
    model = LanguageModel(cfg).to(dtype)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights and (t.dtype.is_floating_point
                                                  or t.dtype == torch.bool):
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, cfg.vocab, (batch, seq_len))
    labels = torch.randint(0, cfg.vocab, (batch, seq_len))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(ids, labels)
    activations = sum(saved.values())
    if activations_only:
        params = list(model.parameters())
        return Measured(params=sum(p.numel() for p in params),
                        weight_bytes=sum(p.numel() * p.element_size() for p in params),
                        gradient_bytes=0, optimizer_bytes=0, activation_bytes=activations)
    loss.backward()
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.step()
    params = list(model.parameters())
    return Measured(
        params=sum(p.numel() for p in params),
        weight_bytes=sum(p.numel() * p.element_size() for p in params),
        gradient_bytes=sum(p.grad.numel() * p.grad.element_size() for p in params
                           if p.grad is not None),
        optimizer_bytes=sum(v.numel() * v.element_size() for state in optimizer.state.values()
                            for k, v in state.items() if k != "step"),
        activation_bytes=activations)
