"""End-to-end tuner benchmark: every kernel of ResNet-18, MobileNet-V2 and BERT tuned by PPOSearch and by
MetaSchedule's evolutionary search at 32 and 64 trials per kernel (each run in its own database), the models built
and timed interleaved beside TVM's default build, PyTorch eager and ONNX Runtime. Writes
logs/tuner_e2e_<target>.json (resumable) and a PNG. `--size tiny --op-filter conv2d10 --trials 2` is a quick check;
see `--help` and docs/results/tuner.md ("End to end"). The machinery is `benchmarks/e2e/`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.e2e.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="benchmarks/tuner_e2e.py"))
