"""The tuner benchmark pooled over CPUs: one reading from several of its JSONs, each measured on its own machine.

A long run of `benchmarks/tuner.py` resumes only on the CPU it began on (its targets and ratios compare latencies
across runs), and a machine that runs it may never come back. So each CPU's JSON is a block of the same design:
runs paired by task and seed inside it, each (task, CPU) with its own target from its own re-timing. Pooling keeps
all of that within a block (`stats` sees the task as "task@cpu") and only the bootstrap crosses blocks: it
resamples tasks, each holding its pairs from every CPU, since one kernel measured on two CPUs is one task drawn.

A block joins at a budget N when its runs measured at least N trials; only re-timed runs count. Blocks must share
the shared batch's size and the measuring settings. Reads JSON only: seconds, no TVM.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import jsonfile

from .report import format_pairs, format_table, plot_paired
from .stats import BASELINE, BLOCK_SEP, ablation_pairs, summarise

# What a pooled block must share with the others: results measured otherwise are not the same experiment.
SHARED_SETTINGS = ("per_iter", "measuring")


@dataclass
class Block:
    """One benchmark JSON: where it came from, the CPU it names its tasks by, its settings and re-timed runs."""

    path: Path
    label: str
    settings: dict[str, Any]
    runs: list[dict[str, Any]]
    unretimed: int

    @property
    def run_trials(self) -> int:
        return int(self.settings["run_trials"])


def _cpu(target: str) -> str:
    """The CPU a target JSON string names (its -mcpu, else its kind)."""
    try:
        spec = json.loads(target)
    except (TypeError, ValueError):
        return str(target)
    return str(spec.get("mcpu") or spec.get("arch") or spec.get("kind", "?"))


def load_block(path: str | Path) -> Block:
    """A benchmark JSON as a block; ValueError naming the file when it is not one, or has no re-timed run."""
    path = Path(path)
    if not jsonfile.exists(path):
        raise ValueError(f"{path}: no such benchmark JSON")
    try:
        state = jsonfile.read_json(path)
    except ValueError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    settings = state.get("settings") if isinstance(state, dict) else None
    if not settings or "run_trials" not in settings or "runs" not in state:
        raise ValueError(f"{path}: not a result of benchmarks/tuner.py (version 2)")
    runs = [r for r in state["runs"] if "tuning_seconds" in r and r.get("retimed") is not None]
    unretimed = len(state["runs"]) - len(runs)
    if not runs:
        raise ValueError(f"{path}: none of its {len(state['runs'])} runs is re-timed; re-time them with its own "
                         f"command and --report, on the CPU they were measured on ({_cpu(settings['target'])})")
    return Block(path, _cpu(settings["target"]), settings, runs, unretimed)


def check_blocks(blocks: list[Block]) -> None:
    """ValueError naming the files and the setting when blocks were measured differently."""
    first = blocks[0]
    for block in blocks[1:]:
        for key in SHARED_SETTINGS:
            if block.settings.get(key) != first.settings.get(key):
                raise ValueError(f"{block.path} and {first.path} differ in {key} ({block.settings.get(key)} against "
                                 f"{first.settings.get(key)}): their runs cannot be pooled")


def label_blocks(blocks: list[Block]) -> None:
    """Give two blocks of the same CPU distinct labels (the CPU, then the file's stem)."""
    seen: dict[str, int] = {}
    for block in blocks:
        seen[block.label] = seen.get(block.label, 0) + 1
    for block in blocks:
        if seen[block.label] > 1:
            block.label = f"{block.label}:{block.path.stem}"


def pooled_runs(blocks: list[Block], trials: int) -> list[dict[str, Any]]:
    """The runs of every block that measured at least `trials`, each task named "task@cpu"; the baseline arm's
    first, so that tables list it first whichever block holds it."""
    runs = [{**run, "task": f"{run['task']}{BLOCK_SEP}{block.label}"}
            for block in blocks if block.run_trials >= trials for run in block.runs]
    return sorted(runs, key=lambda r: r["arm"] != BASELINE)


def budgets(blocks: list[Block]) -> list[int]:
    """Every budget any block reports."""
    return sorted({int(n) for b in blocks for n in b.settings.get("trials", [b.run_trials])})


def load_blocks(paths: list[str | Path]) -> list[Block]:
    """The blocks of `paths`, checked against each other and labelled; ValueError naming what is wrong."""
    if not paths:
        raise ValueError("give at least one benchmark JSON to pool")
    blocks = [load_block(p) for p in paths]
    check_blocks(blocks)
    label_blocks(blocks)
    return blocks


def pool(blocks: list[Block], trials: list[int] | None = None, n_boot: int = 2000) -> dict[str, Any]:
    """The pooled reading: per budget the summary rows and ablation pairs (as `stats` gives them for one file)
    over the blocks that reach it, and what each block holds."""
    out: dict[str, Any] = {"blocks": [], "readings": []}
    for block in blocks:
        arms: dict[str, int] = {}
        for run in block.runs:
            arms[run["arm"]] = arms.get(run["arm"], 0) + 1
        out["blocks"].append({"path": str(block.path), "cpu": block.label, "run_trials": block.run_trials,
                              "seeds": sorted({r["seed"] for r in block.runs}), "runs_by_arm": arms,
                              "unretimed_runs": block.unretimed})
    for n in trials or budgets(blocks):
        runs = pooled_runs(blocks, n)
        if not runs:
            continue
        out["readings"].append({"trials": n, "cpus": sorted({b.label for b in blocks if b.run_trials >= n}),
                                "summary": summarise(runs, [n], n_boot=n_boot),
                                "pairs": ablation_pairs(runs, n, n_boot=n_boot)})
    return out


def format_blocks(reading: dict[str, Any]) -> str:
    """What each pooled block holds, as a markdown table."""
    lines = ["| file | CPU | trials per run | seeds | re-timed runs by arm | not re-timed (left out) |",
             "|---|---|---|---|---|---|"]
    for b in reading["blocks"]:
        arms = ", ".join(f"{a} {n}" for a, n in b["runs_by_arm"].items())
        lines.append(f"| {b['path']} | {b['cpu']} | {b['run_trials']} | {len(b['seeds'])} | {arms} | "
                     f"{b['unretimed_runs']} |")
    return "\n".join(lines)


def report(paths: list[str | Path], out: Path, trials: list[int] | None = None) -> str:
    """Pool `paths`, write the reading to `out` (JSON) with a paired best-so-far plot per budget beside it, and return
    the tables as markdown."""
    blocks = load_blocks(paths)
    reading = pool(blocks, trials)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(reading, indent=1))
    text = ["Pooled blocks (pairs, targets and re-timing stay within a CPU; the bootstrap resamples tasks):", "",
            format_blocks(reading)]
    for r in reading["readings"]:
        n = r["trials"]
        text += ["", f"## N = {n}, pooled over {', '.join(r['cpus'])}", "", format_table(r["summary"], [n]),
                 f"ablation pairs at N = {n}, same CPU, task and seed:", "", format_pairs(r["pairs"])]
        png = out.with_name(f"{out.stem}_n{n}_paired.png")
        if plot_paired(pooled_runs(blocks, n), n, png, shared=int(blocks[0].settings["per_iter"])):
            text.append(f"\n(plot: {png})")
    text.append(f"\nwrote {out}")
    return "\n".join(text)


__all__ = ["Block", "budgets", "check_blocks", "format_blocks", "label_blocks", "load_block", "load_blocks", "pool",
           "pooled_runs", "report"]
