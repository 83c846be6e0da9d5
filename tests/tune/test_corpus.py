"""The corpus of measured schedules: workload suites, the folder and its manifest, resumption (a finished
workload is skipped, an interrupted one gets only the remainder), and clear errors for bad input."""
import json
import os
import signal
from pathlib import Path

import pytest
import tvm
import tvm_ffi
from tvm import te
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner
from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture

from tests.support.kernels import matmul
from tvm_rl import measure
from tvm_rl.errors import TargetError, TuningInterrupted, TvmRlError, UnknownModelError
from tvm_rl.tune import corpus as C
from tvm_rl.tune.corpus import build
from tvm_rl.tune.corpus.command import main as corpus_main

RECORD = ('{"input": ["cuda -model=v100", "batch_matmul.cuda", [["TENSOR", [1, 4, 20], "float32"], '
          '["TENSOR", [1, 4, 20], "float32"]], {}], "config": {}, "result": [[3e-06, 2e-06], 0, 1.0, 0], '
          '"version": 0.2}\n')


@pytest.fixture
def cuda_only_tophub(tmp_path):
    folder = tmp_path / "tophub"
    folder.mkdir()
    (folder / "cuda_v0.10.log").write_text(RECORD)
    return folder


def scale8() -> tvm.IRModule:
    a = te.placeholder((8,), name="A")
    return tvm.IRModule({"main": te.create_prim_func([a, te.compute((8,), lambda i: a[i] * 2.0, name="B")])})


@derived_object
class StandInBuilder(PyBuilder):
    """Writes an empty file per candidate instead of compiling it (RemoveBuildArtifact deletes its folder)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder, self.count = folder, 0

    def build(self, build_inputs):
        out = []
        for _ in build_inputs:
            self.count += 1
            path = self.folder / f"build{self.count}" / "candidate.so"
            path.parent.mkdir(parents=True)
            path.touch()
            out.append(BuilderResult(str(path), None))
        return out


@derived_object
class StandInRunner(PyRunner):
    """Times nothing: every candidate ran in 1e-5 s plus a little per candidate seen (where a device would)."""

    def __init__(self) -> None:
        super().__init__()
        self.ran = 0

    def run(self, runner_inputs):
        self.ran += len(runner_inputs)
        return [LocalRunnerFuture([1e-5 * (1 + (self.ran + i) % 7)]) for i in range(len(runner_inputs))]


def test_workload_names_and_dedup():
    assert C.safe_name("resnet18-tiny.conv2d/1 x") == "resnet18-tiny.conv2d_1_x"
    a, b = C.Workload("mm", "t", matmul(8)), C.Workload("mm", "t", matmul(16))
    same = C.Workload("other", "t", matmul(8))
    out = C.distinct([a, same, b])
    assert [w.name for w in out][0] == "mm" and len(out) == 2  # one per structural hash, first name kept
    assert out[1].name.startswith("mm-") and out[1].key == b.key  # a clash of names gets the hash appended
    assert C.has_reduction(matmul(8)) and not C.has_reduction(scale8())


def test_tophub_workloads_for_the_target_kind(cuda_only_tophub, cpu):
    cuda = measure.parse_target("cuda")
    (workload,) = C.tophub_workloads(cuda, cuda_only_tophub)
    assert workload.name == "batch_matmul_b1_m4_n4_k20" and workload.source == "tophub:cuda_v0.10.log"
    with pytest.raises(C.CorpusError, match=r"no TopHub log for target kind 'llvm' in .*cuda_v0.10.log.*"
                                            r"--tophub-logs all"):
        C.tophub_workloads(cpu, cuda_only_tophub)
    assert len(C.tophub_workloads(cpu, cuda_only_tophub, which="all")) == 1  # shapes are device-independent
    two = C.tophub_workloads(cuda, cuda_only_tophub, max_tasks=3)
    assert [w.name for w in two] == ["batch_matmul_b1_m4_n4_k20"]
    with pytest.raises(C.CorpusError, match="unknown TopHub op kind"):
        C.tophub_workloads(cuda, cuda_only_tophub, ops=["conv3d"])


def test_missing_tophub_folder_names_the_variable(monkeypatch, tmp_path, cpu):
    monkeypatch.setenv("TVM_RL_TOPHUB_DIR", str(tmp_path / "missing"))
    with pytest.raises(TvmRlError, match=r"missing \(from TVM_RL_TOPHUB_DIR\) does not exist"):
        C.tophub_workloads(cpu)


def test_zoo_workloads(cpu):
    with pytest.raises(UnknownModelError, match="unknown zoo model 'resnet19'; known: .*resnet18"):
        C.zoo_workloads(cpu, ["resnet18", "resnet19"], "tiny")
    compute = C.zoo_workloads(cpu, ["resnet18"], "tiny")
    every = C.zoo_workloads(cpu, ["resnet18"], "tiny", kernels="all")
    assert 0 < len(compute) < len(every) and all(C.has_reduction(w.mod) for w in compute)
    assert all(w.name.startswith("resnet18-tiny.") and w.source == "zoo:resnet18-tiny" for w in compute)
    assert any("conv2d" in w.name for w in compute)


def test_bad_settings_and_targets_are_refused_before_measuring(tmp_path, cpu):
    work = [C.Workload("mm8", "t", matmul(8))]
    for kwargs, message in [({"trials": 0}, "trials must be at least 1"),
                            ({"random_fraction": 1.5}, r"random fraction must be within \[0, 1\]"),
                            ({"per_iter": 0}, "per_iter must be at least 1")]:
        with pytest.raises(C.CorpusError, match=message):
            C.build_corpus(work, cpu, tmp_path / "c", **kwargs)
    with pytest.raises(C.CorpusError, match="no workloads to measure"):
        C.build_corpus([], cpu, tmp_path / "c")
    if not tvm.cuda().exist:  # the CUDA corpus needs a GPU to time its candidates on
        with pytest.raises(TargetError, match="no cuda device on this machine"):
            C.build_corpus(work, "cuda", tmp_path / "gpu")
        assert not (tmp_path / "gpu").exists()
    other = C.Corpus(tmp_path / "other")
    other.write_manifest({"format": build.FORMAT, "version": 1, "target": {"kind": "llvm", "mcpu": "cortex-a72"}})
    with pytest.raises(C.CorpusError, match="was measured for target .*cortex-a72.*give another output folder"):
        C.build_corpus(work, cpu, other.path)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "manifest.json").write_text("{}")
    with pytest.raises(C.CorpusError, match="not a tvm-rl corpus manifest"):
        C.build_corpus(work, cpu, tmp_path / "foreign")


def test_cli_errors(tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit):
        corpus_main(["build", "--out", str(tmp_path / "c")])
    assert "choose the workloads: --tophub and/or --zoo" in capsys.readouterr().err
    monkeypatch.setenv("TVM_RL_TOPHUB_DIR", str(tmp_path / "nothing"))
    from tvm_rl.cli import main as cli_main

    assert cli_main(["corpus", "build", "--tophub", "--out", str(tmp_path / "c")]) == 2
    assert "TVM_RL_TOPHUB_DIR" in capsys.readouterr().err
    assert cli_main(["corpus", "build", "--models", "resnet19", "--out", str(tmp_path / "c")]) == 2
    assert "unknown zoo model 'resnet19'" in capsys.readouterr().err
    assert cli_main(["corpus", "train", "--corpus", str(tmp_path / "none")]) == 2
    assert "has no manifest.json" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_build_resume_and_manifest(tmp_path, cpu):
    """Random schedules only (an evolutionary round costs tens of seconds on a small CPU), built and timed by
    stand-ins (compiling and timing cost seconds a batch; the slow test below measures for real)."""
    out = tmp_path / "corpus"
    work = [C.Workload("mm8", "test", matmul(8)), C.Workload("mm16", "test", matmul(16))]
    lines: list[str] = []
    stand_ins = {"builder": StandInBuilder(tmp_path / "builds"), "runner": StandInRunner()}

    def interrupt_after_first_batch(line: str) -> None:
        lines.append(line)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, after the batch's records were added to the database

    with pytest.raises(TuningInterrupted, match="Run the same command again to resume"):
        C.build_corpus(work, cpu, out, trials=4, random_fraction=1.0, per_iter=2, write=interrupt_after_first_batch,
                       **stand_ins)
    assert lines == [lines[0]] and lines[0].startswith("[1/2] mm8 random: 2/4 measured, best ")
    corpus = C.Corpus(out)
    assert corpus.database("mm8").record_count() == 2
    assert [w["records"] for w in corpus.read_manifest()["workloads"]] == [2]

    report = C.build_corpus(work, cpu, out, trials=4, random_fraction=1.0, per_iter=4, write=lines.append,
                            **stand_ins)
    assert report.measured == 6 and report.measured_workloads == ["mm8", "mm16"]  # only the remainder of mm8
    assert [line.split(":")[0] for line in lines[1:]] == ["[1/2] mm8 random", "[2/2] mm16 random"]
    assert "mm8 random: 4/4 measured" in lines[1] and "mm16 random: 4/4 measured" in lines[2]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "tvm-rl corpus" and manifest["target"] == json.loads(str(cpu))
    assert manifest["host"]["cpu"] == str(tvm.target.codegen.llvm_get_system_cpu())
    assert manifest["host"]["logical_cores"] == os.cpu_count()
    assert manifest["settings"]["trials"] == 4 and manifest["settings"]["random"] == 4
    assert [r["per_iter"] for r in manifest["runs"]] == [2, 4]
    assert manifest["measurements"] == 8 and len(manifest["runs"]) == 2 and manifest["seconds"] >= 0
    by_name = {w["name"]: w for w in manifest["workloads"]}
    assert set(by_name) == {"mm8", "mm16"}
    for w, mod in (("mm8", matmul(8)), ("mm16", matmul(16))):
        entry = by_name[w]
        assert entry["records"] == 4 and entry["random"] == 4 and entry["evolved"] == 0
        assert entry["structural_hash"] == str(tvm_ffi.structural_hash(mod)) and entry["folder"] == f"workloads/{w}"
        # Stand-in builds and runs can take under the 0.05 s that the manifest rounds seconds to.
        assert entry["valid"] == 4 and entry["best_us"] > 0 and entry["seconds"] >= 0
    records = corpus.load("mm16")
    assert len(records.records) == 4 and len(records.seconds) == 4 and records.valid == [0, 1, 2, 3]
    assert corpus.names() == ["mm8", "mm16"]

    # Done: nothing is measured again. A workload cut short (records lost) gets exactly what it lacks.
    again = C.build_corpus(work, cpu, out, trials=4, random_fraction=1.0, per_iter=2, write=lines.append,
                           **stand_ins)
    assert again.measured == 0 and again.skipped == ["mm8", "mm16"]
    path = corpus.database("mm8").records_path
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:3]))
    third = C.build_corpus(work, cpu, out, trials=4, random_fraction=1.0, per_iter=2, write=lines.append,
                           **stand_ins)
    assert third.measured == 1 and third.skipped == ["mm16"] and corpus.database("mm8").record_count() == 4
    assert stand_ins["runner"]._inst.ran == 9 and stand_ins["builder"]._inst.count == 9  # 2 + 6 + 0 + 1
    assert manifest["settings"]["builder"] == "StandInBuilder" and manifest["settings"]["runner"] == "StandInRunner"


def test_a_workload_that_fails_to_search_does_not_end_the_run(tmp_path, cpu, monkeypatch):
    real = build._measure

    def measure(workload, *args, **kwargs):
        if workload.name == "bad":
            raise RuntimeError("TVMError: cannot search this\nCheck failed: something")
        return real(workload, *args, **kwargs)

    monkeypatch.setattr(build, "_measure", measure)
    lines: list[str] = []
    work = [C.Workload("bad", "test", matmul(12)), C.Workload("mm8", "test", matmul(8))]
    report = C.build_corpus(work, cpu, tmp_path, trials=2, random_fraction=1.0, per_iter=2, write=lines.append,
                            builder=StandInBuilder(tmp_path / "builds"), runner=StandInRunner())
    assert report.failed == ["bad"] and report.measured == 2
    assert lines[0] == ("[1/2] bad random: failed (RuntimeError: Check failed: something); going on with the next "
                        "workload (a rerun tries it again)")
    entries = {w["name"]: w for w in json.loads((tmp_path / "manifest.json").read_text())["workloads"]}
    assert entries["bad"]["error"].startswith("random: RuntimeError") and entries["bad"]["records"] == 0
    assert entries["mm8"]["records"] == 2 and "error" not in entries["mm8"]
    assert C.Corpus(tmp_path).names() == ["mm8"]


@pytest.mark.slow
def test_random_then_evolved_measured_here(tmp_path, cpu, capsys):
    """The default mix, measured on this CPU with tune_workloads' builder and runner: random samples first, then
    evolved ones; a rerun measures nothing."""
    out = tmp_path / "corpus"
    work = [C.Workload("mm32", "test", matmul(32))]
    report = C.build_corpus(work, cpu, out, trials=6, per_iter=3)
    assert report.measured == 6
    printed = capsys.readouterr().out
    assert "mm32 random: 3/6 measured" in printed and "mm32 evolved: 6/6 measured" in printed
    (entry,) = json.loads((out / "manifest.json").read_text())["workloads"]
    assert entry["random"] == 3 and entry["evolved"] == 3 and entry["records"] == 6 and entry["valid"] >= 1
    assert 0 < min(C.Corpus(out).load("mm32").seconds) < 1e-3  # real timings of a 32^3 matmul
    assert C.build_corpus(work, cpu, out, trials=6, per_iter=3).measured == 0


@pytest.mark.slow
def test_a_cuda_corpus_builds_here(tmp_path):
    """The CUDA path up to timing: TopHub's CUDA workloads and the zoo's kernels as a CUDA build sees them
    (unscheduled: MetaSchedule skips kernels dlight already scheduled), their candidates built by the same
    builder, and a stand-in runner where a GPU would time them."""
    import shutil

    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture

    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc to compile CUDA candidates with")
    tophub = os.environ.get("TVM_RL_TOPHUB_DIR") or str(Path(__file__).resolve().parents[3] / "shared" / "tophub")
    if not Path(tophub).is_dir():
        pytest.skip(f"no TopHub logs at {tophub}")
    cuda = measure.parse_target("cuda")

    @derived_object
    class StandIn(PyRunner):
        def __init__(self):
            super().__init__()
            self.built = 0

        def run(self, runner_inputs):
            self.built += sum(1 for r in runner_inputs if r.artifact_path)
            return [LocalRunnerFuture([1e-5]) for _ in runner_inputs]

    tophub = C.tophub_workloads(cuda, tophub, ops=["batch_matmul"])
    zoo = C.zoo_workloads(cuda, ["resnet18"], "tiny")
    assert all("tirx.is_scheduled" not in w.mod["main"].attrs for w in zoo)
    runner = StandIn()
    report = C.build_corpus([tophub[7], zoo[0]], cuda, tmp_path, trials=2, random_fraction=1.0, per_iter=2,
                            runner=runner, write=lambda line: None)
    assert report.measured == 4 and runner._inst.built == 4  # every candidate compiled for CUDA
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["target_kind"] == "cuda" and manifest["settings"]["runner"] == "StandIn"
