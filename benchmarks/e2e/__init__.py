"""The end-to-end tuner benchmark (`python benchmarks/tuner_e2e.py`): whole zoo models tuned by each search arm,
built and timed (`run`), its tables and plot (`table`) and every run's records archived beside its JSON
(`archive`)."""
