"""Actor-critic over candidate graphs: every candidate is embedded by the same encoder and scored by a
shared head, so the policy is invariant to the candidates' order and takes any number of them (X-RLflow
flattens a padded list of 500; we do not). "Stop" is the current graph scored with a stop flag; the value
head reads the current graph's embedding.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ..errors import CheckpointError
from .gnn import GraphEncoder, batch_graphs
from .observation import EDGE_FEATURES, GLOBAL_FEATURES, NODE_FEATURES, Decision, FeatureSpec

FORMAT = "tvm-rl graph policy"
VERSION = 1
DEFAULT_POLICY = Path(__file__).parent / "policies" / "default.pt"


class PolicyError(CheckpointError):
    """A graph policy checkpoint that cannot be used (missing, corrupt, foreign, or for other features)."""


@dataclass
class PolicyConfig:
    """Network sizes (X-RLflow: GN layer + 5 GAT layers; 3 measured as good on our graphs and cheaper)."""

    hidden: int = 64
    gat_layers: int = 3
    heads: int = 4


class GraphActorCritic(nn.Module):
    """Scores every row of each Decision; value of each Decision's current graph.

    `features`: the `FeatureSpec` its node features were computed with in training, saved with it (None: no
    record, as in checkpoints written before there was one: the nominal roofline of the target it is used
    for). `path`: the checkpoint it was loaded from, if any.
    """

    def __init__(self, config: PolicyConfig | None = None):
        super().__init__()
        self.config = config or PolicyConfig()
        self.features: FeatureSpec | None = None
        self.path: Path | None = None
        h = self.config.hidden
        self.encoder = GraphEncoder(h, self.config.gat_layers, self.config.heads)
        n_extra = 3  # relative cost change, log cost ratio, stop flag
        self.actor = nn.Sequential(nn.Linear(2 * h + n_extra, h), nn.SiLU(), nn.Linear(h, 1))
        self.critic = nn.Sequential(nn.Linear(h, h), nn.SiLU(), nn.Linear(h, 1))

    def forward(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits of all rows (R,), the decision each row belongs to (R,), values (D,))."""
        sizes = [len(d) for d in decisions]
        graphs = [g for d in decisions for g in d.graphs]
        glob = np.concatenate([d.globals for d in decisions])
        z, _ = self.encoder(batch_graphs(graphs, glob))
        owner = torch.repeat_interleave(torch.arange(len(decisions)), torch.tensor(sizes))
        current = torch.tensor(np.cumsum(sizes) - 1)
        z_cur = z[current][owner]
        cost = torch.as_tensor(glob[:, 0], dtype=torch.float32).clamp(min=1e-9)
        cost_cur = cost[current][owner]
        stop = torch.zeros(len(graphs))
        stop[current] = 1.0
        extra = torch.stack([(cost - cost_cur) / cost_cur * 10, torch.log(cost / cost_cur) * 10, stop], 1)
        logits = self.actor(torch.cat([z, z - z_cur, extra], 1)).squeeze(1)
        values = self.critic(z[current]).squeeze(1)
        return logits, owner, values

    def distribution(self, decisions: Sequence[Decision]):
        """(log-probabilities of every row within its decision, owner, values)."""
        logits, owner, values = self(decisions)
        n = len(decisions)
        top = torch.full((n,), -torch.inf).scatter_reduce(0, owner, logits, "amax", include_self=True)
        shifted = logits - top[owner]
        total = torch.zeros(n).index_add_(0, owner, shifted.exp())
        return shifted - total.log()[owner], owner, values

    def chosen_log_probs(self, decisions: Sequence[Decision], rows: torch.Tensor):
        """(log-probability of row `rows[i]` in decision i, all rows' log-probabilities, owner, values)."""
        logp, owner, values = self.distribution(decisions)
        offsets = torch.tensor(np.cumsum([0] + [len(d) for d in decisions[:-1]]))
        return logp[offsets + rows], logp, owner, values

    @torch.no_grad()
    def act(self, decision: Decision, rng: np.random.Generator | None = None, greedy: bool = False
            ) -> tuple[int, int, float, float]:
        """(row, environment action, log-probability, value): sampled with `rng`, or the argmax."""
        logp, _, values = self.distribution([decision])
        p = logp.exp().numpy().astype(np.float64)
        row = int(np.argmax(p)) if greedy else int((rng or np.random.default_rng()).choice(len(p), p=p / p.sum()))
        return row, int(decision.actions[row]), float(logp[row]), float(values[0])

    # ---- checkpoints

    def save(self, path: str | Path, **meta) -> Path:
        """Write the weights with their configuration, feature sizes, `features` (the roofline its node features
        came from, when known) and `meta` (e.g. how it was trained)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        record = {} if self.features is None else {"feature_spec": self.features.as_dict()}
        torch.save({"format": FORMAT, "version": VERSION, "config": asdict(self.config),
                    "features": [NODE_FEATURES, EDGE_FEATURES, GLOBAL_FEATURES], **record,
                    "state_dict": self.state_dict(), "meta": meta}, tmp)
        tmp.replace(path)  # a run killed mid-write leaves the previous checkpoint intact
        return path

    @classmethod
    def load(cls, path: str | Path | None = None) -> "GraphActorCritic":
        """A saved policy (default: the one shipped with tvm-rl); PolicyError says what is wrong with a bad file."""
        path = Path(path) if path is not None else DEFAULT_POLICY
        if not path.is_file():
            hint = (" (the shipped policy is missing from this installation: reinstall tvm-rl, or train one with "
                    "`tvm-rl train`)" if path == DEFAULT_POLICY else "")
            raise PolicyError(f"graph policy checkpoint {path} does not exist{hint}")
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 -- torch raises many kinds (struct.error, UnpicklingError, ...)
            raise PolicyError(f"graph policy checkpoint {path} is corrupt or not a PyTorch file ({err}); "
                              "re-train it with `tvm-rl train` or use the shipped one") from None
        if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
            raise PolicyError(f"{path} is not a tvm-rl graph policy (no {FORMAT!r} header); was it saved by "
                              "tvm-rl's graph agent?")
        if ckpt.get("version") != VERSION:
            raise PolicyError(f"{path} is graph policy format version {ckpt.get('version')}, this tvm-rl reads "
                              f"version {VERSION}: re-train it with `tvm-rl train`")
        want = [NODE_FEATURES, EDGE_FEATURES, GLOBAL_FEATURES]
        if list(ckpt.get("features", [])) != want:
            raise PolicyError(f"{path} was trained on graph features of sizes {ckpt.get('features')}, this tvm-rl "
                              f"encodes {want}: re-train it with `tvm-rl train`")
        try:
            policy = cls(PolicyConfig(**ckpt["config"]))
            policy.load_state_dict(ckpt["state_dict"])
        except (KeyError, TypeError, RuntimeError) as err:
            raise PolicyError(f"graph policy checkpoint {path} does not fit its own configuration: {err}") from None
        if "feature_spec" in ckpt:  # absent from checkpoints written before it was recorded: nominal features
            try:
                policy.features = FeatureSpec.from_dict(ckpt["feature_spec"])
            except (KeyError, TypeError, AttributeError) as err:
                raise PolicyError(f"graph policy checkpoint {path} has an unreadable feature record "
                                  f"({type(err).__name__}: {err}); re-train it with `tvm-rl train`") from None
        policy.meta = ckpt.get("meta", {})
        policy.path = path
        return policy.eval()
