"""`tvm-rl report` reads what the other commands leave in a work dir."""
import json
from pathlib import Path

from tvm_rl import cli, paths
from tvm_rl.report import report


def _work_dir(tmp_path):
    (tmp_path / "optimize_net.json").write_text(json.dumps({
        "model": "net", "target": "llvm -keys=cpu", "default_ms": 2.0, "optimized_ms": 0.5,
        "graph_rewrites": ["fold_batchnorm: fold a into b"], "kernels_tuned": 3, "trials_measured": 48,
        "seconds": {"rewrite": 1.0, "tune": 30.0}}))
    db = tmp_path / "tuning" / "llvm"
    db.mkdir(parents=True)
    (db / "database_workload.json").write_text("w1\nw2\n")
    (db / "database_tuning_record.json").write_text("r\n" * 5)
    run = tmp_path / "graph_train" / "mine"
    run.mkdir(parents=True)
    (run / "train.csv").write_text("iteration,mean_return,mean_speedup\n1,0.5,1.01\n2,2.25,1.04\n")
    return tmp_path


def test_report_has_a_section_per_artefact(tmp_path):
    text = report(_work_dir(tmp_path))
    assert "| net | llvm | 2.000 | 0.500 | 4.00x | 1 | 3 | 48 | 31 |" in text
    assert "| tuning/llvm | 2 | 5 | 0 |" in text
    assert "| graph_train/mine | 2 | 2.250 | 1.040 |" in text
    assert (tmp_path / "report_speedups.png").stat().st_size > 0


def test_cli_writes_report_md_and_names_a_missing_work_dir(tmp_path, capsys):
    assert cli.main(["report", "--work-dir", str(_work_dir(tmp_path)), "--no-plots"]) == 0
    assert "## Optimized models" in (tmp_path / "report.md").read_text()
    assert cli.main(["report", "--work-dir", str(tmp_path / "nowhere")]) == 2
    assert "no work dir" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "Nothing to report" in report(empty)


def test_the_default_work_dir_is_the_users_not_the_repositorys(tmp_path, monkeypatch):
    monkeypatch.delenv("TVM_RL_WORK", raising=False)
    monkeypatch.chdir(tmp_path)
    assert paths.work_dir() == Path("tvm_rl_work")
    monkeypatch.setenv("TVM_RL_WORK", str(tmp_path / "mine"))
    assert paths.work_dir() == tmp_path / "mine"
    (tmp_path / "mine").mkdir()
    assert "Nothing to report" in report()
