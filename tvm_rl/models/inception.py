"""Inception-v3 (torchvision's layer structure, no aux head) for the zoo: its blocks and sizes."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .layers import ConvBN


def _w(n: int, div: int) -> int:
    return max(1, n // div)


def _cbn(cin: int, cout: int, kernel: int | tuple[int, int], stride: int = 1,
         padding: int | tuple[int, int] = 0) -> ConvBN:
    # Inception-v3's BasicConv2d uses BN eps 1e-3, unlike ResNet's 1e-5.
    return ConvBN(cin, cout, kernel, stride, padding, eps=1e-3)


class InceptionA(nn.Module):
    """35x35 block: 1x1, 5x5, double-3x3 and avg-pool branches, concatenated."""

    def __init__(self, cin: int, pool: int, div: int):
        super().__init__()
        c64, c48, c96 = _w(64, div), _w(48, div), _w(96, div)
        self.b1 = _cbn(cin, c64, 1)
        self.b5 = nn.Sequential(_cbn(cin, c48, 1), _cbn(c48, c64, 5, padding=2))
        self.b3 = nn.Sequential(_cbn(cin, c64, 1), _cbn(c64, c96, 3, padding=1), _cbn(c96, c96, 3, padding=1))
        self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), _cbn(cin, pool, 1))
        self.out = c64 + c64 + c96 + pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(x)], 1)


class InceptionB(nn.Module):
    """35->17 reduction: strided 3x3, strided double-3x3 and max-pool branches."""

    def __init__(self, cin: int, div: int):
        super().__init__()
        c384, c64, c96 = _w(384, div), _w(64, div), _w(96, div)
        self.b3 = _cbn(cin, c384, 3, 2)
        self.bd = nn.Sequential(_cbn(cin, c64, 1), _cbn(c64, c96, 3, padding=1), _cbn(c96, c96, 3, 2))
        self.pool = nn.MaxPool2d(3, 2)
        self.out = c384 + c96 + cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.bd(x), self.pool(x)], 1)


class InceptionC(nn.Module):
    """17x17 block: factorised 7x7 as 1x7/7x1 pairs (single and double), 1x1 and avg-pool branches."""

    def __init__(self, cin: int, c7: int, div: int):
        super().__init__()
        c192 = _w(192, div)
        self.b1 = _cbn(cin, c192, 1)
        self.b7 = nn.Sequential(_cbn(cin, c7, 1), _cbn(c7, c7, (1, 7), padding=(0, 3)),
                                _cbn(c7, c192, (7, 1), padding=(3, 0)))
        self.bd = nn.Sequential(_cbn(cin, c7, 1), _cbn(c7, c7, (7, 1), padding=(3, 0)),
                                _cbn(c7, c7, (1, 7), padding=(0, 3)), _cbn(c7, c7, (7, 1), padding=(3, 0)),
                                _cbn(c7, c192, (1, 7), padding=(0, 3)))
        self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), _cbn(cin, c192, 1))
        self.out = 4 * c192

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b7(x), self.bd(x), self.bp(x)], 1)


class InceptionD(nn.Module):
    """17->8 reduction: strided 3x3, 1x7/7x1 then strided 3x3, and max-pool branches."""

    def __init__(self, cin: int, div: int):
        super().__init__()
        c192, c320 = _w(192, div), _w(320, div)
        self.b3 = nn.Sequential(_cbn(cin, c192, 1), _cbn(c192, c320, 3, 2))
        self.b7 = nn.Sequential(_cbn(cin, c192, 1), _cbn(c192, c192, (1, 7), padding=(0, 3)),
                                _cbn(c192, c192, (7, 1), padding=(3, 0)), _cbn(c192, c192, 3, 2))
        self.pool = nn.MaxPool2d(3, 2)
        self.out = c320 + c192 + cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b7(x), self.pool(x)], 1)


class InceptionE(nn.Module):
    """8x8 block: 1x1, 3x3 split into parallel 1x3/3x1, double-3x3 likewise split, and avg-pool branches."""

    def __init__(self, cin: int, div: int):
        super().__init__()
        c320, c384, c448, c192 = _w(320, div), _w(384, div), _w(448, div), _w(192, div)
        self.b1 = _cbn(cin, c320, 1)
        self.b3 = _cbn(cin, c384, 1)
        self.b3a, self.b3b = _cbn(c384, c384, (1, 3), padding=(0, 1)), _cbn(c384, c384, (3, 1), padding=(1, 0))
        self.bd = nn.Sequential(_cbn(cin, c448, 1), _cbn(c448, c384, 3, padding=1))
        self.bda, self.bdb = _cbn(c384, c384, (1, 3), padding=(0, 1)), _cbn(c384, c384, (3, 1), padding=(1, 0))
        self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), _cbn(cin, c192, 1))
        self.out = c320 + 4 * c384 + c192

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3, bd = self.b3(x), self.bd(x)
        return torch.cat([self.b1(x), self.b3a(b3), self.b3b(b3), self.bda(bd), self.bdb(bd), self.bp(x)], 1)


@dataclass(frozen=True)
class InceptionConfig:
    div: int  # every width is the original's divided by this
    a_pools: tuple[int, ...]  # pool-branch width of each InceptionA (original widths)
    c7s: tuple[int, ...]  # 7x7-branch width of each InceptionC (original widths)
    e_blocks: int
    image: int
    classes: int


class InceptionV3(nn.Module):
    """Inception-v3 without the auxiliary head (eval mode): stem, A x3, B, C x4, D, E x2, pool, linear."""

    def __init__(self, cfg: InceptionConfig):
        super().__init__()
        d = cfg.div
        c32, c64, c80, c192 = _w(32, d), _w(64, d), _w(80, d), _w(192, d)
        self.stem = nn.Sequential(
            _cbn(3, c32, 3, 2), _cbn(c32, c32, 3), _cbn(c32, c64, 3, padding=1), nn.MaxPool2d(3, 2),
            _cbn(c64, c80, 1), _cbn(c80, c192, 3), nn.MaxPool2d(3, 2))
        blocks: list[InceptionA | InceptionB | InceptionC | InceptionD | InceptionE] = []
        cin = c192
        for pool in cfg.a_pools:
            blocks.append(InceptionA(cin, _w(pool, d), d))
            cin = blocks[-1].out
        blocks.append(InceptionB(cin, d))
        cin = blocks[-1].out
        for c7 in cfg.c7s:
            blocks.append(InceptionC(cin, _w(c7, d), d))
            cin = blocks[-1].out
        blocks.append(InceptionD(cin, d))
        cin = blocks[-1].out
        for _ in range(cfg.e_blocks):
            blocks.append(InceptionE(cin, d))
            cin = blocks[-1].out
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(cin, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.drop(self.pool(self.blocks(self.stem(x)))), 1))


# 75x75 is the smallest input the stem's and reductions' unpadded strides leave a 1x1 map for.
INCEPTION = {"tiny": InceptionConfig(8, (32,), (128,), 1, 75, 10),
             "full": InceptionConfig(1, (32, 64, 64), (128, 160, 160, 192), 2, 299, 1000)}
