"""Where tvm-rl keeps files of its own between runs (never inside the installed package)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$TVM_RL_CACHE`, else `$XDG_CACHE_HOME/tvm-rl`, else `~/.cache/tvm-rl` (created on first write by its users)."""
    own = os.environ.get("TVM_RL_CACHE")
    if own:
        return Path(own).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "tvm-rl"


WORK_DIR_HELP = "$TVM_RL_WORK, else ./tvm_rl_work"


def work_dir() -> Path:
    """Where a command's output goes unless `--work-dir` says otherwise: `$TVM_RL_WORK`, else `./tvm_rl_work`
    (reports, tuning databases, exported libraries, training runs; kept between runs so that tuning resumes)."""
    own = os.environ.get("TVM_RL_WORK")
    return Path(own).expanduser() if own else Path("tvm_rl_work")
