"""The end-to-end benchmark over seeds: for each (arm, N) tuned with two or more seeds, its geometric-mean latency
and speedups with 95% bootstrap intervals over seeds, against MetaSchedule's budget arms (on the model as imported,
and on TVM's tuning pipeline's module) at every N they were run at (paired by seed where N is the same and two seeds
are shared, resampled independently where not), PyTorch and ONNX Runtime.

Read from one model's entry of the benchmark's JSON (all builds timed in one interleaved timing), so ratios
are within one timing. With three seeds an interval says how much the answer moves with the seed, no more.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .table import BUDGET_BASELINE_ARM, ORT, TORCH

N_BOOT = 2000
# MetaSchedule's arms every (arm, N) is compared with: on the model as imported, and on TVM's tuning pipeline's module
COMPARED = {BUDGET_BASELINE_ARM: "vs_metaschedule", "budget-ms-static": "vs_ms_static"}
LABELS = {"vs_metaschedule": "vs MetaSchedule", "vs_ms_static": "vs MetaSchedule (TVM's tuning pipeline)"}


def _interval(draw, n_boot: int = N_BOOT, seed: int = 0) -> list[float]:
    """[point, low, high] of exp(draw(rng or None)): the point from the data, the interval from resamples."""
    rng = np.random.default_rng(seed)
    stats = np.array([draw(rng) for _ in range(n_boot)])
    return [round(math.exp(x), 3) for x in (draw(None), np.quantile(stats, 0.025), np.quantile(stats, 0.975))]


def _resample(values: np.ndarray, rng) -> np.ndarray:
    return values if rng is None else values[rng.integers(len(values), size=len(values))]


def groups(entry: dict[str, Any]) -> dict[tuple[str, int], dict[int, float]]:
    """{(arm, N): {seed: timed ms}} of the entry's tuned builds."""
    timed = entry.get("timing", {}).get("variants", {})
    out: dict[tuple[str, int], dict[int, float]] = {}
    for key, run in entry.get("runs", {}).items():
        ms = timed.get(key, {}).get("ms")
        if ms:
            out.setdefault((run["arm"], run["trials"]), {})[run["seed"]] = ms
    return out


def seed_summary(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (arm, N) with >= 2 seeds: seeds, geomean ms [CI], and speedups [CI] over MetaSchedule's budget
    arms at each of their N (`vs_metaschedule`, `vs_ms_static`: {N: [point, low, high]}), PyTorch and ORT (> 1:
    faster)."""
    timed = entry.get("timing", {}).get("variants", {})
    found = groups(entry)
    rows = []
    for (arm, n), by_seed in sorted(found.items()):
        if len(by_seed) < 2:
            continue
        logs = np.log([by_seed[s] for s in sorted(by_seed)])
        row: dict[str, Any] = {"arm": arm, "trials": n, "seeds": len(logs),
                               "ms": _interval(lambda rng: _resample(logs, rng).mean()), "vs_metaschedule": {}}
        for (base_arm, base_n), base_seeds in sorted(found.items()):
            field = COMPARED.get(base_arm)
            if field is None or (base_arm, base_n) == (arm, n):
                continue
            shared = sorted(set(by_seed) & set(base_seeds))
            if base_n == n and len(shared) >= 2:
                paired = np.log([base_seeds[s] / by_seed[s] for s in shared])
                row.setdefault(field, {})[base_n] = _interval(lambda rng: _resample(paired, rng).mean())
            else:  # one seed of the baseline: the interval is this arm's spread over seeds alone
                base_logs = np.log(list(base_seeds.values()))
                row.setdefault(field, {})[base_n] = _interval(
                    lambda rng: _resample(base_logs, rng).mean() - _resample(logs, rng).mean())
        for ref, key in ((TORCH, "vs_torch"), (ORT, "vs_ort")):
            ref_ms = timed.get(ref, {}).get("ms")
            if ref_ms:
                row[key] = _interval(lambda rng: math.log(ref_ms) - _resample(logs, rng).mean())
        rows.append(row)
    return rows


def format_seed_table(name: str, rows: list[dict[str, Any]]) -> str:
    """The seed summary as text (empty when no (arm, N) has two seeds)."""
    if not rows:
        return ""

    def ci(v: list[float] | None, suffix: str = "x") -> str:
        return "-" if not v else f"{v[0]:.3g}{suffix} [{v[1]:.3g}, {v[2]:.3g}]"

    lines = [f"\n{name} over seeds: geomean, 95% bootstrap interval over seeds; speedups > 1: faster"]
    for r in rows:
        vs_ms = "; ".join(f"{LABELS[field]} N={n} {ci(v)}" for field in LABELS for n, v in r.get(field, {}).items())
        lines.append(f"{r['arm']} N={r['trials']} ({r['seeds']} seeds): {ci(r['ms'], ' ms')}"
                     + (f"; {vs_ms}" if vs_ms else "")
                     + f"; vs PyTorch {ci(r.get('vs_torch'))}; vs ORT {ci(r.get('vs_ort'))}")
    return "\n".join(lines)


__all__ = ["format_seed_table", "groups", "seed_summary"]
