"""PPOSearch through TVM's own search-strategy protocol cases (after apache/tvm's
tests/python/meta_schedule/test_meta_schedule_search_strategy.py): a 32^3 matmul with a hand-written space, TVM's
RandomModel and MemoryDatabase, fake runner results, and the task scheduler's loop (generate candidates, notify
results, until None). Checked: the budget split into full batches, a small space measured exactly once per valid
point and then ended, a space without knobs measured once, every postprocessor failing ends the task at once,
and, with two design spaces one rated strictly higher, the batch going to the higher-rated one."""
import time

import numpy as np
import pytest
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from tests.support.kernels import matmul
from tvm_rl.tune.agent import PPOConfig
from tvm_rl.tune.knobs import KnobSpace, preload_tensor_intrinsics
from tvm_rl.tune.search_strategy.ppo import PPOSearch

# A target with the core count MetaSchedule's mutators ask for (TVM's own test predates that requirement).
TARGET = {"kind": "llvm", "num-cores": 1}


def light(**kwargs) -> PPOSearch:
    """PPOSearch with few walks: the protocol, not the search's quality, is under test."""
    return PPOSearch(config=PPOConfig(walks=16, max_evaluations=64), seed=0, **kwargs)


def schedule_matmul(sch: Schedule) -> None:
    """TVM's test space: 4-way tiles of i and j, a 2-way tile of k (tens of thousands of points)."""
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i1, i2, i3 = sch.split(i, sch.sample_perfect_tile(i, n=4))
    j0, j1, j2, j3 = sch.split(j, sch.sample_perfect_tile(j, n=4))
    k0, k1 = sch.split(k, sch.sample_perfect_tile(k, n=2))
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)


def schedule_matmul_small(sch: Schedule) -> None:
    """TVM's small space: 2-way tiles of j and k (5 x 5 points: the inner factor is at most 16)."""
    _, j, k = sch.get_loops(sch.get_sblock("C"))
    sch.split(j, sch.sample_perfect_tile(j, n=2))
    sch.split(k, sch.sample_perfect_tile(k, n=2))


def schedule_matmul_empty(sch: Schedule) -> Schedule:
    return sch


@derived_object
class RejectPostproc(ms.postproc.PyPostproc):
    """Rejects a schedule whose first tile decision has `inner` as its inner factor (None: rejects all)."""

    def __init__(self, inner: int | None = None) -> None:
        self.inner = inner

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        pass

    def apply(self, sch: Schedule) -> bool:
        if self.inner is None:
            return False
        tiles = [inst for inst in sch.trace.insts if inst.kind.name == "SamplePerfectTile"]
        return int(sch.trace.decisions[tiles[0]][-1]) != self.inner

    def clone(self) -> "RejectPostproc":
        return RejectPostproc(self.inner)


def context_for(sch_fn, strategy, postprocs=()) -> ms.TuneContext:
    preload_tensor_intrinsics()  # a TuneContext imports TVM's tensor intrinsics: a minute, unless preloaded
    return ms.TuneContext(mod=matmul(32), target=tvm.target.Target(TARGET), search_strategy=strategy,
                          space_generator=ms.space_generator.ScheduleFn(sch_fn, sch_rules=[], postprocs=list(postprocs),
                                                                        mutator_probs={}),
                          task_name="matmul", num_threads=1)


def drive(context: ms.TuneContext, max_trials: int, per_iter: int, cost_model=None):
    """The task scheduler's loop, as in TVM's test: batch sizes and the measured candidates."""
    strategy = context.search_strategy
    strategy.pre_tuning(max_trials=max_trials, num_trials_per_iter=per_iter,
                        design_spaces=context.space_generator.generate_design_space(context.mod),
                        database=ms.database.MemoryDatabase(), cost_model=cost_model or ms.cost_model.RandomModel())
    sizes, measured = [], []
    while (candidates := strategy.generate_measure_candidates()) is not None:
        sizes.append(len(candidates))
        measured += list(candidates)
        results = [ms.runner.RunnerResult(run_secs=[0.11, 0.41, 0.54], error_msg=None) for _ in candidates]
        strategy.notify_runner_results(candidates, results)
    strategy.post_tuning()
    return sizes, measured


def decisions(candidate: ms.MeasureCandidate | Schedule) -> tuple:
    """The tile decisions of a candidate's schedule: what tells two points apart here."""
    trace = getattr(candidate, "sch", candidate).trace
    return tuple(tuple(int(x) for x in trace.decisions[inst]) for inst in trace.insts
                 if inst.kind.name == "SamplePerfectTile")


@pytest.mark.parametrize("adaptive", [True, False], ids=["ppo-adaptive", "ppo"])
def test_budget_is_split_into_full_batches(adaptive):
    sizes, measured = drive(context_for(schedule_matmul, light(adaptive=adaptive)), 20, 7)
    assert sizes == [7, 7, 6]  # what ReplayTrace gives
    assert len({decisions(c) for c in measured}) == 20


def valid_points(sch_fn, postprocs=()) -> set[tuple]:
    """Every point of the (single) design space that decodes, by enumeration: the reference count."""
    context = context_for(sch_fn, None, postprocs)
    (space,) = [KnobSpace(s, context) for s in context.space_generator.generate_design_space(context.mod)]
    grids = np.meshgrid(*(np.arange(c) for c in space.cardinalities), indexing="ij")
    vecs = np.stack([g.ravel() for g in grids], axis=1)
    return {decisions(sch) for sch in map(space.decode, vecs) if sch is not None}


@pytest.mark.parametrize("postprocs", [(), (RejectPostproc(inner=2),)], ids=["all-valid", "some-invalid"])
def test_a_small_space_ends_once_every_valid_point_is_measured(postprocs):
    valid = valid_points(schedule_matmul_small, postprocs)
    assert len(valid) == (25 if not postprocs else 20)
    start = time.perf_counter()
    sizes, measured = drive(context_for(schedule_matmul_small, light(), postprocs), 2000, 10)
    seconds = time.perf_counter() - start
    assert [decisions(c) for c in measured] and {decisions(c) for c in measured} == valid
    assert len(measured) == len(valid)  # each valid point once, then None
    assert all(s == 10 for s in sizes[:-1]) and 0 < sizes[-1] <= 10  # full batches until the last
    assert seconds < 30


def test_an_unenumerated_space_ends_when_a_round_finds_nothing_new():
    # The small space searched as a large one would be (no enumeration): the task ends, without a point measured
    # twice, once random sampling and the walks find no unmeasured valid point in a round.
    start = time.perf_counter()
    sizes, measured = drive(context_for(schedule_matmul_small, light(enumerate_limit=0)), 2000, 10)
    assert len({decisions(c) for c in measured}) == len(measured) == sum(sizes) <= 25
    assert sum(sizes) >= 20 and all(s == 10 for s in sizes[:-2])
    assert time.perf_counter() - start < 30


def test_the_default_search_ends_a_small_space_quickly():
    start = time.perf_counter()
    sizes, _ = drive(context_for(schedule_matmul_small, PPOSearch(seed=0)), 2000, 10)
    assert sum(sizes) == 25 and time.perf_counter() - start < 30


def test_a_space_without_knobs_is_measured_once():
    sizes, _ = drive(context_for(schedule_matmul_empty, light()), 100, 10)
    assert sizes == [1]


def test_every_postproc_failing_returns_none_at_once():
    strategy = light()
    context = context_for(schedule_matmul, strategy, [RejectPostproc(inner=None)])
    start = time.perf_counter()
    sizes, _ = drive(context, 2000, 10)
    assert sizes == [] and time.perf_counter() - start < 10
    assert strategy._inst.stats["evaluations"] == strategy._inst.stats["invalid"] > 0


def two_spaces(sch: Schedule) -> list[Schedule]:
    """Two design spaces of different structure: 4-way tiles of i and j (3 tile knobs' worth of points:
    thousands), or 2-way tiles of i, j and k (125 points)."""
    first, second = sch.copy(), sch.copy()
    i, j, _ = first.get_loops(first.get_sblock("C"))
    first.split(i, first.sample_perfect_tile(i, n=4))
    first.split(j, first.sample_perfect_tile(j, n=4))
    for loop in second.get_loops(second.get_sblock("C")):
        second.split(loop, second.sample_perfect_tile(loop, n=2))
    return [first, second]


@derived_object
class PrefersFirstSpace(ms.cost_model.PyCostModel):
    """Rates every schedule of the first space (2 tiles) strictly above every one of the second (3 tiles)."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def load(self, path: str) -> None:
        pass

    def save(self, path: str) -> None:
        pass

    def update(self, context, candidates, results) -> None:
        pass

    def predict(self, context, candidates) -> np.ndarray:
        first = np.array([len(decisions(c)) == 2 for c in candidates], dtype=float)
        return first + 0.5 * self.rng.random(len(candidates))


def test_the_batch_goes_to_the_higher_rated_space():
    n = 16
    strategy = PPOSearch(config=PPOConfig(walks=32, max_evaluations=256), seed=0)
    context = context_for(two_spaces, strategy)
    context.search_strategy.pre_tuning(max_trials=2 * n, num_trials_per_iter=n,
                                       design_spaces=context.space_generator.generate_design_space(context.mod),
                                       database=ms.database.MemoryDatabase(), cost_model=PrefersFirstSpace())
    batches = []
    while (candidates := context.search_strategy.generate_measure_candidates()) is not None:
        batches.append([len(decisions(c)) == 2 for c in candidates])
        context.search_strategy.notify_runner_results(
            candidates, [ms.runner.RunnerResult(run_secs=[1e-3], error_msg=None) for _ in candidates])
    assert [len(b) for b in batches] == [n, n]
    # The first batch is random over both spaces; the guided one follows the model, but for the random share.
    assert sum(batches[1]) >= n - int(n * strategy._inst.explore_fraction + 0.5)


def test_rounds_log_the_walks_and_their_ppo_diagnostics():
    """Each guided round logs its walks (steps, draft and exact ratings, the draft's agreement with the model) and
    the PPO updates' diagnostics; with learn=False the walks do not change the agent."""
    import torch

    learning = light()
    drive(context_for(schedule_matmul, learning), 24, 8)
    guided = [line for line in learning._inst.log if "ppo_updates" in line]
    assert guided and all(line["ppo_updates"] >= 1 and line["steps"] > 0 for line in guided)
    assert all(line["draft_ratings"] > line["exact_ratings"] > 0 for line in guided)
    for key in ("entropy", "approx_kl", "clipfrac", "explained_variance"):
        assert all(line[key] is not None and np.isfinite(line[key]) for line in guided), key
    assert len(learning._inst.history) == sum(line["ppo_updates"] for line in guided)

    frozen = light(learn=False)
    before = [p.detach().clone() for p in frozen._inst.agent.policy.parameters()]
    drive(context_for(schedule_matmul, frozen), 24, 8)
    assert frozen._inst.agent.updates == 0 and not frozen._inst.history
    assert all(torch.equal(a, b) for a, b in zip(before, frozen._inst.agent.policy.parameters()))
