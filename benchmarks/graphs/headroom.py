"""The room a learned policy has: per model, the best graph any arm or search found against the pass's default.

A policy in the pass chooses among the rewrites the searches also explore. Where no arm and no search, at any
budget, has found a graph much cheaper than the default arm's, no choice of rewrites the searches try can beat the
default by much either, whatever is learned. `headroom` pools every run of the ablation JSONs
(`benchmarks/graph_rl.py`) priced by one proxy, and sets the best of them per model beside the default arm's mean
in the pass's own settings. It reads JSONs only: nothing is rewritten or priced again.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from benchmarks.common import jsonfile
from tvm_rl.graph import arms, defaults

from . import ablation

TARGET = 1.05  # issue 20: the learned default >= 1.05x over the best non-learned arm ...
TARGET_MODELS = 3  # ... on >= 3 models


class HeadroomError(ValueError):
    """The JSONs cannot be pooled (another proxy, measured speedups, nothing to compare)."""


@dataclass
class Best:
    """One run: its proxy speedup over the exported graph, the arm, the seed (None: a deterministic search), and
    the JSON it came from."""

    speedup: float
    arm: str
    seed: int | None
    source: str


def is_pass_default(settings: dict[str, Any]) -> bool:
    """Whether an ablation JSON's `settings` are those `RLRewritePass()` runs with (budget, episodes, steps, cap,
    shortlist, every-match actions)."""
    return (settings.get("time_budget_s") == defaults.TIME_BUDGET_S and settings.get("episodes") == defaults.EPISODES
            and settings.get("max_steps") == defaults.MAX_STEPS and settings.get("cap") == defaults.CAP
            and settings.get("shortlist") == defaults.SHORTLIST and settings.get("all_matches") is True)


def load(paths: Sequence[str | Path]) -> list[tuple[str, dict]]:
    """The JSONs at `paths`, checked to be poolable: priced by the proxy (not measured) and by one and the same
    recorded proxy."""
    if not paths:
        raise HeadroomError("no ablation JSON given")
    docs: list[tuple[str, dict]] = []
    for p in paths:
        try:
            doc = jsonfile.read_json(p)
        except (OSError, json.JSONDecodeError) as e:
            raise HeadroomError(f"{p}: not a readable ablation JSON ({e})") from e
        if not isinstance(doc, dict) or "models" not in doc:
            raise HeadroomError(f"{p}: not an ablation JSON from benchmarks/graph_rl.py (no \"models\")")
        if doc.get("measured"):
            raise HeadroomError(f"{p}: its speedups were measured on builds; pool only runs priced by the proxy")
        if docs and doc.get("proxy") != docs[0][1].get("proxy"):
            raise HeadroomError(f"{p}: priced by another proxy than {docs[0][0]}; its speedups do not compare")
        docs.append((str(p), doc))
    return docs


def _runs(docs: Iterable[tuple[str, dict]]):
    for source, doc in docs:
        for model, entry in doc["models"].items():
            for arm, rows in entry.get("runs", {}).items():
                for row in rows:
                    yield source, doc, model, arm, row


def headroom(docs: Sequence[tuple[str, dict]], default_arm: str = arms.DEFAULT_ARM,
             learned: Iterable[str] = arms.LEARNED) -> dict[str, dict[str, Any]]:
    """Per model that has runs of `default_arm` in the pass's default settings: that arm's mean speedup there
    (`default`, over `default_runs` runs), the best run of any arm, setting or search (`best`), the best run of a
    non-learned one (`best_rule`) and of a learned one (`best_learned`, None without any), and
    `headroom` = best / default."""
    learned = set(learned)
    reference: dict[str, list[float]] = {}
    best_rule: dict[str, Best] = {}
    best_learned: dict[str, Best] = {}
    for source, doc, model, arm, row in _runs(docs):
        speedup = float(row["speedup"])
        if arm == default_arm and is_pass_default(doc.get("settings", {})):
            reference.setdefault(model, []).append(speedup)
        table = best_learned if arm in learned else best_rule
        if model not in table or speedup > table[model].speedup:
            table[model] = Best(speedup, arm, row.get("seed"), source)
    out: dict[str, dict[str, Any]] = {}
    for model, values in reference.items():
        default = float(np.mean(values))
        best = max((b for b in (best_rule.get(model), best_learned.get(model)) if b is not None),
                   key=lambda b: b.speedup)  # the default arm's own runs are in best_rule: never empty
        out[model] = {"default": default, "default_runs": len(values), "best": best,
                      "best_rule": best_rule.get(model), "best_learned": best_learned.get(model),
                      "headroom": best.speedup / default}
    if not out:
        raise HeadroomError(f"no model has runs of {default_arm!r} in the pass's default settings "
                            f"({defaults.TIME_BUDGET_S:g} s, {defaults.EPISODES} episodes of {defaults.MAX_STEPS} "
                            f"steps, cap {defaults.CAP}, shortlist {defaults.SHORTLIST}, every match)")
    return out


def verdict(rows: dict[str, dict[str, Any]], target: float = TARGET, models: int = TARGET_MODELS) -> dict[str, Any]:
    """The models whose best run is at least `target` times the default's mean, and whether there are `models` of
    them: if not, nothing found so far leaves a policy the room to meet the target on that many."""
    room = sorted(m for m, r in rows.items() if r["headroom"] >= target)
    return {"target": target, "models_needed": models, "models_with_room": room, "room": len(room) >= models,
            "geomean_headroom": ablation.geomean(r["headroom"] for r in rows.values())}


def as_json(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`rows` with each `Best` as a plain dict."""
    return {m: {k: (v.__dict__ if isinstance(v, Best) else v) for k, v in r.items()} for m, r in rows.items()}


def table(rows: dict[str, dict[str, Any]]) -> list[str]:
    """A markdown table, the most room first."""
    def run(b: Best | None) -> str:
        if b is None:
            return "-"
        seed = "" if b.seed is None else f", seed {b.seed}"
        return f"{b.speedup:.3f} ({b.arm}{seed}; {Path(b.source).name})"

    out = ["| model | the default (mean, runs) | best without learning | best learned | headroom |",
           "|---|---|---|---|---|"]
    for model, r in sorted(rows.items(), key=lambda kv: -kv[1]["headroom"]):
        out.append(f"| {model} | {r['default']:.3f} ({r['default_runs']}) | {run(r['best_rule'])} | "
                   f"{run(r['best_learned'])} | {r['headroom']:.3f}x |")
    return out


__all__ = ["Best", "HeadroomError", "TARGET", "TARGET_MODELS", "as_json", "headroom", "is_pass_default", "load",
           "table", "verdict"]
