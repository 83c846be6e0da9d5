"""Held-out test models (family "heldout"): architectures outside the training and benchmark zoo, for
judging a graph policy zero-shot. Each mixes convolutions or transformer blocks in ways the zoo does not:

- gpt2_stack: GPT-2 blocks as GPT-2 writes them (fused c_attn Linear(H, 3H) split into Q/K/V, causal mask).
- convnext_stage: ConvNeXt blocks (7x7 depthwise conv, channels-last LayerNorm + MLP, layer scale).
- mobilevit_block: a MobileViT block (local convs, unfold to patches, transformer layers, fold, fuse conv).
- mbconv_se: EfficientNet MBConv blocks with squeeze-excite (SiLU, 3x3 and 5x5 depthwise, sigmoid gate).

Importing this module registers them in the zoo; `registry.names()` leaves them out: ask for
`names("heldout")`; `models.load(name, size)` then works as for the zoo. Weights are seeded random like the
zoo's (batch norms with trained-looking statistics).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from tvm_rl.models.registry import HELD_OUT, pick, register
from tvm_rl.models.vision import _init

# ---------------------------------------------------------------- GPT-2


@dataclass(frozen=True)
class GPT2Config:
    seq: int
    hidden: int
    layers: int
    heads: int


class GPT2Attention(nn.Module):
    """GPT-2's attention: one fused c_attn projection to Q|K|V, split on the last axis, causal mask, c_proj."""

    mask: torch.Tensor  # a buffer (the causal mask)

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.hidden, self.heads, self.head_dim = cfg.hidden, cfg.heads, cfg.hidden // cfg.heads
        self.c_attn = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.c_proj = nn.Linear(cfg.hidden, cfg.hidden)
        # Constant additive mask: keeps the exported graph static (no data-dependent ops).
        self.register_buffer("mask", torch.full((cfg.seq, cfg.seq), float("-inf")).triu(1), persistent=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.reshape(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(self.hidden, dim=-1)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + self.mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.c_proj(ctx.permute(0, 2, 1, 3).reshape(b, s, h))


class GPT2MLP(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.c_fc, self.c_proj, self.act = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(cfg.hidden), GPT2Attention(cfg)
        self.ln_2, self.mlp = nn.LayerNorm(cfg.hidden), GPT2MLP(cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Stack(nn.Module):
    """GPT-2 transformer blocks on precomputed embeddings, then the final ln_f."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


GPT2 = {"tiny": GPT2Config(seq=8, hidden=32, layers=2, heads=2),
        "full": GPT2Config(seq=64, hidden=768, layers=4, heads=12)}


# ---------------------------------------------------------------- ConvNeXt


class ChannelsFirstLayerNorm(nn.Module):
    """LayerNorm over the channels of an NCHW tensor (ConvNeXt's stem and downsampling norm)."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """7x7 depthwise conv, NHWC LayerNorm, Linear(C, 4C), GELU, Linear(4C, C), layer scale, residual."""

    def __init__(self, dim: int, layer_scale: float = 0.1):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        # ConvNeXt initialises gamma to 1e-6; a trained-looking value keeps the branch visible in the output.
        self.gamma = nn.Parameter(layer_scale * torch.rand(dim) + 0.5 * layer_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXtStage(nn.Module):
    """ConvNeXt's stem (4x4 stride-4 conv + channels-first LayerNorm) and its first stage of blocks."""

    def __init__(self, dim: int, blocks: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 4, stride=4), ChannelsFirstLayerNorm(dim))
        self.blocks = nn.Sequential(*(ConvNeXtBlock(dim) for _ in range(blocks)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x))


CONVNEXT = {"tiny": (32, 16, 2), "full": (224, 96, 3)}  # image side, channels, blocks


# ---------------------------------------------------------------- MobileViT


class PatchAttention(nn.Module):
    """Self-attention over (batch * patch-position, patches, d) with separate Q/K/V projections."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.reshape(b, n, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(ctx.permute(0, 2, 1, 3).reshape(b, n, d))


class MobileViTLayer(nn.Module):
    """Pre-LN transformer layer with a SiLU MLP (MobileViT's)."""

    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(dim), PatchAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, ffn), nn.SiLU(), nn.Linear(ffn, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def _conv_bn(cin: int, cout: int, kernel: int, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.SiLU())
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class MobileViTConfig:
    channels: int
    side: int
    dim: int
    layers: int
    heads: int
    patch: int = 2


class MobileViTBlock(nn.Module):
    """Local 3x3 conv + 1x1 to d; unfold into 2x2 patches; transformer layers across patches; fold; 1x1 back
    to C; concat with the input; 3x3 fuse conv."""

    def __init__(self, cfg: MobileViTConfig):
        super().__init__()
        c, d = cfg.channels, cfg.dim
        self.patch = cfg.patch
        self.local = _conv_bn(c, c, 3)
        self.to_d = nn.Conv2d(c, d, 1, bias=False)
        self.layers = nn.Sequential(*(MobileViTLayer(d, cfg.heads, 2 * d) for _ in range(cfg.layers)))
        self.norm = nn.LayerNorm(d)
        self.to_c = _conv_bn(d, c, 1)
        self.fuse = _conv_bn(2 * c, c, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.to_d(self.local(x))
        b, d, h, w = y.shape
        p = self.patch
        nh, nw = h // p, w // p
        # Unfold: (b, d, nh, p, nw, p) -> (b, p, p, nh, nw, d) -> (b*p*p, nh*nw, d): each of the p*p pixel
        # positions attends across all patches.
        t = y.reshape(b, d, nh, p, nw, p).permute(0, 3, 5, 2, 4, 1).reshape(b * p * p, nh * nw, d)
        t = self.norm(self.layers(t))
        # Fold back to (b, d, h, w).
        y = t.reshape(b, p, p, nh, nw, d).permute(0, 5, 3, 1, 4, 2).reshape(b, d, h, w)
        return self.fuse(torch.cat([x, self.to_c(y)], dim=1))


MOBILEVIT = {"tiny": MobileViTConfig(channels=8, side=8, dim=16, layers=2, heads=2),
             "full": MobileViTConfig(channels=64, side=32, dim=96, layers=2, heads=4)}


# ---------------------------------------------------------------- EfficientNet MBConv


class SqueezeExcite(nn.Module):
    """Global average pool, 1x1 reduce, SiLU, 1x1 expand, sigmoid, channel-wise multiply."""

    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce, self.act = nn.Conv2d(channels, reduced, 1), nn.SiLU()
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.expand(self.act(self.reduce(self.pool(x)))))


class MBConv(nn.Module):
    """1x1 expand conv+BN+SiLU, depthwise kxk conv+BN+SiLU, squeeze-excite, 1x1 project conv+BN, residual."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        self.expand = _conv_bn(cin, mid, 1)
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
                                nn.BatchNorm2d(mid), nn.SiLU())
        self.se = SqueezeExcite(mid, max(1, cin // 4))
        self.project = _conv_bn(mid, cout, 1, act=False)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.residual else y


class MBConvStack(nn.Module):
    def __init__(self, blocks: tuple[tuple[int, int, int, int, int], ...]):
        super().__init__()
        self.blocks = nn.Sequential(*(MBConv(*b) for b in blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


# (cin, cout, kernel, stride, expand) per block, EfficientNet-B0's stage 3-4 style: a strided 5x5 that widens,
# then a residual 5x5 and a residual 3x3.
MBCONV = {"tiny": (8, 16, ((8, 16, 5, 2, 4), (16, 16, 5, 1, 4), (16, 16, 3, 1, 4))),
          "full": (32, 56, ((32, 48, 5, 2, 6), (48, 48, 5, 1, 6), (48, 48, 3, 1, 6)))}  # cin, side, blocks


def _quiet_residuals(model: nn.Module) -> nn.Module:
    """Like the zoo's ResNets: a quiet last BN keeps residual stacks' activations from growing each block."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, MBConv) and m.residual:
                bn = m.project[1]
                assert isinstance(bn, nn.BatchNorm2d)
                bn.weight.uniform_(0.1, 0.3)
    return model


# ---------------------------------------------------------------- registrations


@register("gpt2_stack", HELD_OUT, "GPT-2 blocks: fused c_attn + split, causal (full: seq 64, hidden 768, 4 layers)")
def gpt2_stack(size: str):
    cfg = pick(GPT2, size)
    return GPT2Stack(cfg).eval(), (torch.randn(1, cfg.seq, cfg.hidden),)


@register("convnext_stage", HELD_OUT, "ConvNeXt stem + stage-1 blocks (full: 1x3x224x224, C=96, 3 blocks)")
def convnext_stage(size: str):
    side, dim, blocks = pick(CONVNEXT, size)
    return _init(ConvNeXtStage(dim, blocks)), (torch.randn(1, 3, side, side),)


@register("mobilevit_block", HELD_OUT, "MobileViT block: convs, 2 transformer layers on patches (full: 1x64x32x32)")
def mobilevit_block(size: str):
    cfg = pick(MOBILEVIT, size)
    return _init(MobileViTBlock(cfg)), (torch.randn(1, cfg.channels, cfg.side, cfg.side),)


@register("mbconv_se", HELD_OUT, "EfficientNet MBConv + squeeze-excite blocks (full: 1x32x56x56, 3 blocks)")
def mbconv_se(size: str):
    cin, side, blocks = pick(MBCONV, size)
    return _quiet_residuals(_init(MBConvStack(blocks))), (torch.randn(1, cin, side, side),)
