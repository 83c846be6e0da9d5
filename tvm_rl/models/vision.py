"""CNNs of the zoo: ResNet-18/50, ResNeXt-50 32x4d, Inception-v3 (its blocks in `inception.py`), SqueezeNet 1.1,
MobileNet-v2, VGG-16.

Written in plain torch.nn (no torchvision, no downloaded weights) with torchvision's layer structure, so
`full` matches the well-known architectures op for op and parameter for parameter. Weights are random
(the caller seeds torch); BatchNorm layers get random running statistics and affine parameters so that
BN folding changes the numbers and a numerics check of it means something."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .inception import INCEPTION, InceptionV3
from .layers import ConvBN
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
