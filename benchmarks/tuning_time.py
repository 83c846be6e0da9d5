"""Where a tuning run's minutes go: searching, measuring, and searches that measured nothing.

    python -m benchmarks.tuning_time --runs RUN_FOLDER [RUN_FOLDER ...] [--out FILE.json]
    python -m benchmarks.tuning_time --profile GRAPH.json --kernels NAME[,NAME...] [--population 512]

`--runs` reads MetaSchedule's per-task logs of finished tuning runs (`<run>/ms_logs/*/...task_<i>_<name>.log`, which
`tune_workloads` writes): for each search round, the seconds from "Generating candidates" to "Sending ... for
measurement" (the evolutionary search), from there to the batch's last trial line (building and running the
candidates), and whether any trial followed (a round whose candidates were all dropped as already measured, as
`SkipMeasured` does in a resumed run, is searched again: its seconds bought nothing). The logs' clocks have
one-second resolution, so single rounds are rough and the sums are what to read.

`--profile` runs one evolutionary search round (as `tune_workloads` searches by default, the shipped cost model,
an empty database) for each named kernel of a graph (a `graph.json` a benchmark run kept) under MetaSchedule's
Profiler and prints its time per stage (sampling, mutation, the cost model's ratings).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import time
from pathlib import Path
from typing import Any

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def rounds_of_log(lines: list[str]) -> list[dict[str, Any]]:
    """One task log's search rounds: {"search_s", "measure_s", "trials"} each (measure_s None without trials)."""
    out: list[dict[str, Any]] = []
    generating = sending = last = None
    trials = 0

    def close() -> None:
        if generating is not None and sending is not None:
            out.append({"search_s": (sending - generating).total_seconds(), "trials": trials,
                        "measure_s": (last - sending).total_seconds() if last is not None else None})

    for line in lines:
        match = STAMP.match(line)
        if not match:
            continue
        when = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
        if "Generating candidates" in line:
            close()
            generating, sending, last, trials = when, None, None, 0
        elif "for measurement" in line and generating is not None:
            sending = when
        elif "Trial #" in line and sending is not None:
            last, trials = when, trials + 1
    close()
    return out


def run_summary(folder: Path) -> dict[str, Any]:
    """Search, measurement and wasted-search seconds of one run folder's task logs."""
    logs = sorted(folder.glob("ms_logs/*/*task_[0-9]*.log"))
    if not logs:
        raise SystemExit(f"{folder}: no MetaSchedule task logs under ms_logs/ (is it a tuning run's folder?)")
    rounds = [r for log in logs for r in rounds_of_log(log.read_text(errors="replace").splitlines())]
    wasted = [r for r in rounds if not r["trials"]]
    search = sum(r["search_s"] for r in rounds)
    measure = sum(r["measure_s"] or 0.0 for r in rounds)
    return {"run": str(folder), "rounds": len(rounds), "wasted_rounds": len(wasted),
            "trials": sum(r["trials"] for r in rounds), "search_s": search, "measure_s": measure,
            "wasted_search_s": sum(r["search_s"] for r in wasted),
            "search_share": search / (search + measure) if search + measure else None}


def profile_search(graph: Path, kernels: list[str], population: int) -> dict[str, dict[str, float]]:
    """MetaSchedule Profiler's seconds per stage of one search round for each of `kernels` of `graph`."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tvm_rl.measure import parse_target
    from tvm_rl.tune import design_space
    from tvm_rl.tune.cost_model import from_spec
    from tvm_rl.tune.search_strategy import evolutionary
    from tvm_rl.tune.tasks import model_workloads

    target = parse_target("llvm")
    workloads = {name: mod for name, mod, _ in model_workloads(tvm.ir.load_json(graph.read_text()), target)}
    missing = [k for k in kernels if k not in workloads]
    if missing:
        raise SystemExit(f"{graph} has no kernel(s) {', '.join(missing)}; it has {', '.join(sorted(workloads))}")
    model = from_spec("xgb-pretrained", 0, "llvm")
    out = {}
    for name in kernels:
        mod = workloads[name]
        context = ms.TuneContext(mod=mod, target=target, space_generator=design_space.space_generator(target, mod=mod),
                                 search_strategy=evolutionary(0, population=population), task_name=name,
                                 num_threads="physical", rand_state=1).clone()
        spaces = context.space_generator.generate_design_space(context.mod)
        context.search_strategy.pre_tuning(64, 8, spaces, ms.database.MemoryDatabase(), model)
        with ms.Profiler() as profiler:
            start = time.perf_counter()
            context.search_strategy.generate_measure_candidates()
            total = time.perf_counter() - start
        context.search_strategy.post_tuning()
        stages = {k: float(v) for k, v in profiler.get().items() if k.startswith("EvoSearch/")}
        out[name] = {"round_s": total, **stages}
        print(f"{name}: {total:.1f} s; " + ", ".join(f"{k.removeprefix('EvoSearch/')} {v:.1f} s"
                                                     for k, v in sorted(stages.items(), key=lambda kv: -kv[1])
                                                     if v >= 0.05), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, default=[], help="tuning run folders (with ms_logs/)")
    p.add_argument("--profile", type=Path, default=None, metavar="GRAPH", help="a graph.json to profile a search in")
    p.add_argument("--kernels", default="", help="comma-separated kernel (task) names of --profile's graph")
    p.add_argument("--population", type=int, default=512)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not args.runs and args.profile is None:
        p.error("give --runs and/or --profile")
    result: dict[str, Any] = {"runs": [run_summary(folder) for folder in args.runs]}
    if result["runs"]:
        print("| run | rounds | wasted | trials | search s | measure s | search share | wasted search s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in result["runs"]:
            run = Path(r["run"])
            print(f"| {run.parent.name}/{run.name} | {r['rounds']} | {r['wasted_rounds']} | {r['trials']} | "
                  f"{r['search_s']:.0f} | {r['measure_s']:.0f} | {r['search_share']:.0%} | "
                  f"{r['wasted_search_s']:.0f} |")
    if args.profile is not None:
        kernels = [k for k in args.kernels.split(",") if k]
        if not kernels:
            p.error("--profile needs --kernels")
        result["profile"] = {"graph": str(args.profile), "population": args.population,
                             "kernels": profile_search(args.profile, kernels, args.population)}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
