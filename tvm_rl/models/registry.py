"""The zoo's registry: each model is a function `size -> (nn.Module, example inputs)`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import UnknownModelError

SIZES = ("tiny", "full")

Builder = Callable[[str], "tuple[torch.nn.Module, tuple[torch.Tensor, ...]]"]


@dataclass(frozen=True)
class ModelSpec:
    """One zoo entry: a name, a family ("transformer", "cnn", or "heldout"), and its builder."""

    name: str
    family: str
    description: str
    build: Builder


_REGISTRY: dict[str, ModelSpec] = {}


def register(name: str, family: str, description: str) -> Callable[[Builder], Builder]:
    """Decorator adding a builder `fn(size) -> (module, inputs)` to the zoo under `name`."""

    def wrap(fn: Builder) -> Builder:
        if name in _REGISTRY:
            raise ValueError(f"zoo model {name!r} registered twice")
        _REGISTRY[name] = ModelSpec(name, family, description, fn)
        return fn

    return wrap


def spec(name: str) -> ModelSpec:
    """The zoo entry called `name`, or an UnknownModelError (a ValueError) listing the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownModelError(f"unknown zoo model {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


# test models for zero-shot evaluation, kept out of the default zoo (registered by tests/support/heldout_models.py)
HELD_OUT = "heldout"


def names(family: str | None = None) -> list[str]:
    """Registered model names, in registration order, optionally of one family.

    Without a family: the zoo used for training and benchmarks, i.e. every model except those of family
    "heldout" (the zero-shot test models); ask for them by name with `names("heldout")`. `spec` and
    `models.load` know every registered model, held out or not."""
    if family is None:
        return [n for n, s in _REGISTRY.items() if s.family != HELD_OUT]
    return [n for n, s in _REGISTRY.items() if s.family == family]


def pick(configs: dict, size: str):
    """The configuration for `size`, with an error naming the sizes that exist."""
    if size not in configs:
        raise UnknownModelError(f"unknown size {size!r}; choose one of {', '.join(configs)}")
    return configs[size]
