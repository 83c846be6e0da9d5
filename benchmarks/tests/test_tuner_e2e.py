"""The end-to-end tuner benchmark (benchmarks/e2e/run.py): its pure helpers, and one small run end to end."""
import argparse
import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.common.jsonl_gz import append_json_lines_gz, read_json_lines_gz
from benchmarks.e2e import archive as arch
from benchmarks.e2e import run as e2e
from tvm_rl.database import RECORDS, WORKLOADS
from tvm_rl.errors import TuningInterrupted
from tvm_rl.tune.tasks import TuneReport


def test_default_arms_add_the_pretrained_ones_only_with_a_cost_model():
    assert e2e.resolve_arms(None, None) == ["ppo", "evolutionary"]
    assert e2e.resolve_arms(None, "xgb-pretrained") == ["ppo", "evolutionary", "evolutionary-pretrained",
                                                        "ppo-pretrained-model"]
    assert e2e.resolve_arms(["evolutionary", "ppo", "evolutionary"], None) == ["evolutionary", "ppo"]


def test_unknown_arms_and_pretrained_arms_without_a_model_are_refused():
    with pytest.raises(SystemExit, match="unknown arm.*bogus"):
        e2e.resolve_arms(["ppo", "bogus"], None)
    with pytest.raises(SystemExit, match="ppo-pretrained-model.*--cost-model"):
        e2e.resolve_arms(["ppo-pretrained-model"], None)


def test_every_run_gets_its_own_folder_and_key():
    combos = [(arm, n, seed) for arm in ("ppo", "evolutionary") for n in (32, 64) for seed in (0, 1)]
    folders = {e2e.run_dir(Path("w"), "llvm", "full", "bert", *c) for c in combos}
    keys = {e2e.variant_key(*c) for c in combos}
    assert len(folders) == len(keys) == len(combos)
    assert e2e.run_dir(Path("w"), "llvm", "tiny", "bert", "ppo", 32, 0) != \
        e2e.run_dir(Path("w"), "llvm", "full", "bert", "ppo", 32, 0)


def test_default_out_keeps_check_runs_apart_from_the_real_one():
    assert e2e.default_out("llvm", "full") == Path("logs/tuner_e2e_llvm.json")
    assert e2e.default_out("cuda", "tiny") == Path("logs/tuner_e2e_cuda_tiny.json")


def test_interleave_runs_round_robin_takes_the_median_and_drops_timers_that_cannot_time():
    calls = []

    def timer(name, values):
        seq = iter(values)

        def run():
            calls.append(name)
            return next(seq)
        return run

    out = e2e.interleave({"a": timer("a", [3.0, 1.0, 2.0]), "b": timer("b", [5.0, 9.0, 7.0]),
                          "ort": timer("ort", [None])}, passes=3)
    assert calls == ["a", "b", "ort", "a", "b", "a", "b"]
    assert out["a"] == {"ms": 2.0, "passes_ms": [3.0, 1.0, 2.0]}
    assert out["b"]["ms"] == 7.0
    assert out["ort"] == {"ms": None, "passes_ms": []}


def entry():
    run = {"arm": "ppo", "trials": 32, "seed": 0, "label": "ppo", "tuning_s": 120.0, "measurements": 640}
    variants = {"TVM default": {"ms": 10.0}, "ppo/N32/s0": {"ms": 4.0, "correct": True},
                "PyTorch": {"ms": 6.0}, "ORT": {"ms": None}}
    return {"runs": {"ppo/N32/s0": run}, "timing": {"variants": variants, "passes": 5, "seconds": 42.0}}


def test_table_rows_give_speedups_over_default_pytorch_and_ort():
    rows = {r["variant"]: r for r in e2e.table_rows(entry())}
    assert list(rows) == ["TVM default", "ppo", "PyTorch", "ORT"]
    ppo = rows["ppo"]
    assert ppo["speedup"] == pytest.approx(2.5) and ppo["vs_torch"] == pytest.approx(1.5)
    assert ppo["vs_ort"] is None and ppo["measurements"] == 640 and ppo["trials"] == 32
    assert rows["PyTorch"]["speedup"] == pytest.approx(10 / 6) and rows["PyTorch"]["vs_torch"] is None
    assert rows["ORT"]["ms"] is None and rows["ORT"]["speedup"] is None


def test_each_arm_is_held_against_evolutionary_search_at_its_own_n_and_seed():
    e = entry()
    e["runs"]["evolutionary/N32/s0"] = {"arm": "evolutionary", "trials": 32, "seed": 0, "label": "evolutionary"}
    e["runs"]["ppo/N64/s0"] = {"arm": "ppo", "trials": 64, "seed": 0, "label": "ppo N64"}
    e["timing"]["variants"].update({"evolutionary/N32/s0": {"ms": 5.0}, "ppo/N64/s0": {"ms": 2.0}})
    rows = {r["variant"]: r for r in e2e.table_rows(e)}
    assert rows["ppo"]["vs_evolutionary"] == pytest.approx(5.0 / 4.0)
    assert rows["ppo N64"]["vs_evolutionary"] is None  # no evolutionary run at N = 64: nothing to compare with
    assert rows["evolutionary"]["vs_evolutionary"] is None
    assert all(rows[k]["vs_evolutionary"] is None for k in ("TVM default", "PyTorch", "ORT"))
    line = next(x for x in e2e.format_table("bert", e, {"size": "full", "target_name": "llvm"}).splitlines()
                if x.startswith("ppo "))
    assert line.split()[4] == "1.25x"


def test_format_table_prints_every_variant_and_the_cost():
    text = e2e.format_table("bert", entry(), {"size": "full", "target_name": "llvm"})
    lines = text.splitlines()
    ppo = next(line for line in lines if line.startswith("ppo"))
    assert ppo.split() == ["ppo", "32", "4.000", "2.50x", "-", "120", "640", "1.50x", "-"]
    assert any(line.startswith("ORT") for line in lines)
    assert lines[-1] == "cost: tuning 120 s, timing 42 s"
    bad = entry()
    bad["timing"]["variants"]["ppo/N32/s0"]["correct"] = False
    assert "WRONG OUTPUT" in e2e.format_table("bert", bad, {"size": "full", "target_name": "llvm"})
    assert "PART-TUNED" not in text
    cut = entry()
    cut["runs"]["ppo/N32/s0"]["interrupted"] = True  # a sitting stopped part-way, timed by a later invocation
    assert "PART-TUNED" in e2e.format_table("bert", cut, {"size": "full", "target_name": "llvm"})


def test_load_state_refuses_to_mix_settings(tmp_path):
    settings = {"target": "llvm", "size": "tiny", "op_filter": None, "trials_per_iter": 8, "cost_model": None,
                "threads": 2}
    out = tmp_path / "e2e.json"
    assert e2e.load_state(out, settings)["models"] == {}
    out.write_text(json.dumps({"settings": settings, "models": {"bert": {"runs": {}}}}))
    assert "bert" in e2e.load_state(out, {**settings, "threads": 4})["models"]
    with pytest.raises(SystemExit, match="size"):
        e2e.load_state(out, {**settings, "size": "full"})
    with pytest.raises(SystemExit, match="minutes"):  # a time budget's runs are not mixed with others
        e2e.load_state(out, {**settings, "minutes": 10.0})


def test_bad_budgets_are_refused_before_any_work(tmp_path):
    with pytest.raises(SystemExit, match="at least 1"):
        e2e.main(["--trials", "0", "--out", str(tmp_path / "x.json"), "--work-dir", str(tmp_path)])
    assert not (tmp_path / "x.json").exists()


def test_a_run_key_is_parsed_and_a_malformed_one_is_refused_naming_the_form():
    assert e2e.parse_key("evolutionary-pretrained/N64/s2") == ("evolutionary-pretrained", 64, 2)
    assert e2e.parse_key("budget-ours-library/N128/s0") == ("budget-ours-library", 128, 0)  # budget arms too
    for bad in ("evolutionary/64/s0", "bogus/N64/s0", "evolutionary/N64"):
        with pytest.raises(SystemExit, match=f"--discard {bad}: not a run key.*ARM/N<trials>/s<seed>"):
            e2e.parse_key(bad)


def fake_run(folder, n):
    folder.mkdir(parents=True)
    (folder / WORKLOADS).write_text('["w0"]\n')
    (folder / RECORDS).write_text("".join(json.dumps([0, [f"t{i}", [1.0 + i]]]) + "\n" for i in range(n)))
    return folder


def test_a_discarded_run_leaves_the_json_and_the_archive_and_its_folder_is_kept_aside(tmp_path, capsys):
    archive, work = tmp_path / "e2e_best.jsonl.gz", tmp_path / "work"
    folder = fake_run(e2e.run_dir(work, "llvm", "full", "bert", "evolutionary", 64, 0), 3)
    arch.RunRecords(archive, "bert", "evolutionary/N64/s0", folder).flush()
    arch.add(archive, "bert", "evolutionary/N64/s0", folder)
    run = {"arm": "evolutionary", "trials": 64, "seed": 0, "work_dir": str(folder)}
    state = {"models": {"bert": {"runs": {"evolutionary/N64/s0": run, "ppo/N64/s0": {}},
                                 "timing": {"variants": {"evolutionary/N64/s0": {}, "ppo/N64/s0": {}}}}}}
    e2e.discard_runs(state, archive, ["bert", "vit"], ["evolutionary/N64/s0"], work, "llvm", "full")
    assert set(state["models"]["bert"]["runs"]) == {"ppo/N64/s0"}
    assert set(state["models"]["bert"]["timing"]["variants"]) == {"ppo/N64/s0"}
    assert not folder.exists()
    aside = list(folder.parent.glob("evolutionary_n64_s0.discarded-*"))
    assert len(aside) == 1 and len((aside[0] / RECORDS).read_text().splitlines()) == 3  # measurements never deleted
    # Neither every record nor the best ones come back: a rerun tunes it from the start.
    assert arch.restore_all(archive, "bert", "evolutionary/N64/s0", folder) == 0
    assert not arch.restore(archive, "bert", "evolutionary/N64/s0", tmp_path / "best")
    assert arch.RunRecords(archive, "bert", "evolutionary/N64/s0", folder).count == 0
    out = capsys.readouterr().out
    assert "[bert] evolutionary/N64/s0: discarded; its records moved to" in out
    assert "[vit] evolutionary/N64/s0: discarded (nothing was recorded for it)" in out
    # Tuned again after that, the new run's records are archived and restored as any run's.
    fake_run(folder, 1)
    arch.RunRecords(archive, "bert", "evolutionary/N64/s0", folder).flush()
    assert arch.restore_all(archive, "bert", "evolutionary/N64/s0", tmp_path / "again") == 1


def interrupted_tuning(folder, seconds=0.05, error=None):
    """A tune_model that waits for quiet cores, measures for `seconds`, and is then stopped by Ctrl-C (or raises
    `error`)."""
    def tune_model(mod, target, work_dir, *, before_tuning, **kwargs):
        before_tuning()
        time.sleep(seconds)
        raise error or TuningInterrupted(f"interrupted; rerun to resume from {work_dir}")
    return tune_model


def test_a_sitting_stopped_by_ctrl_c_still_adds_its_seconds_and_the_run_is_marked_part_tuned(tmp_path, monkeypatch):
    folder = fake_run(tmp_path / "run", 2)
    monkeypatch.setattr(e2e, "tune_model", interrupted_tuning(folder))
    monkeypatch.setattr(e2e.bench_runs, "wait_for_cores", lambda wait, threshold: time.sleep(0.2) or {"busy": False})
    args = argparse.Namespace(load_wait=1.0, max_load=None, seeds=1, cost_model=None, op_filter=None)
    kept = []
    previous = {"arm": "evolutionary", "trials": 64, "seed": 0, "work_dir": str(folder), "tuning_s": 10.0,
                "sittings": 1, "failures": 0}
    with pytest.raises(TuningInterrupted):
        e2e.tune_run(SimpleNamespace(mod=None), None, folder, "evolutionary", 64, 0, args, previous, None, kept.append)
    (run,) = kept
    # Its measuring seconds count, the wait for quiet cores does not.
    assert 10.04 <= run["tuning_s"] < 10.19 and run["sittings"] == 2
    assert run["interrupted"] is True and run["measurements"] == 2 and run["load"] == {"busy": False}
    assert previous["tuning_s"] == 10.0  # the caller's entry is not changed behind its back


def test_a_sitting_that_crashed_still_adds_its_seconds_and_names_the_error(tmp_path, monkeypatch):
    folder = fake_run(tmp_path / "run", 2)
    monkeypatch.setattr(e2e, "tune_model", interrupted_tuning(folder, error=RuntimeError("int32 overflow")))
    monkeypatch.setattr(e2e.bench_runs, "wait_for_cores", lambda wait, threshold: {"busy": False})
    args = argparse.Namespace(load_wait=1.0, max_load=None, seeds=1, cost_model=None, op_filter=None)
    kept = []
    previous = {"arm": "evolutionary", "trials": 64, "seed": 0, "work_dir": str(folder), "tuning_s": 10.0,
                "sittings": 1, "failures": 0}
    with pytest.raises(RuntimeError, match="int32"):
        e2e.tune_run(SimpleNamespace(mod=None), None, folder, "evolutionary", 64, 0, args, previous, None, kept.append)
    (run,) = kept
    assert 10.04 <= run["tuning_s"] < 10.19 and run["sittings"] == 2 and run["interrupted"] is True
    assert run["crashed"] == "RuntimeError: int32 overflow"


def test_kernels_whose_search_failed_are_named_in_the_run_over_sittings(tmp_path, monkeypatch):
    folder = fake_run(tmp_path / "run", 2)
    failed = iter([{"conv2d251": "RuntimeError: a"}, {"conv2d291": "RuntimeError: b"}])

    def tune_model(mod, target, work_dir, *, before_tuning, **kwargs):
        return None, TuneReport(tasks=3, tuned=["x"], seconds=1.0, search_errors=next(failed))

    monkeypatch.setattr(e2e, "tune_model", tune_model)
    monkeypatch.setattr(e2e, "records_per_workload", lambda database: {1: 2})
    args = argparse.Namespace(load_wait=1.0, max_load=None, seeds=1, cost_model=None, op_filter=None)
    run = {"arm": "evolutionary", "trials": 64, "seed": 0, "work_dir": str(folder), "tuning_s": 0.0, "sittings": 0,
           "failures": 0}
    for _ in range(2):
        _, run, _ = e2e.tune_run(SimpleNamespace(mod=None), None, folder, "evolutionary", 64, 0, args, run, None)
    assert run["search_errors"] == {"conv2d251": "RuntimeError: a", "conv2d291": "RuntimeError: b"}


def test_ctrl_c_ends_the_benchmark_with_one_line_saying_how_to_resume(tmp_path, monkeypatch, capsys):
    def stopped(*args):
        raise TuningInterrupted("interrupted; 12 records measured")
    monkeypatch.setattr(e2e, "_tune_and_time", stopped)
    out = tmp_path / "e2e.json"
    assert e2e.main(["--out", str(out), "--work-dir", str(tmp_path / "w")]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "interrupted; 12 records measured" in err
    assert f"The same command resumes from what is archived in {arch.archive_path(out)}" in err


@pytest.mark.slow
def test_end_to_end_tiny_resnet18_and_a_rerun_that_tunes_nothing(tmp_path, capsys, monkeypatch):
    out, work = tmp_path / "e2e.json", tmp_path / "work"
    waits = []  # the load check before each tuning run and the timing, with the limits given on the command line
    monkeypatch.setattr(e2e.bench_runs, "wait_for_cores",
                        lambda wait, threshold: waits.append((wait, threshold)) or {"busy": False, "seen": len(waits)})
    # One kernel (the task whose name contains conv2d10, as TVM names them) keeps evolutionary search's first
    # rounds short: each kernel costs it some 30 s of search at any trial count.
    argv = ["--size", "tiny", "--models", "resnet18", "--trials", "2", "--arms", "ppo", "evolutionary",
            "--op-filter", "conv2d10", "--passes", "2", "--budget-s", "2", "--work-dir", str(work), "--out", str(out),
            "--load-wait", "5", "--max-load", "0.7"]
    assert e2e.main(argv) == 0
    assert waits == [(5.0, 0.7)] * 3  # two tuning runs, then the timing
    first = capsys.readouterr().out
    assert "trials, best" in first  # the tuning progress lines the rerun must not print
    state = json.loads(out.read_text())
    model = state["models"]["resnet18"]
    assert set(model["runs"]) == {"ppo/N2/s0", "evolutionary/N2/s0"}
    for key, run in model["runs"].items():
        assert Path(run["work_dir"]).is_dir() and run["sittings"] == 1 and run["tuning_s"] > 0
        assert 1 <= run["tuned_kernels"] < run["kernels"]
        assert run["measurements"] == 2 * run["tuned_kernels"]
        timed = model["timing"]["variants"][key]
        assert timed["correct"] is True and timed["ms"] > 0 and len(timed["passes_ms"]) == 2
    assert [r["load"]["seen"] for r in model["runs"].values()] == [1, 2] and model["timing"]["load"]["seen"] == 3
    variants = model["timing"]["variants"]
    assert all(variants[k]["ms"] > 0 for k in ("TVM default", "PyTorch", "ORT"))
    assert state["cost"]["tuning_s"] > 0 and state["cost"]["timing_s"] > 0
    rows = [line.split()[0] for line in first.splitlines() if line.split() and line.split()[0] in
            ("TVM", "ppo", "evolutionary", "PyTorch", "ORT")]
    assert rows == ["TVM", "ppo", "evolutionary", "PyTorch", "ORT"]
    assert out.with_suffix(".png").stat().st_size > 0

    assert e2e.main(argv) == 0
    second = capsys.readouterr().out
    again = json.loads(out.read_text())["models"]["resnet18"]
    assert "trials, best" not in second and "nothing new tuned" in second
    assert len(waits) == 3  # nothing to tune and nothing to time: no wait for quiet cores either
    assert again["runs"] == model["runs"]
    assert again["timing"] == model["timing"]

    # The evolutionary run's folder is lost: a run of the other arm still builds it, from the archive's best records.
    shutil.rmtree(model["runs"]["evolutionary/N2/s0"]["work_dir"])
    assert e2e.main([*argv[:argv.index("--arms")], "--arms", "ppo", *argv[argv.index("--op-filter"):], "--retime"]) == 0
    restored = json.loads(out.read_text())["models"]["resnet18"]["timing"]["variants"]["evolutionary/N2/s0"]
    assert restored["correct"] is True and restored["ms"] > 0
    assert "trials, best" not in capsys.readouterr().out  # restored, not tuned again

    # Its own arm asked for again (as when a seed is added): its every record is restored into its folder, nothing is
    # tuned again under the same key, and its record (seconds, sittings) is kept as it was.
    assert e2e.main([*argv, "--retime"]) == 0
    third = capsys.readouterr().out
    k = model["runs"]["evolutionary/N2/s0"]["tuned_kernels"]  # kernels the filter selects, 2 trials each
    assert "trials, best" not in third and f"{2 * k} records restored" in third
    kept = json.loads(out.read_text())["models"]["resnet18"]["runs"]["evolutionary/N2/s0"]
    assert kept == model["runs"]["evolutionary/N2/s0"]

    # A run stopped after its first kernel (a session's end), its folder then lost and the JSON never told of it: it
    # resumes from the records archived batch by batch, and only the kernel it had not measured is tuned.
    key, folder = "ppo/N2/s0", Path(model["runs"]["ppo/N2/s0"]["work_dir"])
    lines = (folder / RECORDS).read_text().splitlines(keepends=True)
    first = [line for line in lines if json.loads(line)[0] == json.loads(lines[0])[0]]
    assert len(first) == 2 and len(lines) == 2 * k
    archive = arch.archive_path(out)
    kept_entries = [e for e in read_json_lines_gz(archive) if not (e.get("key") == key and "start" in e)]
    archive.unlink()
    append_json_lines_gz(archive, kept_entries)
    (folder / RECORDS).write_text("".join(first))
    arch.RunRecords(archive, "resnet18", key, folder).flush()
    shutil.rmtree(folder)
    state = json.loads(out.read_text())
    del state["models"]["resnet18"]["runs"][key]
    out.write_text(json.dumps(state))
    assert e2e.main([*argv[:argv.index("--arms")], "--arms", "ppo", *argv[argv.index("--op-filter"):]]) == 0
    fourth = capsys.readouterr().out
    assert "2 records restored" in fourth and fourth.count("trials, best") == k - 1  # the others' one batch each
    resumed = json.loads(out.read_text())["models"]["resnet18"]["runs"][key]
    assert resumed["measurements"] == 2 * k and resumed["tuned_kernels"] == k
    assert json.loads(out.read_text())["models"]["resnet18"]["timing"]["variants"][key]["correct"] is True

    # Thrown away and asked for again: tuned from the start, its old records kept aside, its old seconds gone.
    assert e2e.main([*argv[:argv.index("--arms")], "--arms", "ppo", *argv[argv.index("--op-filter"):],
                     "--discard", key]) == 0
    fifth = capsys.readouterr().out
    assert f"{key}: discarded; its records moved to" in fifth and fifth.count("trials, best") == k
    retuned = json.loads(out.read_text())["models"]["resnet18"]["runs"][key]
    assert retuned["sittings"] == 1 and retuned["measurements"] == 2 * k
    assert len(list(folder.parent.glob(folder.name + ".discarded-*"))) == 1
