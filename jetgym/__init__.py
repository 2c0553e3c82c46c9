"""jetgym: drive agents and evaluations by candidate scoring under a language model.

The repository's top-level folders install as this package's subpackages: `jetgym.scorers` (questions,
decisions, the scorer registry and backends), `jetgym.agents`, `jetgym.envs` (Gymnasium wrappers and
envs), `jetgym.questions` (offline question sets), `jetgym.scripts` (console entry points) and
`jetgym.conf` (the Hydra configs, package data). Importing `jetgym` imports nothing heavy.
"""

__version__ = "0.2.0"
