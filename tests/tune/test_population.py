"""Evolutionary search's population: MetaSchedule's 512 unless $TVM_RL_POPULATION says otherwise."""
import pytest

from tvm_rl.errors import TvmRlError
from tvm_rl.tune import search_strategy
from tvm_rl.tune.search_strategy.evolutionary import default_population


def test_the_default_population_is_metaschedules_and_the_variable_overrides_it(monkeypatch):
    monkeypatch.delenv("TVM_RL_POPULATION", raising=False)
    assert default_population() == 512
    assert search_strategy.create("evolutionary").population_size == 512
    monkeypatch.setenv("TVM_RL_POPULATION", "96")
    assert search_strategy.create(None).population_size == 96
    assert search_strategy.evolutionary(population=32).population_size == 32


@pytest.mark.parametrize("text", ["many", "1", "-4"])
def test_a_bad_population_names_the_variable(monkeypatch, text):
    monkeypatch.setenv("TVM_RL_POPULATION", text)
    with pytest.raises(TvmRlError, match=r"\$TVM_RL_POPULATION .*" + text):
        search_strategy.create("evolutionary")
    with pytest.raises(TvmRlError, match="at least 2"):
        search_strategy.evolutionary(population=1)
