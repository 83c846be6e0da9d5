"""Measuring on remote devices through TVM's RPC tracker: candidates are built on this host and timed on the
boards registered with a tracker under one key (`python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`).

The tracker is asked what it has before tuning starts, so a wrong address or key fails at once with the
address and the keys it does have, instead of as a timeout on every candidate.
"""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

from tvm.s_tir import meta_schedule as ms

from ...errors import TvmRlError
from ...interrupt import ignore_sigint

DEFAULT_PORT = 9190  # `python -m tvm.exec.rpc_tracker`'s default


class RPCError(TvmRlError):
    """The RPC tracker cannot be reached, or it has no device to measure on for the key asked for."""


@dataclass(frozen=True)
class TrackerKey:
    """What a tracker reports for one device key: devices registered, free now, requests waiting."""

    key: str
    servers: int
    free: int
    pending: int


def parse_tracker(address: str) -> tuple[str, int]:
    """`HOST:PORT` (or `HOST`, port 9190) as (host, port); `[::1]:9190` for IPv6."""
    text = address.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
    if not host:
        raise RPCError(f"RPC tracker address {address!r} has no host; write it as HOST:PORT, e.g. 10.0.0.5:9190")
    if not port:
        return host, DEFAULT_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise RPCError(f"RPC tracker address {address!r} has no valid port; write it as HOST:PORT, e.g. "
                       f"{host}:{DEFAULT_PORT}")
    return host, int(port)


def tracker_summary(host: str, port: int, timeout_sec: float = 10.0) -> dict:
    """The tracker's own summary (`queue_info` per key, `server_info` per server), or an RPCError naming the
    address within `timeout_sec`."""
    address = f"{host}:{port}"
    try:
        # TVM's client retries a refused connection for 60 s: probe first so a wrong address fails now.
        socket.create_connection((host, port), timeout=timeout_sec).close()
    except OSError as err:
        raise RPCError(f"cannot reach the RPC tracker at {address} ({err}); start it there with "
                       f"`python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port {port}`, or fix --rpc-tracker") from err
    result: dict = {}

    def ask() -> None:
        from tvm import rpc

        try:
            tracker = rpc.connect_tracker(host, port)
            try:
                result["summary"] = tracker.summary()
            finally:
                tracker.close()
        except Exception as err:  # noqa: BLE001 - reported below with the address
            result["error"] = err

    # Something else listening on the port may never answer: ask in a thread that may be abandoned.
    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    asker.join(timeout_sec)
    if "summary" in result:
        return result["summary"]
    why = result.get("error", f"no answer in {timeout_sec:g} s")
    raise RPCError(f"{address} does not answer as a TVM RPC tracker ({why}); is "
                   f"`python -m tvm.exec.rpc_tracker` listening on that port?")


def tracker_keys(summary: dict) -> dict[str, TrackerKey]:
    """Every device key in a tracker summary with its registered, free and waited-for device counts."""
    servers: dict[str, int] = {}
    for info in summary.get("server_info", []):
        key = info.get("key", "").split(":", 1)[-1]  # servers register as "server:KEY"
        servers[key] = servers.get(key, 0) + 1
    queues = summary.get("queue_info", {})
    return {key: TrackerKey(key, servers.get(key, 0), int(queues.get(key, {}).get("free", 0)),
                            int(queues.get(key, {}).get("pending", 0)))
            for key in sorted(set(servers) | set(queues))}


def check_tracker(tracker: str, key: str, timeout_sec: float = 10.0) -> TrackerKey:
    """What the tracker at `tracker` (HOST:PORT) has for `key`; an RPCError naming the address and the keys
    it does have when it is unreachable or no device with `key` is free."""
    host, port = parse_tracker(tracker)
    keys = tracker_keys(tracker_summary(host, port, timeout_sec))
    found = keys.get(key)
    if found is None or (found.servers == 0 and found.free == 0):
        have = ", ".join(f"{k.key} ({k.free} free of {k.servers})" for k in keys.values() if k.servers) or "none"
        raise RPCError(f"the RPC tracker at {host}:{port} has no device with key {key!r} (keys it has: {have}); "
                       f"on each device run `python -m tvm.exec.rpc_server --tracker {host}:{port} --key {key}`")
    if found.free == 0:
        raise RPCError(f"all {found.servers} device(s) with key {key!r} at the RPC tracker {host}:{port} are in "
                       f"use ({found.pending} request(s) waiting); wait for them, or start more servers with "
                       f"that key (`python -m tvm.exec.query_rpc_tracker --host {host} --port {port}` lists them)")
    return found


def rpc_runner(tracker: str, key: str, timeout_sec: float = 60.0, max_workers: int | None = None,
               evaluator: ms.runner.EvaluatorConfig | None = None, check: bool = True) -> ms.runner.RPCRunner:
    """A MetaSchedule runner that times each candidate on a device registered with the RPC tracker at
    `tracker` (HOST:PORT) under `key`; pass it as `runner=` to `tune_model` / `tune_workloads`.

    `timeout_sec` bounds one candidate's session on the device (upload, link there, allocate, time it).
    `max_workers` candidates are measured at once (default: as many as the tracker has free devices with
    `key`, so a fleet measures in parallel). With `check`, the tracker is asked first (see `check_tracker`).
    """
    host, port = parse_tracker(tracker)
    free = check_tracker(tracker, key, min(timeout_sec, 10.0)).free if check else 1
    config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                                 session_timeout_sec=int(max(1, round(timeout_sec))))
    # Ctrl-C is the tuning process's to handle (TuningInterrupted), as for the local runner's workers.
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator,
                               max_workers=max_workers or max(1, free), initializer=ignore_sigint)
