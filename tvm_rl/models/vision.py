"""CNNs of the zoo: ResNet-18/50, ResNeXt-50 32x4d, Inception-v3, SqueezeNet 1.1, MobileNet-v2, VGG-16.

Written in plain torch.nn (no torchvision, no downloaded weights) with torchvision's layer structure, so
`full` matches the well-known architectures op for op and parameter for parameter. Weights are random
(the caller seeds torch); BatchNorm layers get random running statistics and affine parameters so that
BN folding changes the numbers and a numerics check of it means something."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .registry import pick, register


def _init(model: nn.Module) -> nn.Module:
    """Randomise `model` in place (He init, random BN statistics) and put it in eval mode."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            # He fan-in init keeps the activation scale roughly constant through deep stacks; PyTorch's
            # default shrinks it ~2.5x a layer, which leaves VGG's logits made of biases alone.
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    for m in model.modules():
        if isinstance(m, (BasicBlock, Bottleneck)):
            # Every residual add about doubles the stream's variance when the branch is as loud as the
            # shortcut: ResNet-50's logits reached ~1e4 (near fp16's limit). A quiet branch end keeps
            # them ~10, like torchvision's zero-init-residual option but without a zero (trivial) BN.
            with torch.no_grad():
                m.last_bn.weight.uniform_(0.1, 0.3)
    return model.eval()


def _image(cfg_image: int) -> torch.Tensor:
    return torch.randn(1, 3, cfg_image, cfg_image)


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


# ---------------------------------------------------------------- ResNet / ResNeXt


class BasicBlock(nn.Module):
    """ResNet-18/34 block: two 3x3 convs and an identity (or 1x1 projection) shortcut."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int, width: int, groups: int):
        # `width` and `groups` only matter to Bottleneck; ResNet builds either block with the same call.
        super().__init__()
        self.conv1 = ConvBN(cin, planes, 3, stride, 1)
        self.conv2 = ConvBN(planes, planes, 3, 1, 1, act=None)
        self.down = _shortcut(cin, planes, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        return self.relu(self.conv2(self.conv1(x)) + idt)

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.conv2[1]


class Bottleneck(nn.Module):
    """ResNet-50 / ResNeXt block: 1x1 reduce, 3x3 (grouped for ResNeXt, strided: v1.5), 1x1 expand x4."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int, width: int, groups: int):
        super().__init__()
        cout = planes * self.expansion
        self.conv1 = ConvBN(cin, width, 1)
        self.conv2 = ConvBN(width, width, 3, stride, 1, groups=groups)
        self.conv3 = ConvBN(width, cout, 1, act=None)
        self.down = _shortcut(cin, cout, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        return self.relu(self.conv3(self.conv2(self.conv1(x))) + idt)

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.conv3[1]


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module | None:
    return None if stride == 1 and cin == cout else ConvBN(cin, cout, 1, stride, act=None)


@dataclass(frozen=True)
class ResNetConfig:
    block: type[BasicBlock] | type[Bottleneck]
    layers: tuple[int, ...]  # blocks per stage
    stem: int  # stem width; stage i has stem * 2**i planes
    image: int
    classes: int
    groups: int = 1
    group_width: int = 0  # channels per group at stage 0 for ResNeXt; 0 = plain ResNet (width = planes)


class ResNet(nn.Module):
    """ResNet / ResNeXt: 7x7/2 stem + 3x3/2 max-pool, four stages, global average pool, linear head."""

    def __init__(self, cfg: ResNetConfig):
        super().__init__()
        self.stem = nn.Sequential(ConvBN(3, cfg.stem, 7, 2, 3), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], cfg.stem
        for i, n in enumerate(cfg.layers):
            planes = cfg.stem * 2**i
            # torchvision: width = planes * base_width / 64 * groups, i.e. group_width * groups at stage 0.
            width = planes * cfg.group_width * cfg.groups // cfg.stem if cfg.group_width else planes
            blocks = []
            for j in range(n):
                blocks.append(cfg.block(cin, planes, 2 if (j == 0 and i > 0) else 1, width, cfg.groups))
                cin = planes * cfg.block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


RESNET18 = {"tiny": ResNetConfig(BasicBlock, (1, 1, 1, 1), 8, 32, 10),
            "full": ResNetConfig(BasicBlock, (2, 2, 2, 2), 64, 224, 1000)}
RESNET50 = {"tiny": ResNetConfig(Bottleneck, (1, 1, 1, 1), 8, 32, 10),
            "full": ResNetConfig(Bottleneck, (3, 4, 6, 3), 64, 224, 1000)}
# Tiny keeps ResNeXt's shape: the grouped 3x3 is twice as wide as the stage's planes, in 4 groups.
RESNEXT50 = {"tiny": ResNetConfig(Bottleneck, (1, 1, 1, 1), 8, 32, 10, groups=4, group_width=4),
             "full": ResNetConfig(Bottleneck, (3, 4, 6, 3), 64, 224, 1000, groups=32, group_width=4)}


# ---------------------------------------------------------------- Inception-v3


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
        blocks: list[nn.Module] = []
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


# ---------------------------------------------------------------- SqueezeNet 1.1


class Fire(nn.Module):
    """SqueezeNet fire module: 1x1 squeeze, then parallel 1x1 and 3x3 expands, concatenated."""

    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True))
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU(inplace=True))
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.squeeze(x)
        return torch.cat([self.e1(s), self.e3(s)], 1)


@dataclass(frozen=True)
class SqueezeNetConfig:
    stem: int
    stages: tuple[tuple[tuple[int, int], ...], ...]  # per stage, (squeeze, expand) of each fire
    image: int
    classes: int


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1: 3x3/2 stem, fire stages split by ceil-mode max-pools, 1x1 conv classifier."""

    def __init__(self, cfg: SqueezeNetConfig):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, cfg.stem, 3, 2), nn.ReLU(inplace=True)]
        cin = cfg.stem
        for stage in cfg.stages:
            layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            for squeeze, expand in stage:
                layers.append(Fire(cin, squeeze, expand))
                cin = 2 * expand
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(cin, cfg.classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


SQUEEZENET = {
    "tiny": SqueezeNetConfig(8, (((2, 8),), ((4, 16),), ((6, 24), (8, 32))), 32, 10),
    "full": SqueezeNetConfig(64, (((16, 64), (16, 64)), ((32, 128), (32, 128)),
                                  ((48, 192), (48, 192), (64, 256), (64, 256))), 224, 1000),
}


# ---------------------------------------------------------------- MobileNet-v2


def _divisible(v: float, by: int = 8) -> int:
    """torchvision's channel rounding: nearest multiple of `by`, never more than 10% below `v`."""
    out = max(by, int(v + by / 2) // by * by)
    return out + by if out < 0.9 * v else out


class InvertedResidual(nn.Module):
    """MobileNet-v2 block: 1x1 expand (skipped when t=1), 3x3 depthwise, linear 1x1 project, residual
    when the shape is kept."""

    def __init__(self, cin: int, cout: int, stride: int, t: int):
        super().__init__()
        hidden = round(cin * t)
        layers: list[nn.Module] = [] if t == 1 else [ConvBN(cin, hidden, 1, act=nn.ReLU6)]
        layers += [ConvBN(hidden, hidden, 3, stride, 1, groups=hidden, act=nn.ReLU6),
                   ConvBN(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


@dataclass(frozen=True)
class MobileNetConfig:
    width: float
    settings: tuple[tuple[int, int, int, int], ...]  # (expansion t, channels c, repeats n, stride s)
    last: int
    image: int
    classes: int


class MobileNetV2(nn.Module):
    """MobileNet-v2: 3x3/2 stem, inverted-residual stages, 1x1 conv to `last`, pool, dropout, linear."""

    def __init__(self, cfg: MobileNetConfig):
        super().__init__()
        cin = _divisible(32 * cfg.width)
        layers: list[nn.Module] = [ConvBN(3, cin, 3, 2, 1, act=nn.ReLU6)]
        for t, c, n, s in cfg.settings:
            cout = _divisible(c * cfg.width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers.append(ConvBN(cin, cfg.last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(cfg.last, cfg.classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


MOBILENET = {
    # Tiny repeats one stage's block so that a residual (stride 1, same width) inverted block remains.
    "tiny": MobileNetConfig(0.25, ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2), (6, 64, 1, 2), (6, 96, 1, 1),
                                   (6, 160, 1, 2), (6, 320, 1, 1)), 128, 32, 10),
    "full": MobileNetConfig(1.0, ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                  (6, 160, 3, 2), (6, 320, 1, 1)), 1280, 224, 1000),
}


# ---------------------------------------------------------------- VGG-16


@dataclass(frozen=True)
class VGGConfig:
    layers: tuple[int | str, ...]  # conv widths, "M" = 2x2/2 max-pool
    pool: int  # side of the adaptive average pool before the classifier
    hidden: int
    image: int
    classes: int


class VGG(nn.Module):
    """VGG without BN: 3x3 conv + ReLU stacks split by max-pools, then a three-layer MLP classifier."""

    def __init__(self, cfg: VGGConfig):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in cfg.layers:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((cfg.pool, cfg.pool))
        self.classifier = nn.Sequential(
            nn.Linear(cin * cfg.pool * cfg.pool, cfg.hidden), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(cfg.hidden, cfg.classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
VGG16 = {
    # Tiny keeps all 13 convs (VGG has no other block type to keep) at 1/8 width; 32x32 pools down to 1x1.
    "tiny": VGGConfig(tuple(v if v == "M" else int(v) // 8 for v in _VGG16), 1, 64, 32, 10),
    "full": VGGConfig(_VGG16, 7, 4096, 224, 1000),
}


# ---------------------------------------------------------------- the zoo entries


@register("resnext50", "cnn", "ResNeXt-50 32x4d (full: grouped bottlenecks [3,4,6,3], 1x3x224x224)")
def resnext50(size: str):
    cfg = pick(RESNEXT50, size)
    return _init(ResNet(cfg)), (_image(cfg.image),)


@register("inception_v3", "cnn", "Inception-v3, no aux head (full: A x3, B, C x4, D, E x2; 1x3x299x299)")
def inception_v3(size: str):
    cfg = pick(INCEPTION, size)
    return _init(InceptionV3(cfg)), (_image(cfg.image),)


@register("squeezenet1_1", "cnn", "SqueezeNet 1.1 (full: 8 fire modules, 1x3x224x224, 1000 classes)")
def squeezenet1_1(size: str):
    cfg = pick(SQUEEZENET, size)
    return _init(SqueezeNet(cfg)), (_image(cfg.image),)


@register("resnet50", "cnn", "ResNet-50 v1.5 (full: bottlenecks [3,4,6,3], 1x3x224x224, 1000 classes)")
def resnet50(size: str):
    cfg = pick(RESNET50, size)
    return _init(ResNet(cfg)), (_image(cfg.image),)


@register("mobilenet_v2", "cnn", "MobileNet-v2 1.0 (full: ReLU6 inverted residuals, 1x3x224x224)")
def mobilenet_v2(size: str):
    cfg = pick(MOBILENET, size)
    return _init(MobileNetV2(cfg)), (_image(cfg.image),)


@register("vgg16", "cnn", "VGG-16 (full: 13 3x3 convs, 4096-wide classifier, 1x3x224x224, 1000 classes)")
def vgg16(size: str):
    cfg = pick(VGG16, size)
    return _init(VGG(cfg)), (_image(cfg.image),)


@register("resnet18", "cnn", "ResNet-18 (full: basic blocks [2,2,2,2], 1x3x224x224, 1000 classes)")
def resnet18(size: str):
    cfg = pick(RESNET18, size)
    return _init(ResNet(cfg)), (_image(cfg.image),)
