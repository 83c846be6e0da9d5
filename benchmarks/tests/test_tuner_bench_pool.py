"""`benchmarks/tuner.py --pool`: one reading over several CPUs' benchmark JSONs, pairs and targets kept per CPU."""
import json
import math

import pytest

from benchmarks.tuning import pool as P
from benchmarks.tuning import stats as S
from benchmarks.tuning.benchmark import Arm, main, planned_runs, until_deadline

MEASURING = {"repeat": 7, "number": 1, "min_repeat_ms": 0, "cache_flush": True, "timeout_sec": 30.0}


def run(task, arm, seed, final, n=4, retimed=True):
    """A run whose one improver, at trial 2, re-timed at `final` seconds."""
    tuning = [None, 1.0, None, None][:n] + [None] * max(0, n - 4)
    return {"task": task, "arm": arm, "seed": seed, "tuning_seconds": tuning, "improvers": S.improvers(tuning),
            "retimed": [final] if retimed else None, "wall_seconds": 3.0}


def block(tmp_path, name, mcpu, runs, run_trials=4, **settings):
    path = tmp_path / f"{name}.json"
    state = {"format": "tvm-rl tuner benchmark", "version": 2, "runs": runs,
             "settings": {"target": json.dumps({"kind": "llvm", "mcpu": mcpu}), "run_trials": run_trials,
                          "trials": [run_trials], "per_iter": 2, "measuring": MEASURING, **settings}}
    path.write_text(json.dumps(state))
    return path


def two_cpus(tmp_path):
    # CPU a: ppo twice as fast as evolutionary on task t. CPU b, 100x slower machine: ppo level with it. Crossing
    # the CPUs in a pair would give ratios near 100 or 1/100; kept apart, the pooled geomean is sqrt(2).
    a = block(tmp_path, "a", "cpu_a", [run("t", "evolutionary", 0, 1.0), run("t", "ppo", 0, 0.5)])
    b = block(tmp_path, "b", "cpu_b", [run("t", "evolutionary", 0, 100.0), run("t", "ppo", 0, 100.0)])
    return a, b


def summary_row(reading, arm):
    return next(r for r in reading["readings"][0]["summary"] if r["arm"] == arm)


def test_pairs_stay_within_a_cpu_and_the_bootstrap_clusters_by_task(tmp_path):
    reading = P.pool(P.load_blocks(list(two_cpus(tmp_path))))
    row = summary_row(reading, "ppo")
    assert row["speedup_vs_baseline"]["ratio"] == pytest.approx(math.sqrt(2))
    assert row["speedup_vs_baseline"]["pairs"] == 2
    assert row["tasks"] == 1  # one kernel measured on two CPUs is one task
    runs = P.pooled_runs(P.load_blocks(list(two_cpus(tmp_path))), 4)
    assert {r["task"] for r in runs} == {"t@cpu_a", "t@cpu_b"}
    assert len(S.paired_log_ratios(runs, "ppo", "evolutionary", lambda r: S.retimed_curve(r)[-1])) == 1


def test_each_cpu_has_its_own_target(tmp_path):
    reading = P.pool(P.load_blocks(list(two_cpus(tmp_path))))
    # One target over both CPUs (0.5 x 1.05) would leave every run of the slow CPU short of it.
    assert summary_row(reading, "evolutionary")["reached"] == 1  # on cpu_b, level with ppo
    assert summary_row(reading, "ppo")["reached"] == 2


def test_a_block_joins_only_the_budgets_its_runs_measured(tmp_path):
    short = block(tmp_path, "short", "cpu_a", [run("t", "evolutionary", 0, 1.0), run("t", "ppo", 0, 0.5)])
    long = block(tmp_path, "long", "cpu_b", [run("t", "evolutionary", 0, 1.0, n=8), run("t", "ppo", 0, 1.0, n=8)],
                 run_trials=8, trials=[4, 8])
    reading = P.pool(P.load_blocks([short, long]))
    by_n = {r["trials"]: r for r in reading["readings"]}
    assert sorted(by_n) == [4, 8] and by_n[8]["cpus"] == ["cpu_b"] and by_n[4]["cpus"] == ["cpu_a", "cpu_b"]
    assert next(r for r in by_n[8]["summary"] if r["arm"] == "ppo")["speedup_vs_baseline"]["ratio"] == 1.0


def test_the_baseline_arm_comes_first_whichever_block_holds_it(tmp_path):
    ppo_only = block(tmp_path, "a", "cpu_a", [run("t", "ppo", 0, 1.0), run("t", "random-walk", 0, 1.0)])
    full = block(tmp_path, "b", "cpu_b", [run("t", "ppo", 0, 1.0), run("t", "evolutionary", 0, 1.0)])
    rows = P.pool(P.load_blocks([ppo_only, full]))["readings"][0]["summary"]
    assert [r["arm"] for r in rows] == ["evolutionary", "ppo", "random-walk"]


def test_two_files_of_one_cpu_get_distinct_labels(tmp_path):
    a = block(tmp_path, "first", "cpu_a", [run("t", "evolutionary", 0, 1.0), run("t", "ppo", 0, 0.5)])
    b = block(tmp_path, "second", "cpu_a", [run("t", "evolutionary", 0, 1.0), run("t", "ppo", 0, 1.0)])
    blocks = P.load_blocks([a, b])
    assert [x.label for x in blocks] == ["cpu_a:first", "cpu_a:second"]
    row = summary_row(P.pool(blocks), "ppo")
    assert row["speedup_vs_baseline"]["pairs"] == 2  # seed 0 of each file pairs within its file


def test_runs_not_re_timed_are_left_out_and_counted(tmp_path):
    path = block(tmp_path, "a", "cpu_a", [run("t", "evolutionary", 0, 1.0), run("t", "ppo", 0, 0.5),
                                          run("t", "ppo", 1, 0.5, retimed=False)])
    info = P.pool(P.load_blocks([path]))["blocks"][0]
    assert info["unretimed_runs"] == 1 and info["runs_by_arm"] == {"evolutionary": 1, "ppo": 1}


def test_bad_blocks_are_named(tmp_path):
    a, _ = two_cpus(tmp_path)
    other = block(tmp_path, "other", "cpu_c", [run("t", "ppo", 0, 1.0)], measuring={**MEASURING, "repeat": 1})
    with pytest.raises(ValueError, match="other.json and .*a.json differ in measuring"):
        P.load_blocks([a, other])
    fresh = block(tmp_path, "fresh", "znver9", [run("t", "ppo", 0, 1.0, retimed=False)])
    with pytest.raises(ValueError, match="fresh.json: none of its 1 runs is re-timed.*znver9"):
        P.load_blocks([fresh])
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="x.json: not a result of benchmarks/tuner.py"):
        P.load_blocks([tmp_path / "x.json"])
    with pytest.raises(ValueError, match="missing.json: no such benchmark JSON"):
        P.load_blocks([tmp_path / "missing.json"])


def test_the_command_prints_the_pooled_tables_and_writes_the_reading(tmp_path, capsys):
    a, b = two_cpus(tmp_path)
    out = tmp_path / "pooled.json"
    assert main(["--pool", str(a), str(b), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## N = 4, pooled over cpu_a, cpu_b" in text and f"{math.sqrt(2):.2f}x" in text
    assert json.loads(out.read_text())["blocks"][1]["cpu"] == "cpu_b"
    assert (tmp_path / "pooled_n4_paired.png").is_file()
    with pytest.raises(SystemExit, match="--pool: .*nothing.json: no such benchmark JSON"):
        main(["--pool", str(tmp_path / "nothing.json"), "--out", str(out)])


def test_a_block_can_take_seeds_no_other_block_ran_and_resumes_seed_by_seed():
    arms = [Arm(name, lambda seed: None, lambda: None, True) for name in ("evolutionary", "ppo")]
    finished = [{"task": "t", "arm": "evolutionary", "seed": 9}]
    todo = [(seed, task, arm.name) for seed, task, arm in planned_runs(range(9, 11), ["t", "u"], arms, finished)]
    assert todo == [(9, "t", "ppo"), (9, "u", "evolutionary"), (9, "u", "ppo"),
                    (10, "t", "evolutionary"), (10, "t", "ppo"), (10, "u", "evolutionary"), (10, "u", "ppo")]
    with pytest.raises(SystemExit, match="--first-seed -1 must be 0 or more"):
        main(["--first-seed", "-1", "--out", "unused.json"])


def test_stop_after_starts_no_run_past_the_deadline_and_finishes_the_one_begun(capsys):
    ticks = iter([0.0, 0.0, 40.0, 99.0, 100.0, 150.0])  # start, then one reading before each run
    started = []
    for run in until_deadline(["a", "b", "c", "d", "e"], 100.0, clock=lambda: next(ticks)):
        started.append(run)
    assert started == ["a", "b", "c"]  # "c" began at 99 s and is not cut; "d" would begin at 100 s
    assert "2 of 5 runs left" in capsys.readouterr().out
    assert list(until_deadline(["a", "b"], None)) == ["a", "b"]
