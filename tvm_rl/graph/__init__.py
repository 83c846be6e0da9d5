"""Graph level: verified rewrite rules over Relax modules and the candidate set the search picks from
(`rules`, `candidates`, `verify`), the graph cost (`cost`), the Gymnasium environment (`env`) and the search
baselines (`search`: greedy, TASO-style backtracking, random rollouts). Import the submodules directly."""
