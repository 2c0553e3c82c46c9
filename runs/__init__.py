"""Runners: jobs that write a run folder (`run_qa`, `run_episodes`), on one run-folder layer (`jetgym.runs.folder`).

They take objects (questions and a scorer, an env and an agent), not configs: the console jobs compose a
Hydra config, build the objects and call them. Importing this package imports neither Hydra nor torch.
"""

from jetgym.runs.episodes import run_episodes
from jetgym.runs.qa import run_qa

__all__ = ["run_episodes", "run_qa"]
