"""`tvm-rl tune`: help, bad input named, and a short TopHub run that writes a database and resumes."""
import json
from pathlib import Path

import pytest

from tvm_rl.cli import main

TOPHUB = Path(__file__).resolve().parents[3] / "shared" / "tophub"


def test_help_lists_the_strategies(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--strategy" in out and "ppo" in out and "annealing" in out and "examples:" in out


def test_unknown_strategy_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--model", "resnet18", "--strategy", "sa"])
    assert "invalid choice: 'sa'" in capsys.readouterr().err


@pytest.mark.slow
def test_tune_tophub_tasks_then_resume(tmp_path, capsys):
    if not TOPHUB.is_dir():
        pytest.skip(f"no TopHub logs at {TOPHUB}")
    args = ["tune", "--tophub", "--tophub-dir", str(TOPHUB), "--ops", "batch_matmul", "--max-tasks", "1",
            "--trials", "4", "--per-iter", "4", "--work-dir", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 TopHub tasks" in out and "1 tuned" in out
    records = (tmp_path / "database_tuning_record.json").read_text().splitlines()
    assert 1 <= len(records) <= 4 and all(json.loads(r) for r in records)
    if len(records) == 4:  # a full budget: the rerun finds it done and measures nothing
        assert main(args) == 0
        assert "0 tuned, 1 already had 4 trials" in capsys.readouterr().out


def test_measure_cold_reaches_the_tuner_and_is_refused_with_a_remote_runner(monkeypatch, capsys):
    import tvm_rl.tune.command as command
    from tvm_rl.tune.runner import is_cold
    from tvm_rl.tune.tasks import TuneReport

    seen = []
    monkeypatch.setattr(command, "tune_model", lambda *a, **k: seen.append(k["runner"]) or (None, TuneReport()))
    assert main(["tune", "--model", "resnet18", "--measure", "cold"]) == 0
    assert main(["tune", "--model", "resnet18"]) == 0
    assert is_cold(seen[0]) and seen[1] == "local"
    with pytest.raises(SystemExit):
        main(["tune", "--model", "resnet18", "--measure", "cold", "--rpc-tracker", "h:9190", "--rpc-key", "k"])
    assert "--measure cold flushes this machine's caches" in capsys.readouterr().err

