"""Operator level: extracting a model's kernels as tuning tasks and tuning them into a MetaSchedule database."""
from .tasks import TuneReport, extract_tasks, open_database, tune_model

__all__ = ["TuneReport", "extract_tasks", "open_database", "tune_model"]
