"""The lab beside the package: benchmark scripts (`python benchmarks/<name>.py` or `python -m benchmarks.<name>`) and
the machinery they share. `tvm_rl` never imports it (tests/flow/test_architecture.py checks)."""
