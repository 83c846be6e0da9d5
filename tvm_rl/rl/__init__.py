"""Reinforcement-learning pieces shared by the graph rewrite agent and the schedule tuner's agent."""
from .ppo import PPOParams, PPOStats, explained_variance, gae, ppo_loss, ppo_update

__all__ = ["PPOParams", "PPOStats", "explained_variance", "gae", "ppo_loss", "ppo_update"]
