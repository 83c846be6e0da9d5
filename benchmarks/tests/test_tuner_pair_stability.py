"""benchmarks/tuner_pair_stability.py: the paired measures of several re-timing sittings, over the runs re-timed in
all of them, with the spread of each measure across the sittings."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import tuner_pair_stability as stab  # noqa: E402

from benchmarks.tuning import stats as S  # noqa: E402


def run(task, arm, seed, retimed_at, n=4):
    idx = sorted(retimed_at)
    tuning = [None] * n
    for rank, i in enumerate(idx):
        tuning[i] = 10.0 - rank
    return {"task": task, "arm": arm, "seed": seed, "tuning_seconds": tuning, "improvers": S.improvers(tuning),
            "retimed": [retimed_at[i] for i in idx], "wall_seconds": 1.0}


def sitting(ppo_best):
    """ppo gets to `ppo_best` at trial 2 on task t; its walks get to 2.0 at trial 4. Task u: equal."""
    return {"runs": [run("t", "ppo", 0, {0: 4.0, 1: ppo_best}), run("t", "random-walk", 0, {0: 4.0, 3: 2.0}),
                     run("u", "ppo", 0, {0: 3.0}), run("u", "random-walk", 0, {0: 3.0})]}


def test_sittings_are_compared_on_the_runs_they_all_re_timed():
    later = sitting(1.0)
    later["runs"].append(run("v", "ppo", 1, {0: 1.0}))  # a new seed in the later sitting only: left out
    later["runs"].append({**run("v", "random-walk", 1, {0: 9.0}), "retimed": None})
    result = stab.stability({"a": sitting(2.0), "b": later}, trials=4, n_boot=50)
    assert result["runs"] == 4 and result["revisions"] == ["a", "b"]
    pair = result["pairs"]["ppo vs random-walk"]
    assert pair["a"]["ratio"]["ratio"] == pytest.approx(1.0)  # both at 2.0 on t in sitting a
    assert pair["b"]["ratio"]["ratio"] == pytest.approx(math.sqrt(2.0))  # 2x on t, 1x on u
    assert pair["spread"]["ratio"] == pytest.approx(math.sqrt(2.0))
    assert pair["a"]["common_level_saving"]["ratio"] == pytest.approx(math.sqrt(2.0))  # level 2.0: trial 2 vs 4
    table = stab.format_stability(result)
    assert "| ppo vs random-walk | best latency | 1.00x [" in table and "| 1.41 |" in table
    assert ("| ppo vs random-walk | median trials to the baseline run's best, arm (baseline) | 1.5 (2.5), 2/2 there "
            "(0 within N/5)") in table


def test_one_sitting_has_no_spread_and_no_common_run_is_an_error():
    result = stab.stability({"HEAD": sitting(1.0)}, trials=4, n_boot=50)
    assert math.isnan(result["pairs"]["ppo vs random-walk"]["spread"]["ratio"])
    assert "| - |" in stab.format_stability(result)
    with pytest.raises(ValueError, match="no run is re-timed in every one of a, b"):
        stab.stability({"a": sitting(1.0), "b": {"runs": [run("w", "ppo", 5, {0: 1.0})]}}, trials=4)


def test_a_revision_git_does_not_know_is_one_clear_line():
    with pytest.raises(SystemExit, match="logs/tuner_llvm.json at revision no-such-revision: .*no-such-revision"):
        stab._load("logs/tuner_llvm.json", "no-such-revision")
