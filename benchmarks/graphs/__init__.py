"""The graph benchmarks' library: every arm run as the pass runs it, the room a policy has, proxy audits."""
