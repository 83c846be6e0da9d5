import pytest

from tvm_rl import measure


@pytest.fixture(scope="session")
def cpu():
    return measure.host_cpu_target()

