"""`benchmarks/tuner.py --peek`: a provisional table of a benchmark still running, from tuning-time latencies."""
import json

import pytest

from benchmarks.tuning import stats as S
from benchmarks.tuning.benchmark import main
from benchmarks.tuning.report import format_peek, provisional_runs


def run(task, arm, seed, tuning):
    return {"task": task, "arm": arm, "seed": seed, "tuning_seconds": tuning, "improvers": S.improvers(tuning),
            "wall_seconds": 5.0}


RUNS = [run("t", "evolutionary", 0, [4.0, None, 2.0, 3.0]), run("t", "ppo", 0, [4.0, 1.0, 5.0, 1.5]),
        run("u", "evolutionary", 0, [3.0, 3.0, 3.0, 3.0]), run("u", "ppo", 0, [3.0, 1.5, 1.5, 1.0]),
        run("t", "evolutionary", 1, [9.0, 9.0, 9.0, 9.0])]  # seed 1: ppo has not run it yet


def test_provisional_runs_take_tuning_time_improvers_of_pairs_every_arm_finished():
    runs, pairs = provisional_runs(RUNS, ["evolutionary", "ppo"])
    assert pairs == 2
    assert {(r["task"], r["seed"]) for r in runs} == {("t", 0), ("u", 0)}  # t seed 1 would pair evolutionary alone
    by = {(r["task"], r["arm"]): r for r in runs}
    assert by[("t", "evolutionary")]["retimed"] == [4.0, 2.0]
    assert by[("u", "ppo")]["retimed"] == [3.0, 1.5, 1.0]
    assert "retimed" not in RUNS[0]  # the state itself is left as it is


def _state(tmp_path):
    state = {"format": "tuner-bench", "settings": {"trials": [2, 4], "arms": ["evolutionary", "ppo"],
                                                   "tasks": ["t", "u"], "seeds": 2}, "runs": RUNS}
    out = tmp_path / "bench.json"
    out.write_text(json.dumps(state))
    return out, state


def test_peek_prints_the_summary_from_tuning_time_and_writes_nothing(tmp_path, capsys):
    out, state = _state(tmp_path)
    text = format_peek(state)
    assert text.startswith("PROVISIONAL: 2 (task, seed) pairs finished by all 2 arms, of 4")
    assert "best tuning-time latency over all arms" in text and "re-timed latency" not in text
    # At N = 4 ppo is 2x on t (1.0 vs 2.0) and 3x on u (1.0 vs 3.0): geomean sqrt(6) over the two tasks.
    line = next(ln for ln in text.split("N = 4")[1].splitlines() if ln.startswith("| ppo |"))
    assert f"{6 ** 0.5:.2f}x" in line
    before = out.read_bytes()
    assert main(["--peek", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == text
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]


def test_peek_without_results_names_the_file(tmp_path):
    with pytest.raises(SystemExit, match="--peek: no benchmark results at .*missing.json"):
        main(["--peek", "--out", str(tmp_path / "missing.json")])
