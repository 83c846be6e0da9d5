import json

import pytest
import tvm

from tvm_rl.cli import main
from tvm_rl.graph import arms


@pytest.mark.slow
def test_rewrite_command_writes_report_and_module(tmp_path, capsys):
    rc = main(["rewrite", "--model", "squeezenet1_1", "--steps", "2", "--episodes", "1", "--no-confirm",
               "--work-dir", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "rewrite_squeezenet1_1.json").read_text())
    assert report["steps"] >= 1 and report["cost_ms"] <= report["initial_cost_ms"]
    assert report["policy"] == arms.DEFAULT_ARM
    mod = tvm.ir.load_json((tmp_path / "rewrite_squeezenet1_1.relax.json").read_text())
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]
    assert "squeezenet1_1:" in capsys.readouterr().out


def test_rewrite_command_names_a_bad_policy_file(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_text("junk")
    rc = main(["rewrite", "--model", "squeezenet1_1", "--policy", str(bad), "--work-dir", str(tmp_path)])
    assert rc == 2
    assert "bad.pt" in capsys.readouterr().err


def test_rewrite_help_names_the_default_and_every_arm(capsys):
    with pytest.raises(SystemExit):
        main(["rewrite", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"default {arms.DEFAULT_ARM}" in text and all(a in text for a in arms.ARMS)


def test_rewrite_command_runs_the_trained_policy_when_asked(tmp_path, capsys):
    rc = main(["rewrite", "--model", "squeezenet1_1", "--policy", "trained", "--steps", "1", "--episodes", "1",
               "--no-confirm", "--work-dir", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "rewrite_squeezenet1_1.json").read_text())
    assert report["policy"] == "trained" and report["steps"] == 1
    assert "(policy trained)" in capsys.readouterr().out


def test_rewrite_command_runs_a_search_when_asked(tmp_path, capsys):
    rc = main(["rewrite", "--model", "squeezenet1_1", "--policy", "backtracking-3", "--no-confirm",
               "--work-dir", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "rewrite_squeezenet1_1.json").read_text())
    assert report["policy"] == "backtracking-3" and report["episodes"] == 1 and report["steps"] == 3
    assert report["cost_ms"] < report["initial_cost_ms"] and report["applied"]
    assert "(policy backtracking-3)" in capsys.readouterr().out


def test_rewrite_command_names_a_misspelt_policy(tmp_path, capsys):
    rc = main(["rewrite", "--model", "squeezenet1_1", "--policy", "backtrack", "--work-dir", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown graph policy 'backtrack'" in err and "backtracking-N" in err
    rc = main(["rewrite", "--model", "squeezenet1_1", "--policy", "backtracking-0", "--work-dir", str(tmp_path)])
    assert rc == 2 and "'backtracking-0': a backtracking search's budget" in capsys.readouterr().err
