"""Pre-train the tuner's agent offline on a corpus, with no measurement, and compare walkers the same way.

A tuning run gives the agent a few rounds per kernel; a policy that learned where to walk on many kernels
before the run starts ahead. Here, for each corpus workload in turn, a `PPOSearch` sharing one agent resumes from
the workload's measured records (they train the pre-trained cost model, refined on them, and seed the walks), and
runs `rounds` of its walks (draft model fitted to the cost model's ratings, PPO updates every `update_every` steps)
without measuring anything: the reward is the rating the walks climb, which is what the agent climbs in a real run.

`compare_walkers` is the offline check that goes with it: on workloads the agent did not train on, one round of
walks per walker (no learning during it) from the same seed, and the cost model's exact ratings of each walker's
finalists. It says whether a policy finds higher-rated points than an untrained one by the model; only the tuner
benchmark (`benchmarks/tuner.py`) says whether that turns into faster kernels.
"""
from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tvm.s_tir import meta_schedule as ms

from ...errors import TvmRlError
from ..agent import PPOAgent, PPOConfig
from ..cost_model.pretrained import PretrainedXGBModel
from ..knobs import make_context
from ..search_strategy.ppo import PPOSearch
from .bootstrap import cluster_bootstrap
from .build import Corpus


def select_workloads(corpus: Corpus, exclude: Sequence[str] = (), only: Sequence[str] | None = None) -> list[str]:
    """Corpus workload names, less those matching an `exclude` pattern; `only` keeps just the ones named."""
    names = [n for n in corpus.names() if not any(fnmatch.fnmatch(n, p) for p in exclude)]
    if only is not None:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise TvmRlError(f"not in corpus {corpus.path} (or excluded): {', '.join(unknown)}")
        names = [n for n in names if n in set(only)]
    if not names:
        raise TvmRlError(f"no workload of corpus {corpus.path} is left to use")
    return names


def _search_on(corpus: Corpus, name: str, agent: PPOAgent, model_path: str | Path, learn: bool, seed: int,
               batch: int) -> Any:
    """A PPOSearch (its Python object) for workload `name`, resumed from the corpus's records of it."""
    records = corpus.load(name)
    context = make_context(records.mod, corpus.target(), name, seed)
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(records.mod)
    for rec in records.records:
        database.commit_tuning_record(ms.database.TuningRecord(rec.trace, workload, rec.run_secs, rec.target,
                                                               rec.args_info))
    strategy = PPOSearch(agent=agent, adaptive=True, seed=seed, learn=learn)  # the shipped policy's recipe
    search: Any = getattr(strategy, "_inst", strategy)  # the Python object behind TVM's wrapper
    search._initialize_with_tune_context(context)
    search.pre_tuning(max_trials=1 << 20, num_trials_per_iter=batch, design_spaces=context.generate_design_space(),
                      database=database, cost_model=PretrainedXGBModel(model_path))
    return search


def pretrain_policy(corpus: str | Path | Corpus, model_path: str | Path, out: str | Path, rounds: int = 2,
                    epochs: int = 1, batch: int = 16, exclude: Sequence[str] = (), seed: int = 0,
                    config: PPOConfig | None = None, write: Callable[[str], None] = print) -> dict[str, Any]:
    """Train an agent on every selected corpus workload (`epochs` passes in a shuffled order, `rounds` walk rounds
    per workload and pass) and save it to `out` (`PPOAgent.save`); returns the training log."""
    corpus = corpus if isinstance(corpus, Corpus) else Corpus(corpus)
    names = select_workloads(corpus, exclude)
    agent = PPOAgent(config or PPOConfig(seed=seed))
    rng = np.random.default_rng(seed)
    log: list[dict[str, Any]] = []
    start = time.perf_counter()
    for epoch in range(epochs):
        for i, name in enumerate(rng.permutation(names)):
            search = _search_on(corpus, str(name), agent, model_path, True, int(rng.integers(1 << 30)), batch)
            for r in range(rounds):
                search.propose(batch)
                line = {"epoch": epoch, "workload": str(name), "round": r, **search.round_record}
                log.append(line)
            write(f"[{epoch + 1}/{epochs}] [{i + 1}/{len(names)}] {name}: {line['ppo_updates']} updates, entropy "
                  f"{_fmt(line['entropy'])}, approx_kl {_fmt(line['approx_kl'])}, explained var "
                  f"{_fmt(line['explained_variance'])}, draft agreement {_fmt(line['agreement'])} "
                  f"[{time.perf_counter() - start:.0f} s]")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    agent.save(str(out))
    return {"workloads": names, "rounds": rounds, "epochs": epochs, "updates": agent.updates,
            "seconds": round(time.perf_counter() - start, 1), "log": log}


def compare_walkers(corpus: str | Path | Corpus, model_path: str | Path, walkers: dict[str, PPOAgent],
                    names: Sequence[str], batch: int = 16, seeds: Sequence[int] = (0, 1, 2),
                    write: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """One round of walks per (workload, seed, walker), no learning, the same seed for every walker; per run the
    cost model's best and top-`batch` mean rating of the finalists, and the round's counts."""
    corpus = corpus if isinstance(corpus, Corpus) else Corpus(corpus)
    rows = []
    for name in names:
        for seed in seeds:
            for label, agent in walkers.items():
                search = _search_on(corpus, name, agent, model_path, False, seed, batch)
                start = time.perf_counter()
                search.propose(batch)
                scores = sorted((v for v in search.last_rated.values() if np.isfinite(v)), reverse=True)
                rows.append({"workload": name, "seed": seed, "walker": label,
                             "best": scores[0] if scores else None,
                             "top_mean": float(np.mean(scores[:batch])) if scores else None,
                             "seconds": round(time.perf_counter() - start, 2),
                             **{k: search.round_record.get(k) for k in ("steps", "draft_ratings", "exact_ratings",
                                                                        "agreement")}})
            write(f"{name} seed {seed}: " + ", ".join(
                f"{r['walker']} best {_fmt(r['best'])} top-{batch} {_fmt(r['top_mean'])}"
                for r in rows[-len(walkers):]))
    return rows


def compare_summary(rows: Sequence[dict[str, Any]], key: str, resamples: int = 10000, seed: int = 0
                    ) -> dict[str, float]:
    """The policy's `key` ("best" or "top_mean") minus the untrained agent's, over `compare_walkers`' runs: wins
    (runs where it is higher), the mean difference (each workload weighing the same) and its 95% interval from
    `bootstrap.cluster_bootstrap`, the tuner benchmark's: workloads resampled, then seeds within each."""
    pairs: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r.get(key) is not None:
            pairs.setdefault((r["workload"], r["seed"]), {})[r["walker"]] = r[key]
    diffs: dict[str, list[float]] = {}
    for (workload, _), p in pairs.items():
        if "policy" in p and "untrained" in p:
            diffs.setdefault(workload, []).append(p["policy"] - p["untrained"])
    if not diffs:
        raise ValueError(f"no run has both walkers' {key!r}")
    mean, low, high = cluster_bootstrap(list(diffs.values()), n_boot=resamples, seed=seed)
    every = np.concatenate(list(diffs.values()))
    return {"wins": int((every > 0).sum()), "runs": len(every), "mean": mean, "low": low, "high": high}


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


__all__ = ["compare_summary", "compare_walkers", "pretrain_policy", "select_workloads"]
