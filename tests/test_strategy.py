"""PPOSearch and SimulatedAnnealing as MetaSchedule search strategies: the loop's contract (budget, no point
measured twice, only valid schedules), a real `tune_tir` run that improves on its first batch, and resume."""
import json
import math

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from kernels import matmul
from tvm_rl.tune import knobs
from tvm_rl.tune.agent import PPOAgent, PPOConfig
from tvm_rl.tune.annealing import SimulatedAnnealing
from tvm_rl.tune.strategy import PPOSearch
from tvm_rl.tune.tasks import shared_builder


def fake_seconds(sch) -> float:
    """A deterministic stand-in for a measurement: a function of the schedule's structure."""
    return 1e-4 * (1 + (tvm_ffi.structural_hash(sch.mod) % 1000) / 1000)


def drive(strategy, ctx, trials: int, per_iter: int):
    """Run the search-strategy protocol the way MetaSchedule's task scheduler does, with fake measurements."""
    inst = strategy._inst
    inst._initialize_with_tune_context(ctx)
    inst.pre_tuning(trials, per_iter, ctx.generate_design_space(), None, None)
    batches = []
    while (cands := inst.generate_measure_candidates()) is not None:
        assert 0 < len(cands) <= per_iter
        results = [ms.runner.RunnerResult(run_secs=[fake_seconds(c.sch)], error_msg=None) for c in cands]
        inst.notify_runner_results(cands, results)
        batches.append(cands)
    inst.post_tuning()
    return inst, batches


@pytest.mark.parametrize("make", [
    lambda: PPOSearch(config=PPOConfig(walks=8, max_evaluations=24), seed=0),
    lambda: PPOSearch(config=PPOConfig(walks=8, max_evaluations=24), adaptive=False, seed=0),
    lambda: SimulatedAnnealing(chains=8, max_evaluations=24, seed=0),
], ids=["ppo", "ppo-topk", "annealing"])
def test_protocol_budget_distinct_points_and_valid_schedules(cpu, make):
    ctx = knobs.make_context(matmul(32), cpu, "matmul", seed=0)
    inst, batches = drive(make(), ctx, trials=14, per_iter=5)
    assert inst.trials == 14 == sum(len(b) for b in batches)
    assert len(inst.measured) == 14  # no point measured twice
    assert inst.stats["rounds"] == len(batches) and inst.stats["evaluations"] >= 14
    assert len(inst.log) == len(batches) and all(r["task"] == "matmul" for r in inst.log)
    # Every candidate is a decoded (replayed + postprocessed) schedule of the workload's design space.
    for batch in batches:
        for cand in batch:
            trace = cand.sch.trace
            assert any(inst.kind.name == "EnterPostproc" for inst in trace.insts)
            assert any(_encodes(space, trace) for space in inst.spaces)


def _encodes(space, trace) -> bool:
    try:
        space.encode(trace)
        return True
    except knobs.KnobError:
        return False


def test_clones_share_the_agent_and_the_log():
    agent = PPOAgent(PPOConfig(walks=4))
    strategy = PPOSearch(agent=agent)
    clone = strategy._inst.clone()._inst
    assert clone.agent is agent and clone.log is strategy._inst.log


def records(work_dir) -> list[tuple[str, float]]:
    lines = (work_dir / "database_tuning_record.json").read_text().splitlines()
    return [(json.dumps(json.loads(line)[1][0]), float(np.mean(json.loads(line)[1][1]))) for line in lines]


@pytest.mark.slow
def test_tune_tir_improves_on_its_first_batch_and_resumes(cpu, tmp_path):
    mod = matmul(128)
    logging_quiet()
    strategy = PPOSearch(config=PPOConfig(walks=32, max_evaluations=96), seed=0)
    ms.tune_tir(mod, cpu, str(tmp_path), max_trials_global=32, num_trials_per_iter=8, strategy=strategy,
                builder=shared_builder(), runner="local")
    first = records(tmp_path)
    assert len(first) == 32
    first_batch_best = min(s for _, s in first[:8])
    assert min(s for _, s in first) < first_batch_best  # the guided rounds found something faster
    # A second run on the same database encodes its records back, never re-measures them, and starts guided.
    again = PPOSearch(config=PPOConfig(walks=32, max_evaluations=96), seed=1)
    logging_quiet()
    ms.tune_tir(mod, cpu, str(tmp_path), max_trials_global=8, num_trials_per_iter=8, strategy=again,
                builder=shared_builder(), runner="local")
    log = again._inst.log
    assert log and log[0]["evaluations"] > 8  # its first round already walked with the cost model
    both = records(tmp_path)
    assert len(both) == 40
    traces = [t for t, _ in both]
    assert len(set(traces[32:]) & set(traces[:32])) == 0


def logging_quiet():
    from tvm_rl.tune.tasks import prepare_metaschedule_logging

    prepare_metaschedule_logging()
