"""Fast math benchmark: each model built exactly and with tvm_rl.fast_math.FastMath(), both tuned into one database,
outputs checked, timed in interleaved rounds. `python benchmarks/fast_math.py --help`; the logic lives in
tvm_rl/fast_math_bench.py and the results in docs/results/fast_math.md."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm_rl.fast_math_bench import main  # noqa: E402

if __name__ == "__main__":
    main()
