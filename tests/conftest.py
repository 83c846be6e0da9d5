import os
from pathlib import Path

import pytest

from tvm_rl import measure

# CI keeps TVM's TopHub logs beside the checkout (they are data, never committed). The package itself reads only
# $TVM_RL_TOPHUB_DIR or ~/.tvm/tophub, so the tests (and the tutorials they run) point the variable there.
_TOPHUB = Path(__file__).resolve().parents[2] / "shared" / "tophub"
if _TOPHUB.is_dir():
    os.environ.setdefault("TVM_RL_TOPHUB_DIR", str(_TOPHUB))


@pytest.fixture(scope="session")
def cpu():
    return measure.host_cpu_target()

