"""Training a cost model on records measured before this run, as if it had measured them itself.

MetaSchedule's tuning loop trains its cost model only on what the loop measures, so a resumed run, or a run that
starts from a shared batch, would search with a model that has forgotten the records already in its database."""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

from tvm.s_tir import meta_schedule as ms

from ...database import record_seconds


def warm(model: ms.CostModel, context: ms.TuneContext, records: Sequence[ms.database.TuningRecord]) -> None:
    """Update `model` with one task's `records` (failed candidates as failures, as the loop reports them)."""
    if not records:
        return
    results = []
    for r in records:
        ok = record_seconds(r.run_secs) is not None
        results.append(ms.runner.RunnerResult(list(r.run_secs) if ok else None, None if ok else "failed"))
    model.update(context, [r.as_measure_candidate() for r in records], results)


def warm_tasks(model: ms.CostModel, tasks: Iterable[tuple[ms.TuneContext, Sequence[ms.database.TuningRecord]]]) -> None:
    """`warm` for each (context, records) of `tasks`; a model that can defer its refit (`PretrainedXGBModel`) is
    refit once at the end rather than after every task."""
    defer = getattr(model, "deferred_refit", None)
    with defer() if defer is not None else contextlib.nullcontext():
        for context, records in tasks:
            warm(model, context, records)
