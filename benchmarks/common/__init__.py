"""What several benchmarks share: gzip'd JSON-lines archives (`jsonl_gz`)."""
