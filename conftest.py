"""Fixtures and set-up shared by the package's tests (tests/) and the benchmarks' own tests (benchmarks/tests/)."""
import os
from pathlib import Path

import pytest

# The suite runs on PYTEST_WORKERS processes (2 on CI's 2 cores): one TVM thread each, as TVM's own default gave
# there before tvm_rl sized its thread pool to the cores (tvm_rl.threads), so that workers do not oversubscribe.
os.environ.setdefault("TVM_NUM_THREADS", "1")

from tvm_rl import measure  # noqa: E402

# CI keeps TVM's TopHub logs beside the checkout (they are data, never committed). The package itself reads only
# $TVM_RL_TOPHUB_DIR or ~/.tvm/tophub, so the tests (and the tutorials they run) point the variable there.
_TOPHUB = Path(__file__).resolve().parents[1] / "shared" / "tophub"
if _TOPHUB.is_dir():
    os.environ.setdefault("TVM_RL_TOPHUB_DIR", str(_TOPHUB))

# Evolutionary search rates its whole population (512) every batch, about 35 s a kernel on two cores even at 2
# trials: most of the suite's tuning tests' time, which test what a run records, resumes and reports, not how good
# its schedules are. The suite runs them with 64 (subprocesses and tutorials inherit it);
# tests/tune/test_pretrained.py tunes at the default, and test_population.py holds the default to 512.
os.environ.setdefault("TVM_RL_POPULATION", "64")

# The first MetaSchedule TuneContext in a process imports TVM's tensorize intrinsics: about a minute on two busy
# cores the plain way, seconds through the package's own loader. Loaded once here, so whichever test makes the
# first TuneContext directly does not pay the minute.
from tvm_rl.tune.intrin import preload_tensor_intrinsics  # noqa: E402

preload_tensor_intrinsics()


@pytest.fixture(scope="session")
def cpu():
    return measure.host_cpu_target()

