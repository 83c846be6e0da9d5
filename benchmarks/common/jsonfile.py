"""Benchmark JSON that may be stored gzip'd: the repository keeps its largest results as `<name>.json.gz` (logs/
README.md), and every reader here takes the plain path and finds either form."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any


def stored(path: str | os.PathLike) -> Path | None:
    """The file holding `path`'s JSON: `path` itself, else `path.gz`; None when neither exists."""
    plain = Path(path)
    packed = plain.with_name(plain.name + ".gz")
    return plain if plain.is_file() else packed if packed.is_file() else None


def exists(path: str | os.PathLike) -> bool:
    return stored(path) is not None


def read_json(path: str | os.PathLike) -> Any:
    """`path`'s JSON, read from `path` or `path.gz`; FileNotFoundError naming both when neither exists."""
    found = stored(path)
    if found is None:
        raise FileNotFoundError(f"{path}: no such file (nor {path}.gz)")
    if found.suffix == ".gz":
        with gzip.open(found, "rt") as f:
            return json.load(f)
    return json.loads(found.read_text())
