"""Transformer models of the zoo: BERT encoder, ViT, a mini-DALL-E causal decoder, a Transformer-Transducer
audio encoder. Attention is written out op by op (separate Q/K/V projections, explicit scale and softmax)
as in the anchors' graphs, so the graph rewrites see the patterns they merge and fuse."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .registry import pick, register


@dataclass(frozen=True)
class TransformerConfig:
    seq: int
    hidden: int
    layers: int
    heads: int
    ffn: int


class SelfAttention(nn.Module):
    """Multi-head self-attention with separate Q/K/V projections and an optional causal mask."""

    def __init__(self, hidden: int, heads: int, causal: bool = False, seq: int = 0):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.causal = causal
        if causal:
            # A constant additive mask keeps the exported graph static (no data-dependent ops).
            mask = torch.full((seq, seq), float("-inf")).triu(1)
            self.register_buffer("mask", mask, persistent=False)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.reshape(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        if self.causal:
            scores = scores + self.mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(ctx.permute(0, 2, 1, 3).reshape(b, s, h))


class EncoderLayer(nn.Module):
    """Post-LN (BERT) or pre-LN (ViT, GPT-style) transformer layer with a GELU feed-forward block."""

    def __init__(self, cfg: TransformerConfig, pre_norm: bool, causal: bool = False):
        super().__init__()
        self.attn = SelfAttention(cfg.hidden, cfg.heads, causal, cfg.seq)
        self.ln1, self.ln2 = nn.LayerNorm(cfg.hidden), nn.LayerNorm(cfg.hidden)
        self.ff = nn.Sequential(nn.Linear(cfg.hidden, cfg.ffn), nn.GELU(), nn.Linear(cfg.ffn, cfg.hidden))
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.ff(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ff(x))


class Stack(nn.Module):
    def __init__(self, cfg: TransformerConfig, pre_norm: bool, causal: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg, pre_norm, causal) for _ in range(cfg.layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class BertEncoder(nn.Module):
    """BERT's encoder stack on precomputed embeddings (as TASO/X-RLflow evaluate it)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.stack = Stack(cfg, pre_norm=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stack(x)


class ViT(nn.Module):
    """Vision Transformer: patch embedding as a strided conv, class token, pre-LN encoder, linear head."""

    def __init__(self, cfg: TransformerConfig, patch: int, classes: int):
        super().__init__()
        self.embed = nn.Conv2d(3, cfg.hidden, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, cfg.hidden) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, cfg.seq + 1, cfg.hidden) * 0.02)
        self.stack = Stack(TransformerConfig(cfg.seq + 1, cfg.hidden, cfg.layers, cfg.heads, cfg.ffn), True)
        self.norm, self.head = nn.LayerNorm(cfg.hidden), nn.Linear(cfg.hidden, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.embed(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.stack(x))[:, 0])


class CausalDecoder(nn.Module):
    """Mini-DALL-E style decoder: token + position embeddings, masked pre-LN layers, logits over the vocab."""

    def __init__(self, cfg: TransformerConfig, vocab: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, cfg.hidden), nn.Parameter(torch.randn(1, cfg.seq, cfg.hidden) * 0.02)
        self.stack = Stack(cfg, pre_norm=True, causal=True)
        self.norm, self.logits = nn.LayerNorm(cfg.hidden), nn.Linear(cfg.hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.logits(self.norm(self.stack(self.tok(tokens) + self.pos)))


class TransducerEncoder(nn.Module):
    """Transformer-Transducer audio encoder: frame stacking by a linear input layer, then pre-LN layers."""

    def __init__(self, cfg: TransformerConfig, features: int):
        super().__init__()
        self.inp = nn.Linear(features, cfg.hidden)
        self.stack = Stack(cfg, pre_norm=True)
        self.norm = nn.LayerNorm(cfg.hidden)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.norm(self.stack(torch.relu(self.inp(frames))))


_TINY = TransformerConfig(seq=8, hidden=32, layers=2, heads=2, ffn=64)

BERT = {"tiny": _TINY, "full": TransformerConfig(seq=64, hidden=1024, layers=8, heads=16, ffn=4096)}
VIT = {"tiny": (TransformerConfig(4, 32, 2, 2, 64), 8, 10),
       "full": (TransformerConfig(64, 768, 12, 12, 3072), 16, 1000)}
DALLE = {"tiny": (_TINY, 64), "full": (TransformerConfig(seq=64, hidden=512, layers=8, heads=8, ffn=2048), 8192)}
TRANSDUCER = {"tiny": (_TINY, 16), "full": (TransformerConfig(seq=64, hidden=512, layers=12, heads=8, ffn=2048), 80)}


@register("bert", "transformer", "BERT encoder (full: seq 64, hidden 1024, 8 layers, 16 heads)")
def bert(size: str):
    cfg = pick(BERT, size)
    return BertEncoder(cfg).eval(), (torch.randn(1, cfg.seq, cfg.hidden),)


@register("vit", "transformer", "ViT-Base/16 (full: 128x128 image = 64 patches, 12 layers, hidden 768)")
def vit(size: str):
    cfg, patch, classes = pick(VIT, size)
    side = int(math.isqrt(cfg.seq)) * patch
    return ViT(cfg, patch, classes).eval(), (torch.randn(1, 3, side, side),)


@register("dalle", "transformer", "mini-DALL-E causal decoder (full: 64 tokens, hidden 512, 8 layers, vocab 8192)")
def dalle(size: str):
    cfg, vocab = pick(DALLE, size)
    return CausalDecoder(cfg, vocab).eval(), (torch.randint(0, vocab, (1, cfg.seq)),)


@register("transducer", "transformer", "Transformer-Transducer audio encoder (full: 64 frames x 80, 12 layers)")
def transducer(size: str):
    cfg, features = pick(TRANSDUCER, size)
    return TransducerEncoder(cfg, features).eval(), (torch.randn(1, cfg.seq, features),)
