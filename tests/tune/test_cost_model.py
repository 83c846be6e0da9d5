"""The cost-model registry: every strategy comparison gets the same, named model."""
import pytest

from tvm_rl.errors import TvmRlError
from tvm_rl.tune import cost_model


def test_xgb_has_no_warm_up_so_its_ratings_count_from_the_first_batch():
    model = cost_model.create("xgb")
    assert model.num_warmup_samples == 0


def test_each_call_gives_a_fresh_model():
    assert cost_model.create("xgb") is not cost_model.create("xgb")


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(TvmRlError, match="xgb, random"):
        cost_model.create("lightgbm")
