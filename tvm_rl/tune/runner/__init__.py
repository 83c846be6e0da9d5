"""Builders and runners: where candidates are compiled and timed (a persistent local builder, a runner that
checks outputs and names failures, an RPC runner for remote devices, a local runner timing cold caches)."""
from .builder import PersistentBuilder
from .cold import cold_runner, is_cold, runner_for
from .failures import CheckedRunner, FailureLog
from .rpc import RPCError, rpc_runner

__all__ = ["CheckedRunner", "FailureLog", "PersistentBuilder", "RPCError", "cold_runner", "is_cold", "rpc_runner",
           "runner_for"]
