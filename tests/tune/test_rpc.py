"""Remote measurement through TVM's RPC tracker: a tracker and two servers on loopback, a short PPOSearch run
whose every candidate is timed on those servers (library and `tvm-rl tune`), and the errors for a wrong
tracker address or key."""
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.kernels import matmul
from tvm_rl.cli import main
from tvm_rl.tune import open_database
from tvm_rl.tune.runner.rpc import RPCError, check_tracker, parse_tracker, rpc_runner, tracker_summary
from tvm_rl.tune.tasks import tune_workloads

KEY = "tvm-rl-test"
TOPHUB = Path(__file__).resolve().parents[3] / "shared" / "tophub"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, check, seconds: float = 120.0):
    deadline = time.monotonic() + seconds
    while True:
        try:
            value = check()
            if value:
                return value
        except RPCError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {seconds:g} s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def tracker(request, tmp_path_factory):
    """HOST:PORT of a tracker on loopback with two servers registered under KEY, and the servers' log files."""
    logs = tmp_path_factory.mktemp("rpc")
    procs: list[subprocess.Popen] = []

    def stop() -> None:
        # Each server runs in a child process of its own: signal the whole process group.
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    request.addfinalizer(stop)

    def start(name: str, *args: str) -> None:
        with open(logs / f"{name}.log", "w") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))

    port = free_port()
    start("tracker", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1))
    wait_for("tracker", lambda: tracker_summary("127.0.0.1", port, 2.0) is not None)
    address = f"127.0.0.1:{port}"
    for i in range(2):
        server_port = free_port()
        start(f"server{i}", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(server_port),
              "--port-end", str(server_port + 1), "--tracker", address, "--key", KEY)
    wait_for("two free servers", lambda: check_tracker(address, KEY).free == 2)
    return address, [logs / "server0.log", logs / "server1.log"]


def sessions(server_logs) -> list[int]:
    """Modules each server has loaded so far (rpc_server logs one line per module a session loads)."""
    return [len(re.findall(r"load_module", log.read_text())) for log in server_logs]


def test_parse_tracker():
    assert parse_tracker("10.0.0.5:9191") == ("10.0.0.5", 9191)
    assert parse_tracker("boards.lab") == ("boards.lab", 9190)
    assert parse_tracker("[::1]:9000") == ("::1", 9000)
    for bad in (":9190", "host:port", "host:70000"):
        with pytest.raises(RPCError, match="HOST:PORT"):
            parse_tracker(bad)


def test_unreachable_tracker_is_named_at_once():
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    start = time.monotonic()
    with pytest.raises(RPCError, match=f"cannot reach the RPC tracker at {address}"):
        rpc_runner(address, KEY)
    assert time.monotonic() - start < 5  # not TVM's 60 s of retries


def test_silent_port_is_not_a_tracker():
    with socket.socket() as listener:  # accepts connections (the kernel's backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(RPCError, match=f"127.0.0.1:{port} does not answer as a TVM RPC tracker"):
            check_tracker(f"127.0.0.1:{port}", KEY, timeout_sec=1.0)


@pytest.mark.slow  # the tracker fixture takes 20-30 s to start
def test_unknown_key_names_the_keys_there(tracker, capsys):
    address, _ = tracker
    with pytest.raises(RPCError, match=rf"no device with key 'jetson'.*keys it has: {KEY} \(2 free of 2\)"):
        rpc_runner(address, "jetson")
    assert main(["tune", "--tophub", "--rpc-tracker", address, "--rpc-key", "jetson"]) == 2
    assert f"tvm-rl tune: error: the RPC tracker at {address} has no device with key 'jetson'" in \
        capsys.readouterr().err


def test_rpc_key_needs_a_tracker(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--tophub", "--rpc-key", KEY])
    assert "--rpc-tracker and --rpc-key go together" in capsys.readouterr().err


def valid_records(work_dir) -> list[list[float]]:
    """Run times of every record in the database: asserted present, finite and positive."""
    records = open_database(work_dir).get_all_tuning_records()
    times = [[float(t) for t in r.run_secs] for r in records]
    assert times and all(t and all(0 < s < 1 and math.isfinite(s) for s in t) for t in times), times
    return times


@pytest.mark.slow
def test_ppo_tuning_measures_on_the_remote_servers(tracker, tmp_path, cpu):
    address, server_logs = tracker
    before = sum(sessions(server_logs))
    runner = rpc_runner(address, KEY, timeout_sec=60)
    assert runner.pool._threadpool._max_workers == 2  # one measurement at a time per free device
    _, report = tune_workloads([("matmul32", matmul(32), 1.0)], cpu, tmp_path, trials_per_kernel=4,
                               trials_per_iter=4, strategy="ppo", runner=runner)
    assert report.tuned == ["matmul32"] and report.measured == 4
    assert len(valid_records(tmp_path)) == 4
    # Every candidate was timed in a session on one of the servers, not on this process's device.
    assert sum(sessions(server_logs)) - before >= 4


@pytest.mark.slow
def test_cli_tunes_through_the_tracker(tracker, tmp_path, capsys):
    address, server_logs = tracker
    before = sum(sessions(server_logs))
    args = ["tune", "--tophub", "--tophub-dir", str(TOPHUB), "--ops", "batch_matmul", "--max-tasks", "1",
            "--strategy", "random", "--trials", "2", "--per-iter", "2", "--work-dir", str(tmp_path),
            "--rpc-tracker", address, "--rpc-key", KEY, "--rpc-timeout", "60"]
    if not TOPHUB.is_dir():
        pytest.skip(f"no TopHub logs at {TOPHUB}")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"measuring on 2 device(s) with key '{KEY}' at {address}" in out and "1 tuned" in out
    assert 1 <= len(valid_records(tmp_path)) <= 2
    assert all(json.loads(line) for line in (tmp_path / "database_tuning_record.json").read_text().splitlines())
    assert sum(sessions(server_logs)) - before >= 1

