"""benchmarks/tile_probe.py: a kernel's best record beside the same schedule with some knobs changed."""
import json

import pytest
import tvm
from tvm.s_tir import meta_schedule as ms

from benchmarks import tile_probe
from tests.support.kernels import relax_matmul
from tvm_rl.database import TuningDatabase
from tvm_rl.tune import extract_tasks, tune_model
from tvm_rl.tune.design_space import space_generator
from tvm_rl.tune.knob_trace import _norm as norm
from tvm_rl.tune.knobs import TILE, KnobError


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, cpu):
    folder = tmp_path_factory.mktemp("probe")
    mod = relax_matmul()
    (folder / "graph.json").write_text(tvm.ir.save_json(mod))
    tune_model(mod, cpu, folder / "db", trials_per_kernel=2, trials_per_iter=2, strategy="random", cost_model="xgb")
    (task,) = extract_tasks(mod, cpu)
    return folder, task


def test_the_best_record_reads_into_its_knobs_and_a_variant_changes_only_what_it_names(tuned, cpu):
    folder, task = tuned
    mod = task.dispatched[0]
    database = TuningDatabase(folder / "db").open()
    (best,) = database.get_top_k(database.commit_workload(mod), 1)
    context = ms.TuneContext(mod=mod, target=cpu, space_generator=space_generator(cpu, mod=mod),
                             search_strategy=None, task_name="mm", rand_state=0, num_threads=1)
    space, vector = tile_probe.record_space(context, best.trace, "mm")
    sch = space.decode(vector)
    assert sch is not None and _decisions(sch.trace) == _decisions(best.trace)  # the record's own choices
    tile = next(k for k in space.knobs if k.kind == TILE)
    other = next(i for i in range(tile.cardinality) if i != vector[tile.position])
    moved = tile_probe.changed(space, vector, {tile.name: list(tile.values[other])})
    assert moved[tile.position] == other and (moved != vector).sum() == 1
    with pytest.raises(KnobError, match="no knob 'nope'; the space has"):
        tile_probe.changed(space, vector, {"nope": [1]})
    with pytest.raises(KnobError, match="is not a legal tiling"):
        tile_probe.changed(space, vector, {tile.name: [999, 999]})


def test_the_command_measures_every_variant_warm_and_cold_and_rates_it(tuned, tmp_path):
    folder, task = tuned
    out = tmp_path / "probe.json"
    assert tile_probe.main(["--graph", str(folder / "graph.json"), "--database", str(folder / "db"),
                            "--kernel", task.task_name, "--repeats", "1", "--cost-model", "xgb",
                            "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["variant"] == "best" and row["warm_ms"] > 0 and row["cold_ms"] > 0
    with pytest.raises(SystemExit, match="no kernel nope"):
        tile_probe.main(["--graph", str(folder / "graph.json"), "--database", str(folder / "db"), "--kernel", "nope"])
    with pytest.raises(SystemExit, match="LABEL=JSON"):
        tile_probe.parse_variant("{}")


def _decisions(trace) -> list:
    return [norm(trace.decisions[i]) for i in trace.insts if i.kind.name.startswith("Sample")]
