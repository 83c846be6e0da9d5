"""The transfer benchmark's data: every measured record of some tuning databases, one `WorkloadFeatures` per
distinct kernel (by structural hash, records of all runs merged in the order the databases are given), each
labelled with the models whose runs measured it, so that a fold can hold out a whole model.

A database's model is the folder name above its run folder (`.../<model>/<arm>_n<N>_s<seed>`, as
`benchmarks/tuner_e2e.py` lays them out), or the database folder's own parent name otherwise. Features are
PerStoreFeature's, as the tuner's cost model computes them, cached in one pickle beside the run (keyed by the
databases' record counts), since extracting them replays every trace.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tvm_rl.database import FAILED_SECONDS, TuningDatabase, record_seconds
from tvm_rl.tune.cost_model.features import WorkloadFeatures, extract_features
from tvm_rl.tune.library import kind_of

RUN_FOLDER = re.compile(r".+_n\d+_s\d+$")


@dataclass
class Kernel:
    """One distinct kernel: its features and seconds (in `data`), a readable name and the models that ran it."""

    data: WorkloadFeatures
    models: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.data.name


def model_of(db: TuningDatabase) -> str:
    """The model a run's database belongs to (see the module docstring)."""
    path = Path(db.path)
    return path.parent.name if RUN_FOLDER.match(path.name) else path.parent.name or path.name


def find_databases(roots: Sequence[str | Path], skip: Sequence[str] = ()) -> list[TuningDatabase]:
    """Every tuning database under `roots`, minus those whose path contains one of `skip`."""
    out = []
    for root in roots:
        found = TuningDatabase.find_under(root) if Path(root).is_dir() else []
        if not found:
            raise SystemExit(f"{root}: no tuning database (database_workload.json) under it")
        out += [db for db in found if not any(s in str(db.path) for s in skip)]
    return out


def _read(databases: Sequence[TuningDatabase]):
    """{structural hash: (mod, target, [records], [seconds], models)} over all databases, in the given order."""
    from tvm.s_tir import meta_schedule as ms

    kernels: dict[str, list] = {}
    for db in databases:
        workloads = [json.loads(line) for line in db.workloads_path.read_text().splitlines() if line.strip()]
        parsed: dict[int, ms.database.Workload] = {}
        model = model_of(db)
        for line in db.records_path.read_text().splitlines() if db.records_path.is_file() else []:
            if not line.strip():
                continue
            index, entry = json.loads(line)
            key = workloads[index][0]
            if index not in parsed:
                parsed[index] = ms.database.Workload.from_json(workloads[index])
            record = ms.database.TuningRecord.from_json(entry, parsed[index])
            secs = record_seconds(entry[1])
            item = kernels.setdefault(key, [parsed[index].mod, record.target, [], [], set()])
            item[2].append(record)
            item[3].append(FAILED_SECONDS if secs is None else secs)
            item[4].add(model)
    return kernels


def _signature(databases: Sequence[TuningDatabase]) -> str:
    text = "\n".join(f"{db.path}:{db.record_count()}" for db in databases)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def load_kernels(databases: Sequence[TuningDatabase], cache_dir: str | Path | None = None,
                 write=print) -> list[Kernel]:
    """The databases' kernels with their features (from `cache_dir` when the same databases hold the same
    record counts)."""
    cache = Path(cache_dir) / f"kernels_{_signature(databases)}.pkl" if cache_dir else None
    if cache is not None and cache.is_file():
        with cache.open("rb") as f:
            return pickle.load(f)
    from tvm.s_tir import meta_schedule as ms

    from tvm_rl.tune.intrin import preload_tensor_intrinsics

    preload_tensor_intrinsics()
    extractor = ms.feature_extractor.PerStoreFeature()
    out = []
    for n, (key, (mod, target, records, seconds, models)) in enumerate(_read(databases).items()):
        context = ms.TuneContext(mod=mod, target=target, task_name=key)
        features = extract_features(context, [r.as_measure_candidate() for r in records], extractor)
        name = f"{'+'.join(kind_of(mod))[:48]}#{key[-6:]}"
        out.append(Kernel(WorkloadFeatures(name, features, np.array(seconds), key), set(models)))
        write(f"  [{n + 1}] features of {name}: {len(records)} records ({', '.join(sorted(models))})")
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.open("wb") as f:
            pickle.dump(out, f)
    return out
