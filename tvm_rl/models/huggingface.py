"""A Hugging Face model from a local directory (what `save_pretrained` writes) as a `Model`, with example inputs
made from its config: token ids for text models, pixel values for vision models, log-mel features for audio
encoders. Decoder LLMs are imported without a KV cache (the prefill graph)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import ModelImportError
from .importer import Model, from_torch

DEFAULT_TOKENS = 128  # sequence length of a text model's example input unless --shape says otherwise
DEFAULT_IMAGE = 224


def is_pretrained_dir(path: str | Path) -> bool:
    """True when `path` is a folder with a `config.json` (a `save_pretrained` output)."""
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()


def example_inputs(model: torch.nn.Module, shapes: dict[str, Sequence[int]] | None = None,
                   seed: int = 0) -> dict[str, torch.Tensor]:
    """The model's main input, seeded, at the shape `shapes` names for it or one its config implies."""
    config: Any = model.config  # a transformers PretrainedConfig (torch's Module typing does not know it)
    name = getattr(model, "main_input_name", "input_ids")
    shape = list((shapes or {}).get(name, []))
    unknown = sorted(set(shapes or {}) - {name})
    if unknown:
        raise ModelImportError(f"--shape names {', '.join(unknown)}, but this {type(model).__name__} takes one input, "
                               f"{name!r}")
    g = torch.Generator().manual_seed(seed)
    if name == "input_ids":
        shape = shape or [1, min(DEFAULT_TOKENS, getattr(config, "max_position_embeddings", DEFAULT_TOKENS))]
        return {name: torch.randint(0, getattr(config, "vocab_size", 2), tuple(shape), generator=g)}
    if name == "pixel_values":
        size = getattr(config, "image_size", DEFAULT_IMAGE)
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        shape = shape or [1, getattr(config, "num_channels", 3), height, width]
    elif name == "input_features":  # Whisper's encoder: log-mel frames at twice its positions
        shape = shape or [1, config.num_mel_bins, 2 * config.max_source_positions]
    elif not shape:
        raise ModelImportError(f"{type(model).__name__}'s input {name!r} has no default shape here: give it as "
                               f"--shape {name}=D1,D2,...")
    return {name: torch.randn(tuple(shape), generator=g)}


def from_pretrained_dir(path: str | Path, shapes: dict[str, Sequence[int]] | None = None,
                        name: str | None = None) -> Model:
    """Load the model saved in `path` (the class its config names) and import it at its example input's shape."""
    try:
        import transformers
    except ImportError as err:
        raise ModelImportError(f"{path} is a Hugging Face model folder; loading it needs the transformers "
                               "package (pip install transformers)") from err
    path = Path(path)
    config = transformers.AutoConfig.from_pretrained(path)
    architectures = getattr(config, "architectures", None) or []
    cls = getattr(transformers, architectures[0], None) if architectures else None
    cls = cls or transformers.AutoModel
    if hasattr(config, "use_cache"):
        config.use_cache = False  # the prefill graph: a KV cache in the outputs cannot be exported
    try:
        module = cls.from_pretrained(path, config=config).eval()
    except Exception as err:  # transformers raises many types for a bad or partial folder
        raise ModelImportError(f"loading the Hugging Face model in {path} failed: {type(err).__name__}: "
                               f"{err}") from err
    inputs = example_inputs(module, shapes)
    return from_torch(_Positional(module, next(iter(inputs))), tuple(inputs.values()),
                      name=name or f"{path.name or 'hf'}")


class _Positional(torch.nn.Module):
    """Calls a Hugging Face model with its main input by keyword (their positional orders differ)."""

    def __init__(self, model: torch.nn.Module, input_name: str) -> None:
        super().__init__()
        self.model, self.input_name = model, input_name

    def forward(self, x: torch.Tensor):
        return self.model(**{self.input_name: x})
