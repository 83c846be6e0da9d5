"""benchmarks/stage_ablation.py: a two-stage run's database cut after its first stage."""
from benchmarks.stage_ablation import first_records
from tvm_rl.database import RECORDS, WORKLOADS


def test_first_records_keeps_the_first_n_in_measurement_order_and_every_workload(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / WORKLOADS).write_text('["w0"]\n["w1"]\n')
    (run / RECORDS).write_text("".join(f"[0, [{i}]]\n" for i in range(5)))
    cut = first_records(run, 3, tmp_path / "cut")
    assert cut.record_count() == 3 and (tmp_path / "cut" / RECORDS).read_text().splitlines() == \
        ["[0, [0]]", "[0, [1]]", "[0, [2]]"]
    assert (tmp_path / "cut" / WORKLOADS).read_text() == (run / WORKLOADS).read_text()
    assert first_records(run, 9, tmp_path / "all").record_count() == 5


def test_time_builds_checks_each_build_and_times_them_all(cpu):
    from benchmarks.stage_ablation import time_builds
    from tvm_rl import models

    timings = time_builds(models.load("squeezenet1_1", "tiny"), cpu, {"a": None, "b": None}, repeat=2)
    assert set(timings) == {"a", "b"} and all(t.median_ms > 0 for t in timings.values())
