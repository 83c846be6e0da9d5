"""Tuning curves read from tuning databases: what `batch_gain.GainModel` is fitted on.

A curve is one kernel's best latency after each batch of its records, in the order the database recorded them
(its `database_tuning_record.json` is appended as candidates are measured).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tvm.s_tir import meta_schedule as ms

from ..database import RECORDS, WORKLOADS, check_database_dir, record_seconds
from ..errors import DatabaseError
from .batch_gain import FEATURES, GainModel, features
from .task_scheduler import untuned_seconds

BATCH = 8  # measurements per batch, as `tvm-rl optimize` tunes: a curve's step


@dataclass(frozen=True)
class Curve:
    """One kernel's tuning curve: its best latency (seconds) after each full batch, from its first valid one."""
    source: str  # the run folder and the workload's index there
    untuned: float
    bests: tuple[float, ...]


def read_curves(folder: str | os.PathLike, batch: int = BATCH) -> list[Curve]:
    """Each kernel's tuning curve in a tuning database folder (`database_workload.json`,
    `database_tuning_record.json`), its records taken in file order (the order they were measured) in batches of
    `batch`; a last, partial batch is left out, as are kernels with no valid record. A folder that is not a
    readable tuning database raises DatabaseError naming the file and line."""
    folder = Path(folder)
    check_database_dir(folder)
    if not (folder / RECORDS).is_file():
        raise DatabaseError(f"{folder} holds no tuning records ({RECORDS}): not a tuning run's folder")
    times: dict[int, list[float]] = {}
    with open(folder / RECORDS) as f:
        for line in f:
            if line.strip():
                index, record = json.loads(line)
                measured = record_seconds(record[1])
                times.setdefault(index, []).append(math.inf if measured is None else measured)
    with open(folder / WORKLOADS) as f:
        workloads = [line for line in f if line.strip()]
    curves = []
    for index, seconds in sorted(times.items()):
        bests, best = [], math.inf
        for start in range(0, len(seconds) - batch + 1, batch):
            best = min(best, *seconds[start:start + batch])
            if not math.isinf(best):
                bests.append(best)
        if bests:
            mod = ms.database.Workload.from_json(json.loads(workloads[index])).mod
            curves.append(Curve(f"{folder}#{index}", untuned_seconds(mod), tuple(bests)))
    return curves


def transitions(curves: Iterable[Curve]) -> tuple[np.ndarray, np.ndarray]:
    """(features after each batch but the last, the relative gain of the batch after it) over `curves`."""
    rows, gains = [], []
    for curve in curves:
        for k in range(1, len(curve.bests)):
            rows.append(features(curve.bests[:k], curve.untuned))
            gains.append((curve.bests[k - 1] - curve.bests[k]) / curve.bests[k - 1])
    return np.asarray(rows, dtype=float).reshape(-1, len(FEATURES)), np.asarray(gains, dtype=float)


def fit_gain_model(curves: Iterable[Curve], seed: int = 0) -> GainModel:
    """A gain model fitted on every transition of `curves`, with how many curves it saw."""
    curves = list(curves)
    model = GainModel.fit(*transitions(curves), seed=seed)
    model.meta["curves"] = len(curves)
    return model
