"""Tuner benchmark: search arms (MetaSchedule's evolutionary search with the default and the pre-trained cost
model, PPOSearch learning / pre-trained / without updates / top-k, random) from the same measured first batch on
eight conv2d, depthwise and (transformer) batch_matmul tasks; trials to a fixed per-task target and re-timed best
latency, with task-clustered bootstrap CIs against evolutionary search. Writes logs/tuner_<target>.json and a PNG
of the trials-to-target curves. `--quick` is a few-minute check; see `--help` and docs/results/tuner.md.
The machinery is `benchmarks/tuning/`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tuning.benchmark import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="benchmarks/tuner.py"))
