"""The cost-model registry: every strategy comparison gets the same, named model, and each name means one model."""
import pytest

from tvm_rl.errors import TvmRlError
from tvm_rl.tune import cost_model


def test_xgb_no_warmup_has_no_warm_up_so_its_ratings_count_from_the_first_batch():
    model = cost_model.create("xgb-no-warmup")
    assert model.num_warmup_samples == 0
    assert cost_model.create().num_warmup_samples == 0  # the default name


def test_xgb_is_metaschedules_model_with_its_warm_up_wherever_it_is_named():
    from tvm.s_tir import meta_schedule as ms

    model = cost_model.create("xgb")
    assert isinstance(model, ms.cost_model.XGBModel) and model.num_warmup_samples == 100
    assert cost_model.from_spec("xgb") == "xgb"  # MetaSchedule makes it from the name, as `tune_tasks` does


def test_each_call_gives_a_fresh_model():
    assert cost_model.create("xgb-no-warmup") is not cost_model.create("xgb-no-warmup")


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(TvmRlError, match="xgb, random, xgb-pretrained, xgb-no-warmup"):
        cost_model.create("lightgbm")
