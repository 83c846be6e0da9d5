"""Run a tutorial and write its rendered Markdown beside it: the text, the code, what it printed, its plots.

`python tutorials/render.py tutorials/graph_pass.py [ARGS...]` runs `python tutorials/graph_pass.py ARGS`,
then writes `tutorials/graph_pass.md`. A tutorial's module docstring is its prose (Markdown); lines it prints
as `figure: PATH` become images. The command and the wall time go into the page, so every number in it comes
from a command written next to it.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render(script: Path, args: list[str]) -> Path:
    source = script.read_text()
    tree = ast.parse(source)
    prose = ast.get_docstring(tree) or ""
    body = "\n".join(source.splitlines()[tree.body[0].end_lineno:]).strip() if prose else source
    command = " ".join(["python", str(script.resolve().relative_to(ROOT)), *args])
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True)
    minutes = (time.perf_counter() - start) / 60
    if run.returncode:
        sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
        raise SystemExit(f"{command} failed with exit code {run.returncode}; nothing rendered")
    printed, figures = [], []
    for line in run.stdout.splitlines():
        if line.startswith("figure: "):
            figures.append(Path(line[len("figure: "):].strip()).resolve())
        else:
            printed.append(line)
    page = script.with_suffix(".md")
    # The page's plots are copied beside it, so it shows them wherever the run wrote its files.
    shown = []
    for f in figures:
        kept = script.parent / "figures" / f"{script.stem}_{f.name}" if not f.name.startswith(script.stem) \
            else script.parent / "figures" / f.name
        kept.parent.mkdir(exist_ok=True)
        if f != kept.resolve():
            shutil.copyfile(f, kept)
        shown.append(kept)
    images = "\n".join(f"![{f.stem}]({_rel(f, page.parent)})" for f in shown)
    # The core count of the machine that made the page, so its timing reads in context wherever it was run.
    page.write_text(f"{prose}\n\n## Run it\n\n```\n{command}\n```\n\nThis run took {minutes:.1f} min on a "
                    f"{os.cpu_count()}-core CPU.\n\n## The code\n\n```python\n{body}\n```\n\n"
                    "## What it printed\n\n```\n"
                    + "\n".join(printed).strip() + "\n```\n" + (f"\n{images}\n" if images else ""))
    return page


def _rel(path: Path, start: Path) -> str:
    import os

    return os.path.relpath(path, start)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print(f"wrote {render(Path(sys.argv[1]), sys.argv[2:])}")
