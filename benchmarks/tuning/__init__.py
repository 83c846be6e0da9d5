"""The tuner benchmark's machinery (`python benchmarks/tuner.py`): its tasks and arms (`arms`), the measuring and
re-timing of its runs (`runs`), their statistics (`stats`), tables and plots (`report`), the records archived beside
its JSON (`archive`) and the reading pooled over CPUs (`pool`); `benchmark.main` is the script."""
