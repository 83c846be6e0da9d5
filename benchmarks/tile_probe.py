"""A kernel's best tuned schedule beside the same schedule with some decisions changed: measured warm and cold, and
rated by the cost model, to tell whether the design space or the search stops a kernel short.

    python -m benchmarks.tile_probe --graph RUN/graph.json --database RUN --kernel fused_conv2d10_add7_relu31 \
        --variant 'rows-inside={"tile:conv2d_nhwc.yy": [1, 1, 7, 1], "tile:conv2d_nhwc.ff": [16, 1, 1, 32]}' \
        --repeats 3 --out logs/tile_probe_resnet18_llvm.json

The kernel is the graph's task of that name (`extract_tasks`), its best record the folder's; its decisions are read
into the knobs of `design_space.space_generator`'s space (`tune.knobs.KnobSpace`), each `--variant` (a label = a
JSON object of knob name -> value: a tile's factors, a categorical's index) changes some of them, and every
schedule is built once and measured `--repeats` times by MetaSchedule's LocalRunner with its defaults ("warm")
and by `tune.runner.cold_runner` ("cold"), interleaved, and rated by `--cost-model`. Prints the knobs and a table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_rl import measure
from tvm_rl.database import TuningDatabase, record_seconds
from tvm_rl.tune import extract_tasks
from tvm_rl.tune.cost_model import from_spec
from tvm_rl.tune.design_space import space_generator
from tvm_rl.tune.knob_trace import plain_literal as norm  # a decision as plain ints (a tile as a tuple)
from tvm_rl.tune.knobs import TILE, KnobError, KnobSpace, to_candidate
from tvm_rl.tune.runner import cold_runner
from tvm_rl.tune.tasks import shared_builder


def record_vector(space: KnobSpace, trace) -> np.ndarray:
    """`trace`'s decisions as `space`'s knob vector. A trace of an older build of the same space (an instruction
    more or less outside the sampling ones) is read sampling instruction by sampling instruction; KnobError where
    its decisions do not fit."""
    try:
        return space.encode(trace)
    except KnobError:
        pass
    ours = [(i, inst) for i, inst in enumerate(space.insts) if inst.kind.name.startswith("Sample")]
    theirs = [inst for inst in trace.insts if inst.kind.name.startswith("Sample")]
    if [inst.kind.name for _, inst in ours] != [inst.kind.name for inst in theirs]:
        raise KnobError("the record samples other decisions than this design space")
    vec = space.random(np.random.default_rng(0))
    knobs = {k.inst_index: k for k in space.knobs}
    locations = []
    for (index, _), inst in zip(ours, theirs):
        knob, decision = knobs.get(index), norm(trace.decisions[inst])
        if knob is None:
            continue
        if knob.kind == TILE:
            if decision not in knob.values:
                raise KnobError(f"{knob.name}: the record's tiling {decision} is not a legal value")
            vec[knob.position] = knob.values.index(decision)
        elif knob.kind == "categorical":
            vec[knob.position] = decision
        else:
            locations.append((knob, decision))
    for knob, decision in locations:  # a location's rank depends on the tiling, set above
        vec[knob.position] = _location_rank(space, vec, knob, decision)
    return vec


def _location_rank(space: KnobSpace, vec: np.ndarray, knob, decision: int) -> int:
    for rank in range(knob.cardinality):
        vec[knob.position] = rank
        sch = space.decode(vec)
        if sch is not None and decision in [norm(sch.trace.decisions[i]) for i in sch.trace.insts
                                            if i.kind.name == "SampleComputeLocation"]:
            return rank
    raise KnobError(f"{knob.name}: no rank gives the record's compute location {decision}")


def record_space(context: ms.TuneContext, trace, name: str) -> tuple[KnobSpace, np.ndarray]:
    """The knob space of `context`'s design spaces that `trace` belongs to, and its vector there."""
    for candidate in context.generate_design_space():
        try:
            space = KnobSpace(candidate, context)
            return space, record_vector(space, trace)
        except KnobError:
            continue
    raise SystemExit(f"the best record of {name} is in none of the design space's structures")


def changed(space: KnobSpace, vec: np.ndarray, change: dict) -> np.ndarray:
    """`vec` with the knobs `change` names set (a tile's factors, a categorical's index); KnobError if a name or
    value is not the space's."""
    by_name = {k.name: k for k in space.knobs}
    out = vec.copy()
    for name, value in change.items():
        knob = by_name.get(name)
        if knob is None:
            raise KnobError(f"no knob {name!r}; the space has {', '.join(by_name)}")
        if knob.kind == TILE:
            if norm(value) not in knob.values:
                raise KnobError(f"{name}: {value} is not a legal tiling (e.g. {list(knob.values[:4])})")
            out[knob.position] = knob.values.index(norm(value))
        elif knob.kind == "categorical" and 0 <= int(value) < knob.cardinality:
            out[knob.position] = int(value)
        else:
            raise KnobError(f"{name}: {value} is not one of its {knob.cardinality} values")
    return out


def parse_variant(text: str) -> tuple[str, dict]:
    label, sep, body = text.partition("=")
    if not sep or not label:
        raise SystemExit(f"--variant takes LABEL=JSON, got {text!r}")
    return label, json.loads(body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", required=True, help="the module the folder was tuned for (a budget run's graph.json)")
    ap.add_argument("--database", required=True, help="the tuning folder")
    ap.add_argument("--kernel", required=True, help="the task name of the kernel")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cost-model", default="xgb-pretrained")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    target = measure.parse_target("llvm")
    tasks = {t.task_name: t for t in extract_tasks(tvm.ir.load_json(Path(args.graph).read_text()), target)}
    if args.kernel not in tasks:
        raise SystemExit(f"no kernel {args.kernel} in {args.graph}; it has {', '.join(sorted(tasks))}")
    mod = tasks[args.kernel].dispatched[0]
    database = TuningDatabase(args.database).open()
    top = database.get_top_k(database.commit_workload(mod), 1)
    if not top:
        raise SystemExit(f"{args.database} holds no record of {args.kernel}")
    context = ms.TuneContext(mod=mod, target=target, space_generator=space_generator(target, mod=mod),
                             search_strategy=None, task_name=args.kernel, rand_state=0, num_threads=1)
    space, vector = record_space(context, top[0].trace, args.kernel)
    print(f"{args.kernel}: best record {(record_seconds(top[0].run_secs) or 0) * 1e3:.3f} ms when tuned; its knobs:")
    knobs = {k.name: str(k.values[vector[k.position]]) if k.kind != "compute_location"
             else f"rank {vector[k.position]}" for k in space.knobs}
    for name, value in knobs.items():
        print(f"  {name} = {value}")
    labels, candidates = [], []
    for label, change in [("best", {})] + [parse_variant(v) for v in args.variant]:
        sch = space.decode(changed(space, vector, change))
        if sch is None:
            raise SystemExit(f"{label}: {space.last_error}")
        labels.append(label)
        candidates.append(to_candidate(sch))
    model = from_spec(args.cost_model, 0, "llvm")
    if not isinstance(model, ms.CostModel):  # a name MetaSchedule makes itself: made as tune_tasks would
        model = ms.CostModel.create(model, num_tuning_cores=1)
    ratings = [float(r) for r in model.predict(context, candidates)]
    built = shared_builder().build([ms.builder.BuilderInput(c.sch.mod, target) for c in candidates])
    for label, b in zip(labels, built):
        if b.error_msg:
            raise SystemExit(f"{label} does not build: {b.error_msg[-500:]}")
    runners = {"warm": ms.runner.LocalRunner(), "cold": cold_runner(target)}
    times: dict[str, dict[str, list[float]]] = {label: {name: [] for name in runners} for label in labels}
    for _ in range(args.repeats):
        for name, runner in runners.items():
            results = runner.run([ms.runner.RunnerInput(b.artifact_path, "cpu", c.args_info)
                                  for b, c in zip(built, candidates)])
            for label, future in zip(labels, results):
                result = future.result()
                seconds = record_seconds(result.run_secs) if result.error_msg is None else None
                times[label][name].append(seconds * 1e3 if seconds is not None else float("nan"))
    rows = [{"variant": label, "rating": rating, **{f"{n}_ms": statistics.median(t) for n, t in times[label].items()},
             "times_ms": times[label]} for label, rating in zip(labels, ratings)]
    print(f"{'variant':24s}{'rating':>8s}{'warm ms':>9s}{'cold ms':>9s}{'best/it warm':>14s}{'cold':>7s}")
    for r in rows:
        print(f"{r['variant']:24s}{r['rating']:8.3f}{r['warm_ms']:9.3f}{r['cold_ms']:9.3f}"
              f"{rows[0]['warm_ms'] / r['warm_ms']:13.2f}x{rows[0]['cold_ms'] / r['cold_ms']:6.2f}x")
    if args.out:
        command = ["python -m benchmarks.tile_probe", *(argv if argv is not None else sys.argv[1:])]
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"kernel": args.kernel, "graph": args.graph, "database": args.database,
                                              "target": str(target), "command": " ".join(command),
                                              "knobs": knobs,
                                              "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
