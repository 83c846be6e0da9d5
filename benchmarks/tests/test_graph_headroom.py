"""benchmarks.graphs.headroom and benchmarks/graph_headroom.py on small hand-made ablation JSONs."""
import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks.graphs import headroom
from tvm_rl.graph import defaults

PASS = {"time_budget_s": defaults.TIME_BUDGET_S, "episodes": defaults.EPISODES, "max_steps": defaults.MAX_STEPS,
        "cap": defaults.CAP, "shortlist": defaults.SHORTLIST, "all_matches": True}
PROXY = {"default": {"peak_gflops": 100.0}}


def doc(models: dict, settings: dict | None = None, proxy: dict | None = None, measured: bool = False) -> dict:
    return {"proxy": PROXY if proxy is None else proxy, "measured": measured,
            "settings": dict(PASS if settings is None else settings),
            "models": {m: {"runs": {arm: [{"seed": s, "speedup": v} for s, v in rows] for arm, rows in runs.items()}}
                       for m, runs in models.items()}}


def write(tmp_path: Path, name: str, d: dict) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p


def test_best_of_any_file_against_the_default_in_the_pass_settings(tmp_path):
    main = write(tmp_path, "main.json", doc({
        "a": {"cheapest-first": [(0, 2.0), (1, 2.2)], "uniform": [(0, 1.5)], "trained": [(0, 2.05)]},
        "b": {"cheapest-first": [(0, 1.1)], "greedy": [(None, 1.12)]}}))
    # A longer budget: its cheapest-first runs may be the best, but never the reference.
    steps = write(tmp_path, "steps.json", doc({"a": {"cheapest-first": [(0, 2.6)]}},
                                              settings={**PASS, "time_budget_s": None}))
    rows = headroom.headroom(headroom.load([main, steps]))
    assert rows["a"]["default"] == pytest.approx(2.1) and rows["a"]["default_runs"] == 2
    assert rows["a"]["best"].speedup == 2.6 and rows["a"]["best"].source == str(steps)
    assert rows["a"]["best_rule"].speedup == 2.6 and rows["a"]["best_learned"].arm == "trained"
    assert rows["a"]["headroom"] == pytest.approx(2.6 / 2.1)
    assert rows["b"]["best"].arm == "greedy" and rows["b"]["best"].seed is None
    assert rows["b"]["best_learned"] is None
    v = headroom.verdict(rows)
    assert v["models_with_room"] == ["a"] and v["room"] is False
    assert headroom.verdict(rows, models=1)["room"] is True
    lines = headroom.table(rows)
    assert lines[2].startswith("| a |") and "steps.json" in lines[2] and "| - |" in lines[3]


def test_a_model_without_the_default_in_the_pass_settings_is_left_out(tmp_path):
    d = doc({"a": {"cheapest-first": [(0, 2.0)]}, "c": {"uniform": [(0, 1.3)]}})
    rows = headroom.headroom(headroom.load([write(tmp_path, "x.json", d)]))
    assert set(rows) == {"a"}
    cap0 = doc({"a": {"cheapest-first": [(0, 2.0)]}}, settings={**PASS, "cap": 0})
    with pytest.raises(headroom.HeadroomError, match="default settings"):
        headroom.headroom(headroom.load([write(tmp_path, "cap0.json", cap0)]))


@pytest.mark.parametrize("bad, match", [
    (doc({}, measured=True), "measured"),
    (doc({}, proxy={"default": {"peak_gflops": 50.0}}), "another proxy"),
    ({"runs": []}, "no \"models\""),
])
def test_load_refuses_what_does_not_pool(tmp_path, bad, match):
    first = write(tmp_path, "first.json", doc({"a": {"cheapest-first": [(0, 2.0)]}}))
    with pytest.raises(headroom.HeadroomError, match=match):
        headroom.load([first, write(tmp_path, "bad.json", bad)])


def test_load_names_an_unreadable_file(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{")
    with pytest.raises(headroom.HeadroomError, match="broken.json"):
        headroom.load([p])
    with pytest.raises(headroom.HeadroomError, match="no ablation JSON"):
        headroom.load([])


def test_the_script_prints_writes_and_fails_cleanly(tmp_path, capsys):
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "graph_headroom.py"
    spec = importlib.util.spec_from_file_location("graph_headroom", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = write(tmp_path, "a.json", doc({"a": {"cheapest-first": [(0, 1.0)], "greedy": [(None, 1.2)]}}))
    out = tmp_path / "h.json"
    assert mod.main([str(src), "--out", str(out)]) == 0
    assert "1 of 1 (a)" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["verdict"]["models_with_room"] == ["a"]
    assert written["models"]["a"]["best"]["arm"] == "greedy"
    assert mod.main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
