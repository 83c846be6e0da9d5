"""`tvm-rl library`: build a schedule library from tuning databases, or say what one holds."""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ..database import TuningDatabase
from .library import ScheduleLibrary, build_library

SHOWN_KINDS = 12  # `show` lists the kinds of kernel with the most schedules, up to this many


def main(argv: list[str] | None = None, prog: str = "tvm-rl library") -> int:
    ap = argparse.ArgumentParser(
        prog=prog, description="A schedule library: the best schedules of tuning databases, which `tvm-rl tune` and "
        "`tvm-rl optimize --library FILE` start from (exact kernels applied unmeasured on the same target, the "
        "same kind of kernel at other shapes measured first).",
        epilog="examples:\n  tvm-rl library build tvm_rl_work/tuning/llvm --out my_cpu.jsonl.gz\n"
               "  tvm-rl library build runs/ --out my_cpu.jsonl.gz --top 8   # every database under runs/\n"
               "  tvm-rl library build new_run/ my_cpu.jsonl.gz --out my_cpu.jsonl.gz   # add a run to a library\n"
               "  tvm-rl library show my_cpu.jsonl.gz",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="keep the best schedules of each workload of tuning databases")
    build.add_argument("sources", nargs="+", help="tuning database folders, folders to search for them, or library "
                       "files to merge (the library grows: the best of all of them is kept)")
    build.add_argument("--out", required=True, help="the library file to write (gzip'd JSON lines)")
    build.add_argument("--top", type=int, default=4, help="schedules kept per workload and target (default 4)")
    show = sub.add_parser("show", help="what a library holds: workloads, kinds of kernel, targets")
    show.add_argument("library", help="a library file")
    args = ap.parse_args(argv)
    if args.action == "build":
        folders, libraries = [], []
        for source in args.sources:
            if Path(source).is_file():
                libraries.append(ScheduleLibrary(source))  # LibraryError (exit 2) names a file that is not one
                continue
            found = TuningDatabase.find_under(source)
            if not found:
                ap.error(f"no tuning database in {source} (a folder with database_tuning_record.json, or a library "
                         "file)")
            folders += found
        library = build_library(folders, args.out, top=args.top, libraries=libraries)
        print(f"{library.path}: {len(library)} schedules of {len(library.workloads())} workloads from "
              f"{len(folders)} database(s)" + (f" and {len(libraries)} library file(s)" if libraries else ""))
        return 0
    library = ScheduleLibrary(args.library)
    print(repr(library))
    for target, n in Counter(e.target for e in library.entries).most_common():
        print(f"  target {target}: {n} schedules")
    kinds = Counter(e.kind for e in library.entries).most_common()
    for kind, n in kinds[:SHOWN_KINDS]:
        name = "+".join(kind)
        print(f"  kind {name if len(name) <= 64 else name[:61] + '...'}: {n} schedules")
    if len(kinds) > SHOWN_KINDS:
        print(f"  ... and {len(kinds) - SHOWN_KINDS} more kinds of kernel")
    return 0
