"""Layers the zoo's CNNs share."""
from __future__ import annotations

from torch import nn


class ConvBN(nn.Sequential):
    """Conv (no bias) + BatchNorm + optional activation, the unit the BN-folding passes look for."""

    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int], stride: int = 1,
                 padding: int | tuple[int, int] = 0, groups: int = 1, act: type[nn.Module] | None = nn.ReLU,
                 eps: float = 1e-5):
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, bias=False),
                                   nn.BatchNorm2d(cout, eps=eps)]
        if act is not None:
            layers.append(act(inplace=True))
        super().__init__(*layers)
