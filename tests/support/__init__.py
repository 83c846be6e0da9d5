"""Test support: example graphs, the rule fuzzer and the held-out models (imported as `tests.support.<module>`)."""
