"""MetaSchedule measure callbacks of our own: run after every measured batch, in this order in `tune_workloads`."""
from .after_batch import AfterBatch
from .interrupt import StopOnInterrupt
from .progress import ProgressLine

__all__ = ["AfterBatch", "ProgressLine", "StopOnInterrupt"]
