"""What a graph training run keeps in its work dir: the checkpoint it resumes from, `train.csv` and `train.png`."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch

from ..errors import CheckpointError

CSV_FIELDS = ("iteration", "episodes", "mean_return", "mean_speedup", "best_speedup", "policy_loss",
              "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "seconds")


def load_checkpoint(path: Path) -> dict:
    """The training checkpoint at `path`, loaded with weights_only (so loading never runs code from the file);
    CheckpointError if it cannot be read that way."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 -- torch raises many kinds (UnpicklingError, EOFError, struct.error)
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise CheckpointError(f"training checkpoint {path} cannot be loaded ({type(err).__name__}: {first}); it is "
                              "corrupt or was written by an older tvm-rl: use another --work-dir") from None


def plain_rows(history: list[dict]) -> list[dict]:
    """`history` with numpy / torch scalars as Python numbers: a weights_only load accepts only plain values."""
    return [{k: v.item() if isinstance(v, (np.generic, torch.Tensor)) else v for k, v in row.items()}
            for row in history]


def write_csv(path: Path, history: list[dict]) -> None:
    """One row per iteration, the columns of CSV_FIELDS."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS)
        w.writeheader()
        w.writerows(history)


def plot_training(history: list[dict], path: Path) -> None:
    """Mean episode return and speedup per iteration."""
    if not history:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    it = [h["iteration"] for h in history]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    a.plot(it, [h["mean_return"] for h in history])
    a.set_xlabel("iteration")
    a.set_ylabel("mean episode return (% of RT0)")
    b.plot(it, [h["mean_speedup"] for h in history], label="mean")
    b.plot(it, [h["best_speedup"] for h in history], label="best")
    b.set_xlabel("iteration")
    b.set_ylabel("speedup (cost model)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
