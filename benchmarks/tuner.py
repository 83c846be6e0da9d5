"""Tuner benchmark: PPOSearch (with and without adaptive sampling), EvolutionarySearch, SimulatedAnnealing and
random on fixed TopHub tasks; prints a table, writes logs/tuner_<target>.json and a PNG of the curves.
`--quick` is a few-minute check; see `--help` for the sizes."""
import sys

from tvm_rl.tune.benchmark import main

if __name__ == "__main__":
    sys.exit(main(prog="benchmarks/tuner.py"))
