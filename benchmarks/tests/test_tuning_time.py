"""benchmarks/tuning_time.py: search, measurement and wasted-search seconds read from MetaSchedule's task logs."""
import pytest

from benchmarks import tuning_time

LOG = """2026-12-07 10:00:00 [INFO] [task_scheduler.cc:175] Initializing Task #3: "conv"
2026-12-07 10:00:01 [INFO] [evolutionary_search.cc:738] Generating candidates......
Postproc #0 [s_tir.meta_schedule.DisallowDynamicLoop]: 0 failure(s)
2026-12-07 10:00:21 [INFO] [evolutionary_search.cc:755] Sending 8 candidates(s) for measurement
2026-12-07 10:00:21 [INFO] [evolutionary_search.cc:738] Generating candidates......
2026-12-07 10:00:36 [INFO] [evolutionary_search.cc:755] Sending 8 candidates(s) for measurement
2026-12-07 10:00:38 [INFO] [task_scheduler.cc:144] [Task #3: conv] Trial #1: GFLOPs: 1.0. Time: 1.0 us.
2026-12-07 10:00:39 [INFO] [task_scheduler.cc:144] [Task #3: conv] Trial #2: GFLOPs: 1.0. Time: 1.0 us.
2026-12-07 10:05:00 [INFO] [evolutionary_search.cc:738] Generating candidates......
2026-12-07 10:05:10 [INFO] [evolutionary_search.cc:755] Sending 2 candidates(s) for measurement
2026-12-07 10:05:13 [INFO] [task_scheduler.cc:144] [Task #3: conv] Trial #3: GFLOPs: 1.0. Time: 1.0 us.
"""


def test_rounds_are_split_and_a_round_that_measured_nothing_is_counted_as_wasted(tmp_path):
    rounds = tuning_time.rounds_of_log(LOG.splitlines())
    assert rounds == [{"search_s": 20.0, "trials": 0, "measure_s": None},
                      {"search_s": 15.0, "trials": 2, "measure_s": 3.0},
                      {"search_s": 10.0, "trials": 1, "measure_s": 3.0}]
    logs = tmp_path / "run" / "ms_logs" / "x"
    logs.mkdir(parents=True)
    (logs / "tvm.s_tir.meta_schedule.logging.task_03_conv.log").write_text(LOG)
    (logs / "tvm.s_tir.meta_schedule.logging.task_scheduler.log").write_text("not a task log\n")
    summary = tuning_time.run_summary(tmp_path / "run")
    assert (summary["rounds"], summary["wasted_rounds"], summary["trials"]) == (3, 1, 3)
    assert summary["search_s"] == 45.0 and summary["measure_s"] == 6.0 and summary["wasted_search_s"] == 20.0
    with pytest.raises(SystemExit, match="no MetaSchedule task logs"):
        tuning_time.run_summary(tmp_path)
