"""The policy's input is built once (`observation.observe`): the environment, training and RLRewritePass show
a policy the same arrays for the same graph and features; checkpoints record the features they were trained
on, and the pass encodes with those, refusing other ones by name."""
import json

import numpy as np
import pytest
import torch

from tests.support import graph_examples as T
from tvm_rl.errors import CheckpointError, FeatureMismatchError
from tvm_rl.graph import cost as costs
from tvm_rl.graph import roofline
from tvm_rl.graph.agent import DEFAULT_POLICY, GraphActorCritic, PolicyConfig
from tvm_rl.graph.env import GraphRewriteEnv
from tvm_rl.graph.observation import (
    Decision,
    FeatureSpec,
    decision_from_observation,
    encode,
    observe,
    padded,
)
from tvm_rl.graph.rewrite_pass import RLRewritePass
from tvm_rl.graph.train import TrainConfig, make_env, play, train


def fake_database(folder, scale: float = 1.0):
    """A tuning database folder whose fit is already cached (`calibration.tuned_roofline` reads roofline.json
    while the records file keeps its size): a fitted roofline without tuning anything."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "database_tuning_record.json").write_text("x" * 100)
    hw = lambda peak, bw, launch, n: {"peak_gflops": peak * scale, "gbps": bw, "launch_us": launch,  # noqa: E731
                                      "source": f"calibrated on {n} kernels"}
    (folder / "roofline.json").write_text(json.dumps({
        "records_bytes": 100, "kinds": list(roofline.KINDS), "kernels": 9, "default": hw(3.0, 2.0, 5.0, 9),
        "per_kind": {"conv": hw(20.0, 4.0, 2.0, 4), "matmul": hw(8.0, 1.5, 1.0, 3)}, "gemm": None}))
    return folder


@pytest.fixture
def fitted(cpu, tmp_path) -> FeatureSpec:
    return FeatureSpec.for_target(cpu, fake_database(tmp_path / "db"))


class Recorder(GraphActorCritic):
    """A small policy that keeps every Decision it is asked about."""

    def __init__(self, features: FeatureSpec | None = None):
        torch.manual_seed(0)
        super().__init__(PolicyConfig(hidden=16, gat_layers=1, heads=2))
        self.features, self.seen = features, []
        self.eval()

    def act(self, decision, rng=None, greedy=False):
        self.seen.append(decision)
        return super().act(decision, rng, greedy)


def assert_same_decision(a: Decision, b: Decision) -> None:
    assert len(a) == len(b)
    for ga, gb in zip(a.graphs, b.graphs):
        np.testing.assert_array_equal(ga.nodes, gb.nodes)
        np.testing.assert_array_equal(ga.edges, gb.edges)
        np.testing.assert_array_equal(ga.edge_features, gb.edge_features)
    np.testing.assert_array_equal(a.globals, b.globals)


def pass_decision(mod, policy, target, **kw) -> Decision:
    """The first Decision RLRewritePass shows `policy` on `mod`: every candidate, one per rule match."""
    RLRewritePass(target, policy, max_steps=1, confirm=False, time_budget_s=None, shortlist=None, cap=16,
                  all_matches=False, **kw)(mod)
    return policy.seen[0]


def test_env_training_and_pass_show_the_policy_the_same_observation(cpu, fitted):
    mod = T.merge_matmul_graph()
    price = costs.roofline_cost(fitted.roofline)
    env = GraphRewriteEnv(mod, cap=16, horizon=2, target=cpu, hardware=fitted.roofline, features=fitted)
    trainee = Recorder()
    play(env, trainee, np.random.default_rng(0), greedy=True)  # what training learns from
    in_training = trainee.seen[0]
    in_pass = pass_decision(mod, Recorder(fitted), cpu, cost=price)
    assert len(in_pass) >= 3  # some candidates and "stop"
    assert_same_decision(in_training, in_pass)
    # ... which is observe()'s, and survives the environment's padding.
    env.reset()  # back to the first state (the episode has moved on)
    n = len(env.candidates)
    direct = observe([c.mod for c in env.candidates] + [mod], [price(c.mod) for c in env.candidates] + [price(mod)],
                     price(mod), fitted, actions=[*range(n), env.stop_action])
    assert_same_decision(direct, in_pass)
    back = decision_from_observation(padded(direct, env.slots + 1, env.max_nodes, env.max_edges))
    assert_same_decision(back, direct)
    np.testing.assert_array_equal(back.actions, direct.actions)
    # The node costs are the fitted roofline's, not the nominal one's the pass used to encode with.
    nominal = encode(mod, roofline.default_hardware(cpu))
    assert not np.array_equal(in_pass.graphs[-1].nodes, nominal.nodes)
    np.testing.assert_array_equal(in_pass.graphs[-1].nodes, encode(mod, fitted.roofline).nodes)


def test_training_records_its_features_and_the_pass_encodes_with_them(cpu, tmp_path, fitted):
    db = tmp_path / "db"
    config = TrainConfig(models=("squeezenet1_1",), target="llvm", database=str(db), iterations=1,
                         episodes_per_iteration=1, horizon=2, cap=8, shortlist=0, hidden=16, gat_layers=1,
                         imitation_episodes=0, work_dir=str(tmp_path / "run"))
    env = make_env("squeezenet1_1", config)
    assert env.features.same_features(fitted) and env.hardware == fitted.roofline  # priced and encoded alike
    policy = train(config, progress=False)
    saved = GraphActorCritic.load(tmp_path / "run" / "policy.pt")
    assert saved.features == policy.features == FeatureSpec.for_target("llvm", db)
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert FeatureSpec.from_dict(ckpt["feature_spec"]) == saved.features
    # The pass shows the trained policy what training showed it, priced with whatever it is given.
    rewrite = RLRewritePass(cpu, tmp_path / "run" / "policy.pt", confirm=False)
    assert rewrite.features == saved.features
    # Resuming keeps the run's features even when the database's fit has changed meanwhile.
    fake_database(db, scale=10.0)
    assert not FeatureSpec.for_target("llvm", db).same_features(saved.features)
    resumed = train(TrainConfig(**{**config.__dict__, "iterations": 2}), progress=False)
    assert resumed.features == saved.features
    assert GraphActorCritic.load(tmp_path / "run" / "policy.pt").features == saved.features


def test_training_can_price_with_a_benchmarks_recorded_proxy_and_keeps_snapshots(cpu, tmp_path, fitted):
    """--proxy-from: training prices and encodes with the roofline a graph benchmark recorded, so its curve
    compares with that benchmark's arms; --snapshot-every keeps the policy of every Nth iteration."""
    record = tmp_path / "bench.json"
    record.write_text(json.dumps({"proxy": fitted.roofline.as_dict(), "models": {}}))
    config = TrainConfig(models=("squeezenet1_1",), target="llvm", proxy_from=str(record), iterations=2,
                         episodes_per_iteration=1, horizon=2, cap=8, shortlist=0, hidden=16, gat_layers=1,
                         imitation_episodes=0, snapshot_every=1, work_dir=str(tmp_path / "run"))
    env = make_env("squeezenet1_1", config)
    assert env.hardware == fitted.roofline and env.features.same_features(fitted)
    assert not env.features.same_features(FeatureSpec.nominal(cpu))
    policy = train(config, progress=False)
    assert policy.features.same_features(fitted) and "bench.json" in policy.features.source
    snaps = sorted(p.name for p in (tmp_path / "run").glob("policy_iter*.pt"))
    assert snaps == ["policy_iter0001.pt", "policy_iter0002.pt"]
    assert GraphActorCritic.load(tmp_path / "run" / "policy_iter0002.pt").features == policy.features
    # What it cannot use is named.
    for text, match in [("{", "cannot read it as JSON"), ('{"models": {}}', 'no "proxy" record'),
                        ('{"proxy": {"default": {"peak": 1}}}', '"proxy" record is unreadable')]:
        record.write_text(text)
        with pytest.raises(ValueError, match=match):
            make_env("squeezenet1_1", config)
    with pytest.raises(ValueError, match="--database or --proxy-from, not both"):
        make_env("squeezenet1_1", TrainConfig(**{**config.__dict__, "database": str(tmp_path)}))


def test_a_checkpoint_round_trips_its_feature_spec(tmp_path, fitted, cpu):
    for spec in (fitted, FeatureSpec.nominal(cpu), FeatureSpec.nominal("cuda")):
        policy = Recorder(spec)
        loaded = GraphActorCritic.load(policy.save(tmp_path / "p.pt"))
        assert loaded.features == spec and loaded.path == tmp_path / "p.pt"
        assert roofline.from_dict(spec.roofline.as_dict()) == spec.roofline  # exactly, kinds in order
    assert isinstance(fitted.roofline, roofline.RooflineModel) and "tuned kernels in" in fitted.source


def test_the_pass_refuses_other_features_than_the_checkpoints_naming_both(cpu, tmp_path, fitted):
    path = Recorder(fitted).save(tmp_path / "fitted.pt")
    with pytest.raises(FeatureMismatchError) as err:
        RLRewritePass(cpu, path, confirm=False, features=FeatureSpec.nominal(cpu))
    message = str(err.value)
    assert str(path) in message and f"fitted to the tuned kernels in {tmp_path / 'db'}" in message
    assert "nominal roofline" in message
    assert isinstance(err.value, CheckpointError)
    with pytest.raises(FeatureMismatchError, match="fitted.pt"):  # a bare roofline is compared the same way
        RLRewritePass(cpu, path, confirm=False, features=roofline.default_hardware(cpu))
    # The same figures under another label are the same features; an explicit override is obeyed.
    relabelled = FeatureSpec(fitted.roofline, "a copy of that fit", "cpu")
    assert RLRewritePass(cpu, path, confirm=False, features=relabelled).features == relabelled
    forced = RLRewritePass(cpu, path, confirm=False, features=FeatureSpec.nominal(cpu), allow_feature_mismatch=True)
    assert forced.features == FeatureSpec.nominal(cpu)
    # Another target kind than it was trained for: a GPU-feature policy on a CPU target.
    gpu = Recorder(FeatureSpec.nominal("cuda")).save(tmp_path / "gpu.pt")
    with pytest.raises(FeatureMismatchError) as err:
        RLRewritePass(cpu, gpu, confirm=False)
    assert str(gpu) in str(err.value) and "(gpu targets)" in str(err.value) and "a cpu target (llvm)" in str(err.value)
    assert RLRewritePass(cpu, gpu, confirm=False, allow_feature_mismatch=True).features.target_kind == "gpu"


def test_a_checkpoint_without_a_record_reads_nominal_features(cpu, tmp_path, fitted):
    path = Recorder(None).save(tmp_path / "old.pt")
    assert "feature_spec" not in torch.load(path, weights_only=True)
    loaded = GraphActorCritic.load(path)
    assert loaded.features is None
    # Priced with a database's fit, encoded with the nominal roofline it was trained on: as before records.
    rewrite = RLRewritePass(cpu, path, confirm=False, cost=costs.roofline_cost(fitted.roofline))
    assert rewrite.features.same_features(FeatureSpec.nominal(cpu))
    assert "no feature record" in rewrite.features.source
    with pytest.raises(FeatureMismatchError, match="old.pt.*no feature record"):
        RLRewritePass(cpu, path, confirm=False, features=fitted)
    # The shipped policy has no record either: it keeps reading the nominal features of its target.
    shipped = GraphActorCritic.load(DEFAULT_POLICY)
    assert shipped.features is None
    assert RLRewritePass(cpu, shipped, confirm=False).features.same_features(FeatureSpec.nominal(cpu))


def test_a_corrupt_feature_record_is_named(tmp_path, fitted):
    path = Recorder(fitted).save(tmp_path / "bad.pt")
    ckpt = torch.load(path, weights_only=True)
    ckpt["feature_spec"] = {"roofline": {"peak": 1.0}}
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError, match="bad.pt has an unreadable feature record"):
        GraphActorCritic.load(path)
