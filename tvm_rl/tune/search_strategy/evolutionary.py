"""MetaSchedule's evolutionary search, as tvm-rl runs it by default."""
from __future__ import annotations

import os

from tvm.s_tir import meta_schedule as ms

from ...errors import TvmRlError

POPULATION = 512  # MetaSchedule's default population_size
POPULATION_VAR = "TVM_RL_POPULATION"


def default_population() -> int:
    """`$TVM_RL_POPULATION` if set (a cheaper, weaker search round: fewer schedules rated per batch), else 512."""
    text = os.environ.get(POPULATION_VAR)
    if text is None:
        return POPULATION
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 2:
        raise TvmRlError(f"${POPULATION_VAR} must be a whole number of at least 2 (got {text!r})")
    return value


def evolutionary(seed: int = 0, walks: int | None = None, evaluations: int | None = None,
                 population: int | None = None) -> ms.SearchStrategy:
    """MetaSchedule's evolutionary search, with the initial population drawn with fewer retries than its
    defaults (50 unmeasured, 5 failures), which on small spaces spend most of a tuning run failing to find
    more distinct schedules than exist. Mutation, cost model and selection are MetaSchedule's own; the seed
    is the task scheduler's, and `walks`/`evaluations` do not apply. `population` is the number of schedules
    sampled, mutated and rated by the cost model each round (default: `default_population()`)."""
    population = default_population() if population is None else population
    if population < 2:
        raise TvmRlError(f"an evolutionary search needs a population of at least 2 (got {population})")
    return ms.search_strategy.EvolutionarySearch(population_size=population,
                                                 init_min_unmeasured=min(16, population), max_fail_count=2)


def is_evolutionary(strategy: ms.SearchStrategy) -> bool:
    """Whether `strategy` is MetaSchedule's evolutionary search (which `tune_workloads` wraps to end spent tasks)."""
    return isinstance(strategy, ms.search_strategy.EvolutionarySearch)
