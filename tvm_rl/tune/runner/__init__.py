"""Builders and runners: where candidates are compiled and timed (a persistent local builder, a runner that
checks outputs and names failures, an RPC runner for remote devices)."""
from .builder import PersistentBuilder
from .failures import CheckedRunner, FailureLog
from .rpc import RPCError, rpc_runner

__all__ = ["CheckedRunner", "FailureLog", "PersistentBuilder", "RPCError", "rpc_runner"]
