"""jetgym: drive agents and evaluations by candidate scoring under a language model.

The repository's top-level folders install as this package's subpackages: `jetgym.scorers` (questions,
decisions, the scorer registry and backends), `jetgym.agents`, `jetgym.envs` (Gymnasium wrappers and
envs), `jetgym.questions` (offline question sets), `jetgym.runs` (the runners and their run folders),
`jetgym.scripts` (console entry points) and `jetgym.conf` (the Hydra configs, package data). Importing
`jetgym` imports nothing heavy; `jetgym.run_qa` and `jetgym.run_episodes` load `jetgym.runs` on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.2.0"
__all__ = ["run_episodes", "run_qa"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import jetgym.runs

        return getattr(jetgym.runs, name)
    raise AttributeError(f"module 'jetgym' has no attribute {name!r}")
