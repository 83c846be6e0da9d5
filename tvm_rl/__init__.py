"""tvm-rl."""
