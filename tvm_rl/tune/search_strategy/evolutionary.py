"""MetaSchedule's evolutionary search, as tvm-rl runs it by default."""
from __future__ import annotations

from tvm.s_tir import meta_schedule as ms


def evolutionary(seed: int = 0, walks: int | None = None, evaluations: int | None = None) -> ms.SearchStrategy:
    """MetaSchedule's evolutionary search, with the initial population drawn with fewer retries than its
    defaults (50 unmeasured, 5 failures), which on small spaces spend most of a tuning run failing to find
    more distinct schedules than exist. Mutation, cost model and selection are MetaSchedule's own; the seed
    is the task scheduler's, and `walks`/`evaluations` do not apply."""
    return ms.search_strategy.EvolutionarySearch(population_size=512, init_min_unmeasured=16, max_fail_count=2)


def is_evolutionary(strategy: ms.SearchStrategy) -> bool:
    """Whether `strategy` is MetaSchedule's evolutionary search (which `tune_workloads` wraps to end spent tasks)."""
    return isinstance(strategy, ms.search_strategy.EvolutionarySearch)
