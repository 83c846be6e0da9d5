"""tvm-rl's own files go to a user cache folder, never into the installed package."""
from pathlib import Path

import tvm_rl
from tvm_rl.graph import cost
from tvm_rl.paths import cache_dir


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TVM_RL_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("TVM_RL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "tvm-rl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "tvm-rl"


def test_kernel_cost_cache_lives_in_the_cache_dir_not_the_package(monkeypatch, tmp_path):
    monkeypatch.delenv("TVM_RL_KERNEL_COST_DIR", raising=False)
    monkeypatch.setenv("TVM_RL_CACHE", str(tmp_path))
    kernels = cost.KernelCostCache("llvm")
    assert kernels.path == tmp_path / "kernel_cost" / "kernels.jsonl"
    package = Path(tvm_rl.__file__).resolve().parent.parent
    assert package not in kernels.path.resolve().parents
    monkeypatch.setenv("TVM_RL_KERNEL_COST_DIR", str(tmp_path / "own"))
    assert cost.KernelCostCache("llvm").path == tmp_path / "own" / "kernels.jsonl"
