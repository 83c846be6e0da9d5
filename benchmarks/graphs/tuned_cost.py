"""Cost functions that tune a graph's kernels before timing it: they join the two halves, so they live above
both (the graph half never imports the tuner)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import tvm

from tvm_rl.graph.cost import CostFn, Memo, PairMeasure, end_to_end_ms, pair_measure


def tuned_pair_measure(target: tvm.target.Target | str, inputs: Sequence[np.ndarray] | None, work_dir: str | Path,
                       trials_per_kernel: int = 16, repeat: int = 10, **tune_options) -> PairMeasure:
    """`pair_measure` after tuning both graphs' kernels into `work_dir` (see `tuned_end_to_end_cost` for why)."""
    return pair_measure(target, inputs, repeat=repeat,
                        tune=database_tuner(target, work_dir, trials_per_kernel, **tune_options))


def tuned_end_to_end_cost(target: tvm.target.Target | str, inputs: Sequence[np.ndarray], work_dir: str | Path,
                          trials_per_kernel: int = 16, repeat: int = 10, **tune_options) -> CostFn:
    """The measured end-to-end median after tuning the graph's kernels into `work_dir`, memoised.

    Rewrites create kernels the database has never seen (a merged matmul, a conv with its batch norm folded
    in); built untuned they are naive loops on CPU, so timing them untuned would condemn every such rewrite.
    Each graph's kernels are tuned first to the same `trials_per_kernel` (`tune.tune_model`: kernels already
    in the database are skipped, so graphs sharing kernels tune them once), then the graph is timed.
    """
    tune = database_tuner(target, work_dir, trials_per_kernel, **tune_options)
    return Memo(lambda mod: end_to_end_ms(mod, target, inputs, tune(mod), repeat).median_ms)


def database_tuner(target, work_dir: str | Path, trials_per_kernel: int,
                   **tune_options) -> Callable[[tvm.IRModule], tvm.s_tir.meta_schedule.Database]:
    """mod -> the database of `work_dir` after tuning mod's kernels there (`tune.tune_model`)."""
    from tvm_rl.tune import tune_model

    return lambda mod: tune_model(mod, target, work_dir, trials_per_kernel=trials_per_kernel, **tune_options)[0]


def seed_folder(work_dir: str | Path, seed: int) -> Path:
    """Where `best_of_seeds_tuner` tunes with `seed`: `<work_dir>/seed<seed>`."""
    return Path(work_dir) / f"seed{seed}"


def best_of_seeds_tuner(target, work_dir: str | Path, trials_per_kernel: int, seeds: Sequence[int],
                        **tune_options) -> Callable[[tvm.IRModule], tvm.s_tir.meta_schedule.Database]:
    """mod -> `work_dir` after tuning mod's kernels once per tuner seed, each seed into its own database
    (`seed_folder`), `work_dir` then refreshed as their merge: every kernel built with the best record any seed
    found. A few trials per kernel leave some kernels badly tuned, and which ones depends on the seed (a re-tune
    at 16 trials moved a rewritten graph by a third), so comparing graphs needs more than one tuning."""
    from tvm_rl.database import TuningDatabase, merge_databases, open_database

    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"tune seeds must be distinct and at least one, not {list(seeds)}")
    folders = [seed_folder(work_dir, seed) for seed in seeds]
    tuners = [database_tuner(target, folder, trials_per_kernel, seed=seed, **tune_options)
              for folder, seed in zip(folders, seeds)]

    records = [TuningDatabase(folder).records_path for folder in folders]

    def records_state() -> list[tuple[int, int] | None]:
        return [(p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else None for p in records]

    def tune(mod: tvm.IRModule) -> tvm.s_tir.meta_schedule.Database:
        before = records_state()
        for tune_one in tuners:
            tune_one(mod)
        # Re-merging reads every seed's records: skipped when no seed tuned anything new for this graph.
        if records_state() != before or TuningDatabase(work_dir).is_empty():
            merge_databases(work_dir, folders, replace=True)
        return open_database(work_dir)

    return tune


