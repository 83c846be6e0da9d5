"""The model zoo: seeded random-weight PyTorch models exported to Relax, plus user models and ONNX files.

    >>> from tvm_rl import models
    >>> m = models.load("bert", "tiny")      # m.mod (IRModule), m.inputs, m.reference_outputs()
"""
from __future__ import annotations

import torch

from . import huggingface, transformers, vision  # noqa: F401  (transformers, vision: register the zoo)
from .importer import Model, export_onnx, from_onnx, from_torch
from .registry import SIZES, names, register, spec


def load(name: str, size: str = "tiny", seed: int = 0) -> Model:
    """Build zoo model `name` at `size` ("tiny" or "full") with weights and inputs drawn from `seed`."""
    entry = spec(name)
    torch.manual_seed(seed)
    module, example_inputs = entry.build(size)
    return from_torch(module, example_inputs, name=f"{name}-{size}")


__all__ = ["Model", "SIZES", "export_onnx", "from_onnx", "from_torch", "huggingface", "load", "names", "register",
           "spec"]
